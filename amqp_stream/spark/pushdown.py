"""Filter pushdown: Spark filters -> broker filters (stage 1 values, a stage 2 SQL expression).

Spark gives ``pushFilters`` a list of simple predicates that are ANDed. We translate:

- ``filter_value = v`` / ``filter_value IN (...)`` -> stage-1 values (``rabbitmq:stream-filter``).
  Stage 1 is a Bloom filter per chunk, so it lets through chunks with other values; the reader
  checks each message's filter value exactly (``Pushdown.accepts``), and the filter is not handed
  back to Spark.
- Predicates on declared columns (the ``properties`` option) -> one ``amqp:sql-filter``
  expression over application properties (AMQP property columns use ``properties.<name>``).
  Names that are not plain identifiers or are reserved words go in ``[delimited]`` form.
  Predicates whose meaning is the same in Spark and in the broker's SQL (strings, integers,
  booleans) are left to the broker alone; the others (floating point, whose NaN ordering
  differs) are pushed and also handed back to Spark, so results never depend on pushdown.
- Comparisons of ``offset`` with integers narrow the offset ranges planned (Spark checks them
  too, so ``offset IN (3, 900)`` reads 3..900 and Spark keeps the two).
- Everything else stays with Spark.

Pure functions over ``pyspark.sql.datasource`` filter objects; tested without a broker.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from pyspark.sql.datasource import (EqualTo, Filter, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    IsNull, LessThan, LessThanOrEqual, Not, StringContains,
                                    StringEndsWith, StringStartsWith)
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DoubleType, FloatType,
                               IntegerType, LongType, ShortType, StringType)

from amqp_stream.client import PROPERTY_NAMES

__all__ = ["Pushdown", "plan_pushdown", "sql_identifier", "sql_literal"]

FILTER_VALUE_COLUMN = "filter_value"
OFFSET_COLUMN = "offset"
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED = {"AND", "OR", "NOT", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE", "UTC",
             "BETWEEN", "EXISTS", "INF", "NAN", "LOWER", "UPPER", "LEFT", "RIGHT", "SUBSTRING", "DATE"}
_EXACT_TYPES = (StringType, ByteType, ShortType, IntegerType, LongType, BooleanType, BinaryType)
_PUSHABLE_TYPES = _EXACT_TYPES + (FloatType, DoubleType)
_ESCAPE = "!"


@dataclass
class Pushdown:
    """What the reader asks the broker for, and what it still checks itself."""

    filter_values: tuple[str, ...] | None = None  # None: no stage 1; () : nothing can match
    sql: str | None = None
    pushed: list[str] = field(default_factory=list)  # descriptions, for explain/debugging
    offset_start: int = 0          # offsets outside [offset_start, offset_end) are not read
    offset_end: int | None = None

    def accepts(self, filter_value: str | None) -> bool:
        """The exact check behind stage 1."""
        return self.filter_values is None or filter_value in self.filter_values

    @property
    def empty(self) -> bool:
        return self.filter_values == () or (self.offset_end is not None and self.offset_end <= self.offset_start)

    def clamp(self, start: int, end: int) -> tuple[int, int]:
        """A planned offset range narrowed by the offset predicates."""
        start = max(start, self.offset_start)
        end = end if self.offset_end is None else min(end, self.offset_end)
        return start, max(start, end)


def _offset_bounds(f: Filter) -> tuple[int, int | None] | None:
    """[start, end) implied by a predicate on the ``offset`` column, or None."""
    v = getattr(f, "value", None)
    if isinstance(f, In):
        if not f.value or not all(isinstance(x, int) and not isinstance(x, bool) for x in f.value):
            return None
        return min(f.value), max(f.value) + 1
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if isinstance(f, EqualTo):
        return v, v + 1
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return 0, v
    if isinstance(f, LessThanOrEqual):
        return 0, v + 1
    return None


def sql_identifier(column: str) -> str:
    """How a column is named in the broker's SQL: AMQP property columns as
    ``properties.<name>``, application properties bare or ``[delimited]``."""
    if column in PROPERTY_NAMES:
        return f"properties.{column}"
    if _IDENT.match(column) and column.upper() not in _RESERVED:
        return column
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in column):
        raise ValueError(f"column name {column!r} has control characters")
    return "[" + column.replace("]", "]]") + "]"


def sql_literal(value: Any) -> str:
    """A literal in the broker's SQL syntax; ``ValueError`` when there is none."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("no literal for NaN or infinity")
        mantissa, exp = f"{abs(value):.17e}".split("e")
        return ("-" if value < 0 else "") + f"{mantissa}E{int(exp)}"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex().upper()
    raise ValueError(f"no SQL literal for {type(value).__name__}")


