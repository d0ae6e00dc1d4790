"""Delivered messages -> Arrow record batches of the read schema, column by column.

Why: a reader that yields a tuple per row pays twice per value: ``message_to_row`` converts
each value on its own (``to_spark``), then Spark's worker converts each tuple's values again
into Arrow (``LocalDataToArrowConversion``, a call per value). Spark 4's Python data sources
also take ``pyarrow.RecordBatch``es, so a task gathers its messages' fields in one list per
column (``Columns.add``) and makes each column an Arrow array at once (``Columns.batch``).

The values are ``message_to_row``'s, and the arrays what Spark's worker would make of those
rows (``tests/spark/test_batches.py`` checks both paths against each other over random
messages and schemas). A column whose values are all of the one Python type its Spark type
takes as it is (every ``n`` an ``int`` in range for an INT column, every ``region`` a ``str``
for a STRING column...) goes to Arrow as the list it is; any other column goes value by value
through ``to_spark`` and Spark's own converter, as the tuple path did.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Callable

from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DoubleType, IntegerType,
                               LongType, ShortType, StringType, StructType)

from amqp_stream.client import PROPERTY_NAMES
from amqp_stream.spark.mapping import _EPOCH, _STRING, _body_bytes, declared_columns, fixed_columns, to_spark

__all__ = ["Columns", "BATCH_ROWS", "BATCH_BYTES", "read_arrow_schema"]

#: rows per yielded batch (Spark's own default for Python UDF batches is 10,000); the stream
#: protocol's read adds whole chunks, so its batches pass it by at most a chunk's records
BATCH_ROWS = 10_000
#: the messages' bytes that also end a batch: 10,000 messages of a megabyte would otherwise
#: be held at once by a task (its memory bounded by this, and a chunk or a message more)
BATCH_BYTES = 64 << 20

_BITS = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}
# the milliseconds a ``datetime`` can hold (years 1..9999): beyond, message_to_row's
# ``_EPOCH + timedelta`` raises, and so does ``batch``
_MIN_MS, _MAX_MS = -62135596800000, 253402300799999


def read_arrow_schema(declared: StructType, super_stream: bool = False) -> Any:
    """The Arrow schema Spark expects of a batch of the read schema (``records_to_arrow_batches``
    compares them exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(StructType(fixed_columns(super_stream).fields + declared.fields), timezone="UTC")


def _spark_converter(dtype: DataType) -> Callable[[Any], Any] | None:
    """Spark's Python value -> Arrow input conversion for ``dtype`` (what its worker applies to
    a reader's tuples), None when it is the identity."""
    from pyspark.sql.conversion import LocalDataToArrowConversion
    return LocalDataToArrowConversion._create_converter(dtype, none_on_identity=True)


def _text(v: Any) -> str | None:
    """``to_spark(v, STRING)``, with the common types first (application property values)."""
    t = type(v)
    if t is str:
        return v
    if t is int:
        return int.__repr__(v)
    if t is float:
        return float.__repr__(v) if math.isfinite(v) else None
    if t is bool:
        return "true" if v else "false"
    return to_spark(v, _STRING)


class Columns:
    """The rows of one task's messages, one Python list per column, made into ``RecordBatch``es.

    ``add`` takes what ``message_to_row`` takes (``offset``, ``chunk_timestamp``,
    ``filter_value``, ``body``, ``properties``, ``application_properties``); ``batch`` gives
    the rows added since the last one. ``stream``: a super stream's partition stream, the
    ``stream`` column of every row. ``output``: the schema of the batches when it is not the
    whole read schema (fixed columns left out or in another order: ``Columns.of``); a fixed
    column left out is not made, so a read of a few columns pays for those alone (the map of
    every application property as text costs most)."""

    def __init__(self, declared: StructType, stream: str | None = None, output: StructType | None = None):
        from pyspark.sql.pandas.types import to_arrow_schema
        self.declared, self.stream = declared, stream
        # every column a read can give (the fixed ones, then the declared), and the ones it gives
        self.full = read_arrow_schema(declared, stream is not None)
        self.schema = self.full if output is None else to_arrow_schema(output, timezone="UTC")
        names = self.full.names
        self._projection = None if self.schema.names == names else [names.index(n) for n in self.schema.names]
        self._given = set(self.schema.names)
        self._declared = [(f.name, f.dataType, f.name in PROPERTY_NAMES, _spark_converter(f.dataType))
                          for f in declared.fields]
        self._map_type = self.full.field("application_properties").type
        self._clear()

    @classmethod
    def of(cls, schema: StructType, stream: str | None = None) -> "Columns":
        """The columns of ``schema``, the schema Spark resolved (``read_schema``'s or one given
        with ``.schema(...)``: any of the fixed columns, in any order)."""
        return cls(declared_columns(schema, stream is not None), stream, schema)

    def gives(self, name: str) -> bool:
        """Whether the fixed column ``name`` is among those read: a column left out is not made."""
        return name in self._given

    def record_batch(self, arrays: list[Any]) -> Any:
        """``arrays`` (one per column of ``full``; None for one not given) as a batch of ``schema``."""
        import pyarrow as pa  # type: ignore[import-untyped]
        if self._projection is not None:
            arrays = [arrays[i] for i in self._projection]
        for field, array in zip(self.schema, arrays, strict=True):
            if not field.nullable and array.null_count:  # Spark would take the schema's word for it
                raise ValueError(f"column {field.name} is NOT NULL in the given schema, but {array.null_count} "
                                 f"of {len(array)} messages have no value for it")
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _clear(self) -> None:
        """Empty every column list in place (``stored_columns`` holds their ``append``s)."""
        if not hasattr(self, "offsets"):
            self.offsets: list[int] = []
            self.times: list[int | None] = []
            self.filter_values: list[Any] = []
            self.bodies: list[Any] = []
            # the application_properties map column: every message's keys and their values as
            # text, one run a message; map_ends[i] is where message i's run ends
            self.map_keys: list[str] = []
            self.map_items: list[str | None] = []
            self.map_ends: list[int] = [0]
            self.values: list[list[Any]] = [[] for _ in self._declared]
        columns: list[list[Any]] = [self.offsets, self.times, self.filter_values, self.bodies,
                                    self.map_keys, self.map_items, *self.values]
        for column in columns:
            column.clear()
        del self.map_ends[1:]

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, m: Any) -> None:
        """One delivered message (a ``client.StreamMessage`` or ``stream_read``'s view)."""
        self.offsets.append(m.offset)
        ts_ms = m.chunk_timestamp
        props = m.properties
        if ts_ms is None:
            ct = props.get("creation_time")
            ts_ms = int(ct * 1000) if ct else None
        self.times.append(ts_ms)
        self.filter_values.append(m.filter_value)
        self.bodies.append(m.body)
        app = m.application_properties
        if all(type(k) is str for k in app):
            self.map_keys.extend(app)
            self.map_items.extend(map(_text, app.values()))
        else:  # keys made text (two may become one, the last winning, as in message_to_row)
            text = {str(k): to_spark(v, _STRING) for k, v in app.items()}
            self.map_keys.extend(text)
            self.map_items.extend(text.values())
        self.map_ends.append(len(self.map_keys))
        for values, (name, _, is_property, _) in zip(self.values, self._declared, strict=True):
            values.append((props if is_property else app).get(name))

    def batch(self) -> Any:
        """The rows added since the last batch as one ``pyarrow.RecordBatch`` of ``schema``."""
        import pyarrow as pa
        n, gives = len(self.offsets), self.gives
        columns: list[Any] = [pa.array(self.offsets, pa.int64()),
                              self._timestamps() if gives("timestamp") else None,
                              pa.array(self.filter_values, pa.string()) if gives("filter_value") else None,
                              self._bodies() if gives("body") else None,
                              self._map() if gives("application_properties") else None]
        if self.stream is not None:
            columns.append(pa.array([self.stream] * n, pa.string()))
        for values, (_, dtype, _, conv) in zip(self.values, self._declared, strict=True):
            columns.append(_column(values, dtype, conv, self.full.field(len(columns)).type))
        self._clear()
        return self.record_batch(columns)

    def _timestamps(self) -> Any:
        import pyarrow as pa
        present = [ms for ms in self.times if ms is not None]
        if present and (min(present) < _MIN_MS or max(present) > _MAX_MS):
            for ms in present:  # message_to_row's OverflowError, as the tuple path raised it
                _EPOCH + dt.timedelta(milliseconds=ms)
        return pa.array([None if ms is None else ms * 1000 for ms in self.times], pa.timestamp("us", tz="UTC"))

    def _bodies(self) -> Any:
        import pyarrow as pa
        bodies = self.bodies
        if not set(map(type, bodies)) <= {bytes, type(None)}:
            bodies = [_body_bytes(b) for b in bodies]
        return pa.array(bodies, pa.binary())

    def _map(self) -> Any:
        """``{str(k): to_spark(v, STRING)}`` of every message's application properties."""
        import pyarrow as pa
        return pa.MapArray.from_arrays(pa.array(self.map_ends, pa.int32()), pa.array(self.map_keys, pa.string()),
                                       pa.array(self.map_items, pa.string()), type=self._map_type)


def _column(values: list, dtype: DataType, conv: Callable[[Any], Any] | None, arrow_type: Any) -> Any:
    """A declared column: ``[to_spark(v, dtype) for v in values]`` as Spark's worker would make
    it an Arrow array, without the per-value calls when the values need none."""
    import pyarrow as pa
    kinds = set(map(type, values))
    kinds.discard(type(None))
    t = type(dtype)
    if t in _BITS and kinds <= {int}:
        present = [v for v in values if v is not None]
        bound = 1 << (_BITS[t] - 1)
        if not present or (min(present) >= -bound and max(present) < bound):
            return pa.array(values, arrow_type)
    elif t is StringType and kinds <= {str}:
        return pa.array(values, arrow_type)
    elif t is DoubleType and kinds <= {float}:
        return pa.array(values, arrow_type)
    elif t is BooleanType and kinds <= {bool}:
        return pa.array(values, arrow_type)
    elif t is BinaryType and kinds <= {bytes}:
        return pa.array(values, arrow_type)
    converted = [to_spark(v, dtype) for v in values]
    if conv is not None:
        converted = [conv(v) for v in converted]
    return pa.array(converted, arrow_type)
