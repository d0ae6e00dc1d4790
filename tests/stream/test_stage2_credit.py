"""Stage 2 over the stream protocol under the credit a client grants: whatever the credit (one
at a time, a few, many; initial and given back), a filtered subscription gets exactly the runs
of consecutive matching records of each stored chunk, each as a chunk of its own, in order,
with the stored records' bytes and a CRC that checks. The broker rebuilds the next matches
while the client has no credit (``Subscription._prefetch``): this is what it must not change.
Real broker process, the conformance client."""

from __future__ import annotations

import itertools
import urllib.request
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Message

from amqp_stream.stream_listener.consuming import Subscription
from amqp_stream.streamproto import RemoteProtocolError, ServerConnection, State
from amqp_stream.streamproto import frames as f
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient, offset_first
from storage.format import encode_chunk, encode_entries
from tests.http.api import call
from tests.stream.test_derived_keys import _metric
from tests.polling import wait_for
from tests.streamproto.test_connection import events, handshake


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("stage2-credit") / "data",
                       extra_args=["--fsync", "never"]) as b:
        yield b


def _message(k: int, i: int, uniform: bool = False) -> bytes:
    """``uniform``: every message of one size and layout, so that the broker matches a chunk's
    records as columns (``amqp_stream.columns``); else sizes vary, record by record."""
    return bytes(Message(body=b"m%06d" % i if uniform else b"m%d" % i, properties={"k": k}).encode())


def _expected(frames: list[list[int]], wanted: int, uniform: bool) -> list[tuple[int, list[bytes]]]:
    """(first offset, bodies) of each run of consecutive records with ``k = wanted`` within
    one stored chunk (one Publish frame each)."""
    out: list[tuple[int, list[bytes]]] = []
    offset = 0
    for ks in frames:
        run: list[bytes] = []
        first = 0
        for i, k in enumerate(ks):
            if k == wanted:
                if not run:
                    first = offset + i
                run.append(_message(k, offset + i, uniform))
            elif run:
                out.append((first, run))
                run = []
        if run:
            out.append((first, run))
        offset += len(ks)
    return out


_names = itertools.count()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=60), min_size=1, max_size=8),
       wanted=st.integers(0, 3), initial=st.integers(1, 12), back=st.integers(1, 3),
       every=st.integers(1, 4), uniform=st.booleans(), v2=st.booleans())
def test_filtered_deliveries_are_the_runs_of_matches_whatever_the_credit(
        broker, frames, wanted, initial, back, every, uniform, v2):
    """Credit ``initial`` at first, then ``back`` after every ``every`` chunks received (or
    sooner, when the client has none left); Deliver v1 or v2 (the stream's committed chunk
    id in every frame: everything was published before the subscription)."""
    _filtered_read(broker, frames, wanted, initial, back, every, uniform, v2)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.lists(st.integers(0, 3), min_size=256, max_size=600), min_size=1, max_size=3),
       wanted=st.integers(0, 3), initial=st.integers(1, 12), back=st.integers(1, 3),
       every=st.integers(1, 4), uniform=st.booleans(), v2=st.booleans())
def test_large_stored_chunks_give_the_same_deliveries(
        broker, frames, wanted, initial, back, every, uniform, v2):
    """Stored chunks of hundreds of records, as a steady publisher's are (the columns'
    blocks, many matches a chunk and frames a grant): the same runs, in order, whatever
    the credit. (The writer's chunks grow from 32 entries as a frame fills them: a first
    frame of 1,000 records that match no filter here makes the next ones' chunks large.)"""
    stored = _filtered_read(broker, [[9] * 1000, *frames], wanted, initial, back, every,
                            uniform, v2)
    assert max(len(ks) for ks in stored[5:]) >= 256


def _stored_chunks(broker, stream: str, records: int) -> list[int]:
    """The records of each stored chunk of ``stream``: a stage-1 subscription that matches
    every message gets the chunks as stored (not joined)."""
    c = StreamClient("127.0.0.1", broker.stream_port, timeout=10)
    assert c.subscribe(0, stream, offset_first(), credit=1000,
                       properties={"filter.0": "none", "match-unfiltered": "true"}) == OK
    sizes: list[int] = []
    while sum(sizes) < records:
        sizes.append(c.next_chunk().num_records)
    c.close()
    return sizes


def _publishing_client(broker, deliver_v2: bool) -> tuple[StreamClient, str]:
    """A client (Deliver v2 when asked) with publisher 1 declared on a new stream."""
    stream = f"stage2-{next(_names)}"
    c = StreamClient("127.0.0.1", broker.stream_port, timeout=10)
    if deliver_v2:
        assert c.exchange_command_versions([(8, 1, 2)])[0] == OK
    assert c.create_stream(stream) == OK
    assert c.declare_publisher(1, stream) == OK
    return c, stream


