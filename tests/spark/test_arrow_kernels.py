"""``arrow_kernels.Kernels`` writes ``ArrowEncoder``'s messages byte for byte: random schemas of
the columns it takes, random values (nulls, long and escaped strings, extreme numbers), with
and without publishing ids; what it leaves to the per-value way is written that way."""

from __future__ import annotations

import time
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (BinaryType, BooleanType, DecimalType, DoubleType, IntegerType, LongType, StringType, StructField,
                               StructType)

from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.mapping import WritePlan

TYPES = {"string": StringType(), "int": IntegerType(), "long": LongType(), "double": DoubleType(),
         "boolean": BooleanType(), "decimal": DecimalType(23, 2), "decimal0": DecimalType(10, 0),
         "decimal9": DecimalType(20, 9)}
PLAIN = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=5)
# mostly values the kernels write, now and then one they leave to the per-value way
VALUES = {
    "string": PLAIN | PLAIN | PLAIN | st.text(max_size=4) | st.just("x" * 300)
    | st.sampled_from(['q"uote', "back\\slash", "é", "tab\t"]),
    "int": st.integers(-(2**31), 2**31 - 1) | st.integers(-130, 130) | st.sampled_from([-129, -128, 127, 128]),
    "long": st.integers(-(2**63), 2**63 - 1) | st.integers(-130, 130) | st.sampled_from([-129, -128, 127, 128]),
    "double": st.integers(-10**6, 10**6).map(lambda i: i / 4) | st.integers(-9, 9).map(float)
    | st.sampled_from([0.1, -0.0, 1e15 + 0.5, 123456.789]) | st.floats(),
    "boolean": st.booleans(),
    "decimal": st.decimals(-10**20, 10**20, places=2) | st.sampled_from([Decimal("0.00"), Decimal("-0.01")]),
    "decimal0": st.decimals(-10**9, 10**9, places=0),
    "decimal9": st.decimals(-10**10, 10**10, places=9) | st.sampled_from([Decimal("0E-9"), Decimal("1E-9"),
                                                                        Decimal("-0.000001")]),
}
NAMES = ["a", "b", "c", "region", "message_id", "subject", "correlation_id"]


@st.composite
def batches(draw, max_rows: int = 6):
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=1, max_size=5))
    kinds = {n: ("string" if n in ("message_id", "subject", "correlation_id") else draw(st.sampled_from(list(TYPES))))
             for n in names}
    fields = [StructField(n, TYPES[kinds[n]]) for n in names]
    if draw(st.booleans()):
        fields.append(StructField("body", BinaryType()))
    schema = StructType(fields)
    rows = draw(st.integers(0, max_rows))
    columns = {n: draw(st.lists(st.none() | VALUES[kinds[n]] if draw(st.booleans()) else VALUES[kinds[n]],
                                min_size=rows, max_size=rows)) for n in names}
    if "body" in schema.names:
        columns["body"] = draw(st.lists(st.none() | st.binary(max_size=4) | st.just(b"y" * 300),
                                        min_size=rows, max_size=rows))
    batch = pa.RecordBatch.from_arrays([pa.array(columns[f.name], to_arrow_schema(StructType([f]))[0].type)
                                        for f in schema.fields], schema=to_arrow_schema(schema, timezone="UTC"))
    strings = [n for n in names if kinds[n] == "string"]
    fv = draw(st.none() | st.sampled_from(strings)) if strings else None
    offset = draw(st.integers(0, rows) if max_rows <= 6 else st.integers(0, 3))
    return schema, batch.slice(offset), fv, draw(st.none() | st.integers(1, 2**40))


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch):
    """Both ways stamp creation_time with the clock: one clock for both."""
    monkeypatch.setattr(time, "time", lambda: 1795823780.661)


def test_kernels_write_the_encoders_bytes():
    """Random batches; and most of them written by the kernels (else the check says little)."""
    runs: list[bool] = []

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batches())
    def check(case):
        schema, batch, fv, first_id = case
        enc = ArrowEncoder(WritePlan.for_schema(schema, fv), schema)
        assert enc._kernels is not None
        fast = enc._kernels.encode(batch, first_id)
        runs.append(fast is not None)
        values = enc.encode_values(batch, first_id)
        assert enc.encode(batch, first_id) == values
        assert fast is None or fast == values

    check()
    assert sum(runs) > len(runs) / 2, f"the kernels wrote {sum(runs)} of {len(runs)} batches"


