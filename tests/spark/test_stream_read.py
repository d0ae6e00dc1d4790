"""Reads over the stream protocol (``streamUrl``) give the rows the AMQP 1.0 read gives.

One stream holds messages of every AMQP type the mapping reads (in application properties, in
properties, as bodies of each section kind), some with a filter value and some without; the
same queries run both ways, with filters pushed down and not, and the DataFrames must match.
"""

from __future__ import annotations

import datetime as dt
import math
import urllib.request
import uuid

import proton
import pytest
from prometheus_client.parser import text_string_to_metric_families

from amqp_stream import client as amqp

VALUES = [proton.byte(-5), proton.short(300), proton.int32(70000), 2 ** 40, proton.ubyte(7),
          proton.ushort(65000), proton.uint(4_000_000_000), proton.ulong(2 ** 63), proton.float32(1.5),
          2.25, float("nan"), True, False, "text", "12", proton.symbol("sym"), b"bin", proton.char("c"),
          proton.timestamp(1_700_000_000_123), uuid.UUID(int=12345), [1, "a"], {"k": 1},
          proton.decimal64(5), None]
TYPES = ["STRING", "INT", "BIGINT", "DOUBLE", "FLOAT", "BOOLEAN", "BINARY", "TIMESTAMP", "DATE",
         "DECIMAL(10,2)", "SMALLINT", "TINYINT", "ARRAY<STRING>", "MAP<STRING,INT>"]
PROPS = ", ".join(f"v_{t.split('(')[0].split('<')[0].lower()} {t}" for t in TYPES) + \
    ", region STRING, n BIGINT, subject STRING, creation_time DOUBLE, message_id STRING, user_id BINARY"
CREATED = dt.datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def typed(broker, tmp_path_factory):
    name = f"stream-read-{uuid.uuid4().hex[:8]}"
    n = 0
    with amqp.connect(broker.url) as c:
        c.declare(name)
        with c.publisher(name, window=64) as pub:
            for region in ("eu", "us", None):
                for i, v in enumerate(VALUES):
                    app = {f"v_{t.split('(')[0].split('<')[0].lower()}": v for t in TYPES}
                    app.update(n=n, region=region if region else "none")
                    body = [f"data-{n}".encode(), f"value-{n}", {"n": n, "v": i}][n % 3]
                    pub.publish(body, filter_value=region, application_properties=app,
                                properties={"message_id": f"m{n}", "subject": f"s{i % 4}",
                                            "creation_time": CREATED, "user_id": b"guest"})
                    n += 1
                pub.flush()
    return name, n


def read(spark, broker, stream, via_stream: bool, **options):
    r = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream)
         .option("properties", PROPS).option("numPartitions", 2))
    if via_stream:
        r = r.option("streamUrl", broker.stream_url)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _comparable(v):
    """NaN equals nothing, itself included: compare it as a word."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, dict):
        return {k: _comparable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_comparable(x) for x in v)
    return v


def collect(df) -> list:
    return sorted((_comparable(tuple(r)) for r in df.collect()), key=lambda r: r[0])


@pytest.mark.parametrize("query,options", [
    (None, {}),
    (None, {"pushdown": "false"}),
    ("filter_value = 'eu'", {}),
    ("filter_value = 'eu'", {"pushdown": "false"}),
    ("n > 30 AND subject = 's1'", {}),
    ("v_bigint IS NOT NULL", {}),
    (None, {"filterValues": "us", "matchUnfiltered": "true"}),
    (None, {"sqlFilter": "n % 2 = 0"}),
    (None, {"startingOffset": "10", "endingOffset": "50", "numPartitions": "3"}),
])
def test_stream_protocol_rows_equal_amqp_rows(spark, broker, typed, query, options):
    stream, total = typed
    frames = [read(spark, broker, stream, via, **options) for via in (False, True)]
    if query:
        frames = [f.where(query) for f in frames]
    amqp_rows, stream_rows = (collect(f) for f in frames)
    assert amqp_rows, "the case reads nothing: it would compare nothing"
    assert [r[0] for r in stream_rows] == [r[0] for r in amqp_rows]
    assert stream_rows == amqp_rows


def delivered_chunks(broker) -> float:
    """Chunks the broker sent to stream-protocol subscribers (all streams)."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "amqp_stream_stream_protocol_delivered_chunks_total")


def test_partition_end_and_filter_honoured(spark, broker, typed):
    stream, total = typed
    before = delivered_chunks(broker)
    df = read(spark, broker, stream, True, startingOffset="5", endingOffset="40", numPartitions="4",
              filterValues="eu,us", sqlFilter="n % 3 = 1")
    got = [r.n for r in df.orderBy("offset").collect()]
    eu_us = 2 * len(VALUES)  # the first two regions carry filter values
    assert got == [n for n in range(5, 40) if n % 3 == 1 and n < eu_us]
    assert all(r.filter_value in ("eu", "us") for r in df.collect())
    assert delivered_chunks(broker) > before, "the read did not go over the stream protocol"


def test_streaming_read_over_the_stream_protocol(spark, broker, typed, tmp_path):
    """A streaming query (Trigger.AvailableNow, micro-batches of 25) gives the batch read's rows."""
    stream, total = typed
    outs = []
    for via in (False, True):
        r = (spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", stream)
             .option("properties", PROPS).option("maxRecordsPerTrigger", 25).option("sqlFilter", "n % 2 = 1"))
        if via:
            r = r.option("streamUrl", broker.stream_url)
        out = tmp_path / f"out-{via}"
        q = (r.load().select("offset", "n", "v_string", "body").writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(tmp_path / f"ckpt-{via}"))
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None
        outs.append(sorted(tuple(x) for x in spark.read.parquet(str(out)).collect()))
    assert outs[1] == outs[0]
    assert [r[1] for r in outs[1]] == list(range(1, total, 2))


def test_chunks_of_named_publishers_read_over_the_stream_protocol(spark, broker):
    """A named write (``writeName``: exactly once) leaves chunks with a trailer (the writers'
    sequences); a Deliver holds header and data only, so the read must not count the trailer.
    Written over both protocols, read over the stream protocol."""
    name = f"stream-read-named-{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 300).selectExpr("id AS n", "concat('r', id % 3) AS region").repartition(2)
    for via, start in ((False, 0), (True, 300)):
        w = (df.selectExpr(f"n + {start} AS n", "region").write.format("amqp-stream")
             .option("url", broker.url).option("stream", name).option("declare", "true")
             .option("writeName", f"named-{via}"))
        if via:
            w = w.option("streamUrl", broker.stream_url)
        w.mode("append").save()
    rows = read(spark, broker, name, True).select("n").collect()
    assert sorted(r.n for r in rows) == list(range(600))