def _filtered_read(broker, frames, wanted, initial, back, every, uniform, v2) -> list[list[int]]:
    """Publish ``frames`` (the ``k`` of each message), read them with ``k = wanted`` under
    the credit pattern; the stored chunks (the ``k`` of their messages)."""
    c, stream = _publishing_client(broker, v2)
    offset = 0
    for ks in frames:  # one frame, confirmed before the next: one stored chunk each
        ids = list(range(offset, offset + len(ks)))
        c.publish(1, [(i, _message(k, i, uniform)) for i, k in zip(ids, ks, strict=True)])
        c.wait_confirms(1, ids)
        offset += len(ks)
    # a last record that matches, in a chunk of its own: the read is over when it comes
    c.publish(1, [(offset, _message(wanted, offset, uniform))])
    c.wait_confirms(1, [offset])
    flat = [k for ks in frames for k in ks] + [wanted]
    stored, at = [], 0
    for n in _stored_chunks(broker, stream, len(flat)):  # (a large frame may be several)
        stored.append(flat[at:at + n])
        at += n
    expected = _expected(stored, wanted, uniform)
    assert c.subscribe(0, stream, offset_first(), credit=initial,
                       properties={"sql-filter": f"k = {wanted}"}) == OK
    got: list[tuple[int, list[bytes]]] = []
    owed, left = 0, initial
    while not got or got[-1][0] < offset:
        chunk = c.next_chunk()
        assert chunk.num_entries == chunk.num_records
        assert chunk.committed_chunk_id == (offset if v2 else None)
        assert zlib.crc32(chunk.data) == chunk.crc
        records = chunk.records()
        assert [o for o, _ in records] == list(range(chunk.chunk_id, chunk.chunk_id + len(records)))
        got.append((chunk.chunk_id, [body for _, body in records]))
        owed += 1
        left -= 1
        if owed == every or not left:
            c.credit(0, back)
            owed, left = 0, left + back
    assert got == expected
    c.close()
    return stored


