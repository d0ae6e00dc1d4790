"""The sink's Arrow path (issue 25 item 18): ``ArrowEncoder`` writes the messages the row path
(``WritePlan.message``) builds, ``publish_batches`` keeps the exactly-once numbering across
batches, and every column type the mapping supports goes through Spark and back."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import time

import pyarrow as pa
import pytest
from pyspark.sql.conversion import ArrowTableToRowsConversion
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, MapType, ShortType,
                               StringType, StructField, StructType, TimestampNTZType, TimestampType)

from amqp_stream import client as amqp
from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.mapping import WritePlan
from amqp_stream.spark.numbering import batch_numbering
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.writer import publish_batches
from amqp_stream.wire import decode, split_sections

UTC = dt.timezone.utc
EVERY_TYPE = StructType([
    StructField("n", IntegerType()), StructField("region", StringType()), StructField("amount", DoubleType()),
    StructField("k", LongType()), StructField("b", ByteType()), StructField("s", ShortType()),
    StructField("f", FloatType()), StructField("ok", BooleanType()), StructField("bin", BinaryType()),
    StructField("ts", TimestampType()), StructField("ntz", TimestampNTZType()), StructField("d", DateType()),
    StructField("dec", DecimalType(10, 2)), StructField("arr", ArrayType(IntegerType())),
    StructField("m", MapType(StringType(), IntegerType())), StructField("st", StructType([StructField("x", IntegerType())])),
    StructField("message_id", StringType()), StructField("correlation_id", LongType()),
    StructField("user_id", BinaryType()), StructField("subject", StringType()), StructField("content_type", StringType()),
    StructField("creation_time", TimestampType()), StructField("group_sequence", IntegerType()),
])
ROWS = [
    (1, "eu", 0.25, 3, 1, 300, 1.5, True, b"\x00\x01", dt.datetime(2020, 1, 1, 1, 2, 3, 456789, tzinfo=UTC),
     dt.datetime(2022, 1, 1, 5), dt.date(2020, 2, 3), decimal.Decimal("12.34"), [1, 2], {"a": 1}, {"x": 5},
     "m-1", 7, b"bob", "subj", "text/plain", dt.datetime(2021, 1, 1, tzinfo=UTC), 4),
    (None,) * 23,  # every value null: left out, as the row path leaves it out
    (2**31 - 1, "x" * 300, -1e300, -2**63, -128, -32768, -0.5, False, b"y" * 400,
     dt.datetime(1960, 5, 6, 7, 8, 9, 999, tzinfo=UTC), None, None, None, [], {}, None,
     "é" * 200, 2**62, None, None, None, None, None),  # long strings and binaries: their 32-bit forms
]


def arrow_batch(schema: StructType, rows) -> pa.RecordBatch:
    """The batch Spark's Arrow writer would hand over for ``rows``."""
    return pa.RecordBatch.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows],
                                      schema=to_arrow_schema(schema, timezone="UTC"))


def as_rows(batch: pa.RecordBatch, schema: StructType) -> list[tuple]:
    """What the row path gets for ``batch``: Spark's own Arrow-to-Row conversion."""
    convs = [ArrowTableToRowsConversion._create_converter(f.dataType) for f in schema.fields]
    cols = [[conv(v) for v in col.to_pylist()] for conv, col in zip(convs, batch.columns, strict=True)]
    return [tuple(c[r] for c in cols) for r in range(batch.num_rows)]


def sections(data) -> dict[int, object]:
    """Section code -> decoded value; proton's empty header section (all defaults) left out."""
    out = {code: decode(bytes(data), vstart)[0] for code, _, vstart, _ in split_sections(bytes(data))}
    if out.get(0x70) == []:
        del out[0x70]
    return out


@pytest.mark.parametrize("body", ["json", "binary", "string"])
def test_encoded_messages_are_the_row_paths(body):
    schema, rows = EVERY_TYPE, ROWS
    if body != "json":
        kind = BinaryType() if body == "binary" else StringType()
        schema = StructType(EVERY_TYPE.fields + [StructField("body", kind)])
        values = [b"\x00payload", None, b"z" * 70000] if body == "binary" else ["text", None, "ü" * 300]
        rows = [r + (v,) for r, v in zip(ROWS, values, strict=True)]
    plan = WritePlan.for_schema(schema, "region")
    batch = arrow_batch(schema, rows)
    encoded = ArrowEncoder(plan, schema).encode(batch, 41)
    assert len(encoded) == len(rows)
    for r, (data, row) in enumerate(zip(encoded, as_rows(batch, schema), strict=True)):
        new, old = sections(data), sections(plan.message(row).encode())
        # the publishing id is the encoder's addition; the rest is the row path's message
        assert new[0x72].pop(amqp.PUBLISHING_ID) == 41 + r
        if not new[0x72]:
            del new[0x72]
        if row[schema.names.index("creation_time")] is None:  # the publish time: each its own
            assert abs(new[0x73][9] - old[0x73][9]) < 60_000
            new[0x73][9] = old[0x73][9]
        assert new == old, f"row {r}: {new} != {old}"
    if body == "json":
        first = json.loads(sections(encoded[0])[0x75])
        assert first["st"] == {"x": 5} and first["ts"] == "2020-01-01T01:02:03.456789" and first["dec"] == "12.34"


