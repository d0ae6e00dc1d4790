"""Rows <-> AMQP messages: the read schema, the write plan, the value conversions.

Writing (``WritePlan``): a ``body`` column (binary or string) becomes the body, else the whole
row as JSON (content type ``application/json``); columns named like AMQP properties
(``message_id``, ``subject``, ``correlation_id``, ``content_type``, ... see
``amqp_stream.client.PROPERTY_NAMES``) become those properties; the ``filterValueColumn`` becomes
the ``x-stream-filter-value`` annotation (and stays an application property, so it can be read
back as a typed column); every other column becomes an application property keeping its Spark
type as the nearest AMQP type (integers by width, float/double, boolean, string, binary,
timestamp as an AMQP timestamp). Dates and decimals go as strings, arrays/maps/structs as JSON
strings; nulls are left out.

Reading (``read_schema``, ``message_to_row``): fixed columns ``offset``, ``timestamp``,
``filter_value``, ``body``, ``application_properties`` (map<string,string>) plus one typed column
per entry of the ``properties`` DDL option, taken from the application property of that name
(or from the AMQP property when the name is one of ``PROPERTY_NAMES``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import difflib
import json
import math
import re
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

import proton
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, CalendarIntervalType,
                               CharType, DataType, DateType, DayTimeIntervalType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, MapType, NullType,
                               ShortType, StringType, StructField, StructType, TimestampNTZType,
                               TimestampType, VarcharType, VariantType, YearMonthIntervalType)

from amqp_stream.client import PROPERTY_NAMES, StreamMessage, build_message

__all__ = ["BASE_COLUMNS", "STREAM_COLUMN", "read_schema", "fixed_columns", "declared_columns",
           "check_schema_options", "check_readable", "WritePlan", "message_to_row",
           "to_spark"]

BASE_COLUMNS = StructType([
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), True),
    StructField("filter_value", StringType(), True),
    StructField("body", BinaryType(), True),
    StructField("application_properties", MapType(StringType(), StringType()), True),
])
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_STRING = StringType()


_BASE_DDL = ("`offset` BIGINT NOT NULL, `timestamp` TIMESTAMP, `filter_value` STRING, `body` BINARY, "
             "`application_properties` MAP<STRING, STRING>")
#: reading a super stream: the partition stream a row came from, after the fixed columns
STREAM_COLUMN = "stream"
_STREAM_DDL = f", `{STREAM_COLUMN}` STRING NOT NULL"


def read_schema(ddl: str | None, super_stream: bool = False) -> str:
    """The read schema as DDL (Spark parses it; workers cannot parse DDL themselves). The
    ``properties`` DDL is checked first, so that a typo is reported in the user's own text
    rather than in the joined schema (whose first type is the ``offset`` column's BIGINT).
    A super stream's rows have a ``stream`` column (its offsets are per partition stream)."""
    base = _BASE_DDL + (_STREAM_DDL if super_stream else "")
    if not ddl or not ddl.strip():
        return base
    check_properties_ddl(ddl)
    return base + ", " + ddl


#: the first word of every Spark SQL type name (DDL is case-insensitive)
SPARK_TYPES = ("STRING", "VARCHAR", "CHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT",
               "TINYINT", "BYTE", "DOUBLE", "FLOAT", "REAL", "BOOLEAN", "BINARY", "TIMESTAMP",
               "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "DATE", "DECIMAL", "DEC", "NUMERIC", "ARRAY", "MAP",
               "STRUCT", "INTERVAL", "VARIANT")
_ENTRY = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s*([A-Za-z_]*)(.*)", re.S)


def check_properties_ddl(ddl: str) -> list[str]:
    """The column names of the ``properties`` option; ``ValueError`` naming the entry that is
    not ``name TYPE`` with a Spark type (the rest of each entry is left to Spark)."""
    names = []
    for entry in _top_level_entries(ddl):
        m = _ENTRY.fullmatch(entry)
        if not entry.strip() or m is None or not m.group(2):
            raise ValueError(f"properties option {ddl!r}: {entry.strip()!r} is not 'name TYPE'")
        word = m.group(2).upper()
        if word not in SPARK_TYPES:
            close = difflib.get_close_matches(word, SPARK_TYPES, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"properties option {ddl!r}: column {m.group(1)}: unknown type "
                             f"{m.group(2)!r}{hint}")
        names.append(_unquote(m.group(1)))
    return names


def check_schema_options(ddl: str | None, schema: StructType, super_stream: bool = False) -> None:
    """``ValueError`` when a schema given with ``.schema(...)`` declares other columns than the
    ``properties`` option does: Spark uses the given schema and never asks for the option's, so
    the option would be dropped without a word. The names are compared (the types are the given
    schema's)."""
    if not ddl or not ddl.strip():
        return
    named = check_properties_ddl(ddl)
    declared = declared_columns(schema, super_stream).names
    if sorted(named) != sorted(declared):
        raise ValueError(f"the schema given with .schema() declares {declared}, the properties option "
                         f"{named}: give one of them, or the same columns in both")


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _top_level_entries(ddl: str) -> list[str]:
    """Split on commas outside <...>, (...), backticks and quotes."""
    entries, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(ddl):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "`'\"":
            quote = ch
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            entries.append(ddl[start:i])
            start = i + 1
    entries.append(ddl[start:])
    return entries


def fixed_columns(super_stream: bool = False) -> StructType:
    """The columns a read can give beyond the declared ones: ``BASE_COLUMNS`` (and a super
    stream's ``stream``)."""
    if not super_stream:
        return BASE_COLUMNS
    return StructType(list(BASE_COLUMNS.fields) + [StructField(STREAM_COLUMN, StringType(), False)])


def declared_columns(schema: StructType, super_stream: bool = False) -> StructType:
    """The typed columns beyond the fixed ones, from the schema Spark resolved: the read schema
    (``read_schema``), or one the user gave with ``.schema(...)``, which may leave fixed
    columns out and put the columns in any order, but gives a fixed column its own type."""
    fixed = fixed_columns(super_stream)
    fields = [f for f in schema.fields if f.name not in fixed.names]
    names = [f.name for f in schema.fields]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"properties option redefines column(s) {dup}")
    for f in schema.fields:
        if f.name in fixed.names and f.dataType != fixed[f.name].dataType:
            raise ValueError(f"schema: column {f.name} is the read's own, of type "
                             f"{fixed[f.name].dataType.simpleString()}, not {f.dataType.simpleString()} "
                             f"(a property of that name is read from application_properties)")
    declared = StructType(fields)
    check_readable(declared)
    return declared


