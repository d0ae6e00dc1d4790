"""Arrow record batches -> encoded AMQP messages, for the writer (``ArrowEncoder``).

Why: Spark hands a Python data source writer its rows as Arrow batches; turning each into a
``Row`` and then a ``proton.Message`` (~75 µs to build and encode) made the sink slow. Here a
batch's columns become Python lists once (plain ``to_pylist`` for the simple types, Spark's own
Arrow-to-row converter for the rest, so a value is what a ``Row`` would hold) and each row's
message is written straight into bytes with ``amqp_stream.wire``: per column one prepared
encoder, no ``Row``, no ``proton.Message``.

The mapping is ``mapping.WritePlan``'s (``docs/spark.md``, "Writing rows as messages"); the
sections are message-annotations (filter value, publishing id), properties,
application-properties and the body (a data section for bytes, amqp-value for a string body).
Property columns of a type proton would coerce in ways of its own (a number as ``subject``,
seconds as ``creation_time``...) are not rewritten here: the whole batch then goes through the
row path (``WritePlan.message``), so both paths give the same messages.

Timestamps are instants: a ``creation_time``/``absolute_expiry_time`` column and a timestamp
application property are the column's microseconds since the epoch, rounded down to milliseconds.
"""

from __future__ import annotations

import json
import struct
import time
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any, Callable, Iterator

from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DoubleType, FloatType,
                               IntegerType, LongType, ShortType, StringType, StructType, TimestampType)

from amqp_stream.client.names import FILTER_VALUE, PUBLISHING_ID
from amqp_stream.spark.mapping import WritePlan, _converter, _json_default
from amqp_stream.wire import encode_compound, encode_into

__all__ = ["ArrowEncoder", "PROPERTY_ORDER"]

#: the fields of the AMQP properties section in order (AMQP 1.0 §3.2.4), by their snake names
PROPERTY_ORDER = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                  "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
                  "reply_to_group_id")
_STRING_PROPERTIES = {"to", "subject", "reply_to", "group_id", "reply_to_group_id"}
_SYMBOL_PROPERTIES = {"content_type", "content_encoding"}
_TIME_PROPERTIES = {"absolute_expiry_time", "creation_time"}
_ID_PROPERTIES = {"message_id", "correlation_id"}
_INTEGERS = (ByteType, ShortType, IntegerType, LongType)

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U32, _U64 = struct.Struct(">I"), struct.Struct(">Q")
_F32, _F64 = struct.Struct(">f"), struct.Struct(">d")
_NULL = b"\x40"

Encoder = Callable[[Any], bytes]


def _variable(code8: int) -> Callable[[bytes], bytes]:
    """str8/vbin8/sym8 (``code8``) or their 32-bit forms for 256 bytes and more."""
    head8, code32 = bytes((code8,)), bytes((code8 + 0x10,))

    def enc(raw: bytes) -> bytes:
        n = len(raw)
        return head8 + bytes((n,)) + raw if n < 256 else code32 + _U32.pack(n) + raw
    return enc


_vbin, _str8, _sym8 = _variable(0xA0), _variable(0xA1), _variable(0xA3)


def _string(v: str) -> bytes:
    return _str8(v.encode("utf-8"))


def _int32(v: int) -> bytes:
    return b"\x54" + _I8.pack(v) if -128 <= v <= 127 else b"\x71" + _I32.pack(v)


def _long(v: int) -> bytes:
    return b"\x55" + _I8.pack(v) if -128 <= v <= 127 else b"\x81" + _I64.pack(v)


def _ulong(v: int) -> bytes:
    return b"\x53" + bytes((v,)) if 0 <= v < 256 else b"\x80" + _U64.pack(v)


def _ms(us: int) -> int:
    """Microseconds -> milliseconds, rounded down (as ``mapping``'s row path)."""
    return us // 1000


def _timestamp_us(us: int) -> bytes:
    return b"\x83" + _I64.pack(_ms(us))


def _wired(conv: Callable[[Any], Any]) -> Encoder:
    """The AMQP encoding of ``conv(value)`` (the row path's converter, the wire codec)."""
    def enc(v: Any) -> bytes:
        out = bytearray()
        encode_into(out, conv(v))
        return bytes(out)
    return enc


