"""TreeToFilter: the Lark parse tree of ``grammar/sql_filter.lark`` → ``sqlfilter.ast`` nodes.

Strategy: one method per aliased grammar alternative, named after it. Lexical values are decoded
here (quotes, brackets, hex), and names are resolved to (section, field) once, so that later
passes never see text. Anything the grammar lets through but the language forbids, and that can
be decided from one token (an unknown section or field, a control character in a delimited
identifier, an overflowing float literal), is a ``FilterError`` at that token's position.
"""

from __future__ import annotations

import math
from typing import Any

from lark import Token, Transformer, v_args

from sqlfilter import ast
from sqlfilter.errors import FilterError

__all__ = ["TreeToFilter", "resolve_section"]

#: section prefix → MessageView attribute. RabbitMQ 4.2 knows header/h, properties/p and
#: application_properties/a; message_annotations/m and footer/f are our extension.
_SECTION_PREFIXES = {
    "header": "header", "h": "header",
    "properties": "properties", "p": "properties",
    "application_properties": "application_properties", "a": "application_properties",
    "message_annotations": "message_annotations", "m": "message_annotations",
    "footer": "footer", "f": "footer",
}
_NEVER_STORED = frozenset(("delivery_annotations", "delivery-annotations", "d"))

#: fields a filter may name in the fixed sections (RabbitMQ: header.priority only)
_HEADER_FIELDS = frozenset(("priority", "durable", "ttl", "first_acquirer", "delivery_count"))
_PROPERTIES_FIELDS = frozenset((
    "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id"))


def _pos(token_or_meta: Any) -> int:
    """1-based character offset of a token or of a tree node's first token (0 if unknown)."""
    start = getattr(token_or_meta, "start_pos", None)
    return start + 1 if start is not None else 0


def _is_control(ch: str) -> bool:
    return ord(ch) < 32 or ord(ch) == 127


def _unquote(token: Token) -> str:
    text = str(token)
    quote = text[0]
    return text[1:-1].replace(quote + quote, quote)


def _unbracket(text: str, pos: int) -> str:
    inner = text[1:-1]
    if any(_is_control(ch) for ch in inner):
        raise FilterError("control character in a delimited identifier", pos)
    return inner.replace("[[", "[").replace("]]", "]")


def resolve_section(prefix: str, name: str, pos: int) -> ast.Field:
    """A qualified name → Field, or FilterError for an unknown/unsupported section or field."""
    if prefix in _NEVER_STORED:
        raise FilterError(f"delivery annotations are never stored, cannot filter on {prefix}.{name}",
                          pos)
    section = _SECTION_PREFIXES.get(prefix)
    if section is None:
        raise FilterError(f"unknown section {prefix!r}", pos)
    if section == "header" and name not in _HEADER_FIELDS:
        raise FilterError(f"unknown header field {name!r}", pos)
    if section == "properties" and name not in _PROPERTIES_FIELDS:
        raise FilterError(f"unknown properties field {name!r}", pos)
    return ast.Field(section, name, pos)


