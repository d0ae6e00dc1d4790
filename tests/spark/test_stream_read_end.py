"""Where a ``streamUrl`` read of a range ends: at the broker's ``end-offset`` chunk, never at a
quiet socket (docs/stream-protocol.md). The task's own read (``read_range_stream``, what a
Spark executor runs) against a real broker of its own, which the test SIGSTOPs mid-read."""

from __future__ import annotations

import os
import signal
import threading
import time

from pyspark.sql.types import LongType, StructField, StructType

from amqp_stream.client.stream import StreamClient
from amqp_stream.spark.mapping import BASE_COLUMNS
from amqp_stream.spark.offsets import OffsetRange
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.pushdown import Pushdown
from amqp_stream.spark.stream_read import read_range_stream
from amqp_stream.testing import BrokerProcess
from tests.stream.test_end_offset import publish_chunks

READ = StructType(list(BASE_COLUMNS.fields) + [StructField("n", LongType())])


def options(b: BrokerProcess, stream: str) -> SourceOptions:
    return SourceOptions.parse({"url": b.url, "stream": stream, "streamUrl": b.stream_url,
                                "timeout": "120"})


def test_filtered_read_ends_at_the_broker_end_not_a_quiet_socket(broker, stream_name, monkeypatch):
    """The only match is in the first chunk, 500 chunks the filter rules out follow: every row
    comes and the read ends without any wait for the socket timing out."""
    end = publish_chunks(broker.stream_url, stream_name, [("eu", 10)] + [("us", 5)] * 500)
    quiet: list[float | None] = []
    pump = StreamClient.pump

    def watched(self, timeout):
        got = pump(self, timeout)
        if not got and timeout != 0:  # pump(0) looks at what is there, it does not wait
            quiet.append(timeout)
        return got

    monkeypatch.setattr(StreamClient, "pump", watched)
    for pd in (Pushdown(("eu",)), Pushdown(None, "n < 10")):
        quiet.clear()
        batches = read_range_stream(options(broker, stream_name), OffsetRange(0, end), pd, READ)
        assert [n for b in batches for n in b.column(b.num_columns - 1).to_pylist()] == list(range(10)), pd
        assert quiet == [], f"the read waited on a quiet socket ({pd})"


def test_rows_are_not_lost_while_the_broker_is_stopped(tmp_path):
    """150 matching chunks between chunks the filter rules out; after the first batch the broker
    is SIGSTOPped for 2 s (the old read gave up after 0.5 s of quiet), then SIGCONTed: every
    row still comes (the rows read before the stop come as a batch first)."""
    groups = [("eu", 5), ("us", 5)] * 150 + [("us", 5)] * 300
    expected = [n for i, (v, c) in enumerate(groups) for n in range(i * 5, i * 5 + c) if v == "eu"]
    with BrokerProcess(tmp_path / "data") as b:
        end = publish_chunks(b.stream_url, "s", groups)
        first, stopped = threading.Event(), threading.Event()
        pid = b.proc.pid

        def stop_and_go() -> None:
            first.wait(60)
            os.kill(pid, signal.SIGSTOP)
            stopped.set()
            try:
                time.sleep(2.0)  # the fault's length: longer than the old 0.5 s time-out
            finally:
                os.kill(pid, signal.SIGCONT)

        t = threading.Thread(target=stop_and_go)
        t.start()
        got = []
        try:
            for batch in read_range_stream(options(b, "s"), OffsetRange(0, end), Pushdown(("eu",)), READ):
                got += batch.column(batch.num_columns - 1).to_pylist()
                if not first.is_set():  # the rows that came before the broker stops
                    first.set()
                    assert stopped.wait(60)
        finally:
            first.set()
            t.join()
        assert got == expected
