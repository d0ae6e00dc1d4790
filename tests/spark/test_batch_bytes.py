"""A task's batches end at ``BATCH_BYTES`` too, not only at ``BATCH_ROWS``: large messages make
smaller batches, so a task never holds thousands of them at once. Both reads (the stream
protocol's and AMQP 1.0's), as a Spark executor runs them, against the session's broker; the
bound lowered to 1 MB so that a few messages of 300 KB pass it."""

from __future__ import annotations

import pytest
from proton import Message
from pyspark.sql.types import LongType, StructField, StructType

from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.spark import reader, stream_read
from amqp_stream.spark.mapping import BASE_COLUMNS
from amqp_stream.spark.offsets import OffsetRange
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.pushdown import Pushdown

READ = StructType(list(BASE_COLUMNS.fields) + [StructField("n", LongType())])
BODY = 300_000
COUNT = 24


@pytest.mark.parametrize("via_stream", [True, False])
def test_large_messages_make_small_batches(broker, stream_name, monkeypatch, via_stream):
    monkeypatch.setattr(stream_read, "BATCH_BYTES", 1 << 20)
    monkeypatch.setattr(reader, "BATCH_BYTES", 1 << 20)
    with StreamClient(broker.stream_url) as c:  # a message a chunk: each confirmed before the next
        c.create(stream_name)
        c.declare_publisher(1, stream_name)
        for n in range(COUNT):
            body = bytes([n]) * BODY
            c.send(publish_frame(1, [(n, None, bytes(Message(body=body, properties={"n": n}).encode()))]))
            while c.confirmed <= n:
                assert c.pump(10), "confirms stopped"
    options = {"url": broker.url, "stream": stream_name, "timeout": "60"}
    if via_stream:
        options["streamUrl"] = broker.stream_url
    batches = list(reader.read_range(SourceOptions.parse(options), OffsetRange(0, COUNT), Pushdown(None), READ))
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["n"] for r in rows] == list(range(COUNT))
    assert all(r["body"] == bytes([r["n"]]) * BODY for r in rows)
    sizes = [b.num_rows for b in batches]
    assert max(sizes) <= 4, sizes  # 1 MB and one 300 KB message more at most: 4 rows
    assert len(batches) >= COUNT // 4
