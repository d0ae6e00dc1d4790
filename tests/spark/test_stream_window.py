"""The stream-protocol sink's window (``stream_sink.WINDOW_BYTES``): what it has unconfirmed is
bounded by the frames' bytes, whatever their message counts, never more than the bound while
more than one frame is in flight; every row is stored once, in order. Against the session's
broker, in process (``publish_batches`` as a Spark task runs it), the bound lowered so that a
write of a few thousand rows meets it many times."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from amqp_stream import client as amqp
from amqp_stream.client.stream import StreamClient
from amqp_stream.spark import framing, stream_sink
from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.mapping import WritePlan
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.writer import publish_batches
from amqp_stream.streamproto import Publish, decode

SCHEMA = StructType([StructField("n", IntegerType()), StructField("text", StringType())])
ROWS = 6000
BOUND = 100_000  # bytes: three frames of 100 messages of ~320 bytes (the body is the row as JSON)


def _frames(parts) -> list[tuple[int, int]]:
    """(messages, bytes) of each Publish frame in one send's buffers (the protocol's decoder)."""
    raw = b"".join(bytes(p) for p in parts)
    out, pos = [], 0
    while pos < len(raw):
        size = 4 + int.from_bytes(raw[pos:pos + 4], "big")
        publish = decode(memoryview(raw)[pos + 4:pos + size])
        assert isinstance(publish, Publish)
        out.append((len(publish.messages), size))
        pos += size
    return out


def test_unconfirmed_frames_stay_within_the_window_bytes(broker, stream_name, monkeypatch):
    monkeypatch.setattr(stream_sink, "WINDOW_BYTES", BOUND)
    monkeypatch.setattr(framing, "FRAME_MESSAGES", 100)
    monkeypatch.setattr(stream_sink, "MERGE_ROWS", 1)
    # the bytes of every frame sent, in order, with the messages sent up to its end; and at each
    # send the bytes not yet confirmed once it has gone (the confirms as the sender last saw them)
    sent: list[tuple[int, int]] = []
    in_flight: list[tuple[int, int]] = []
    real_send = StreamClient.send_parts

    def send_parts(self, parts):
        for count, size in _frames(parts):
            sent.append(((sent[-1][0] if sent else 0) + count, size))
        done = self.confirmed + self.errors
        waiting = [size for end, size in sent if end > done]
        in_flight.append((len(waiting), sum(waiting)))
        return real_send(self, parts)

    monkeypatch.setattr(StreamClient, "send_parts", send_parts)
    plan = WritePlan.for_schema(SCHEMA)
    batches = [pa.RecordBatch.from_pylist([{"n": n, "text": f"row {n:06d} " + "x" * 100}
                                           for n in range(s, s + 500)], schema=pa.schema(
                                               [("n", pa.int32()), ("text", pa.string())]))
               for s in range(0, ROWS, 500)]
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
    opts = SourceOptions.parse({"url": broker.url, "stream": stream_name, "streamUrl": broker.stream_url,
                                "window": "1"})
    assert publish_batches(opts, ArrowEncoder(plan, SCHEMA), batches) == (ROWS, 0)
    assert sum(size for _, size in sent) > 10 * BOUND  # the bound was met, not avoided
    assert all(nbytes <= BOUND for frames, nbytes in in_flight if frames > 1), in_flight
    assert max(frames for frames, _ in in_flight) > 1  # more than a frame at a time: a window
    with amqp.connect(broker.url) as c, c.consumer(stream_name) as con:
        got = [m.application_properties["n"] for m in con.read_available()]
    assert got == list(range(ROWS))
