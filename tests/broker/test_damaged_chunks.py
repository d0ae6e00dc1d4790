"""A chunk damaged on disk under a running broker (a header's record count, a bit of a data
section), read by real consumers: the project's stream client (plain, sent with sendfile and
joined; stage 2 with ``sql-filter``) and its AMQP client (plain, filter values, SQL). Each
consumer gets the chunks before the damage as stored, then the broker logs why and ends it
with the reason (segment and byte): a stream connection with a Close (INTERNAL_ERROR), an
AMQP link detached with ``amqp:internal-error`` while a consumer of another stream on the same
connection goes on. A data section sent unread (sendfile) goes out only under its stored CRC,
which then fails. Another stream's consumers and publishers go on, and the broker restarts
cleanly, serving the other stream whole and leaving the damaged one as it is."""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

import proton
import pytest

from amqp_stream.client import connect
from amqp_stream.client.errors import ClientError
from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.streamproto import OffsetSpec, OffsetType
from amqp_stream.testing import BrokerProcess
from storage.files import read_index_tuples
from storage.format import CHUNK_HEADER, CHUNK_HEADER_BYTES as HB

pytestmark = pytest.mark.timeout(120)

BATCHES, PER_BATCH = 4, 100  # a frame of 100 after a confirm: chunks of 32 + 68 (docs/storage.md)


def _message(i: int) -> bytes:
    return bytes(proton.Message(body=f"m{i}", properties={"region": f"r{i % 3}"}).encode())


def _fill(b: BrokerProcess, stream: str) -> None:
    with StreamClient(b.stream_url) as c:
        c.create(stream)
        c.declare_publisher(1, stream)
        for k in range(BATCHES):
            ids = range(k * PER_BATCH, (k + 1) * PER_BATCH)
            c.send(publish_frame(1, [(i, f"r{i % 3}", _message(i)) for i in ids]))
            while c.confirmed < (k + 1) * PER_BATCH:
                c.pump(10)


def _chunks(b: BrokerProcess, stream: str) -> tuple[Path, list[tuple]]:
    (index,) = (b.data_dir / "streams" / stream).rglob("*.index")
    fd = os.open(index, os.O_RDONLY)
    try:
        return index.with_suffix(".segment"), read_index_tuples(fd, 0, 1000)
    finally:
        os.close(fd)


def _damage(segment: Path, at: int, change) -> None:
    fd = os.open(segment, os.O_RDWR)
    try:
        os.pwrite(fd, change(os.pread(fd, 4, at)), at)
    finally:
        os.close(fd)


def _consume_stream(b: BrokerProcess, stream: str, properties=None,
                    credit: int = 10) -> tuple[list[bytes], str]:
    """Deliveries (each chunk as sent) until the broker closes the connection: its reason."""
    got: list[bytes] = []
    c = StreamClient(b.stream_url, on_chunk=lambda chunk: got.append(bytes(chunk)))
    try:
        c.subscribe(1, stream, OffsetSpec(OffsetType.FIRST), credit, properties)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            c.pump(1)
    except ClientError as exc:
        return got, str(exc)
    finally:
        c.sock.close()
    raise AssertionError(f"the consumer was not closed; {len(got)} chunks delivered")


def _crc_holds(chunk: bytes) -> bool:
    h = CHUNK_HEADER.unpack_from(chunk)
    return zlib.crc32(chunk[HB:HB + h[8]]) == h[7]


def _consume_amqp(b: BrokerProcess, stream: str, **filters) -> tuple[list[str], str]:
    """Messages received until the consumer fails: its error. A consumer of "good" on the same
    connection reads that stream whole afterwards."""
    bodies: list[str] = []
    with connect(b.url, timeout=30) as client, client.consumer("good", credit=50) as other:
        try:
            with client.consumer(stream, credit=50, **filters) as consumer:
                for m in consumer.read_available(timeout=30):
                    bodies.append(m.body)
        except ClientError as exc:
            error = str(exc)
        else:
            raise AssertionError(f"the consumer did not fail; {len(bodies)} messages")
        assert len(list(other.read_available(timeout=30))) >= BATCHES * PER_BATCH
    return bodies, error


def _all_of(b: BrokerProcess, stream: str) -> list[str]:
    with connect(b.url, timeout=30) as client, client.consumer(stream, credit=500) as consumer:
        return [m.body for m in consumer.read_available(timeout=30)]


def _still_serves(b: BrokerProcess) -> None:
    """The other stream: read whole, and a publish to it confirmed."""
    assert _all_of(b, "good")[:BATCHES * PER_BATCH] == [f"m{i}" for i in range(BATCHES * PER_BATCH)]
    with StreamClient(b.stream_url) as c:
        c.declare_publisher(2, "good")
        c.send(publish_frame(2, [(0, None, _message(-1))]))
        while c.confirmed < 1:
            c.pump(10)


