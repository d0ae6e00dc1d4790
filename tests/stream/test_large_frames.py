"""Frames above the negotiated frame max, on a real broker process: taken up to the hard max
(16 MiB) as RabbitMQ 3.10 takes them, read a budget's worth at a time broker-wide, and a
frame above the hard max answered as RabbitMQ 4.2.7 answers one above frame_max."""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest
from rstream import AMQPMessage, ConfirmationStatus, Producer

from amqp_stream.streamproto.constants import DEFAULT_FRAME_HARD_MAX
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient

FRAME_MAX = 1 << 20  # what every client here negotiates (the broker's default too)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("large") / "data",
                       extra_args=["--fsync", "never"]) as b:
        yield b


def test_rstream_send_batch_of_100000_is_one_frame_above_frame_max_and_is_stored(broker):
    """rstream's send_batch does not split by frame_max: 100,000 messages are one ~1.5 MB
    Publish. RabbitMQ 3.10 stores and confirms it; so must we (it used to close with 14)."""
    async def go() -> tuple[int, int]:
        confirmed: list[ConfirmationStatus] = []
        done = asyncio.Event()

        def on_confirm(status: ConfirmationStatus) -> None:
            confirmed.append(status)
            if len(confirmed) == 100_000:
                done.set()
        async with Producer("127.0.0.1", broker.stream_port, username="guest",
                            password="guest", frame_max=FRAME_MAX) as p:
            await p.create_stream("batch")
            await p.send_batch("batch", [AMQPMessage(body=b"%06d" % i)
                                         for i in range(100_000)], on_publish_confirm=on_confirm)
            await done.wait()
        return len(confirmed), sum(1 for s in confirmed if s.is_confirmed)
    assert asyncio.run(asyncio.wait_for(go(), 60)) == (100_000, 100_000)
    c = StreamClient("127.0.0.1", broker.stream_port, frame_max=FRAME_MAX)
    code, stats = c.stream_stats("batch")
    assert code == OK
    assert c.subscribe(1, "batch", credit=100) == OK
    records = 0
    while records < 100_000:
        records += c.next_chunk().num_records
    assert records == 100_000
    c.close()


def _publish_frame(publisher_id: int, first_id: int, count: int, size: int) -> bytes:
    body = b"".join(struct.pack(">QI", first_id + i, size) + b"b" * size for i in range(count))
    content = struct.pack(">HHBi", 0x02, 1, publisher_id, count) + body
    return struct.pack(">I", len(content)) + content


def test_large_frames_of_several_connections_wait_their_turn_and_all_arrive(broker):
    """Two 12 MiB frames at once are more than the 16 MiB read budget: the second connection
    waits unread until the first frame is taken, then goes on; both are confirmed whole."""
    clients = [StreamClient("127.0.0.1", broker.stream_port, frame_max=FRAME_MAX)
               for _ in range(2)]
    assert clients[0].create_stream("two") == OK
    frames = []
    for c in clients:
        assert c.declare_publisher(1, "two") == OK
        frames.append(_publish_frame(1, 0, 12 * 1024, 1000))
    assert all(FRAME_MAX < len(f) < DEFAULT_FRAME_HARD_MAX for f in frames)
    half = len(frames[0]) // 2
    clients[0].send_raw(frames[0][:half])  # the first reserves 12 MiB
    second = threading.Thread(target=clients[1].send_raw, args=(frames[1],))
    second.start()  # the second cannot: it waits unread (its sendall blocks)
    clients[0].send_raw(frames[0][half:])
    second.join(30)
    assert not second.is_alive()
    for c in clients:
        assert c.wait_confirms(1, [12 * 1024 - 1])[12 * 1024 - 1] == OK
        assert c.stream_stats("two")[0] == OK  # still open
        c.close()


def test_a_frame_above_the_hard_max_gets_close_frame_too_large(broker):
    c = StreamClient("127.0.0.1", broker.stream_port, frame_max=FRAME_MAX)
    c.send_raw(struct.pack(">IHH", DEFAULT_FRAME_HARD_MAX + 1, 0x02, 1) + b"\0" * 1000)
    closed = c.wait_closed()
    assert (closed.code, closed.reason) == (14, "frame too large")
    c.sock.close()


def test_a_client_stalled_inside_a_large_frame_is_closed_and_others_go_on(tmp_path):
    """The read budget is held while a large frame comes in, for idle_timeout at most: a
    client that stops halfway is closed, and the one waiting behind it gets its turn."""
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never",
                                                      "--idle-timeout", "1"]) as b:
        stalled, waiting = (StreamClient("127.0.0.1", b.stream_port, frame_max=FRAME_MAX)
                            for _ in range(2))
        assert stalled.create_stream("s") == OK
        for c in (stalled, waiting):
            assert c.declare_publisher(1, "s") == OK
        frame = _publish_frame(1, 0, 12 * 1024, 1000)
        stalled.send_raw(frame[:len(frame) // 2])  # and nothing more
        sender = threading.Thread(target=waiting.send_raw, args=(frame,))
        sender.start()
        assert waiting.wait_confirms(1, [12 * 1024 - 1])[12 * 1024 - 1] == OK
        sender.join(10)
        assert stalled.wait_closed().code is None  # closed without a word
        assert "not received whole within 1 s" in b.log_text()
        waiting.close()


def test_large_v2_frames_in_flight_together_are_stored_byte_for_byte(broker):
    """The Spark sink's traffic: Publish v2 frames of ~0.5 MB (messages of varying sizes, a
    filter value each), several unconfirmed at once on two connections, so that the broker
    gathers each into a buffer of its own, reuses the buffers of frames already written
    (``streamproto.connection._frame_buffer``) and writes chunks cut across frames in parts:
    every message is stored once, in order, byte for byte, and its filter value goes to its
    chunk's Bloom filter."""
    from amqp_stream.client.stream import StreamClient as Client
    from bench.stream_protocol import publish, publish_frames
    from storage import OffsetSpec, open_reader

    bodies = [b"\x00\x53\x75\xa0" + bytes([n]) + bytes([n % 251]) * n for n in range(120, 250)]
    values = [f"r{i % 13:02d}" for i in range(60_000)]
    with Client(broker.stream_url) as c:
        c.create("spans")
    per_publisher = 30_000
    for k in range(2):  # one after the other: the stream's order is then known
        frames = publish_frames(1, 1 + k * per_publisher, per_publisher, 2_500,
                                values[k * per_publisher:], bodies)
        with Client(broker.stream_url) as c:
            c.declare_publisher(1, "spans", f"sink-{k}")
            publish(c, frames, broker.proc.pid, window=8 * 2_500)
    expected = [bodies[i % len(bodies)] for i in range(1, 1 + 2 * per_publisher)]
    stored: list[bytes] = []
    with open_reader(str(broker.data_dir / "streams" / "spans" / "log"), OffsetSpec.first()) as r:
        for chunk in r:
            stored += [record for _, record in chunk.records]
            if len(stored) >= len(expected):
                break
    assert stored == expected
    with open_reader(str(broker.data_dir / "streams" / "spans" / "log"), OffsetSpec.first(),
                     ["r05"]) as r:  # the Bloom filters: every r05 message's chunk is read
        seen = set()
        for chunk in r:
            seen.update(offset for offset, _ in chunk.records)
            if max(seen, default=-1) >= len(expected) - 1:
                break
    assert {i for i in range(len(expected)) if values[i] == "r05"} <= seen
