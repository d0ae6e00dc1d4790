"""Filter pushdown: Spark filters -> broker filters (stage 1 values, a stage 2 SQL expression).

Spark gives ``pushFilters`` a list of simple predicates that are ANDed. We translate:

- ``filter_value = v`` / ``filter_value IN (...)`` -> stage-1 values (``rabbitmq:stream-filter``).
  Stage 1 is a Bloom filter per chunk, so it lets through chunks with other values; the reader
  checks each message's filter value exactly (``Pushdown.accepts``), and the filter is not handed
  back to Spark.
- Predicates on declared columns (the ``properties`` option) -> one ``amqp:sql-filter``
  expression over application properties (AMQP property columns use ``properties.<name>``).
  Names that are not plain identifiers or are reserved words go in ``[delimited]`` form.
  Every such predicate is handed back to Spark, so the broker need only let through every
  message whose row passes it; what each clause lets through is explained at ``_OTHER_KIND``.
  So results never depend on pushdown (``tests/spark/test_pushdown_equivalence.py`` checks it
  on random schemas, values and predicates).
- Comparisons of ``offset`` with integers narrow the offset ranges planned (Spark checks them
  too, so ``offset IN (3, 900)`` reads 3..900 and Spark keeps the two).
- Everything else stays with Spark.

Pure functions over ``pyspark.sql.datasource`` filter objects; tested without a broker.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from pyspark.sql.datasource import (EqualTo, Filter, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    IsNull, LessThan, LessThanOrEqual, Not, StringEndsWith, StringStartsWith)
from pyspark.sql.types import (BooleanType, ByteType, DataType, DoubleType, IntegerType, LongType,
                               ShortType, StringType)

import sqlfilter
from amqp_stream.client import PROPERTY_NAMES

__all__ = ["Pushdown", "plan_pushdown", "sql_identifier", "sql_literal", "fits", "streams_named"]

FILTER_VALUE_COLUMN = "filter_value"
OFFSET_COLUMN = "offset"
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED = {"AND", "OR", "NOT", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE", "UTC",
             "BETWEEN", "EXISTS", "INF", "NAN", "LOWER", "UPPER", "LEFT", "RIGHT", "SUBSTRING", "DATE"}
_ESCAPE = "!"


@dataclass
class Pushdown:
    """What the reader asks the broker for, and what it still checks itself."""

    filter_values: tuple[str, ...] | None = None  # None: no stage 1; () : nothing can match
    sql: str | None = None
    pushed: list[str] = field(default_factory=list)  # descriptions, for explain/debugging
    offset_start: int = 0          # offsets outside [offset_start, offset_end) are not read
    offset_end: int | None = None

    def describe(self) -> str:
        """What the broker is asked for, in words (``explain`` and partitions print it)."""
        stage1 = ("no stage 1" if self.filter_values is None else
                  f"stage 1 filter values {list(self.filter_values)} (each message's then checked exactly)")
        return f"{stage1}; SQL filter: {self.sql if self.sql else 'none'}"

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


# The broker sees the raw AMQP value, Spark the value ``mapping.to_spark`` reads for the
# declared type. For integer and boolean columns these agree wherever Spark's value is not null
# (those columns take only numbers / booleans, by value), so the clause is the predicate itself.
# A DOUBLE column also holds NaN and infinities (null to the broker) and integers beyond 2**53
# (rounded by Spark), and a STRING column the text of any scalar ('5' for the int 5): there the
# clause is exact only for the column's own kind (``_OTHER_KIND`` is true, never unknown, for a
# value of any other kind, which is let through for Spark to decide), and an equality lists
# every raw value whose text is the literal (``_string_candidates``), so that it stays a plain
# ``=``/``IN`` for the broker's derived keys and prefilter.
_OTHER_KIND: list[tuple[tuple[type, ...], str]] = [
    ((StringType,), "LOWER({x}) IS NULL"),
    ((DoubleType,), "({x} + 0.0) IS NULL OR ({x} % 1) IS NOT NULL"),
]
_COMPARISONS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}
_ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")


def _string_candidates(text: str) -> list[Any]:
    """Every value the broker may hold for a row whose STRING column reads ``text``
    (``mapping.to_spark``): the text (string, symbol, UTF-8 binary), and the integer, boolean,
    float, char code point, timestamp or uuid whose text it is."""
    out: list[Any] = [text]
    if re.fullmatch(r"-?[1-9][0-9]*|0", text):
        out.append(int(text))
    if text in ("true", "false"):
        out.append(text == "true")
    try:
        x = float(text)
        if math.isfinite(x) and repr(x) == text:
            out.append(x)
    except ValueError:
        pass
    if len(text) == 1:
        out.append(ord(text))
    if _ISO_MS.match(text):
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        out.append(round(t.timestamp() * 1000))
    try:
        u = uuid.UUID(text)
        if str(u) == text:
            out.append(u.bytes)
    except ValueError:
        pass
    return out


def _literal_fits(value: Any, dtype: DataType) -> bool:
    """A literal of the column's own family (so the broker compares as Spark does)."""
    if isinstance(dtype, StringType):
        return isinstance(value, str)
    if isinstance(dtype, BooleanType):
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if isinstance(dtype, DoubleType):
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, int)


