"""Consumers' chunks sent by sender threads (``--stream-send-threads``) against the loop sending
them itself (``0``, the plain path): the same Deliver frames, chunk for chunk and byte for
byte, for random streams, credits and subscriptions per connection; in order when the socket
is full and the rest of a batch waits; a chunk that cannot be sent closes its connection only,
with one log line. Real broker processes, the conformance client on raw sockets."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_stream.streamproto import ResponseCode
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, Chunk, ServerClosed, StreamClient, offset_first
from tests.polling import wait_for


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """The plain path (the loop sends) and sender threads, side by side."""
    root = tmp_path_factory.mktemp("send-threads")
    with BrokerProcess(root / "loop", extra_args=["--fsync", "never", "--stream-send-threads", "0"]) as a, \
            BrokerProcess(root / "threads", extra_args=["--fsync", "never",
                                                        "--stream-send-threads", "3"]) as b:
        yield a, b


def _fill(broker: BrokerProcess, stream: str, frames: list[list[bytes]]) -> None:
    """One Publish per frame, each confirmed before the next (so each is a chunk of its own on
    either broker, and the two hold the same chunks)."""
    c = StreamClient("127.0.0.1", broker.stream_port)
    assert c.create_stream(stream) == OK
    assert c.declare_publisher(1, stream) == OK
    next_id = 0
    for bodies in frames:
        ids = list(range(next_id, next_id + len(bodies)))
        c.publish(1, zip(ids, bodies, strict=True))
        c.wait_confirms(1, ids)
        next_id += len(bodies)
    c.close()


def _read(broker: BrokerProcess, stream: str, subscriptions: int, credit: int,
          records: int) -> dict[int, list[tuple]]:
    """Every chunk each of ``subscriptions`` (one connection) gets, as (header fields but the
    timestamp, which is the publish's time, and data), credit given back one per chunk, until
    each has ``records`` records."""
    c = StreamClient("127.0.0.1", broker.stream_port, timeout=60)
    got: dict[int, list[tuple]] = {s: [] for s in range(subscriptions)}
    counts = dict.fromkeys(got, 0)
    for s in got:
        assert c.subscribe(s, stream, offset_first(), credit=credit) == OK
    while min(counts.values()) < records:
        chunk: Chunk = c.next_chunk()
        s = chunk.subscription_id
        got[s].append((chunk.committed_chunk_id, chunk.chunk_type, chunk.num_entries,
                       chunk.num_records, chunk.chunk_id, chunk.crc,
                       chunk.data_length, chunk.trailer_length, chunk.bloom_size, chunk.data))
        counts[s] += chunk.num_records
        c.credit(s, 1)
    c.sock.close()
    return got


def _bodies(chunks: list[tuple]) -> list[bytes]:
    out = []
    for h in chunks:
        c = Chunk(0, *h[:4], 0, *h[4:])
        out.extend(body for _, body in c.records())
    return out


_names = iter(range(1_000_000))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.lists(st.binary(max_size=3000), min_size=1, max_size=40), min_size=1,
                       max_size=12),
       subscriptions=st.integers(1, 3), credit=st.integers(1, 12))
def test_sender_threads_deliver_the_loops_bytes(brokers, frames, subscriptions, credit):
    stream = f"same-{next(_names)}"
    total = sum(map(len, frames))
    got = []
    for b in brokers:
        _fill(b, stream, frames)
        got.append(_read(b, stream, subscriptions, credit, total))
    assert got[0] == got[1]
    flat = [body for bodies in frames for body in bodies]
    for chunks in got[1].values():
        assert _bodies(chunks) == flat


def test_a_full_socket_keeps_the_order(brokers):
    """~24 MB with credit for all of it on three subscriptions of one connection, and four
    connections at once: far more than the socket takes, so batches come back with a rest that
    waits for the socket; every connection still gets the loop's bytes in order."""
    frames = [[os.urandom(60_000) for _ in range(10)] for _ in range(40)]
    total = 400
    for b in brokers:
        _fill(b, "big", frames)
    expected = _read(brokers[0], "big", 3, 40, total)
    results: list[object] = [None] * 4

    def reader(i: int) -> None:
        try:
            results[i] = _read(brokers[1], "big", 3, 40, total)
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for r in results:
        assert r == expected


def _segment(broker: BrokerProcess, stream: str) -> Path:
    (seg,) = (broker.data_dir / "streams" / stream).rglob("*.segment")
    return seg


def test_a_chunk_that_cannot_be_sent_closes_its_connection_only(brokers):
    """The segment is cut short under the broker (its index still says the chunk is whole):
    the reader finds the chunk runs past the end of the file before it is sent, the chunk
    before it goes out, then a Close with INTERNAL_ERROR naming the segment, one log line,
    and another connection goes on publishing. (Cut between that check and the sendfile in
    the worker, the sendfile comes up short: the socket is closed, "cannot send a chunk".)"""
    broker = brokers[1]
    _fill(broker, "cut", [[b"a" * 100], [b"b" * 200_000]])
    seg = _segment(broker, "cut")
    os.truncate(seg, seg.stat().st_size - 150_000)
    other = StreamClient("127.0.0.1", broker.stream_port)
    assert other.create_stream("alive") == OK
    assert other.declare_publisher(1, "alive") == OK
    line = f"{seg}: corrupt data at byte"
    before = broker.log_text().count(line)
    c = StreamClient("127.0.0.1", broker.stream_port, timeout=30)
    assert c.subscribe(0, "cut", offset_first(), credit=10) == OK
    assert c.next_chunk().num_records == 1  # the first chunk is whole
    closed = c.wait_closed()
    assert isinstance(closed, ServerClosed) and closed.code == ResponseCode.INTERNAL_ERROR
    assert line in closed.reason and "runs past the end of the segment" in closed.reason
    wait_for(lambda: broker.log_text().count(line) > before, 10, "the log line")
    assert broker.log_text().count(line) == before + 1
    other.publish(1, [(0, b"still here")])
    assert other.wait_confirms(1, [0]) == {0: OK}
    other.close()
