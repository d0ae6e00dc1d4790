"""Stored chunks joined into one Deliver (``--stream-join-bytes``) give a consumer exactly what
the stored chunks one by one give: the same records at the same offsets, from any start offset,
with or without a stage-1 filter (then nothing is joined), whatever the credit; every
joined chunk's CRC checks (combined from the stored ones, ``storage.crc``) and it begins where
a stored chunk begins. Two real broker processes with the same stream, one joining, one not;
the conformance client."""

from __future__ import annotations

import itertools
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, Chunk, StreamClient, offset_at, offset_first
from storage.crc import crc32_combine

JOIN = 700  # data bytes a joined chunk may hold on the joining broker


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    root = tmp_path_factory.mktemp("joined")
    with BrokerProcess(root / "plain", extra_args=["--fsync", "never", "--stream-join-bytes", "0"]) as plain, \
            BrokerProcess(root / "joined", extra_args=["--fsync", "never", "--stream-join-bytes",
                                                       str(JOIN)]) as joined:
        yield plain, joined


_names = itertools.count()


def _publish(port: int, stream: str, frames: list[tuple[str | None, list[bytes], bool]]) -> int:
    """One stored chunk per frame (each confirmed before the next); a frame is (its filter value,
    bodies, as one uncompressed sub-entry batch?). The offset after the last record."""
    c = StreamClient("127.0.0.1", port, timeout=10)
    assert c.create_stream(stream) == OK
    assert c.declare_publisher(1, stream) == OK
    pid = offset = 0
    for value, bodies, batch in frames:
        if batch:
            c.publish_sub_batch(1, pid, bodies)
            c.wait_confirms(1, [pid])
            pid += 1
        else:
            ids = list(range(pid, pid + len(bodies)))
            c.publish(1, [(i, b, value) for i, b in zip(ids, bodies, strict=True)], version=2)
            c.wait_confirms(1, ids)
            pid += len(bodies)
        offset += len(bodies)
    c.close()
    return offset


def _read(port: int, stream: str, start: int, properties: dict[str, str], last: int,
          initial: int, back: int) -> list[Chunk]:
    """Chunks until the one holding offset ``last``, credit ``initial`` then ``back`` per chunk."""
    c = StreamClient("127.0.0.1", port, timeout=10)
    assert c.subscribe(0, stream, offset_at(start) if start else offset_first(), credit=initial,
                       properties=properties) == OK
    got: list[Chunk] = []
    while not got or got[-1].chunk_id + got[-1].num_records <= last:
        chunk = c.next_chunk()
        got.append(chunk)
        c.credit(0, back)
    c.close()
    return got


def _checked(chunks: list[Chunk]) -> list[tuple[int, bytes]]:
    """Every chunk whole and CRC-checked; the records of all, in order."""
    out: list[tuple[int, bytes]] = []
    for ch in chunks:
        assert len(ch.data) == ch.data_length
        assert zlib.crc32(ch.data) == ch.crc
        records = ch.records()
        assert len(records) == ch.num_records
        assert [o for o, _ in records] == list(range(ch.chunk_id, ch.chunk_id + ch.num_records))
        out.extend(records)
    return out


_frame = st.tuples(st.sampled_from(["a", "b", None]),
                   st.lists(st.binary(max_size=120), min_size=1, max_size=12), st.booleans())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(_frame, min_size=1, max_size=10), start=st.integers(0, 200),
       filtered=st.booleans(), initial=st.integers(1, 4), back=st.integers(1, 2))
def test_joined_chunks_deliver_what_the_stored_chunks_do(brokers, frames, start, filtered,
                                                         initial, back):
    stream = f"joined-{next(_names)}"
    frames = [*frames, ("a", [b"last"], False)]  # every read ends at this record
    plain, joined = brokers
    last = _publish(plain.stream_port, stream, frames) - 1
    assert _publish(joined.stream_port, stream, frames) - 1 == last
    start = min(start, last)
    properties = {"filter.0": "a"} if filtered else {}
    want = _read(plain.stream_port, stream, start, properties, last, initial, back)
    got = _read(joined.stream_port, stream, start, properties, last, initial, back)
    assert _checked(got) == _checked(want)
    assert {ch.chunk_id for ch in got} <= {ch.chunk_id for ch in want}  # joins start where stored chunks do
    assert all(ch.data_length <= JOIN for ch in got if ch.chunk_id not in
               {w.chunk_id for w in want if w.data_length > JOIN})


