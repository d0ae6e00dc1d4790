"""The column-wise read path (``batches.Columns`` over ``stream_read.stored_message``) gives the
batches Spark's worker makes of the tuple path's rows (``message_to_row`` over
``wire_message``, then ``records_to_arrow_batches``): random messages, random declared schemas,
no broker, no Spark session."""

from __future__ import annotations

import datetime as dt
import math

import proton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType
from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

from amqp_stream.client.names import FILTER_VALUE
from amqp_stream.spark.batches import Columns
from amqp_stream.spark.mapping import BASE_COLUMNS, STREAM_COLUMN, declared_columns, message_to_row
from amqp_stream.spark.source import AmqpStreamDataSource
from amqp_stream.spark.stream_read import stored_message, wire_message

KEYS = ["a", "b", "c", "message_id", "subject", "creation_time", "group_sequence"]
TYPES = ["string", "integer", "long", "short", "byte", "double", "float", "boolean", "binary", "timestamp",
         "timestamp_ntz", "date", "decimal(10,2)", {"type": "array", "elementType": "string", "containsNull": True},
         {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
         {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": {}}]}]

_MS = st.integers(-(2**40), 2**42)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1).map(proton.int32),
    st.integers(-128, 127).map(proton.byte), st.integers(0, 2**64 - 1).map(proton.ulong),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(width=32).map(proton.float32),
    st.text(max_size=8), st.text(alphabet="abc", max_size=4).map(proton.symbol), st.binary(max_size=8),
    _MS.map(proton.timestamp), st.uuids(), st.characters().map(proton.char),
    st.sampled_from(["5", "2026-01-02", "2026-01-02T03:04:05", "1.5", "[1, 2]", '{"x": 3}', "true"]))
values = st.one_of(scalars, st.lists(st.integers(-5, 5) | st.text(max_size=3), max_size=3),
                   st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2))


@st.composite
def messages(draw) -> bytes:
    m = proton.Message()
    m.properties = draw(st.dictionaries(st.sampled_from(KEYS[:3] + ["region"]), values, max_size=4))
    if draw(st.booleans()):
        m.id = draw(st.text(max_size=5) | st.integers(0, 2**63))
    m.subject = draw(st.none() | st.text(max_size=5))
    m.creation_time = draw(st.sampled_from([0.0, 1.5, 1795823780.661]) | _MS.map(lambda ms: ms / 1000.0))
    m.group_sequence = draw(st.integers(0, 5))
    fv = draw(st.none() | st.text(max_size=4))
    if fv is not None:
        m.annotations = {proton.symbol(FILTER_VALUE): fv}
    m.body = draw(st.none() | st.binary(max_size=12) | st.text(max_size=6) | st.integers(-5, 5)
                  | st.lists(st.integers(0, 3), max_size=2))
    return bytes(m.encode())


@st.composite
def schemas(draw) -> StructType:
    names = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
    fields = [{"name": n, "type": draw(st.sampled_from(TYPES)), "nullable": True, "metadata": {}} for n in names]
    return StructType.fromJson({"type": "struct", "fields": fields})


def _reference(datas: list[bytes], declared: StructType, stream: str | None):
    """The tuple path: rows as the readers yielded them, made Arrow by Spark's own worker code."""
    fixed = len(BASE_COLUMNS.fields)
    rows = [message_to_row(wire_message(d, i), declared) for i, d in enumerate(datas)]  # type: ignore[arg-type]
    if stream is not None:
        rows = [r[:fixed] + (stream,) + r[fixed:] for r in rows]
    fields = list(BASE_COLUMNS.fields)
    if stream is not None:
        fields.append(StructType.fromJson({"type": "struct", "fields": [
            {"name": STREAM_COLUMN, "type": "string", "nullable": False, "metadata": {}}]}).fields[0])
    schema = StructType(fields + list(declared.fields))
    return list(records_to_arrow_batches(iter(rows), 10_000, schema, AmqpStreamDataSource))  # type: ignore[arg-type]


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN, types too."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=6), schemas(), st.none() | st.just("p-1"))
def test_columns_give_the_batches_spark_makes_of_the_rows(datas, declared, stream):
    declared = declared_columns(StructType(list(BASE_COLUMNS.fields) + list(declared.fields)))
    try:
        expected = _reference(datas, declared, stream)
    except OverflowError:  # a creation time past year 9999: the tuple path fails; so must this one
        columns = Columns(declared, stream)
        try:
            for i, d in enumerate(datas):
                columns.add(stored_message(d, i))
            columns.batch()
        except OverflowError:
            return
        raise AssertionError("the column path read a creation time the row path could not") from None
    columns = Columns(declared, stream)
    for i, d in enumerate(datas):
        m, w = stored_message(d, i), wire_message(d, i)
        assert _same((m.offset, m.body, m.filter_value, m.properties, m.application_properties),
                     (w.offset, w.body, w.filter_value, w.properties, w.application_properties))
        columns.add(m)
    got = columns.batch()
    assert len(expected) == 1 and got.schema.equals(expected[0].schema)
    assert _same(got.to_pylist(), expected[0].to_pylist())


def test_the_usual_message_takes_the_fast_columns():
    """The messages the sink writes (every value of a column one type): the same rows, and no
    value goes through ``to_spark``."""
    from amqp_stream.spark import batches
    declared = StructType.fromJson({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in [("n", "integer"), ("region", "string"), ("amount", "double"), ("k", "long"),
                     ("message_id", "string")]]})
    datas = []
    for i in range(50):
        m = proton.Message(body=b"{}", id=f"m-{i}", creation_time=1795823780.661 + i)
        m.properties = {"n": proton.int32(i), "region": f"r{i % 3}", "amount": i * 0.25, "k": i * 3}
        m.annotations = {proton.symbol(FILTER_VALUE): f"r{i % 3}"}
        datas.append(bytes(m.encode()))
    calls = []
    original = batches.to_spark
    batches.to_spark = lambda v, t: calls.append(v) or original(v, t)  # type: ignore[assignment]
    try:
        columns = Columns(declared)
        for i, d in enumerate(datas):
            columns.add(stored_message(d, i))
        got = columns.batch()
    finally:
        batches.to_spark = original  # type: ignore[assignment]
    assert calls == []
    assert _same(got.to_pylist(), _reference(datas, declared, None)[0].to_pylist())
    assert got.column("timestamp")[1].as_py() == dt.datetime(2026, 11, 27, 23, 56, 21, 661000, tzinfo=dt.timezone.utc)


def test_read_schema_and_columns_agree():
    """``Columns.schema`` is what Spark compares a reader's batches with (``read_schema``)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    declared = StructType.fromJson({"type": "struct", "fields": [
        {"name": "n", "type": "long", "nullable": True, "metadata": {}}]})
    full = StructType(list(BASE_COLUMNS.fields) + list(declared.fields))
    assert Columns(declared).schema.equals(to_arrow_schema(full, timezone="UTC"))
