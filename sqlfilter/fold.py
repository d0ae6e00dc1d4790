"""Constant folding: sub-expressions without message fields are evaluated once, at compile time.

Strategy: bottom-up rebuild of the tree; a node whose operands are all literals becomes the
literal it evaluates to, computed by the very functions of ``sqlfilter.runtime`` that evaluate
it per message (so folding cannot change a result). ``Literal(None)`` stands for unknown.
AND/OR also fold when one side alone decides (FALSE AND x, x AND FALSE → FALSE; TRUE OR x,
x OR TRUE → TRUE): evaluation has no side effects, so skipping x changes nothing; and TRUE AND x,
FALSE OR x are x when x is a predicate (a value that is not boolean would become unknown). ``UTC()`` is
never folded: its value changes while the filter is in place.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, TypeGuard

from sqlfilter import ast, runtime
from sqlfilter.like import compile_like

__all__ = ["fold"]

_ARITH = {"+": runtime.add, "-": runtime.sub, "*": runtime.mul, "/": runtime.div,
          "%": runtime.mod}
#: nodes that always evaluate to True/False/None (so TRUE AND x and FALSE OR x are just x)
_PREDICATES = (ast.Compare, ast.And, ast.Or, ast.Not, ast.Like, ast.In, ast.Between, ast.IsNull,
               ast.Exists)
_CALLS: dict[str, Callable[..., Any]] = {
    "LOWER": runtime.lower, "UPPER": runtime.upper, "LEFT": runtime.left, "RIGHT": runtime.right,
    "SUBSTRING": runtime.substring, "DATE": runtime.date, **runtime.JMS_CALLS}


def _lit(node: ast.Node) -> TypeGuard[ast.Literal]:
    return isinstance(node, ast.Literal)


def fold(node: ast.Node) -> ast.Node:
    """The tree with every constant sub-expression replaced by its value."""
    if isinstance(node, (ast.Literal, ast.Field, ast.Element, ast.Utc, ast.Exists)):
        return node
    if isinstance(node, ast.IsNull):
        ref = fold(node.ref)
        if _lit(ref):
            return ast.Literal(runtime.norm(ref.value) is None, node.pos)
        return replace(node, ref=ref)
    if isinstance(node, (ast.Neg, ast.Pos)):
        operand = fold(node.operand)
        if _lit(operand):
            f = runtime.neg if isinstance(node, ast.Neg) else runtime.pos
            return ast.Literal(f(operand.value), node.pos)
        return replace(node, operand=operand)
    if isinstance(node, ast.Arith):
        left, right = fold(node.left), fold(node.right)
        if _lit(left) and _lit(right):
            return ast.Literal(_ARITH[node.op](left.value, right.value), node.pos)
        return replace(node, left=left, right=right)
    if isinstance(node, ast.Compare):
        left, right = fold(node.left), fold(node.right)
        if _lit(left) and _lit(right):
            return ast.Literal(runtime.COMPARE[node.op](left.value, right.value), node.pos)
        return replace(node, left=left, right=right)
    if isinstance(node, ast.And):
        left, right = fold(node.left), fold(node.right)
        if (_lit(left) and left.value is False) or (_lit(right) and right.value is False):
            return ast.Literal(False, node.pos)
        if _lit(left) and _lit(right):
            return ast.Literal(runtime.and3(left.value, right.value), node.pos)
        if _lit(left) and left.value is True and isinstance(right, _PREDICATES):
            return right
        if _lit(right) and right.value is True and isinstance(left, _PREDICATES):
            return left
        return replace(node, left=left, right=right)
    if isinstance(node, ast.Or):
        left, right = fold(node.left), fold(node.right)
        if (_lit(left) and left.value is True) or (_lit(right) and right.value is True):
            return ast.Literal(True, node.pos)
        if _lit(left) and _lit(right):
            return ast.Literal(runtime.or3(left.value, right.value), node.pos)
        if _lit(left) and left.value is False and isinstance(right, _PREDICATES):
            return right
        if _lit(right) and right.value is False and isinstance(left, _PREDICATES):
            return left
        return replace(node, left=left, right=right)
    if isinstance(node, ast.Not):
        operand = fold(node.operand)
        if _lit(operand):
            return ast.Literal(runtime.not3(operand.value), node.pos)
        return replace(node, operand=operand)
    if isinstance(node, ast.Like):
        subject = fold(node.subject)
        if _lit(subject):
            matcher = compile_like(node.pattern, node.escape, node.pos)
            return ast.Literal(matcher.match_value(subject.value), node.pos)
        return replace(node, subject=subject)
    if isinstance(node, ast.In):
        subject = fold(node.subject)
        items = tuple(fold(item) for item in node.items)
        values = tuple(i.value for i in items if _lit(i))
        if _lit(subject) and len(values) == len(items):
            return ast.Literal(runtime.in_(subject.value, values), node.pos)
        return replace(node, subject=subject, items=items)
    if isinstance(node, ast.Between):
        subject, low, high = fold(node.subject), fold(node.low), fold(node.high)
        if _lit(subject) and _lit(low) and _lit(high):
            return ast.Literal(runtime.between(subject.value, low.value, high.value), node.pos)
        return replace(node, subject=subject, low=low, high=high)
    if isinstance(node, ast.Call):
        args = tuple(fold(a) for a in node.args)
        arguments = [a.value for a in args if _lit(a)]
        if len(arguments) == len(args):
            return ast.Literal(_CALLS[node.name](*arguments), node.pos)
        return replace(node, args=args)
    raise TypeError(f"fold: unexpected node {node!r}")  # pragma: no cover - all nodes handled