# -- writing ---------------------------------------------------------------------------------


def _json_default(v: Any) -> Any:
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode()
    raise TypeError(f"cannot encode {type(v).__name__} as JSON")


def _ms(value: dt.datetime) -> int:
    """Milliseconds since the epoch, rounded down (as Spark's own conversions: an instant before
    1970 with a fraction of a millisecond is not moved later)."""
    if value.tzinfo is None:  # Spark hands TimestampType values as naive local time
        value = value.astimezone(dt.timezone.utc)
    return (value - _EPOCH) // dt.timedelta(milliseconds=1)


def _converter(dtype: DataType):
    """Spark value -> AMQP application property value (None: leave out)."""
    if isinstance(dtype, BooleanType) or isinstance(dtype, (StringType, DoubleType, LongType)):
        return lambda v: v
    if isinstance(dtype, IntegerType):
        return proton.int32
    if isinstance(dtype, ShortType):
        return proton.short
    if isinstance(dtype, ByteType):
        return proton.byte
    if isinstance(dtype, FloatType):
        return proton.float32
    if isinstance(dtype, BinaryType):
        return bytes
    if isinstance(dtype, (TimestampType, TimestampNTZType)):
        return lambda v: proton.timestamp(_ms(v))
    if isinstance(dtype, (DateType, DecimalType)):
        return lambda v: v.isoformat() if isinstance(v, dt.date) else str(v)
    return lambda v: json.dumps(_jsonable(v), default=_json_default, sort_keys=True)


