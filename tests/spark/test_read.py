"""Batch and streaming reads, with and without pushdown: same rows, fewer bytes with it.

The stream is filled with the AMQP client, one region at a time (flushed between regions) so
chunks hold one filter value each and stage 1 can skip them; the broker's Prometheus counters
(``amqp_stream_read_bytes_total``, ``amqp_stream_delivered_bytes_total``) show what it read and
sent.
"""

from __future__ import annotations

import datetime as dt

import pytest

from amqp_stream import client as amqp
from tests.spark.conftest import metric

REGIONS = [f"r{i}" for i in range(10)]
PER_REGION = 60
PROPS = "n INT, region STRING, amount DOUBLE, message_id STRING"
CREATED = dt.datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=dt.timezone.utc)


@pytest.fixture
def filled(broker, stream_name):
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
        with c.publisher(stream_name, window=64) as pub:
            n = 0
            for region in REGIONS:
                for _ in range(PER_REGION):
                    pub.publish(f"payload-{n:06d}-".encode() * 8, filter_value=region,
                                properties={"message_id": f"m{n}", "creation_time": CREATED},
                                application_properties={"n": n, "region": region, "amount": n / 4})
                    n += 1
                pub.flush()
    return stream_name


def reader(spark, broker, stream, **options):
    r = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream)
         .option("properties", PROPS).option("numPartitions", 2))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    return sorted((r.offset, r.filter_value, r.n, r.region, r.amount, r.message_id, bytes(r.body))
                  for r in df.collect())


def measured(broker, stream, name, fn):
    before = metric(broker, name, stream)
    result = fn()
    return result, metric(broker, name, stream) - before


def test_batch_read_all_columns(spark, broker, filled):
    df = reader(spark, broker, filled, pushdown="false")
    got = df.orderBy("offset").collect()
    assert [r.offset for r in got] == list(range(len(REGIONS) * PER_REGION))
    r = got[65]
    assert (r.filter_value, r.n, r.region, r.amount, r.message_id) == ("r1", 65, "r1", 65 / 4, "m65")
    assert r.application_properties == {"n": "65", "region": "r1", "amount": str(65 / 4)}
    assert r.body == b"payload-000065-" * 8
    # the broker sends no chunk timestamp: the column is the message's creation time
    assert r.timestamp.replace(tzinfo=dt.timezone.utc) == CREATED


def test_offset_range_options(spark, broker, filled):
    df = reader(spark, broker, filled, startingOffset="100", endingOffset="250", numPartitions=3)
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100, 250))


def test_stage1_pushdown_same_rows_fewer_bytes_read(spark, broker, filled):
    query = "filter_value = 'r3'"
    plain, plain_bytes = measured(broker, filled, "amqp_stream_read_bytes_total",
                                  lambda: rows(reader(spark, broker, filled, pushdown="false").where(query)))
    pushed, pushed_bytes = measured(broker, filled, "amqp_stream_read_bytes_total",
                                    lambda: rows(reader(spark, broker, filled).where(query)))
    assert pushed == plain and len(plain) == PER_REGION
    assert 0 < pushed_bytes < plain_bytes / 2, (pushed_bytes, plain_bytes)


def test_stage2_pushdown_same_rows_fewer_bytes_delivered(spark, broker, filled):
    query = "n >= 200 AND n < 260 AND region LIKE 'r%' AND message_id <> 'm201' AND amount > 10.0"
    name = "amqp_stream_delivered_bytes_total"
    plain, plain_bytes = measured(broker, filled, name,
                                  lambda: rows(reader(spark, broker, filled, pushdown="false").where(query)))
    pushed, pushed_bytes = measured(broker, filled, name, lambda: rows(reader(spark, broker, filled).where(query)))
    assert pushed == plain and len(plain) == 59
    assert 0 < pushed_bytes < plain_bytes / 4, (pushed_bytes, plain_bytes)


def test_unpushable_filters_still_apply(spark, broker, filled):
    query = "filter_value IN ('r1', 'r2') AND (n % 7 = 0 OR region = 'r2') AND body IS NOT NULL"
    plain = rows(reader(spark, broker, filled, pushdown="false").where(query))
    assert rows(reader(spark, broker, filled).where(query)) == plain
    assert {r[1] for r in plain} == {"r1", "r2"} and len(plain) == 60 + 9


def stream_query(spark, broker, stream, tmp_path, name, **options):
    r = (spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", stream)
         .option("properties", PROPS).option("numPartitions", 2))
    for k, v in options.items():
        r = r.option(k, v)
    df = r.load().where("filter_value = 'r3' OR filter_value = 'r7'").select("offset", "filter_value", "n")
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / name))
         .option("checkpointLocation", str(tmp_path / f"{name}-ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None
    return sorted(tuple(r) for r in spark.read.parquet(str(tmp_path / name)).collect())


def test_streaming_read_with_and_without_pushdown_and_resume(spark, broker, filled, tmp_path):
    (plain, plain_bytes) = measured(broker, filled, "amqp_stream_read_bytes_total",
                                    lambda: stream_query(spark, broker, filled, tmp_path, "plain"))
    (pushed, pushed_bytes) = measured(broker, filled, "amqp_stream_read_bytes_total",
                                      lambda: stream_query(spark, broker, filled, tmp_path, "pushed",
                                                           filterValues="r3,r7"))
    assert pushed == plain and len(plain) == 2 * PER_REGION
    assert 0 < pushed_bytes < plain_bytes / 2, (pushed_bytes, plain_bytes)
    # more data, then the same queries again: each resumes from its checkpoint
    with amqp.connect(broker.url) as c, c.publisher(filled) as pub:
        for n in range(600, 620):
            pub.publish(b"late", filter_value="r7", application_properties={"n": n, "region": "r7"})
        pub.flush()
    again = stream_query(spark, broker, filled, tmp_path, "pushed", filterValues="r3,r7")
    assert again == sorted(plain + [(n, "r7", n) for n in range(600, 620)])
    assert stream_query(spark, broker, filled, tmp_path, "plain") == again


def test_missing_stream_read_fails_clearly(spark, broker, stream_name):
    with pytest.raises(Exception, match=rf"stream '{stream_name}' does not exist"):
        reader(spark, broker, stream_name).collect()


def test_offset_predicates_read_less(spark, broker, filled):
    query = "offset >= 120 AND offset < 150"
    name = "amqp_stream_read_bytes_total"
    plain, plain_bytes = measured(broker, filled, name,
                                  lambda: rows(reader(spark, broker, filled, pushdown="false").where(query)))
    pushed, pushed_bytes = measured(broker, filled, name, lambda: rows(reader(spark, broker, filled).where(query)))
    assert pushed == plain and [r[0] for r in plain] == list(range(120, 150))
    assert 0 < pushed_bytes < plain_bytes / 2, (pushed_bytes, plain_bytes)


def test_streaming_micro_batch_limit(spark, broker, filled, tmp_path):
    df = (spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", filled)
          .option("maxRecordsPerTrigger", 250).load().select("offset"))
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="0 seconds").start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sizes == [250, 250, 100]
    assert sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out")).collect()) == list(range(600))
