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

__all__ = ["check", "children"]


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