def _jsonable(v: Any) -> Any:
    """Structs (``Row``s, at any depth) as JSON objects, so a struct column reads back by name."""
    if hasattr(v, "asDict"):
        return {k: _jsonable(x) for k, x in v.asDict().items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


@dataclass
class WritePlan:
    """How the columns of a written DataFrame map onto a message (built once per writer)."""

    names: list[str]
    body_index: int | None
    body_is_json: bool
    filter_index: int | None
    properties: list[tuple[int, str]]            # (column index, AMQP property name)
    application: list[tuple[int, str, Any]]      # (column index, key, converter)

    @classmethod
    def for_schema(cls, schema: StructType, filter_value_column: str | None = None) -> "WritePlan":
        names = schema.names
        if filter_value_column is not None and filter_value_column not in names:
            raise ValueError(f"filterValueColumn {filter_value_column!r} is not a column; columns: {names}")
        body_index = None
        if "body" in names:
            body_type = schema["body"].dataType
            if not isinstance(body_type, (BinaryType, StringType)):
                raise ValueError(f"column body must be binary or string, not {body_type.simpleString()}")
            body_index = names.index("body")
        props, app = [], []
        for i, f in enumerate(schema.fields):
            if i == body_index:
                continue
            if f.name in PROPERTY_NAMES:
                props.append((i, f.name))
            else:
                app.append((i, f.name, _converter(f.dataType)))
        return cls(names, body_index, body_index is None,
                   names.index(filter_value_column) if filter_value_column else None, props, app)

    def message(self, row: tuple | list) -> proton.Message:
        """One row (values in schema order) as a message."""
        if self.body_is_json:
            body = json.dumps(dict(zip(self.names, _plain(row), strict=False)), default=_json_default,
                              separators=(",", ":")).encode()
        else:
            assert self.body_index is not None  # body_is_json: no body column
            body = row[self.body_index]
            if isinstance(body, bytearray):
                body = bytes(body)
        properties = {name: row[i] for i, name in self.properties if row[i] is not None}
        if self.body_is_json and "content_type" not in properties:
            properties["content_type"] = "application/json"
        if "creation_time" not in properties:
            properties["creation_time"] = time.time()
        app = {key: conv(row[i]) for i, key, conv in self.application if row[i] is not None}
        fv = None
        if self.filter_index is not None and row[self.filter_index] is not None:
            fv = str(row[self.filter_index])
        return build_message(body, properties=properties, application_properties=app, filter_value=fv)


def _plain(row) -> list:
    """Nested Rows -> dicts, for the JSON body."""
    out = []
    for v in row:
        if hasattr(v, "asDict"):
            v = v.asDict(recursive=True)
        out.append(v)
    return out


# -- reading ---------------------------------------------------------------------------------
#
# ``to_spark`` is the one table of conversions: an AMQP value (as proton decodes it) into a
# value of the declared Spark type, or None when that value has no such reading (docs/spark.md,
# "Declared columns"). Declared types it cannot fill at all fail at planning
# (``check_readable``). Numbers, booleans and text keep the meaning the broker's SQL filter gives
# them, so that pushdown can be exact: numeric columns take numbers only (an integer column a
# float only when integral; the string '5' is no number, as '5' = 5 is false in the filter),
# booleans booleans only, timestamps are milliseconds since the epoch; a STRING column gives
# every scalar its text (5 -> '5'), and what the filter sees as null (NaN, infinities, lists,
# maps, decimals) is null there too. Never a Python repr.

_INT_RANGES = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}
_UNREADABLE = (DayTimeIntervalType, YearMonthIntervalType, VariantType, NullType, CalendarIntervalType)
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")


def check_readable(schema: StructType) -> None:
    """``ValueError`` naming a declared column whose type no AMQP value converts to."""
    for f in schema.fields:
        bad = _unreadable(f.dataType)
        if bad is not None:
            raise ValueError(f"properties option: column {f.name}: type {bad.simpleString()} cannot be "
                             f"read from an AMQP value (see docs/spark.md, 'Declared columns')")


