"""Streaming reads: maxRecordsPerTrigger under Trigger.AvailableNow, and failOnDataLoss over
offsets that retention removed (issue 25 item 17), with real queries and real retention.

Before, Trigger.AvailableNow read everything in one micro-batch whatever maxRecordsPerTrigger
said (the reader did not support it, so Spark fell back to reading all available), and a query
whose next offset retention had removed went on silently from the first offset there was.
"""

from __future__ import annotations

import contextlib
import logging
import shutil

import pytest
from pyspark.errors import StreamingQueryException

from amqp_stream import client as amqp
from amqp_stream.spark.mapping import BASE_COLUMNS
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.reader import StreamReader

RETENTION = {"x-max-length-bytes": 20_000, "x-stream-max-segment-size-bytes": 5_000}


def publish(broker, stream, count: int, arguments=None, size: int = 10, per_chunk: int = 64) -> dict:
    """``count`` messages, flushed every ``per_chunk`` (a segment rolls over between chunks)."""
    with amqp.connect(broker.url) as c:
        c.declare(stream, arguments)
        with c.publisher(stream, window=64) as pub:
            for i in range(count):
                pub.publish(b"x" * size)
                if (i + 1) % per_chunk == 0:
                    pub.flush()
            pub.flush()
        return c.info(stream)


def run(spark, broker, stream, out, ckpt, **options):
    r = spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().select("offset").writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):  # raised again here; q.exception() holds it
        q.awaitTermination(300)
    return q


def offsets(spark, out) -> list[int]:
    return sorted(r.offset for r in spark.read.parquet(str(out)).collect())


def test_max_records_per_trigger_holds_under_available_now(spark, broker, stream_name, tmp_path):
    publish(broker, stream_name, 600)
    q = run(spark, broker, stream_name, tmp_path / "out", tmp_path / "ckpt", maxRecordsPerTrigger=250)
    assert q.exception() is None
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [250, 250, 100]
    assert offsets(spark, tmp_path / "out") == list(range(600))


def test_removed_offsets_are_reported_by_the_reader(broker, stream_name, caplog):
    info = publish(broker, stream_name, 60, RETENTION, size=1000, per_chunk=2)
    first, next_ = int(info["first_offset"]), int(info["next_offset"])
    assert 0 < first < next_
    opts = {"url": broker.url, "stream": stream_name}
    with pytest.raises(amqp.ConsumerError, match=rf"offsets 0..{first - 1} were removed by retention .*"
                                                 r"failOnDataLoss=false"):
        StreamReader(SourceOptions.parse(opts), BASE_COLUMNS).partitions({"offset": 0}, {"offset": next_})
    reader = StreamReader(SourceOptions.parse({**opts, "failOnDataLoss": "false"}), BASE_COLUMNS)
    with caplog.at_level(logging.WARNING, logger="amqp_stream.spark"):
        parts = reader.partitions({"offset": 0}, {"offset": next_})
    assert parts[0].start == first and parts[-1].end == next_
    assert f"going on from offset {first} (failOnDataLoss=false)" in caplog.text


def test_a_query_behind_retention_fails_or_goes_on(spark, broker, stream_name, tmp_path):
    info = publish(broker, stream_name, 10, RETENTION, size=1000, per_chunk=2)
    assert info["first_offset"] == 0
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    assert run(spark, broker, stream_name, out, ckpt).exception() is None
    assert offsets(spark, out) == list(range(10))
    info = publish(broker, stream_name, 60, RETENTION, size=1000, per_chunk=2)  # retention drops offset 10 and on
    first, next_ = int(info["first_offset"]), int(info["next_offset"])
    assert 10 < first < next_
    shutil.copytree(ckpt, tmp_path / "ckpt2")
    q = run(spark, broker, stream_name, out, ckpt)
    assert q.exception() is not None
    assert f"offsets 10..{first - 1} were removed by retention" in str(q.exception())
    assert offsets(spark, out) == list(range(10))
    q = run(spark, broker, stream_name, out, tmp_path / "ckpt2", failOnDataLoss="false")
    assert q.exception() is None
    assert offsets(spark, out) == list(range(10)) + list(range(first, next_))