#: application property encoders that take the Arrow value as it is (no Spark conversion)
_SIMPLE: dict[type, Encoder] = {
    StringType: _string,
    LongType: _long,
    IntegerType: _int32,
    ShortType: lambda v: b"\x61" + _I16.pack(v),
    ByteType: lambda v: b"\x51" + _I8.pack(v),
    DoubleType: lambda v: b"\x82" + _F64.pack(v),
    FloatType: lambda v: b"\x72" + _F32.pack(v),
    BooleanType: lambda v: b"\x41" if v else b"\x42",
    BinaryType: _vbin,
}


def _property_encoder(name: str, dtype: DataType) -> Encoder | None:
    """The encoder of an AMQP property column, None when the row path must decide."""
    if isinstance(dtype, StringType):
        if name in _STRING_PROPERTIES or name in _ID_PROPERTIES:
            return _string
        if name in _SYMBOL_PROPERTIES:
            return lambda v: _sym8(v.encode("ascii"))
        if name == "user_id":
            return lambda v: _vbin(v.encode("utf-8"))
    if isinstance(dtype, BinaryType) and (name == "user_id" or name in _ID_PROPERTIES):
        return _vbin
    if isinstance(dtype, TimestampType) and name in _TIME_PROPERTIES:
        return _timestamp_us
    if isinstance(dtype, _INTEGERS) and name in _ID_PROPERTIES:
        return lambda v: _ulong(v) if v >= 0 else _negative_id(name, v)
    if isinstance(dtype, _INTEGERS) and name == "group_sequence":
        return lambda v: b"\x70" + _U32.pack(v)
    return None


def _negative_id(name: str, v: int) -> bytes:
    raise ValueError(f"column {name}: {v} is not a message id (AMQP ids are unsigned longs, strings, "
                     "binary or UUIDs)")


def _or(field: list[bytes] | bytes, default: bytes) -> list[bytes] | bytes:
    """A property field with ``default`` where it is null."""
    if isinstance(field, list):
        return [default if v == _NULL else v for v in field]
    return default if field == _NULL else field


def _section(code: bytes, kind: str, count: int, body: bytes) -> bytes:
    """A described list or map section (``code``: its descriptor's low byte)."""
    size = len(body) + 1
    if size < 256 and count < 256:  # list8 / map8
        return b"\x00\x53" + code + (b"\xc0" if kind == "list" else b"\xc1") + bytes((size, count)) + body
    out = bytearray(b"\x00\x53" + code)
    encode_compound(out, kind, count, body)
    return bytes(out)


def _sections(code: bytes, kind: str, parts: list[list[bytes]], n: int) -> list[bytes]:
    """A map section per row from its entries' encodings (an empty one: no section)."""
    if not parts:
        return [b""] * n
    out = []
    full = 2 * len(parts)
    for row in zip(*parts, strict=True):
        count = full - 2 * row.count(b"")
        out.append(_section(code, kind, count, b"".join(row)) if count else b"")
    return out


#: what ``json.dumps(v, default=_json_default, separators=(",", ":"))`` uses, made once
_JSON = json.JSONEncoder(default=_json_default, separators=(",", ":"))


def _json_value(v: Any) -> str:
    if hasattr(v, "asDict"):  # a struct's Row: an object, as ``mapping._plain`` makes it
        v = v.asDict(recursive=True)
    return _JSON.encode(v)