@given(first=st.integers(0, 2**63 - 1), timestamp=st.integers(-2**63, 2**63 - 1),
       epoch=st.integers(0, 2**64 - 1), bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_a_rebuilt_chunk_is_the_encoders_chunk(first, timestamp, epoch, bodies):
    """The one-record shortcut packs the bytes ``storage.format``'s encoder gives."""
    plain = b"".join(encode_chunk(first, timestamp, encode_entries(bodies), len(bodies),
                                  len(bodies), epoch=epoch))
    assert Subscription._chunk(first, timestamp, epoch, bodies) == (len(bodies), plain)


_credit_bytes = st.one_of(
    st.builds(lambda s, c: f.encode(f.Credit(s, c)), st.integers(0, 255), st.integers(0, 65535)),
    st.binary(min_size=11, max_size=11),  # (what else 11 bytes may be)
    st.builds(lambda v, b: b"\x00\x00\x00\x07\x00\x09" + v.to_bytes(2, "big") + b,
              st.integers(0, 3), st.binary(min_size=3, max_size=3)),
    st.binary(max_size=24))


@given(data=_credit_bytes, before=st.sampled_from(["nothing", "part of a frame", "a Close"]))
def test_a_credit_taken_without_decoding_is_what_the_decoder_gives(data, before):
    """``ServerConnection.credit_frame`` (the listener takes a read that is one Credit frame
    without buffering it): when it answers, ``receive_data`` and ``next_event`` would have
    given that Credit and nothing more; on an idle open connection a Credit is taken so."""
    conns = []
    for _ in range(2):
        conn = ServerConnection()
        handshake(conn)
        if before == "part of a frame":
            conn.receive_data(f.encode(f.Credit(1, 1))[:5])
        elif before == "a Close":
            conn.receive_data(f.encode(f.Close(9, 0, "bye")))
            assert isinstance(conn.next_event(), f.Close)
        conns.append(conn)
    fast, plain = conns
    got = fast.credit_frame(data, len(data))
    plain.receive_data(data)
    try:
        decoded = events(plain)
    except RemoteProtocolError:
        decoded = None
    if got is not None:
        assert before == "nothing" and decoded == [f.Credit(*got)]
        assert fast.state is State.OPEN and fast.buffered == 0
    if before == "nothing" and len(data) == 11 and data == f.encode(f.Credit(data[8], int.from_bytes(data[9:], "big"))):
        assert got is not None


def _eleven_matches(broker, credit: int, deliver_v2: bool = False) -> tuple[StreamClient, str]:
    """A client subscribed with ``credit`` and ``k = 0`` to a new stream of one stored chunk of
    41 messages: 11 matches (offsets 0, 4, ... 40), none next to another."""
    c, stream = _publishing_client(broker, deliver_v2)
    ids = list(range(41))
    c.publish(1, [(i, _message(i % 4, i, True)) for i in ids])
    c.wait_confirms(1, ids)
    assert c.subscribe(0, stream, offset_first(), credit=credit, properties={"sql-filter": "k = 0"}) == OK
    return c, stream


def _writes(broker, port: int) -> int:
    """``send_cnt`` of the broker's connection from client port ``port`` (HTTP API)."""
    rows = call(broker, "GET", "/api/connections").json
    return next(r["send_cnt"] for r in rows if r["peer_port"] == port)


def test_the_chunks_of_credit_frames_read_together_go_out_in_one_write(broker):
    """rstream grants a credit per chunk it gets: Credit frames that come in one read are
    answered in one write (the connection writes once it has handled them all), not one
    write a frame."""
    c, _ = _eleven_matches(broker, credit=1)
    assert c.next_chunk().chunk_id == 0  # the other matches are built: they wait for credit
    port = c.sock.getsockname()[1]
    before = _writes(broker, port)
    c.sock.sendall(b"".join(f.encode(f.Credit(0, 1)) for _ in range(8)))
    assert [c.next_chunk().chunk_id for _ in range(8)] == list(range(4, 36, 4))
    assert _writes(broker, port) - before == 1
    c.close()


def _lag(broker, stream: str) -> float:
    """The stream's attached consumer's lag (one consumer), from the metrics scrape: how far
    its reader, prefetches included, is behind the end."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    lines = [line for line in text.splitlines()
             if line.startswith("amqp_stream_attached_consumer_lag_messages{")
             and f'stream="{stream}"' in line]
    assert len(lines) == 1, lines
    return float(lines[0].rsplit(" ", 1)[1])


def test_matches_stored_after_the_end_are_prefetched_without_credit(broker):
    """A filtered subscription with its credit used up at the end of the stream asks its
    reader nothing while it only sends frames already built; once the stream grows, its
    prefetch goes on before the next credit comes (the reader reaches the new end)."""
    c, stream = _eleven_matches(broker, credit=11)
    assert [c.next_chunk().chunk_id for _ in range(11)] == list(range(0, 41, 4))
    assert c.create_stream(f"{stream}-barrier") == OK  # (the prefetch found the end by now)
    more = list(range(41, 82))
    c.publish(1, [(i, _message(i % 4, i, True)) for i in more])
    c.wait_confirms(1, more)
    wait_for(lambda: _lag(broker, stream) == 0, 10, "the prefetch to read the new chunk")
    c.credit(0, 10)
    assert [c.next_chunk().chunk_id for _ in range(10)] == list(range(44, 82, 4))
    c.close()


def test_frames_built_before_the_stream_grew_carry_its_committed_id_when_sent(broker):
    """Deliver v2: the frames of matches wait for credit with the committed chunk id of when
    they were built; sent after the stream grew, they carry the stream's id then."""
    c, stream = _eleven_matches(broker, credit=1, deliver_v2=True)
    first = c.next_chunk()  # (the next matches are built, with the committed id of then)
    assert first.chunk_id == 0 and first.committed_chunk_id < 41
    c.publish(1, [(41, _message(1, 41, True))])  # a chunk of its own: committed chunk id 41
    c.wait_confirms(1, [41])
    c.credit(0, 2)
    assert [(ch.chunk_id, ch.committed_chunk_id) for ch in (c.next_chunk(), c.next_chunk())] \
        == [(4, 41), (8, 41)]
    c.close()


@pytest.mark.parametrize("uniform", [True, False])
def test_each_record_a_filtered_read_leaves_out_counts_once_as_dropped(broker, uniform):
    """``stage2_dropped_messages``: every record read and not delivered once, whether the
    columns chose the matches (uniform records: the reader counts those it left out) or the
    records were matched one by one."""
    c, stream = _publishing_client(broker, False)
    ids = list(range(41))
    c.publish(1, [(i, _message(i % 4, i, uniform)) for i in ids])
    c.wait_confirms(1, ids)
    assert c.subscribe(0, stream, offset_first(), credit=11, properties={"sql-filter": "k = 0"}) == OK
    assert [c.next_chunk().chunk_id for _ in range(11)] == list(range(0, 41, 4))
    assert _metric(broker.metrics_url, "stage2_dropped_messages_total", stream) == 30
    c.close()


def _send_pend(broker, port: int) -> int:
    """``send_pend`` of the broker's connection from client port ``port`` (HTTP API): bytes
    queued for its socket that the socket did not take yet."""
    rows = call(broker, "GET", "/api/connections").json
    return next(r["send_pend"] for r in rows if r["peer_port"] == port)


def test_chunks_the_socket_cannot_take_at_once_come_whole_and_in_order(broker):
    """The one-record chunks of a filtered read pile up beyond what the socket buffers hold
    while the client reads nothing: what a write leaves is queued and goes out when the
    socket takes more; every chunk comes, whole and in order."""
    c, stream = _publishing_client(broker, False)
    n = 120_000
    for at in range(0, n, 4000):
        ids = list(range(at, at + 4000))
        c.publish(1, [(i, _message(i % 2, i, True)) for i in ids])
        c.wait_confirms(1, ids)
    assert c.subscribe(0, stream, offset_first(), credit=n // 2,
                       properties={"sql-filter": "k = 0"}) == OK
    port = c.sock.getsockname()[1]
    wait_for(lambda: _send_pend(broker, port) > 0, 30, "deliveries the socket did not take")
    for i in range(0, n, 2):
        chunk = c.next_chunk()
        assert (chunk.chunk_id, chunk.num_records) == (i, 1)
        assert zlib.crc32(chunk.data) == chunk.crc
        assert chunk.records() == [(i, _message(0, i, True))]
    c.close()
