"""Batch and streaming writes into a real broker, read back with the AMQP client."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from amqp_stream import client as amqp
from amqp_stream.testing import BrokerProcess, free_port

REGIONS = ["eu", "us", "ap"]


def events(spark, n: int, start: int = 0):
    rows = [(i, REGIONS[i % 3], i * 0.5, f"evt-{i}") for i in range(start, start + n)]
    return spark.createDataFrame(rows, "n INT, region STRING, amount DOUBLE, message_id STRING")


def read_all(url: str, stream: str) -> list[amqp.StreamMessage]:
    with amqp.connect(url) as c:
        with c.consumer(stream, offset="first") as con:
            return list(con.read_available())


def test_batch_write_publishes_every_row_once_with_filter_values(spark, broker, stream_name):
    (events(spark, 600).repartition(3).write.format("amqp-stream")
     .option("url", broker.url).option("stream", stream_name).option("declare", "true")
     .option("x-max-length-bytes", "100000000").option("filterValueColumn", "region")
     .option("window", "50").mode("append").save())
    msgs = read_all(broker.url, stream_name)
    ids = Counter(m.properties["message_id"] for m in msgs)
    assert len(msgs) == 600 and set(ids) == {f"evt-{i}" for i in range(600)} and max(ids.values()) == 1
    for m in msgs:
        body = json.loads(m.body)
        assert m.filter_value == body["region"] == REGIONS[body["n"] % 3]
        assert m.application_properties["n"] == body["n"] and m.application_properties["amount"] == body["amount"]
    assert sorted(m.offset for m in msgs) == list(range(600))
    with amqp.connect(broker.url) as c:
        assert c.info(stream_name)["arguments"]["x-max-length-bytes"] == 100000000


def test_streaming_write_over_micro_batches(spark, broker, stream_name, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for k in range(3):  # three files, one per micro-batch
        lines = [json.dumps({"n": i, "region": REGIONS[i % 3], "amount": i * 0.5, "message_id": f"evt-{i}"})
                 for i in range(100 * k, 100 * k + 100)]
        (src / f"part-{k}.json").write_text("\n".join(lines) + "\n")
    stream = (spark.readStream.schema("n INT, region STRING, amount DOUBLE, message_id STRING")
              .option("maxFilesPerTrigger", 1).json(str(src)))
    query = (stream.writeStream.format("amqp-stream").option("url", broker.url)
             .option("stream", stream_name).option("declare", "true").option("filterValueColumn", "region")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 3
    msgs = read_all(broker.url, stream_name)
    assert sorted(m.properties["message_id"] for m in msgs) == sorted(f"evt-{i}" for i in range(300))
    assert all(m.filter_value in REGIONS for m in msgs)


def test_missing_stream_without_declare_fails_clearly(spark, broker, stream_name):
    with pytest.raises(Exception, match=rf"stream '{stream_name}' does not exist.*declare=true"):
        (events(spark, 5).write.format("amqp-stream").option("url", broker.url)
         .option("stream", stream_name).mode("append").save())


def test_broker_down_fails_clearly(spark):
    url = f"amqp://127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=r"cannot connect to amqp://127\.0\.0\.1"):
        (events(spark, 5).write.format("amqp-stream").option("url", url).option("stream", "s")
         .option("declare", "true").mode("append").save())


def test_rejected_message_fails_the_task(spark, tmp_path):
    """A broker that refuses large messages rejects one row: the task (and the job) fail and
    say so; the small rows published before stay published (at least once)."""
    with BrokerProcess(tmp_path / "data", extra_args=["--max-message-size", "2000"]) as small:
        rows = [(f"r{i}", "x" * (5000 if i == 7 else 10)) for i in range(20)]
        df = spark.createDataFrame(rows, "message_id STRING, body STRING").coalesce(1)
        with pytest.raises(Exception, match=r"(?s)PublishError.*not accepted.*rejected"):
            (df.write.format("amqp-stream").option("url", small.url).option("stream", "big")
             .option("declare", "true").option("window", "4").mode("append").save())


def test_credentials_and_tls_options(spark, tmp_path):
    from tests.spark.secure import PASSWORD, USER, secure_broker

    b, url, ca = secure_broker(tmp_path)
    with b:
        opts = {"url": url, "stream": "secured", "user": USER, "password": PASSWORD, "tlsCaFile": str(ca)}
        events(spark, 30).write.format("amqp-stream").options(**opts).option("declare", "true") \
            .option("filterValueColumn", "region").mode("append").save()
        back = spark.read.format("amqp-stream").options(**opts).option("properties", "n INT").load()
        assert sorted(r.n for r in back.select("n").collect()) == list(range(30))
        with pytest.raises(Exception, match="unauthorized-access"):
            spark.read.format("amqp-stream").options(**dict(opts, password="wrong")).load().collect()
