"""TreeToFilter: the rules of ``grammar/sql_filter.lark`` → ``sqlfilter.ast`` nodes.

Strategy: one method per aliased grammar alternative, named after it. The LALR parser calls them
as it reduces each rule (``sqlfilter.parser``), so no parse tree is built; a node's position is
that of its first kept token. Lexical values are decoded
here (quotes, brackets, hex), and names are resolved to (section, field) once, so that later
passes never see text. Anything the grammar lets through but the language forbids, and that can
be decided from one token (an unknown section or field, a control character in a delimited
identifier, an overflowing float literal), is a ``FilterError`` at that token's position.
"""

from __future__ import annotations

import math
from typing import Any

from lark import Token, Transformer

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


def _pos(token: Any) -> int:
    """1-based character offset of a token (0 if unknown)."""
    start = getattr(token, "start_pos", None)
    return start + 1 if start is not None else 0


def _first(children: list) -> int:
    """Position of a node: that of its first child holding one (keywords are not kept)."""
    for child in children:
        if isinstance(child, Token) and child.start_pos is not None:
            return child.start_pos + 1
        pos = getattr(child, "pos", 0)
        if pos:
            return pos
        if isinstance(child, tuple) and child:
            return _first(list(child))
    return 0


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


def _like_of(subject: ast.Node, before: str, token: Token, after: str) -> ast.Like:
    text = _unquote(token).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return ast.Like(subject, before + text + after, "\\", _pos(token))


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


class TreeToFilter(Transformer):
    """Builds the frozen expression tree; one method per aliased alternative."""

    # ---- logic and comparison ----
    def or_(self, c):
        return ast.Or(c[0], c[1], _first(c))

    def and_(self, c):
        return ast.And(c[0], c[1], _first(c))

    def not_(self, c):
        return ast.Not(c[0], _first(c))

    def compare(self, c):
        op = str(c[1])
        return ast.Compare("<>" if op == "!=" else op, c[0], c[2], _first(c))

    def like(self, c):
        return ast.Like(c[0], _unquote(c[1]), None, _pos(c[1]))

    def like_escape(self, c):
        return ast.Like(c[0], _unquote(c[1]), _unquote(c[2]), _pos(c[1]))

    def not_like(self, c):
        return ast.Not(self.like(c), _first(c))

    def not_like_escape(self, c):
        return ast.Not(self.like_escape(c), _first(c))

    # RocketMQ's CONTAINS / STARTSWITH / ENDSWITH (selector dialect only): LIKE with the
    # string's own % _ and \ escaped, so they share LIKE's semantics and fast paths
    def contains(self, c):
        return _like_of(c[0], "%", c[1], "%")

    def not_contains(self, c):
        return ast.Not(self.contains(c), _first(c))

    def startswith(self, c):
        return _like_of(c[0], "", c[1], "%")

    def not_startswith(self, c):
        return ast.Not(self.startswith(c), _first(c))

    def endswith(self, c):
        return _like_of(c[0], "%", c[1], "")

    def not_endswith(self, c):
        return ast.Not(self.endswith(c), _first(c))

    def sum_list(self, c):
        return tuple(c)

    def in_(self, c):
        return ast.In(c[0], c[1], _first(c))

    def not_in(self, c):
        return ast.Not(ast.In(c[0], c[1], _first(c)), _first(c))

    def between(self, c):
        return ast.Between(c[0], c[1], c[2], _first(c))

    def not_between(self, c):
        return ast.Not(ast.Between(c[0], c[1], c[2], _first(c)), _first(c))

    def is_null(self, c):
        return ast.IsNull(c[0], _first(c))

    def is_not_null(self, c):
        return ast.Not(ast.IsNull(c[0], _first(c)), _first(c))

    # ---- arithmetic ----
    def add(self, c):
        return ast.Arith("+", c[0], c[1], _first(c))

    def sub(self, c):
        return ast.Arith("-", c[0], c[1], _first(c))

    def mul(self, c):
        return ast.Arith("*", c[0], c[1], _first(c))

    def div(self, c):
        return ast.Arith("/", c[0], c[1], _first(c))

    def mod(self, c):
        return ast.Arith("%", c[0], c[1], _first(c))

    def pos(self, c):
        return ast.Pos(c[0], _first(c))

    def neg(self, c):
        return ast.Neg(c[0], _first(c))

    # ---- literals ----
    def int_lit(self, c):
        return ast.Literal(int(c[0]), _first(c))

    def float_lit(self, c):
        value = float(c[0])
        if math.isinf(value):
            raise FilterError("approximate numeric literal out of range", _first(c))
        return ast.Literal(value, _first(c))

    def string_lit(self, c):
        return ast.Literal(_unquote(c[0]), _first(c))

    def binary_lit(self, c):
        return ast.Literal(bytes.fromhex(str(c[0])[2:]), _first(c))

    def true_lit(self, c):
        return ast.Literal(True, _first(c))

    def false_lit(self, c):
        return ast.Literal(False, _first(c))

    def inf_lit(self, c):
        return ast.Literal(math.inf, _first(c))

    def nan_lit(self, c):
        return ast.Literal(math.nan, _first(c))

    def null_lit(self, c):  # the selector dialect only
        return ast.Literal(None, _first(c))

    # ---- references ----
    def plain_ref(self, c):
        return ast.Field("application_properties", str(c[0]), _first(c))

    def delimited_ref(self, c):
        return ast.Field("application_properties", _unbracket(str(c[0]), _pos(c[0])), _first(c))

    def section_ref(self, c):
        prefix, name = str(c[0]).split(".", 1)
        return resolve_section(prefix, name, _first(c))

    def section_delimited_ref(self, c):
        prefix, rest = str(c[0]).split(".", 1)
        return resolve_section(prefix, _unbracket(rest, _pos(c[0])), _first(c))

    def element_ref(self, c):
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
        return ast.Element(c[0], key, _first(c))

    # ---- functions ----
    def utc(self, c):
        return ast.Utc(_first(c))

    def lower(self, c):
        return ast.Call("LOWER", tuple(c), _first(c))

    def upper(self, c):
        return ast.Call("UPPER", tuple(c), _first(c))

    def left(self, c):
        return ast.Call("LEFT", tuple(c), _first(c))

    def right(self, c):
        return ast.Call("RIGHT", tuple(c), _first(c))

    def substring(self, c):
        return ast.Call("SUBSTRING", tuple(c), _first(c))

    substring_len = substring

    def date(self, c):
        return ast.Call("DATE", tuple(c), _first(c))

    def exists(self, c):
        return ast.Exists(c[0], _first(c))
