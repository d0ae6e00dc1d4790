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


def children(node: ast.Node) -> list[ast.Node]:
    """The direct sub-expressions of a node, in source order."""
    out: list[ast.Node] = []
    for f in fields(node):
        value = getattr(node, f.name)
        if isinstance(value, tuple):
            out.extend(v for v in value if not isinstance(v, (str, int, float, bytes)))
        elif f.name not in ("pos",) and hasattr(value, "__dataclass_fields__"):
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
