"""``amqp_stream.client.stream``: the load tool's stream-protocol client against the session
broker: what it counts from chunk headers is what was published, chunk callbacks see whole
chunks, and a deleted stream is reported, not fatal."""

from __future__ import annotations

import struct

import pytest

from amqp_stream.client import ClientError
from amqp_stream.client.stream import StreamClient, offset_spec, parse_stream_url, publish_frame

MESSAGE = b"\x00\x53\x75\xa0\x03abc"  # an AMQP data section


@pytest.fixture
def url(broker) -> str:
    return f"rabbitmq-stream://{broker.host}:{broker.stream_port}"


def _publish(url: str, stream: str, count: int, per_frame: int = 250) -> None:
    with StreamClient(url) as c:
        assert c.create(stream) is True and c.create(stream) is False
        c.declare_publisher(1, stream)
        for first in range(0, count, per_frame):
            c.send(publish_frame(1, [(i, f"v{i % 2}", MESSAGE)
                                     for i in range(first, min(count, first + per_frame))]))
        while c.confirmed < count:
            assert c.pump(10), "confirms stopped"
        assert c.errors == 0


def test_counting_from_chunk_headers_sees_every_record(url):
    _publish(url, "load-count", 5000)
    with StreamClient(url) as c:
        c.subscribe(1, "load-count", offset_spec("first"), credit=1)  # one credit per chunk back
        while c.records < 5000:
            assert c.pump(10), "deliveries stopped"
        assert c.records == 5000 and c.chunks >= 1


def test_a_chunk_callback_gets_whole_chunks(url):
    _publish(url, "load-chunks", 600)
    chunks: list[bytes] = []
    with StreamClient(url, on_chunk=lambda chunk: chunks.append(bytes(chunk))) as c:
        c.subscribe(1, "load-chunks", offset_spec("first"))
        while c.records < 600:
            assert c.pump(10)
    records = 0
    for chunk in chunks:
        n, data_length = struct.unpack_from(">I", chunk, 4)[0], struct.unpack_from(">I", chunk, 36)[0]
        assert len(chunk) == 48 + data_length  # header and data section, nothing else
        assert chunk[48:].count(MESSAGE) == n
        records += n
    assert records == 600


def test_a_deleted_stream_is_reported(url):
    _publish(url, "load-gone", 10)
    with StreamClient(url) as consumer, StreamClient(url) as admin:
        consumer.subscribe(1, "load-gone", offset_spec("first"))
        admin.delete("load-gone")
        while "load-gone" not in consumer.gone:
            assert consumer.pump(10), "no MetadataUpdate"
        with pytest.raises(ClientError, match="STREAM_DOES_NOT_EXIST"):
            admin.delete("load-gone")


@pytest.mark.parametrize("text,expected", [
    ("rabbitmq-stream://h", ("h", 5552, None, None, "/")),
    ("rabbitmq-stream://u:p%40@h:1/v", ("h", 1, "u", "p@", "v")),
])
def test_urls(text, expected):
    assert parse_stream_url(text) == expected


@pytest.mark.parametrize("text", ["amqp://h", "rabbitmq-stream://", "rabbitmq-stream://h:x"])
def test_bad_urls(text):
    with pytest.raises(ClientError):
        parse_stream_url(text)
