"""``Consumer.pump``'s two ways of sending a batch give the bytes ``with_stream_offset`` gives,
in order: the batch at once (it fits in what the session may hold: nothing checked per
delivery; pre-settled, the settle advances the link) and one by one (checked before each send:
here forced by a session limit of 0 bytes). Random messages of every shape the splice tells
apart (proton's empty header before one section or another, or before the body alone; no
header; a header with fields; annotations already there), mixed in a batch, both settle
modes. In-process: a real stream on disk, a real ``Consumer`` sending over proton's
engine to a receiving engine (no socket)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from cproton_ffi import lib

from amqp_stream.amqp.consuming import ROWS_AT_LEAST, Consumer, spliced_rows
from amqp_stream.amqp.source_filters import SourceFilters
from amqp_stream.wire import with_stream_offset
from bench import proton_floor
from bench.in_process import StreamEntry
from storage import OffsetSpec, Stream, StreamConfig



def _consume(stream: Stream, settled: bool, one_by_one: bool) -> list[bytes]:
    """The bytes of every delivery, in order (each settled by the receiver when not pre-settled)."""
    server_t, client_t, sender, receiver = proton_floor._pair(settled)
    consumer = Consumer(sender, StreamEntry(stream), SourceFilters(start=OffsetSpec.first()),
                        lambda c, soon: None)
    assert consumer.presettled == settled
    if one_by_one:
        consumer.turn.max_buffered = 0
    out = []
    while True:
        consumer.pump()
        proton_floor._pump(server_t, client_t)
        while (d := receiver.current) is not None and not d.partial:
            out.append(receiver.recv(d.pending))
            receiver.advance()
            if not settled:
                d.settle()
        proton_floor._pump(client_t, server_t)
        if consumer.waiting:
            return out


def _sent_both_ways(stored: list[bytes], settled: bool, batch: int, **config: int) -> None:
    """``stored`` appended ``batch`` at a time to a new stream: a consumer sends each message
    with its offset spliced in (``with_stream_offset``), in whole batches and one by one."""
    with tempfile.TemporaryDirectory() as tmp:
        stream = Stream.open(Path(tmp, "s"), StreamConfig(fsync="never", **config))
        try:
            for at in range(0, len(stored), batch):
                stream.append_batch(stored[at:at + batch])
            stream.flush()
            expected = [with_stream_offset(data, i) for i, data in enumerate(stored)]
            assert _consume(stream, settled, one_by_one=False) == expected
            assert _consume(stream, settled, one_by_one=True) == expected
        finally:
            stream.close()


def _shaped(i: int, shape: int, body: bytes) -> bytes:
    m = Message(body=body, properties={"i": i} if shape < 4 else None)
    if shape == 4:  # proton's empty header, then the properties section (not the application's)
        m.subject = f"s{i}"
    if shape == 2:
        m.durable = True  # a header with fields (list8)
    if shape == 3:
        m.annotations = {"x-opt-a": i}
    data = bytes(m.encode())
    if shape == 5:  # proton's empty header, then the body alone (its empty properties cut out)
        assert data[4:8] == b"\x00\x53\x73\x45"
        data = data[:4] + data[8:]
    if shape == 1:  # no header at all (as the stream protocol's clients send)
        assert data.startswith(b"\x00\x53\x70\x45")
        data = data[4:]
    return data


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.binary(max_size=40)), min_size=1, max_size=600),
       st.booleans())
def test_both_ways_send_the_spliced_bytes(messages, settled):
    _sent_both_ways([_shaped(i, shape, body) for i, (shape, body) in enumerate(messages)],
                    settled, batch=97)


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([0, 5, 0, 5, 4, 1]), size=st.integers(0, 40),
       n=st.integers(ROWS_AT_LEAST, 2 * ROWS_AT_LEAST),
       bodies=st.lists(st.binary(min_size=40, max_size=40), min_size=1, max_size=8),
       odd=st.lists(st.tuples(st.integers(0, 2 * ROWS_AT_LEAST), st.integers(0, 5), st.binary(max_size=41)),
                    max_size=3),
       settled=st.booleans())
def test_messages_of_one_layout_spliced_as_rows_are_the_spliced_bytes(shape, size, n, bodies, odd, settled):
    """Runs of messages of one layout (one shape, bodies of one size: ``spliced_rows``'s
    batches), now and then one of another shape or size among them (the batch then goes one
    by one): both ways send what ``with_stream_offset`` gives."""
    stored = [_shaped(i, shape, bodies[i % len(bodies)][:size]) for i in range(n)]
    for at, other, body in odd:
        if at < len(stored):
            stored[at] = _shaped(at, other, body)
    # one chunk: batches as long as a turn allows
    _sent_both_ways(stored, settled, batch=len(stored), min_chunk_entries=1024,
                    max_chunk_entries=1024)


@settings(max_examples=200, deadline=None)
@given(shape=st.integers(0, 5), size=st.integers(0, 40),
       rows=st.lists(st.tuples(st.integers(0, (1 << 63) - 1), st.binary(min_size=40, max_size=40)),
                     min_size=1, max_size=80),
       odd=st.one_of(st.none(), st.tuples(st.integers(0, 79), st.integers(0, 5), st.binary(max_size=41))))
def test_spliced_rows_is_the_splice_or_nothing(shape, size, rows, odd):
    """``spliced_rows`` gives exactly the spliced bytes of each message, or None (never other
    bytes): messages of one layout with any offsets, one of another shape or size among them."""
    batch = [(o, _shaped(i, shape, body[:size])) for i, (o, body) in enumerate(rows)]
    if odd is not None and odd[0] < len(batch):
        batch[odd[0]] = (batch[odd[0]][0], _shaped(odd[0], odd[1], odd[2]))
    got = spliced_rows(batch)
    expected = [with_stream_offset(d, o) for o, d in batch]
    if got is None:  # only where the layouts differ, or the shape is not the one it takes
        assert (len({len(d) for _, d in batch}) > 1 or len({d[:8] for _, d in batch}) > 1
                or shape in (1, 2, 3) or odd is not None)
    else:
        assert got == expected and all(type(b) is bytes for b in got)
    assert shape != 0 or odd is not None or got is not None  # (one layout: always as rows)


def test_a_client_behind_is_sent_at_most_the_session_room(tmp_path):
    """A pump with the client's bytes not taken: the session holds at most ``max_buffered``
    and one message more, whichever way the batches went (cut to about what fits, then one
    by one); the rest goes once the bytes are taken, all of it, in order."""
    stream = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    stored = [_shaped(i, i % 4, bytes([i % 251]) * (1000 + 37 * (i % 50))) for i in range(400)]
    stream.append_batch(stored)
    stream.flush()
    server_t, client_t, sender, receiver = proton_floor._pair()
    consumer = Consumer(sender, StreamEntry(stream), SourceFilters(start=OffsetSpec.first()),
                        lambda c, soon: None)
    consumer.turn.max_buffered = 20_000
    session = lib.pn_link_session(sender._impl)
    out = []
    while not consumer.waiting:
        consumer.pump()
        held = lib.pn_session_outgoing_bytes(session)
        assert held <= 20_000 + max(map(len, stored)) + 64, held
        proton_floor._pump(server_t, client_t)
        while (d := receiver.current) is not None and not d.partial:
            out.append(receiver.recv(d.pending))
            receiver.advance()
        proton_floor._pump(client_t, server_t)
    assert out == [with_stream_offset(data, i) for i, data in enumerate(stored)]
    stream.close()