def test_small_chunks_that_follow_on_come_as_one(brokers):
    """Five stored chunks of 2 records (60 data bytes each) come as one Deliver of 10 records;
    with a stage-1 filter (skipping the third), as stored: clients post-filter a chunk at a time
    (rstream's stops at the first record its decoder fails on)."""
    plain, joined = brokers
    frames = [("b" if i == 2 else "a", [b"x%d-%d" % (i, j) + bytes(20) for j in range(2)], False)
              for i in range(5)]
    for port in (plain.stream_port, joined.stream_port):
        _publish(port, "joined-small", frames)
    stored = _read(plain.stream_port, "joined-small", 0, {}, 9, 10, 1)
    assert [ch.chunk_id for ch in stored] == [0, 2, 4, 6, 8]
    whole = _read(joined.stream_port, "joined-small", 0, {}, 9, 10, 1)
    assert [(ch.chunk_id, ch.num_records) for ch in whole] == [(0, 10)]
    assert _checked(whole) == _checked(stored)
    skipping = _read(joined.stream_port, "joined-small", 0, {"filter.0": "a"}, 9, 10, 1)
    assert [(ch.chunk_id, ch.num_records) for ch in skipping] == [(0, 2), (2, 2), (6, 2), (8, 2)]


@given(parts=st.lists(st.binary(max_size=3000), min_size=1, max_size=6))
def test_crc32_combine_is_the_crc_of_the_joined_bytes(parts):
    crc = zlib.crc32(parts[0])
    for p in parts[1:]:
        crc = crc32_combine(crc, zlib.crc32(p), len(p))
    assert crc == zlib.crc32(b"".join(parts))


def test_a_consumer_at_the_end_gets_what_is_written_after_its_credit_ran_out(brokers):
    """At the committed end the look for a chunk to join finds none; that must not be kept as
    'at the end' past the turn: a chunk written while the consumer has no credit comes with
    its next credit."""
    joined = brokers[1]
    c = StreamClient("127.0.0.1", joined.stream_port, timeout=10)
    assert c.create_stream("joined-tail") == OK
    assert c.declare_publisher(1, "joined-tail") == OK
    assert c.subscribe(0, "joined-tail", offset_first(), credit=1) == OK
    for i in range(3):  # each written while the consumer has no credit, then credit
        c.publish(1, [(i, b"m%d" % i)])
        c.wait_confirms(1, [i])
        if i:
            c.credit(0, 1)
        chunk = c.next_chunk()
        assert (chunk.chunk_id, chunk.records()) == (i, [(i, b"m%d" % i)])
    c.close()


def test_a_joined_chunk_stays_within_the_clients_frame_max(brokers):
    """Six stored chunks of 60 data bytes: up to ten would join (``JOIN``), but a client with a
    frame max of 300 gets Delivers of three (180 data bytes + header + Deliver head <= 300)."""
    plain, joined = brokers
    frames = [(None, [b"y%d-%d" % (i, j) + bytes(22) for j in range(2)], False) for i in range(6)]
    _publish(joined.stream_port, "joined-frame-max", frames)
    c = StreamClient("127.0.0.1", joined.stream_port, timeout=10, frame_max=300, record=True)
    assert c.subscribe(0, "joined-frame-max", offset_first(), credit=10) == OK
    got = [c.next_chunk() for _ in range(2)]
    assert [(ch.chunk_id, ch.num_records, ch.data_length) for ch in got] == [(0, 6, 180), (6, 6, 180)]
    assert _checked(got) == [(i * 2 + j, b"y%d-%d" % (i, j) + bytes(22)) for i in range(6) for j in range(2)]
    assert c.received is not None and max(len(f) for f in c.received) <= 300 + 4
    c.close()