@v_args(meta=True)
class TreeToFilter(Transformer):
    """Builds the frozen expression tree; one method per aliased alternative."""

    # ---- logic and comparison ----
    def or_(self, meta, c):
        return ast.Or(c[0], c[1], _pos(meta))

    def and_(self, meta, c):
        return ast.And(c[0], c[1], _pos(meta))

    def not_(self, meta, c):
        return ast.Not(c[0], _pos(meta))

    def compare(self, meta, c):
        op = str(c[1])
        return ast.Compare("<>" if op == "!=" else op, c[0], c[2], _pos(meta))

    def like(self, meta, c):
        return ast.Like(c[0], _unquote(c[1]), None, _pos(c[1]))

    def like_escape(self, meta, c):
        return ast.Like(c[0], _unquote(c[1]), _unquote(c[2]), _pos(c[1]))

    def not_like(self, meta, c):
        return ast.Not(self.like(meta, c), _pos(meta))

    def not_like_escape(self, meta, c):
        return ast.Not(self.like_escape(meta, c), _pos(meta))

    def sum_list(self, meta, c):
        return tuple(c)

    def in_(self, meta, c):
        return ast.In(c[0], c[1], _pos(meta))

    def not_in(self, meta, c):
        return ast.Not(ast.In(c[0], c[1], _pos(meta)), _pos(meta))

    def between(self, meta, c):
        return ast.Between(c[0], c[1], c[2], _pos(meta))

    def not_between(self, meta, c):
        return ast.Not(ast.Between(c[0], c[1], c[2], _pos(meta)), _pos(meta))

    def is_null(self, meta, c):
        return ast.IsNull(c[0], _pos(meta))

    def is_not_null(self, meta, c):
        return ast.Not(ast.IsNull(c[0], _pos(meta)), _pos(meta))

    # ---- arithmetic ----
    def add(self, meta, c):
        return ast.Arith("+", c[0], c[1], _pos(meta))

    def sub(self, meta, c):
        return ast.Arith("-", c[0], c[1], _pos(meta))

    def mul(self, meta, c):
        return ast.Arith("*", c[0], c[1], _pos(meta))

    def div(self, meta, c):
        return ast.Arith("/", c[0], c[1], _pos(meta))

    def mod(self, meta, c):
        return ast.Arith("%", c[0], c[1], _pos(meta))

    def pos(self, meta, c):
        return ast.Pos(c[0], _pos(meta))

    def neg(self, meta, c):
        return ast.Neg(c[0], _pos(meta))

    # ---- literals ----
    def int_lit(self, meta, c):
        return ast.Literal(int(c[0]), _pos(meta))

    def float_lit(self, meta, c):
        value = float(c[0])
        if math.isinf(value):
            raise FilterError("approximate numeric literal out of range", _pos(meta))
        return ast.Literal(value, _pos(meta))

    def string_lit(self, meta, c):
        return ast.Literal(_unquote(c[0]), _pos(meta))

    def binary_lit(self, meta, c):
        return ast.Literal(bytes.fromhex(str(c[0])[2:]), _pos(meta))

    def true_lit(self, meta, c):
        return ast.Literal(True, _pos(meta))

    def false_lit(self, meta, c):
        return ast.Literal(False, _pos(meta))

    def inf_lit(self, meta, c):
        return ast.Literal(math.inf, _pos(meta))

    def nan_lit(self, meta, c):
        return ast.Literal(math.nan, _pos(meta))

    # ---- references ----
    def plain_ref(self, meta, c):
        return ast.Field("application_properties", str(c[0]), _pos(meta))

    def delimited_ref(self, meta, c):
        return ast.Field("application_properties", _unbracket(str(c[0]), _pos(c[0])), _pos(meta))

    def section_ref(self, meta, c):
        prefix, name = str(c[0]).split(".", 1)
        return resolve_section(prefix, name, _pos(meta))

    def section_delimited_ref(self, meta, c):
        prefix, rest = str(c[0]).split(".", 1)
        return resolve_section(prefix, _unbracket(rest, _pos(c[0])), _pos(meta))

    def element_ref(self, meta, c):
        selector = str(c[1])[1:-1].strip()
        pos = _pos(c[1])
        if selector.isdigit() and selector.isascii():
            key: int | str = int(selector)
        elif len(selector) >= 2 and selector[0] in "'\"" and selector[-1] == selector[0]:
            quote = selector[0]
            inner = selector[1:-1]
            if inner.replace(quote + quote, "").count(quote):
                raise FilterError("bad quoting in an element selector", pos)
            key = inner.replace(quote + quote, quote)
        else:
            raise FilterError("an element selector is [index] or ['key']", pos)
        return ast.Element(c[0], key, _pos(meta))

    # ---- functions ----
    def utc(self, meta, c):
        return ast.Utc(_pos(meta))

    def lower(self, meta, c):
        return ast.Call("LOWER", tuple(c), _pos(meta))

    def upper(self, meta, c):
        return ast.Call("UPPER", tuple(c), _pos(meta))

    def left(self, meta, c):
        return ast.Call("LEFT", tuple(c), _pos(meta))

    def right(self, meta, c):
        return ast.Call("RIGHT", tuple(c), _pos(meta))

    def substring(self, meta, c):
        return ast.Call("SUBSTRING", tuple(c), _pos(meta))

    substring_len = substring

    def date(self, meta, c):
        return ast.Call("DATE", tuple(c), _pos(meta))

    def exists(self, meta, c):
        return ast.Exists(c[0], _pos(meta))