def _natural(f: Filter, name: str, dtype: DataType) -> str | None:
    """SQL whose answer equals Spark's for raw values of the column's natural kind, or None."""
    if isinstance(f, Not):
        inner = _natural(f.child, name, dtype) if not isinstance(f.child, (IsNull, IsNotNull)) else None
        return f"NOT ({inner})" if inner else None
    if isinstance(f, In):
        if not f.value or not all(_literal_fits(v, dtype) for v in f.value):
            return None
        return f"{name} IN ({', '.join(sql_literal(v) for v in f.value)})"
    op = _COMPARISONS.get(type(f))
    if op is not None:
        assert isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual))
        if not _literal_fits(f.value, dtype) or (isinstance(dtype, BooleanType) and op != "="):
            return None  # the broker orders booleans as false, Spark as false < true
        return f"{name} {op} {sql_literal(f.value)}"
    if isinstance(f, (StringStartsWith, StringEndsWith)) and isinstance(dtype, StringType):
        # one '%': a prefix/suffix compare on the broker (two '%' would not cross line feeds)
        pattern = _like(f.value) + "%" if isinstance(f, StringStartsWith) else "%" + _like(f.value)
        return f"{name} LIKE {sql_literal(pattern)} ESCAPE '{_ESCAPE}'"
    return None


def _predicate(f: Filter, columns: Mapping[str, DataType]) -> str | None:
    """A broker SQL clause true for every message whose row passes ``f`` (more may pass: Spark
    still evaluates ``f``), or None if there is none worth sending."""
    attr = getattr(f, "attribute", None) if not isinstance(f, Not) else getattr(f.child, "attribute", None)
    if attr is None or len(attr) != 1 or attr[0] not in columns:
        return None
    dtype = columns[attr[0]]
    if not isinstance(dtype, (StringType, ByteType, ShortType, IntegerType, LongType, DoubleType, BooleanType)):
        return None
    try:
        name = sql_identifier(attr[0])
        if isinstance(f, IsNotNull):  # a row's value is null when the property is absent
            return f"EXISTS({name})"
        if isinstance(dtype, StringType) and isinstance(f, (EqualTo, In)):
            values = (f.value,) if isinstance(f, EqualTo) else f.value
            if not values or not all(isinstance(v, str) for v in values):
                return None
            literals = list(dict.fromkeys(sql_literal(c) for v in values for c in _string_candidates(v)))
            return f"{name} = {literals[0]}" if len(literals) == 1 else f"{name} IN ({', '.join(literals)})"
        natural = _natural(f, name, dtype)
    except ValueError:
        return None
    if natural is None:
        return None
    other = next((g for types, g in _OTHER_KIND if isinstance(dtype, types)), None)
    return natural if other is None else f"({natural}) OR (EXISTS({name}) AND ({other.format(x=name)}))"


def _and(clauses: list[str]) -> str | None:
    return " AND ".join(f"({c})" if len(clauses) > 1 else c for c in clauses) or None


def fits(sql: str | None) -> bool:
    """Within what the broker compiles (4096 characters, 200 tokens): a longer text would make
    the broker refuse the filter, so further clauses are left to Spark."""
    if sql is None:
        return True
    try:
        sqlfilter.compile_sql(sql)
    except sqlfilter.FilterError:
        return False
    return True


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
        if pred is not None and fits(_and(clauses + [pred])):  # else left to Spark alone
            clauses.append(pred)
            pushed.append(repr(f))
        rest.append(f)  # the SQL clause may let more through (see _predicate): Spark checks
    sql = _and(clauses)
    return Pushdown(tuple(sorted(values)) if values is not None else None, sql, pushed, start, end), rest


def streams_named(filters: Iterable[Filter], column: str) -> set[str] | None:
    """The partition streams a super stream read may skip to: ``stream = 'x'`` and
    ``stream IN (...)`` predicates on ``column``, intersected (None: no such predicate). Spark
    still checks them; planning only leaves out the partitions no row of which could pass."""
    allowed: set[str] | None = None
    for f in filters:
        if isinstance(f, EqualTo) and f.attribute == (column,):
            names = {f.value}
        elif isinstance(f, In) and f.attribute == (column,):
            names = set(f.value)
        else:
            continue
        allowed = names if allowed is None else allowed & names
    return allowed
