"""The expression tree of an SQL filter: frozen dataclasses built by ``TreeToFilter``.

Strategy: the parse tree from Lark is turned once into these small immutable nodes; every later
pass (checks, constant folding, code generation) is a function over them that returns new nodes,
so a pass can never corrupt what another pass sees. Each node carries ``pos``, the 1-based
character offset of its first token, so passes can report a ``FilterError`` at the right place.
``pos`` takes no part in equality: two trees that mean the same are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "Node", "Literal", "Field", "Element", "Utc", "Call", "Neg", "Pos", "Arith", "Compare", "And",
    "Or", "Not", "Like", "In", "Between", "IsNull", "Exists", "SECTIONS",
]

#: section names as MessageView attributes, in message order
SECTIONS = ("header", "properties", "application_properties", "message_annotations", "footer")


@dataclass(frozen=True)
class Literal:
    """A constant: int, float, str, bytes or bool (after folding also None for unknown)."""
    value: Any
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Field:
    """A field of a section: ``section`` is a MessageView attribute, ``name`` the dict key."""
    section: str
    name: str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Element:
    """An element of a list/array (``key`` int) or a map (``key`` str) held by ``base``."""
    base: "Field | Element"
    key: int | str
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Utc:
    """``UTC()``: the current time in milliseconds; never folded."""
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Call:
    """An extension function: LOWER, UPPER, LEFT, RIGHT, SUBSTRING, DATE."""
    name: str
    args: tuple["Node", ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Neg:
    operand: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Pos:
    operand: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Arith:
    """``op`` is one of + - * / %."""
    op: str
    left: "Node"
    right: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Compare:
    """``op`` is one of = <> < > <= >= (``!=`` is normalised to ``<>``)."""
    op: str
    left: "Node"
    right: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class And:
    left: "Node"
    right: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Or:
    left: "Node"
    right: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Not:
    operand: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Like:
    """``subject LIKE pattern [ESCAPE escape]``; NOT LIKE is ``Not(Like(...))``."""
    subject: "Node"
    pattern: str
    escape: str | None
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class In:
    """``subject IN (items)``; NOT IN is ``Not(In(...))``."""
    subject: "Node"
    items: tuple["Node", ...]
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Between:
    """``subject BETWEEN low AND high`` (extension); NOT BETWEEN is ``Not(Between(...))``."""
    subject: "Node"
    low: "Node"
    high: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class IsNull:
    """``x IS NULL``; IS NOT NULL is ``Not(IsNull(...))`` (never unknown, so that is exact).

    RabbitMQ's documented form is ``identifier IS NULL``; any operand is accepted here and is
    null when it evaluates to unknown (RabbitMQ: ``eval0(Expr) =:= undefined``)."""
    ref: "Node"
    pos: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Exists:
    """``EXISTS(ref)`` (extension): the field or element is present, whatever its value."""
    ref: "Field | Element"
    pos: int = field(default=0, compare=False)


Node = Union[Literal, Field, Element, Utc, Call, Neg, Pos, Arith, Compare, And, Or, Not, Like, In,
             Between, IsNull, Exists]
