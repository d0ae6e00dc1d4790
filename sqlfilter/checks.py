"""Checks on the expression tree that the grammar cannot express.

Strategy: one walk over the tree, before folding, so errors point at what the user wrote. Each
LIKE pattern is compiled here (``sqlfilter.like.compile_like``), which is also where its rules are
checked (single-character escape, escape not at the end, no control characters: RabbitMQ
``transform_pattern``); a ``DATE`` of a literal string must be a valid ISO 8601 date-time.
The compiled matchers are returned keyed by node, for code generation to reuse.
"""

from __future__ import annotations

from dataclasses import fields

from sqlfilter import ast, runtime
from sqlfilter.errors import FilterError
from sqlfilter.like import LikeMatcher, compile_like

__all__ = ["check", "check_conditions", "children"]


_FIELDS: dict[type, tuple[str, ...]] = {}


def children(node: ast.Node) -> list[ast.Node]:
    """The direct sub-expressions of a node, in source order."""
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(f.name for f in fields(node) if f.name != "pos")
    out: list[ast.Node] = []
    for name in names:
        value = getattr(node, name)
        if isinstance(value, tuple):
            out.extend(value)
        elif hasattr(value, "__dataclass_fields__"):
            out.append(value)
    return out


def check(tree: ast.Node) -> dict[ast.Like, LikeMatcher]:
    """Raise FilterError for the first problem found; return the compiled LIKE matchers."""
    matchers: dict[ast.Like, LikeMatcher] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Like):
            matchers[node] = compile_like(node.pattern, node.escape, node.pos)
        elif isinstance(node, ast.Call) and node.name == "DATE":
            arg = node.args[0]
            if isinstance(arg, ast.Literal) and isinstance(arg.value, str) \
                    and runtime.date(arg.value) is None:
                raise FilterError(f"DATE needs an ISO 8601 date-time, not {arg.value!r}", arg.pos)
        stack.extend(children(node))
    return matchers


_PREDICATES = (ast.Compare, ast.And, ast.Or, ast.Not, ast.Like, ast.In, ast.Between, ast.IsNull,
               ast.Exists)
_CONDITIONS = (ast.Compare, ast.And, ast.Or, ast.Not, ast.Like, ast.In, ast.Between, ast.IsNull,
               ast.Exists, ast.Field, ast.Element)


def _condition(node: ast.Node) -> bool:
    if isinstance(node, _CONDITIONS):
        return True
    if isinstance(node, ast.Literal):
        return node.value is None or type(node.value) is bool
    return isinstance(node, ast.Call) and node.name == "JMS_REDELIVERED"


def check_conditions(tree: ast.Node) -> None:
    """The selector dialect's own checks (ActiveMQ Classic's parser, from JMS's type rules):
    - the whole expression and every operand of AND, OR and NOT must be able to give a boolean
      (a predicate, TRUE/FALSE/NULL or a property; ``asBooleanExpression``): ``5``,
      ``'a' AND x``, ``NOT (a + 1)`` are refused;
    - NULL is compared only with IS [NOT] NULL (``a = NULL`` is refused), and ``< > <= >=``
      compare numbers only: a string, boolean or NULL literal, or a predicate, as one of their
      operands is refused (``checkLessThanOperand``), and so is it for every operand of
      BETWEEN (``x BETWEEN a AND b`` is ``x >= a AND x <= b``: JMS's BETWEEN is arithmetic);
    - IN takes a property on its left and string literals in its list (``_check_in``)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not _condition(node):
            raise FilterError("expression will not result in a boolean value", node.pos or None)
        if isinstance(node, (ast.And, ast.Or)):
            stack += (node.left, node.right)
        elif isinstance(node, ast.Not):
            stack.append(node.operand)
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Compare):
            for side in (node.left, node.right):
                literal = side.value if isinstance(side, ast.Literal) else 0
                if literal is None:
                    raise FilterError("NULL cannot be compared: use IS [NOT] NULL",
                                      side.pos or None)
                if node.op not in ("=", "<>") and not _arithmetic(side):
                    raise FilterError(f"{node.op} compares numbers only", side.pos or None)
        elif isinstance(node, ast.Between):
            for side in (node.subject, node.low, node.high):
                if not _arithmetic(side) or isinstance(side, ast.Literal) and side.value is None:
                    raise FilterError("BETWEEN compares numbers only", side.pos or node.pos or None)
        elif isinstance(node, ast.In):
            _check_in(node)
        stack.extend(children(node))


def _arithmetic(node: ast.Node) -> bool:
    """Whether an operand of ``< > <= >=`` or BETWEEN may be a number: not a string or boolean
    literal, not a predicate (ActiveMQ's ``checkLessThanOperand``)."""
    if isinstance(node, ast.Literal):
        return type(node.value) not in (str, bool)
    return not isinstance(node, _PREDICATES)


def _check_in(node: ast.In) -> None:
    """JMS: ``identifier [NOT] IN (string-literal, ...)``. ActiveMQ's grammar takes string
    literals only there, and refuses anything but a property on the left ("Expected a property
    for In expression"): so ``NOT color IN ('red')``, which is ``(NOT color) IN ('red')`` since
    NOT binds tighter, is refused rather than read either way."""
    subject = node.subject
    if isinstance(subject, ast.Not):
        raise FilterError("IN takes a property on its left, and NOT binds tighter than IN: "
                          "write color NOT IN (...) or NOT (color IN (...))", subject.pos or None)
    if not (isinstance(subject, (ast.Field, ast.Element))
            or isinstance(subject, ast.Call) and subject.name in runtime.JMS_CALLS):
        raise FilterError("IN takes a property on its left", subject.pos or None)
    for item in node.items:
        if not (isinstance(item, ast.Literal) and type(item.value) is str):
            raise FilterError("IN takes string literals only", item.pos or None)