@pytest.mark.parametrize("join", ["0", "1048576"], ids=["as stored", "joined"])
def test_a_damaged_record_count_closes_each_consumer_and_spares_the_rest(tmp_path, join):
    """Chunk 1's header says one record more (outside the CRC): every consumer stops before it
    with an error, none is given its records or header (before the fix the sendfile consumer
    was sent it, with offsets one too many); after a restart it is left as it is."""
    with BrokerProcess(tmp_path / "data", extra_args=["--stream-join-bytes", join]) as b:
        _fill(b, "bad")
        _fill(b, "good")
        segment, records = _chunks(b, "bad")
        stored = segment.read_bytes()
        damaged = records[1]
        _damage(segment, damaged[3] + 4, lambda v: (int.from_bytes(v, "big") + 1).to_bytes(4, "big"))
        for properties in (None, {"sql-filter": "region = 'r1'"}):
            got, reason = _consume_stream(b, "bad", properties)
            assert f"{segment}: corrupt data at byte {damaged[3]}" in reason
            for chunk in got:  # (chunk id + records: it ends before the damaged one)
                h = CHUNK_HEADER.unpack_from(chunk)
                assert h[6] + h[3] <= damaged[0] and _crc_holds(chunk)
                if properties is None:  # (stored chunks, joined or not)
                    assert chunk[HB:] in stored
            if properties is None and join == "0":  # the chunk before the damage went out
                assert len(got) == 1
        for filters in ({}, {"filter_values": ["r1"]}, {"sql": "region = 'r1'"}):
            bodies, error = _consume_amqp(b, "bad", **filters)
            assert all(int(body[1:]) < damaged[0] for body in bodies), filters
            assert "amqp:internal-error" in error and f"{segment}: corrupt data" in error
            assert "connection" not in error  # (the link detached, not the connection)
        assert str(segment) in b.log_text()
        _still_serves(b)
        assert b.stop() == 0
        before = len(b.log_text())
        b.start()
        _still_serves(b)
        # recovery finds the damage inside the segment: that stream is left as it is
        assert f"{segment}: corrupt data at byte" in b.log_text()[before:]
        assert "not opened (left as it is)" in b.log_text()[before:]


def test_a_rotten_data_section_is_refused_or_sent_under_a_failing_crc(tmp_path):
    """A bit of chunk 1's data flipped: the sendfile consumer gets it only under its stored
    CRC, which fails (the client's check refuses it); stage 2 (which reads it) and the AMQP
    consumers are closed with an error; the other stream is served throughout."""
    with BrokerProcess(tmp_path / "data") as b:
        _fill(b, "bad")
        _fill(b, "good")
        segment, records = _chunks(b, "bad")
        damaged = records[1]
        head = CHUNK_HEADER.unpack_from(segment.read_bytes(), damaged[3])
        at = damaged[3] + HB + head[10] + 30
        _damage(segment, at, lambda v: bytes([v[0] ^ 0x04]) + v[1:])
        got: list[bytes] = []
        c = StreamClient(b.stream_url, on_chunk=lambda chunk: got.append(bytes(chunk)))
        with c:
            c.subscribe(1, "bad", OffsetSpec(OffsetType.FIRST), 10)
            while c.records < BATCHES * PER_BATCH:
                c.pump(10)
        assert [_crc_holds(chunk) for chunk in got].count(False) == 1
        got, reason = _consume_stream(b, "bad", {"sql-filter": "region = 'r1'"})
        assert f"chunk {damaged[0]}: CRC mismatch" in reason
        assert all(_crc_holds(chunk) and CHUNK_HEADER.unpack_from(chunk)[6] < damaged[0]
                   for chunk in got)
        for filters in ({}, {"filter_values": ["r1"]}, {"sql": "region = 'r1'"}):
            bodies, error = _consume_amqp(b, "bad", **filters)
            assert all(int(body[1:]) < damaged[0] for body in bodies), filters
        assert "CRC mismatch" in b.log_text()
        _still_serves(b)


@pytest.mark.parametrize("damage", ["bit rot", "records more"])
def test_stage_2_over_a_run_of_chunks_sends_the_matches_before_the_damage(tmp_path, damage):
    """Chunk 6 of 8 damaged (a bit of its data; its header's record count): stage 2 reads the
    chunks before it at once (``Reader.read_span``) and, with the credit there, sends every
    match of theirs, in order and under CRCs that hold, then the Close naming the damage."""
    with BrokerProcess(tmp_path / "data") as b:
        _fill(b, "bad")
        segment, records = _chunks(b, "bad")
        assert len(records) >= 8
        damaged = records[6]
        if damage == "bit rot":
            head = CHUNK_HEADER.unpack_from(segment.read_bytes(), damaged[3])
            _damage(segment, damaged[3] + HB + head[10] + 30, lambda v: bytes([v[0] ^ 0x04]) + v[1:])
        else:
            _damage(segment, damaged[3] + 4,
                    lambda v: (int.from_bytes(v, "big") + 1).to_bytes(4, "big"))
        got, reason = _consume_stream(b, "bad", {"sql-filter": "region = 'r1'"}, credit=1000)
        if damage == "bit rot":
            assert f"chunk {damaged[0]}: CRC mismatch" in reason
        else:
            assert f"{segment}: corrupt data at byte {damaged[3]}" in reason
        assert all(_crc_holds(chunk) for chunk in got)
        offsets = [CHUNK_HEADER.unpack_from(chunk)[6] for chunk in got]
        assert offsets == [i for i in range(damaged[0]) if i % 3 == 1]