def _like(text: str) -> str:
    return "".join(_ESCAPE + c if c in "%_" + _ESCAPE else c for c in text)


def _predicate(f: Filter, columns: Mapping[str, DataType]) -> tuple[str, bool] | None:
    """(SQL text, exact) for a filter on declared columns, or None if not translatable."""
    if isinstance(f, Not):
        inner = _predicate(f.child, columns)
        return (f"NOT ({inner[0]})", inner[1]) if inner else None
    attr = getattr(f, "attribute", None)
    if attr is None or len(attr) != 1 or attr[0] not in columns:
        return None
    dtype = columns[attr[0]]
    if not isinstance(dtype, _PUSHABLE_TYPES):
        return None
    exact = isinstance(dtype, _EXACT_TYPES)
    name = sql_identifier(attr[0])
    try:
        if isinstance(f, IsNull):
            return f"{name} IS NULL", exact
        if isinstance(f, IsNotNull):
            return f"{name} IS NOT NULL", exact
        if isinstance(f, In):
            if not f.value or any(v is None for v in f.value):
                return None
            return f"{name} IN ({', '.join(sql_literal(v) for v in f.value)})", exact
        ops = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}
        op = ops.get(type(f))
        if op is not None:
            value = getattr(f, "value", None)  # every filter in ``ops`` has one
            if value is None:
                return None
            return f"{name} {op} {sql_literal(value)}", exact
        if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)) and isinstance(dtype, StringType):
            pattern = _like(f.value)
            pattern = {StringStartsWith: pattern + "%", StringEndsWith: "%" + pattern,
                       StringContains: "%" + pattern + "%"}[type(f)]
            return f"{name} LIKE {sql_literal(pattern)} ESCAPE '{_ESCAPE}'", exact
    except ValueError:
        return None
    return None


def plan_pushdown(filters: Iterable[Filter], columns: Mapping[str, DataType]) -> tuple[Pushdown, list[Filter]]:
    """Split ``filters`` into a ``Pushdown`` and the filters Spark must still evaluate
    (returned by reference, as ``pushFilters`` requires)."""
    values: set[str] | None = None
    start, end = 0, None
    clauses: list[str] = []
    pushed: list[str] = []
    rest: list[Filter] = []
    for f in filters:
        attr = getattr(f, "attribute", None)
        if attr == (FILTER_VALUE_COLUMN,) and isinstance(f, (EqualTo, In)):
            vals = (f.value,) if isinstance(f, EqualTo) else tuple(f.value)
            if all(isinstance(v, str) for v in vals):
                values = set(vals) if values is None else values & set(vals)
                pushed.append(repr(f))
                continue
        if attr == (OFFSET_COLUMN,):
            bounds = _offset_bounds(f)
            if bounds is not None:  # narrows the ranges read; Spark still checks the predicate
                start = max(start, max(bounds[0], 0))
                end = bounds[1] if end is None else (end if bounds[1] is None else min(end, bounds[1]))
                pushed.append(repr(f))
            rest.append(f)
            continue
        pred = _predicate(f, columns)
        if pred is None:
            rest.append(f)
            continue
        clauses.append(pred[0])
        pushed.append(repr(f))
        if not pred[1]:
            rest.append(f)
    sql = " AND ".join(f"({c})" if len(clauses) > 1 else c for c in clauses) or None
    return Pushdown(tuple(sorted(values)) if values is not None else None, sql, pushed, start, end), rest