def _unreadable(dtype: DataType) -> DataType | None:
    if isinstance(dtype, _UNREADABLE):
        return dtype
    if isinstance(dtype, ArrayType):
        return _unreadable(dtype.elementType)
    if isinstance(dtype, MapType):
        return _unreadable(dtype.keyType) or _unreadable(dtype.valueType)
    if isinstance(dtype, StructType):
        return next((b for b in (_unreadable(f.dataType) for f in dtype.fields) if b is not None), None)
    return None


def _kind(value: Any) -> str:
    """The AMQP type of a decoded value, as the conversion table names it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (proton.decimal32, proton.decimal64, proton.decimal128)):
        return "decimal"  # proton gives only the raw IEEE 754 bits
    if isinstance(value, proton.timestamp):
        return "timestamp"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, proton.char):
        return "char"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, uuid.UUID):
        return "uuid"
    if isinstance(value, (list, tuple, proton.Array)):
        return "list"
    if isinstance(value, dict):
        return "map"
    return "other"  # described values


def to_spark(value: Any, dtype: DataType) -> Any:
    """An AMQP value as a value of ``dtype``; None when it has no reading as one."""
    if value is None:
        return None
    kind = _kind(value)
    if kind == "timestamp":
        value = int(value)
    elif kind == "char":  # text as text, a number as its code point (as the SQL filter sees it)
        if isinstance(dtype, (StringType, CharType, VarcharType)):
            return str(value)
        value, kind = ord(value), "integer"
    elif kind == "float":
        value = float(value)
    elif isinstance(value, proton.Array):
        value = list(value.elements)
    if value is None or kind in ("decimal", "other"):
        return None
    try:
        return _CONVERT[type(dtype)](value, kind, dtype)
    except KeyError:  # types check_readable refuses never get here
        raise ValueError(f"no AMQP value converts to {dtype.simpleString()}") from None
    except (ValueError, TypeError, ArithmeticError, OverflowError):
        return None


def _to_string(v: Any, kind: str, dtype: DataType) -> str | None:
    if kind == "string":
        return str(v)
    if kind == "integer":
        return str(int(v))
    if kind == "timestamp":
        return _iso(v)
    if kind == "boolean":
        return "true" if v else "false"
    if kind == "float":  # NaN and infinities are null to the SQL filter: null here too
        return repr(v) if math.isfinite(v) else None
    if kind == "binary":
        return bytes(v).decode("utf-8")  # not UTF-8: no text (None)
    if kind == "uuid":
        return str(v)
    return None  # lists and maps (read them as ARRAY/MAP/STRUCT)


def _iso(ms: int) -> str:
    t = _EPOCH + dt.timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _to_integer(v: Any, kind: str, dtype: DataType) -> int | None:
    n: int | None
    if kind in ("integer", "timestamp"):
        n = int(v)
    elif kind == "float":
        n = int(v) if math.isfinite(v) and v == int(v) else None
    else:
        return None  # not a number to the SQL filter either ('5' = 5 is false there)
    bits = _INT_RANGES[type(dtype)]  # type: ignore[index]  # _CONVERT sends integral types only
    return n if n is not None and -(1 << (bits - 1)) <= n < (1 << (bits - 1)) else None


def _to_float(v: Any, kind: str, dtype: DataType) -> float | None:
    if kind in ("integer", "timestamp"):
        x = float(int(v))
    elif kind == "float":
        x = v
    else:
        return None
    if isinstance(dtype, FloatType) and math.isfinite(x):  # the nearest float32, as Spark stores it
        return struct.unpack("f", struct.pack("f", x))[0] if abs(x) <= _FLOAT32_MAX else None
    return x


_FLOAT32_MAX = 3.4028234663852886e38


def _to_boolean(v: Any, kind: str, dtype: DataType) -> bool | None:
    return bool(v) if kind == "boolean" else None


def _to_binary(v: Any, kind: str, dtype: DataType) -> bytes | None:
    if kind == "binary":
        return bytes(v)
    if kind == "string":
        return v.encode("utf-8")
    if kind == "uuid":
        return v.bytes
    return None


def _to_timestamp(v: Any, kind: str, dtype: DataType) -> dt.datetime | None:
    if kind in ("integer", "timestamp"):
        t = _EPOCH + dt.timedelta(milliseconds=int(v))
    elif kind == "float":
        t = _EPOCH + dt.timedelta(milliseconds=v)
    elif kind == "string":
        t = dt.datetime.fromisoformat(v.strip())
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
    else:
        return None
    return t if isinstance(dtype, TimestampType) else t.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _to_date(v: Any, kind: str, dtype: DataType) -> dt.date | None:
    if kind == "string":
        text = v.strip()
        if len(text) == 10:
            return dt.date.fromisoformat(text)
    t = _to_timestamp(v, kind, TimestampType())
    return t.date() if t is not None else None


def _to_decimal(v: Any, kind: str, dtype: DataType) -> decimal.Decimal | None:
    assert isinstance(dtype, DecimalType)
    d: decimal.Decimal | None
    if kind in ("integer", "timestamp"):
        d = decimal.Decimal(int(v))
    elif kind == "float":
        d = decimal.Decimal(repr(v)) if math.isfinite(v) else None
    elif kind == "string":
        d = decimal.Decimal(v.strip())
    else:
        return None
    if d is None or not d.is_finite():
        return None
    q = d.quantize(decimal.Decimal(1).scaleb(-dtype.scale), rounding=decimal.ROUND_HALF_UP)
    return q if len(q.as_tuple().digits) <= dtype.precision else None


def _to_array(v: Any, kind: str, dtype: DataType) -> list | None:
    assert isinstance(dtype, ArrayType)
    if kind == "string":
        v, kind = json.loads(v), "list"
    if not isinstance(v, list):
        return None
    return [to_spark(x, dtype.elementType) for x in v]


def _to_map(v: Any, kind: str, dtype: DataType) -> dict | None:
    assert isinstance(dtype, MapType)
    if kind == "string":
        v = json.loads(v)
    if not isinstance(v, dict):
        return None
    out = {}
    for k, x in v.items():
        key = to_spark(k, dtype.keyType)
        if key is None:
            return None  # Spark maps have no null keys
        out[key] = to_spark(x, dtype.valueType)
    return out


def _to_struct(v: Any, kind: str, dtype: DataType) -> tuple | None:
    assert isinstance(dtype, StructType)
    if kind == "string":
        v = json.loads(v)
    if not isinstance(v, dict):
        return None
    fields = {str(k): x for k, x in v.items()}
    return tuple(to_spark(fields.get(f.name), f.dataType) for f in dtype.fields)


_CONVERT = {StringType: _to_string, CharType: _to_string, VarcharType: _to_string,
            ByteType: _to_integer, ShortType: _to_integer, IntegerType: _to_integer, LongType: _to_integer,
            FloatType: _to_float, DoubleType: _to_float, BooleanType: _to_boolean, BinaryType: _to_binary,
            TimestampType: _to_timestamp, TimestampNTZType: _to_timestamp, DateType: _to_date,
            DecimalType: _to_decimal, ArrayType: _to_array, MapType: _to_map, StructType: _to_struct}


def _body_bytes(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, default=_json_default).encode()


def message_to_row(m: StreamMessage, declared: StructType) -> tuple:
    """A delivered message as a row of ``read_schema`` (fixed columns, then declared ones)."""
    ts_ms = m.chunk_timestamp
    if ts_ms is None:
        ct = m.properties.get("creation_time")
        ts_ms = int(ct * 1000) if ct else None
    ts = _EPOCH + dt.timedelta(milliseconds=ts_ms) if ts_ms is not None else None
    app = m.application_properties
    row = [m.offset, ts, m.filter_value, _body_bytes(m.body),
           {str(k): to_spark(v, _STRING) for k, v in app.items()}]
    for f in declared.fields:
        source = m.properties if f.name in PROPERTY_NAMES else app
        row.append(to_spark(source.get(f.name), f.dataType))
    return tuple(row)