@pytest.mark.parametrize("amount", [DoubleType(), DecimalType(23, 2)], ids=["double", "decimal"])
def test_the_usual_batch_is_written_by_the_kernels(amount):
    """The bench's five columns (``spark.range``'s ``id * 0.25`` is a DECIMAL(23,2)): a column at
    a time (no fall-back), the same bytes."""
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                         StructField("amount", amount), StructField("message_id", StringType()),
                         StructField("k", LongType())])
    ids = range(-300, 3000)
    amounts = [i * 0.25 for i in ids] if isinstance(amount, DoubleType) else [Decimal(i) / 4 for i in ids]
    batch = pa.RecordBatch.from_arrays([
        pa.array(list(ids), pa.int32()), pa.array([f"r{i % 100:02d}" for i in ids]),
        pa.array(amounts, to_arrow_schema(StructType([schema["amount"]]))[0].type), pa.array([f"m-{i}" for i in ids]),
        pa.array([i * 3 for i in ids], pa.int64())], names=schema.names)
    enc = ArrowEncoder(WritePlan.for_schema(schema, "region"), schema)
    assert enc._kernels is not None
    fast = enc._kernels.encode(batch, 1)
    assert fast is not None and fast == enc.encode_values(batch, 1)


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()], ids=["string", "large_string"])
def test_string_columns_with_64_bit_offsets(string_type):
    """Spark may hand strings as ``large_string``: the JSON check reads their offsets as they
    are (a quote in the last row sends the batch the per-value way), and the pieces join the same."""
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                         StructField("message_id", StringType())])
    enc = ArrowEncoder(WritePlan.for_schema(schema, "region"), schema)
    for regions, fast_expected in ((["r1", "r2", "r3", "r4"], True), (["r1", "r2", "r3", 'q"'], False)):
        batch = pa.RecordBatch.from_arrays([pa.array([1000, 2000, 3000, 4000], pa.int32()),
                                            pa.array(regions, string_type), pa.array(["m-1", "m-2", "m-3", "m-4"], string_type)],
                                           names=schema.names)
        for part in (batch, batch.slice(1), batch.slice(0, 3)):
            fast = enc._kernels.encode(part, 5)
            assert (fast is not None) == (fast_expected or 'q"' not in part.column(1).to_pylist())
            assert enc.encode(part, 5) == enc.encode_values(part, 5)
            assert fast is None or fast == enc.encode_values(part, 5)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 8).flatmap(lambda scale: st.tuples(
    st.just(scale),
    st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 10**(scale + 2)) | st.integers(-(2**70), 2**70)
             | st.sampled_from([0, 1, 10**scale, 2**63 - 1, -1, -(2**63)]), min_size=1, max_size=8),
    st.integers(0, 2))))
def test_decimal_text_is_str_of_each_value(case):
    """The decimal text written from the unscaled integers is ``str`` of each ``Decimal`` (what
    the per-value way writes); Arrow's cast is left to what it does not write."""
    from amqp_stream.spark.arrow_kernels import _decimal_text
    from amqp_stream.spark.row_concat import as_array
    scale, unscaled, cut = case
    values = [Decimal(u).scaleb(-scale) for u in unscaled]
    col = pa.array([Decimal(0)] * cut + values, pa.decimal128(38, scale)).slice(cut)
    text = _decimal_text(col)
    fits = all(-(2**63) <= u < 2**63 for u in unscaled)
    if fits and scale <= 6 and (scale == 0 or min(unscaled) >= 0):
        assert text is not None
        got = as_array(text).to_pylist()
        assert [t if isinstance(t, bytes) else t.encode() for t in got] == [str(v).encode() for v in values]
    else:
        assert text is None


def test_spark_shuffled_batches_are_written_by_the_kernels():
    """Rows as Spark's ``repartition`` hands them (ids shuffled: every batch has integers of
    both forms, and region codes of one width): a column at a time, the same bytes."""
    import random
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                         StructField("amount", DecimalType(23, 2)), StructField("message_id", StringType()),
                         StructField("k", LongType())])
    ids = list(range(5000))
    random.Random(7).shuffle(ids)
    batch = pa.RecordBatch.from_arrays([
        pa.array(ids, pa.int32()), pa.array([f"r{(i * 7919) % 100:02d}" for i in ids]),
        pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(23, 2)), pa.array([f"m-{i}" for i in ids]),
        pa.array([i * 3 for i in ids], pa.int64())], names=schema.names)
    enc = ArrowEncoder(WritePlan.for_schema(schema, "region"), schema)
    for part in (batch, batch.slice(3, 4000)):
        fast = enc._kernels.encode(part, 1)
        assert fast is not None and fast == enc.encode_values(part, 1)