def test_property_columns_proton_coerces_go_the_row_path():
    """A number as ``subject``: proton's own coercion (here: its TypeError) decides, as before."""
    schema = StructType([StructField("subject", IntegerType()), StructField("n", IntegerType())])
    plan = WritePlan.for_schema(schema)
    batch = arrow_batch(schema, [(None, 1)])
    assert sections(ArrowEncoder(plan, schema).encode(batch)[0])[0x74] == {"n": 1}
    with pytest.raises(TypeError):
        ArrowEncoder(plan, schema).encode(arrow_batch(schema, [(5, 1)]))


@pytest.mark.parametrize("protocol", ["amqp", "stream"])
def test_publish_batches_skips_what_an_earlier_attempt_stored(broker, stream_name, protocol):
    """A retried task: the broker has ids 1..150 of the reference; batches of 100 rows resume at
    row 151, in the middle of the second batch, and the broker stores each row once; over AMQP
    1.0 and over the stream protocol (``streamUrl``), the filter values in both."""
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType())])
    plan = WritePlan.for_schema(schema, "region")
    batches = [arrow_batch(schema, [(i, "eu") for i in range(s, s + 100)]) for s in range(0, 300, 100)]
    options = {"url": broker.url, "stream": stream_name, "window": "64"}
    if protocol == "stream":
        options["streamUrl"] = broker.stream_url
    opts = SourceOptions.parse(options)
    numbering = batch_numbering("retry", 0)
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
    assert publish_batches(opts, ArrowEncoder(plan, schema), [b.slice(0, 50) if i == 1 else b
                                                             for i, b in enumerate(batches[:2])], numbering) == (150, 0)
    assert publish_batches(opts, ArrowEncoder(plan, schema), batches, numbering) == (150, 150)
    with amqp.connect(broker.url) as c:
        assert c.publisher_sequence(stream_name, "retry/0") == 300
        with c.consumer(stream_name) as con:
            got = [(m.application_properties["n"], m.filter_value) for m in con.read_available()]
    assert got == [(i, "eu") for i in range(300)]


def test_every_mapped_type_round_trips_through_spark(spark, broker, stream_name):
    """Written by Spark (the Arrow path), read back by Spark with each column declared. AMQP
    timestamps hold milliseconds, so timestamps come back cut to the millisecond. The
    ``creation_time`` property is checked with the client: read back as a declared column it is
    taken for milliseconds where the client gives seconds (the read side's, reported)."""
    columns = [f for f in EVERY_TYPE.fields if f.name not in ("ntz", "creation_time")]  # NTZ: local wall time
    names = [f.name for f in EVERY_TYPE.fields]
    rows = [tuple(v for f, v in zip(EVERY_TYPE.fields, r, strict=True) if f in columns) + (r[names.index("creation_time")],)
            for r in ROWS]
    df = spark.createDataFrame(rows, StructType(columns + [EVERY_TYPE["creation_time"]])).coalesce(1)
    (df.write.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
     .option("declare", "true").option("filterValueColumn", "region").mode("append").save())
    ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in columns)
    back = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
            .option("properties", ddl).load().orderBy("offset").select(*[f"`{f.name}`" for f in columns]))
    got = [tuple(r) for r in back.collect()]
    ct = [f.name for f in columns].index("content_type")  # a JSON body's, when the row gives none
    want = [tuple("application/json" if i == ct and v is None else _ms(v) for i, v in enumerate(r))[:len(columns)]
            for r in df.collect()]
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        assert g == w, [(f.name, x, y) for f, x, y in zip(columns, g, w, strict=True) if x != y]
    with amqp.connect(broker.url) as c, c.consumer(stream_name) as con:
        created = [m.properties.get("creation_time") for m in con.read_available()]
    assert created[0] == dt.datetime(2021, 1, 1, tzinfo=UTC).timestamp()
    assert all(abs(t - time.time()) < 600 for t in created[1:])  # no column value: the publish time


def _ms(v):
    """A timestamp rounded down to the millisecond, as an AMQP timestamp holds it."""
    return v.replace(microsecond=v.microsecond // 1000 * 1000) if isinstance(v, dt.datetime) else v


def test_json_bodies_write_numbers_as_json_does():
    """The JSON body is built column by column: floats as ``json.dumps`` writes them."""
    schema = StructType([StructField("x", DoubleType()), StructField("y", FloatType()), StructField("n", LongType())])
    values = [0.1, -0.0, float("nan"), float("inf"), float("-inf"), 1e300, 1e-7, None]
    rows = [(v, 0.1 if v is None else v, i) for i, v in enumerate(values)]
    plan = WritePlan.for_schema(schema)
    batch = arrow_batch(schema, rows)
    new = [sections(data)[0x75] for data in ArrowEncoder(plan, schema).encode(batch)]
    old = [sections(plan.message(row).encode())[0x75] for row in as_rows(batch, schema)]
    assert new == old and b'"x":NaN' in new[2] and b'"y":0.10000000149011612' in new[7]


def test_stream_url_option_is_checked():
    from amqp_stream.spark.options import OptionError
    base = {"url": "amqp://h", "stream": "s"}
    assert SourceOptions.parse(dict(base, streamUrl="rabbitmq-stream://h:5552")).stream_url == "rabbitmq-stream://h:5552"
    assert SourceOptions.parse(base).stream_url is None
    with pytest.raises(OptionError, match="streamUrl: not a stream-protocol URL"):
        SourceOptions.parse(dict(base, streamUrl="amqp://h:5672"))
    with pytest.raises(OptionError, match="no TLS"):
        SourceOptions.parse(dict(base, streamUrl="rabbitmq-stream://h", tlsCaFile="/ca.pem"))
