"""Exactly-once writes and consumer-name reads (issue 14).

The crash tests kill for real, with ``bench.spark_crash``'s scenarios at a smaller size: the
driver of a batch job (a child process with its own SparkSession, SIGKILL to its process group),
the broker under a batch job of this session, and a streaming query's driver in its second
micro-batch; each once a third of the rows are in the stream, seen by a consumer. Then the same
write runs again here, and the stream is read back: every row once.
"""

from __future__ import annotations

import pytest

from amqp_stream import client as amqp
from amqp_stream.spark.numbering import Numbering, batch_numbering, stream_numbering
from amqp_stream.spark.options import OptionError, SourceOptions
from amqp_stream.spark.reader import store_progress
from amqp_stream.spark.writer import check_exactly_once
from bench.spark_crash import batch_write, broker_kill, driver_kill, streaming_kill, tally
from tests.polling import wait_for

ROWS = 20_000
STREAM_ROWS = 8_000  # four micro-batches of 2,000


def test_write_options_and_numbering():
    base = {"url": "amqp://h", "stream": "s"}
    named = SourceOptions.parse(dict(base, writeName="orders-2026-11-25"))
    assert named.exactly_once and SourceOptions.parse(dict(base, exactlyOnce="true")).exactly_once
    assert not SourceOptions.parse(base).exactly_once
    check_exactly_once(named, streaming=False)
    with pytest.raises(OptionError, match="needs writeName"):
        check_exactly_once(SourceOptions.parse(dict(base, exactlyOnce="true")), streaming=False)
    with pytest.raises(OptionError, match="writeName is for batch writes"):
        check_exactly_once(named, streaming=True)
    with pytest.raises(OptionError, match="writeName must be 1..240 bytes"):
        SourceOptions.parse(dict(base, writeName="x" * 241))
    b = batch_numbering("orders", 3)
    assert b.reference == "orders/3" and [b.publishing_id(n) for n in range(3)] == [1, 2, 3]
    s0, s1 = stream_numbering("q-id", 0, 1), stream_numbering("q-id", 1, 1)
    assert s0.reference == s1.reference == "spark-q-id/1"
    assert s0.publishing_id(0) == 1 and s0.publishing_id((1 << 32) - 2) < s1.publishing_id(0) == (1 << 32) + 1
    with pytest.raises(OptionError, match="more rows than its ids allow"):
        s0.publishing_id((1 << 32) - 1)
    assert Numbering("r", 0, 1 << 64).publishing_id((1 << 64) - 2) == (1 << 64) - 1


def test_a_named_write_run_twice_stores_its_rows_once(spark, broker, stream_name):
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
    batch_write(spark, broker.url, stream_name, 900, 3, "load-twice")
    batch_write(spark, broker.url, stream_name, 900, 3, "load-twice")
    t = tally(broker.url, stream_name, 900)
    assert (t.stored, t.lost, t.duplicated) == (900, 0, 0)
    with amqp.connect(broker.url) as c:
        assert [c.publisher_sequence(stream_name, f"load-twice/{p}") for p in range(3)] == [300, 300, 300]


def crashed(outcome, rows: int = ROWS) -> None:
    t = outcome.tally
    assert 0 < outcome.at_kill < rows, "the kill came before or after the write, not during it"
    assert (t.stored, t.lost, t.duplicated, t.strangers) == (rows, 0, 0, 0), outcome


def test_driver_killed_mid_write_then_run_again_stores_every_row_once(spark, tmp_path):
    crashed(driver_kill(spark, tmp_path, ROWS, 4, "load-driver"))


def test_broker_killed_mid_write_then_run_again_stores_every_row_once(spark, tmp_path):
    crashed(broker_kill(spark, tmp_path, ROWS, 4, "load-broker"))


def test_streaming_query_killed_mid_batch_resumes_storing_every_row_once(spark, tmp_path):
    crashed(streaming_kill(spark, tmp_path, STREAM_ROWS, exactly_once=True), STREAM_ROWS)


# -- consumer names --------------------------------------------------------------------------


def fill(url: str, stream: str, start: int, n: int) -> None:
    with amqp.connect(url) as c:
        c.declare(stream)
        with c.publisher(stream) as pub:
            for i in range(start, start + n):
                pub.publish(f"m{i}".encode(), application_properties={"i": i})
            pub.flush()


def test_store_progress_moves_forward_only_past_messages(broker, stream_name):
    fill(broker.url, stream_name, 0, 10)
    opts = SourceOptions.parse({"url": broker.url, "stream": stream_name, "consumerName": "shared"})
    with amqp.connect(broker.url) as c:
        store_progress(opts, 10)
        assert c.stored_offset(stream_name, "shared") == 9  # a query sees a store at once
        # ... but the store's tracking chunk (offset 10) is written after the PUT's answer, as
        # a StoreOffset is: next_offset (the committed end) gets there soon, not at once
        wait_for(lambda: c.info(stream_name)["next_offset"] == 11, 10, "the tracking chunk at 10")
        store_progress(opts, 11)  # nothing but that tracking chunk since: nothing to store
        assert c.stored_offset(stream_name, "shared") == 9 and c.info(stream_name)["next_offset"] == 11
        fill(broker.url, stream_name, 10, 1)  # offset 11
        store_progress(opts, 12)
        assert c.stored_offset(stream_name, "shared") == 11
        c.store_offset(stream_name, "shared", 40)  # another consumer of the name got further
        fill(broker.url, stream_name, 11, 1)
        store_progress(opts, c.info(stream_name)["next_offset"])
        assert c.stored_offset(stream_name, "shared") == 40


def test_consumer_name_reads_start_at_its_stored_offset_and_streaming_stores_progress(
        spark, broker, stream_name, tmp_path):
    fill(broker.url, stream_name, 0, 300)

    def streaming(checkpoint: str) -> list[int]:
        df = (spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
              .option("consumerName", "shared").option("maxRecordsPerTrigger", 100).load().select("offset"))
        q = (df.writeStream.format("memory").queryName(checkpoint).option("checkpointLocation", str(tmp_path / checkpoint))
             .trigger(processingTime="0 seconds").start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
        assert q.exception() is None
        return sorted(r.offset for r in spark.sql(f"SELECT offset FROM {checkpoint}").collect())

    def batch() -> list[int]:
        df = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
              .option("consumerName", "shared").load())
        return sorted(r.offset for r in df.select("offset").collect())

    assert batch() == list(range(300))  # nothing stored yet: startingOffset (first)
    assert streaming("first_query") == list(range(300))
    with amqp.connect(broker.url) as c:
        assert c.stored_offset(stream_name, "shared") == 299
        fill(broker.url, stream_name, 300, 50)
        end = c.info(stream_name)["next_offset"]
    new = [o for o in range(300, end) if o not in _tracking_offsets(broker.url, stream_name)]
    assert len(new) == 50
    assert batch() == new  # a batch read starts after the stored offset and stores nothing
    assert streaming("second_query") == new  # no checkpoint yet: starts at the stored offset
    with amqp.connect(broker.url) as c:
        assert c.stored_offset(stream_name, "shared") == new[-1]


def _tracking_offsets(url: str, stream: str) -> set[int]:
    """Offsets that hold no message (tracking chunks take one each)."""
    with amqp.connect(url) as c, c.consumer(stream) as con:
        offsets = {m.offset for m in con.read_available()}
        end = c.info(stream)["next_offset"]
    return set(range(end)) - offsets
