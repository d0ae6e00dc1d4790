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
import re
import time
from dataclasses import dataclass
from typing import Any

import proton
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DataType, DateType,
                               DecimalType, DoubleType, FloatType, IntegerType, LongType, MapType,
                               ShortType, StringType, StructField, StructType, TimestampNTZType,
                               TimestampType)

from amqp_stream.client import PROPERTY_NAMES, StreamMessage, build_message

__all__ = ["BASE_COLUMNS", "read_schema", "declared_columns", "WritePlan", "message_to_row", "to_spark"]

BASE_COLUMNS = StructType([
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), True),
    StructField("filter_value", StringType(), True),
    StructField("body", BinaryType(), True),
    StructField("application_properties", MapType(StringType(), StringType()), True),
])
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


_BASE_DDL = ("`offset` BIGINT NOT NULL, `timestamp` TIMESTAMP, `filter_value` STRING, `body` BINARY, "
             "`application_properties` MAP<STRING, STRING>")


def read_schema(ddl: str | None) -> str:
    """The read schema as DDL (Spark parses it; workers cannot parse DDL themselves). The
    ``properties`` DDL is checked first, so that a typo is reported in the user's own text
    rather than in the joined schema (whose first type is the ``offset`` column's BIGINT)."""
    if not ddl or not ddl.strip():
        return _BASE_DDL
    check_properties_ddl(ddl)
    return _BASE_DDL + ", " + ddl


#: the first word of every Spark SQL type name (DDL is case-insensitive)
SPARK_TYPES = ("STRING", "VARCHAR", "CHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "SHORT",
               "TINYINT", "BYTE", "DOUBLE", "FLOAT", "REAL", "BOOLEAN", "BINARY", "TIMESTAMP",
               "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "DATE", "DECIMAL", "DEC", "NUMERIC", "ARRAY", "MAP",
               "STRUCT", "INTERVAL", "VARIANT")
_ENTRY = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s*([A-Za-z_]*)(.*)", re.S)


def check_properties_ddl(ddl: str) -> None:
    """``ValueError`` naming the entry of the ``properties`` option that is not ``name TYPE``
    with a Spark type (the rest of each entry is left to Spark)."""
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


def declared_columns(schema: StructType) -> StructType:
    """The typed columns beyond the fixed ones, from the schema Spark resolved."""
    fields = [f for f in schema.fields if f.name not in BASE_COLUMNS.names]
    names = [f.name for f in schema.fields]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"properties option redefines column(s) {dup}")
    return StructType(fields)


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


def to_spark(value: Any, dtype: DataType) -> Any:
    """An AMQP value as a value of ``dtype``; None when it does not convert."""
    if value is None:
        return None
    try:
        if isinstance(dtype, StringType):
            if isinstance(value, (bytes, memoryview)):
                return bytes(value).decode("utf-8", "replace")
            return str(value)
        if isinstance(dtype, (LongType, IntegerType, ShortType, ByteType)):
            if isinstance(value, bool):
                return int(value)
            return int(value) if isinstance(value, (int, float, decimal.Decimal)) else int(str(value))
        if isinstance(dtype, (DoubleType, FloatType)):
            return float(value)
        if isinstance(dtype, BooleanType):
            if isinstance(value, str):
                return {"true": True, "false": False}.get(value.lower())
            return bool(value)
        if isinstance(dtype, BinaryType):
            return bytes(value) if isinstance(value, (bytes, memoryview, bytearray)) else str(value).encode()
        if isinstance(dtype, (TimestampType, TimestampNTZType)):
            if isinstance(value, (int, float)):  # proton.timestamp is an int of ms
                ts = _EPOCH + dt.timedelta(milliseconds=int(value))
                return ts if isinstance(dtype, TimestampType) else ts.replace(tzinfo=None)
            return dt.datetime.fromisoformat(str(value))
        if isinstance(dtype, DateType):
            return dt.date.fromisoformat(str(value)[:10])
        if isinstance(dtype, DecimalType):
            return decimal.Decimal(str(value))
        if isinstance(dtype, (ArrayType, MapType, StructType)):
            return json.loads(value) if isinstance(value, str) else value
    except (ValueError, TypeError, ArithmeticError):
        return None
    return value


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
           {str(k): _string(v) for k, v in app.items()}]
    for f in declared.fields:
        source = m.properties if f.name in PROPERTY_NAMES else app
        row.append(to_spark(source.get(f.name), f.dataType))
    return tuple(row)


def _string(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (bytes, memoryview)):
        return bytes(v).hex()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):  # proton.int32, proton.timestamp, ... print their class otherwise
        return str(int(v))
    if isinstance(v, float):
        return str(float(v))
    return str(v)