def _json_float(v: float) -> str:
    """A float as ``json`` writes it (``repr``; NaN and the infinities as JavaScript names)."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return float.__repr__(v)


class ArrowEncoder:
    """Encodes the rows of Arrow batches of one schema as AMQP messages (see the module doc).

    ``encode(batch, first_id)`` gives one ``bytes`` per row; with ``first_id`` row i carries the
    publishing id ``first_id + i`` as its ``x-publishing-id`` annotation.
    """

    def __init__(self, plan: WritePlan, schema: StructType):
        self.plan, self.schema = plan, schema
        self._fast = True
        self._props: list[tuple[int, int, Encoder]] = []      # (column, field position, encoder)
        for i, name in plan.properties:
            enc = _property_encoder(name, schema.fields[i].dataType)
            if enc is None:
                self._fast = False
            else:
                self._props.append((i, PROPERTY_ORDER.index(name), enc))
        self._app: list[tuple[int, bytes, Encoder]] = []       # (column, encoded key, encoder)
        for i, key, _ in plan.application:
            dtype = schema.fields[i].dataType
            simple = _SIMPLE.get(type(dtype))
            if isinstance(dtype, TimestampType):
                simple = _timestamp_us
            self._app.append((i, _string(key), simple or _wired(_converter(dtype))))
        # columns read as Arrow gives them; the rest through Spark's converter (the Row's value)
        self._raw = {i for i, _, e in self._app if e in _SIMPLE.values() or e is _timestamp_us}
        self._raw |= {i for i, _, _ in self._props}
        if plan.body_index is not None:
            self._raw.add(plan.body_index)
        self._spark = [_spark_converter(f.dataType) for f in schema.fields]
        self._fv_key = _sym8(FILTER_VALUE.encode())
        self._pid_key = _sym8(PUBLISHING_ID.encode())
        from amqp_stream.spark.arrow_kernels import Kernels
        self._kernels = Kernels.for_encoder(self)  # the usual columns: a column at a time

    def _columns(self, batch: Any) -> tuple[list[list], list[list] | None]:
        """The batch's columns as the encoders take them, and (for a JSON body) as a ``Row``
        holds them."""
        import pyarrow as pa  # type: ignore[import-untyped]
        raw_cols: list[list] = []
        row_cols: list[list] = []
        json_body = self.plan.body_is_json
        for i, f in enumerate(self.schema.fields):
            col = batch.column(i)
            conv = self._spark[i]
            values = None
            if i in self._raw and isinstance(f.dataType, TimestampType):
                raw_cols.append(col.cast(pa.int64()).to_pylist())
            else:
                values = col.to_pylist()
                if conv is not None and i not in self._raw:
                    values = [conv(v) for v in values]
                raw_cols.append(values)
            if json_body:
                if values is None or (conv is not None and i in self._raw):
                    values = col.to_pylist()
                    values = values if conv is None else [conv(v) for v in values]
                row_cols.append(values)
        return raw_cols, row_cols if json_body else None

    def encode(self, batch: Any, first_id: int | None = None) -> list[bytes]:
        """The messages of ``batch``'s rows, in order. Column by column: each column's values
        become their encodings in one pass, and each row's sections are joined from those."""
        if not self._fast:
            return list(self._via_rows(batch, first_id))
        if self._kernels is not None:
            out = self._kernels.encode(batch, first_id)
            if out is not None:
                return out
        return self.encode_values(batch, first_id)

    def encode_pieces(self, batch: Any) -> Any:
        """``encode(batch)``'s messages as the kernels write them, not yet joined
        (``row_concat``), for the frames built around them in the same join; None when the
        batch goes value by value."""
        return self._kernels.encode_pieces(batch) if self._kernels is not None else None

    def encode_values(self, batch: Any, first_id: int | None = None) -> list[bytes]:
        """``encode`` value by value (what the kernels fall back to, and what they are checked
        against)."""
        n = batch.num_rows
        cols, row_cols = self._columns(batch)
        plan = self.plan
        # message annotations: the filter value, the publishing id
        parts: list[list[bytes]] = []
        fv = self.filter_values(batch, cols)
        if fv is not None:
            key = self._fv_key
            parts.append([b"" if v is None else key + _string(v) for v in fv])
        if first_id is not None:
            key = self._pid_key
            parts.append([key + _ulong(pid) for pid in range(first_id, first_id + n)])
        annotations = _sections(b"\x72", "map", parts, n)
        # properties: fields up to the last one given (creation_time, at least)
        fields: list[list[bytes] | bytes] = [_NULL] * len(PROPERTY_ORDER)
        for i, pos, enc in self._props:
            fields[pos] = [_NULL if v is None else enc(v) for v in cols[i]]
        if plan.body_is_json:  # when no content_type is given
            fields[6] = _or(fields[6], _sym8(b"application/json"))
        fields[9] = _or(fields[9], b"\x83" + _I64.pack(int(time.time() * 1000)))  # the publish time
        last = max(p for p, f in enumerate(fields) if f is not _NULL)
        properties = []
        for row in zip(*[f if isinstance(f, list) else [f] * n for f in fields[:last + 1]], strict=True):
            count = len(row)
            while row[count - 1] == _NULL:  # trailing nulls left out (creation_time is never null)
                count -= 1
            properties.append(_section(b"\x73", "list", count, b"".join(row[:count])))
        # application properties
        app_parts = []
        for i, key, enc in self._app:
            app_parts.append([b"" if v is None else key + enc(v) for v in cols[i]])
        application = _sections(b"\x74", "map", app_parts, n)
        # body
        if row_cols is not None:
            bodies = [b"\x00\x53\x75" + _vbin(text.encode()) for text in self._json(row_cols, n)]
        else:
            assert plan.body_index is not None
            bodies = [b"" if v is None  # no body section, as proton leaves a None body out
                      else b"\x00\x53\x77" + _string(v) if isinstance(v, str)
                      else b"\x00\x53\x75" + _vbin(bytes(v)) for v in cols[plan.body_index]]
        return [a + p + ap + body for a, p, ap, body in zip(annotations, properties, application, bodies, strict=True)]

    def filter_values(self, batch: Any, cols: list[list] | None = None) -> list[str | None] | None:
        """Each row's filter value (``str()`` of the Row's value, as the row path), None
        without a ``filterValueColumn``."""
        index = self.plan.filter_index
        if index is None:
            return None
        if isinstance(self.schema.fields[index].dataType, StringType):
            return cols[index] if cols is not None else batch.column(index).to_pylist()
        conv = self._spark[index]
        values = batch.column(index).to_pylist()
        return [None if v is None else str(v if conv is None else conv(v)) for v in values]

    def _json(self, row_cols: list[list], n: int) -> list[str]:
        """Each row as the JSON object the row path writes (``json.dumps`` of the row as a dict,
        keys in column order, compact separators), built column by column."""
        frags = []
        for name, values, f in zip(self.plan.names, row_cols, self.schema.fields, strict=True):
            head = _json_string(name) + ":"
            if isinstance(f.dataType, StringType):
                frags.append([head + ("null" if v is None else _json_string(v)) for v in values])
            elif isinstance(f.dataType, (IntegerType, LongType, ShortType, ByteType)):
                frags.append([head + ("null" if v is None else int.__repr__(v)) for v in values])
            elif isinstance(f.dataType, (DoubleType, FloatType)):
                frags.append([head + ("null" if v is None else _json_float(v)) for v in values])
            else:
                frags.append([head + _json_value(v) for v in values])
        return ["{" + ",".join(row) + "}" for row in zip(*frags, strict=True)] if frags else ["{}"] * n

    def _via_rows(self, batch: Any, first_id: int | None) -> Iterator[bytes]:
        """The row path: what ``WritePlan.message`` builds (for property columns proton coerces)."""
        from proton import symbol, ulong
        cols = [col.to_pylist() if conv is None else [conv(v) for v in col.to_pylist()]
                for col, conv in zip(batch.columns, self._spark, strict=True)]
        for r in range(batch.num_rows):
            msg = self.plan.message(tuple(c[r] for c in cols))
            if first_id is not None:
                ann = dict(msg.annotations or {})
                ann[symbol(PUBLISHING_ID)] = ulong(first_id + r)
                msg.annotations = ann
            yield bytes(msg.encode())


def _spark_converter(dtype: DataType) -> Callable[[Any], Any] | None:
    """Spark's own Arrow value -> Row value conversion for ``dtype`` (None: the value as is)."""
    from pyspark.sql.conversion import ArrowTableToRowsConversion
    try:
        return ArrowTableToRowsConversion._create_converter(dtype, none_on_identity=True)
    except TypeError:  # a PySpark without none_on_identity
        return ArrowTableToRowsConversion._create_converter(dtype)
