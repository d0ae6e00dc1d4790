"""The stream publish path's fast paths end to end, on a real broker process: random sequences
of Publish frames from several publishers on one connection (v1 of one size: packed; v1 of
mixed sizes: spanned; v1 with sub-entry batches and v2 with filter values of several lengths:
walked; v2 with values of one length of 0 to 300 bytes, empty, or none: spanned, by words up to
8 bytes and by rows above; large frames gathered into kept buffers, some above the negotiated
frame max), named publishers going back into ids already stored, all written to the socket
in pieces cut at random places. Checked against a model of what RabbitMQ stores:

- every message is confirmed, and the stream holds what the model says, once, in the order
  the frames came, byte for byte, at consecutive offsets, in the segment files, as delivered
  to a subscriber afterwards and to one reading while the chunks are written (duplicates of
  a named publisher are exactly the ids at or below the last one stored for its reference,
  which QueryPublisherSequence then answers);
- every chunk's Bloom filter (``bloom.Matcher``) matches each filter value of its records, and a
  stage-1 filtered subscription gets every chunk that holds its value;
- a frame with a filter value that is not UTF-8 closes the connection and nothing of it is
  stored; a frame of exactly the hard max is stored; a named publisher's large frames are
  deduplicated after a restart or a crash as before it.

The in-process halves (each fast path against its plain path) are ``test_publish_packed``,
``test_publish_spanned``, ``tests/streamproto/test_spanned_values`` and
``tests/storage/test_entry_cut``."""

from __future__ import annotations

import gzip
import itertools
import random
import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bloom
from amqp_stream.streamproto import Publish
from amqp_stream.streamproto.constants import DEFAULT_FRAME_HARD_MAX, ResponseCode
from amqp_stream.streamproto.frames import encode
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient, offset_first
from storage.format import (CHUNK_USER, SEGMENT_HEADER_BYTES, decode_header, decode_records,
                            encode_entries)

FRAME_MAX = 128 << 10  # what the publishing client negotiates: larger frames go above it
PUBLISHERS = 3
HIGH_IDS = 0x0102_0304_0506_0000  # publishing ids whose every byte counts


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("paths") / "data",
                       extra_args=["--fsync", "never"]) as b:
        yield b


_names = itertools.count()


@dataclass
class _Model:
    """What a stream must hold: its records in order with each one's filter value."""

    records: list[bytes] = field(default_factory=list)
    values: list[str | None] = field(default_factory=list)
    last: dict[str, int] = field(default_factory=dict)  # a reference's last stored id

    def publish(self, reference: str, messages: tuple) -> None:
        for pid, value, data, batch in messages:
            if reference:
                if pid <= self.last.get(reference, -1):
                    continue  # a duplicate: confirmed, not stored
                self.last[reference] = pid
            records = [data] if batch is None else _opened(data, batch)
            self.records += records
            self.values += [value] * len(records)


def _opened(data: bytes, batch: tuple) -> list[bytes]:
    """A sub-entry batch's records (uncompressed or gzip)."""
    raw = gzip.decompress(data) if batch[0] else data
    out, pos = [], 0
    while pos < len(raw):
        (size,) = struct.unpack_from(">I", raw, pos)
        out.append(raw[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def _text(rnd: random.Random, width: int) -> str:
    """A value of ``width`` UTF-8 bytes: letters, NULs and two-byte letters."""
    out, n = [], 0
    while n < width:
        c = rnd.choice("abcxyz\0é" if width - n >= 2 else "abcxyz\0")
        out.append(c)
        n += len(c.encode())
    return "".join(out)


@st.composite
def _frames(draw):
    """(publishers: [(stream index, reference)], frames: [(publisher index, Publish)]): the
    bulk of each frame from a seeded generator, its shape from hypothesis."""
    rnd = random.Random(draw(st.integers(0, 1 << 32)))
    publishers = [(draw(st.integers(0, 1)), draw(st.sampled_from(("", f"ref-{k}"))))
                  for k in range(draw(st.integers(1, PUBLISHERS)))]
    widths = draw(st.lists(st.sampled_from((0, 1, 3, 6, 8, 9, 17, 64, 255, 300)), min_size=1,
                           max_size=3))
    pools = {w: [_text(rnd, w) for _ in range(draw(st.integers(1, 4)))] for w in widths}
    next_id = [draw(st.integers(0, 5)) for _ in publishers]
    frames = []
    for _ in range(draw(st.integers(1, 6))):
        p = draw(st.integers(0, len(publishers) - 1))
        kind = draw(st.sampled_from(("v1 one size", "v1 mixed", "v1 batch", "v2 one length",
                                     "v2 one length", "v2 none", "v2 lengths")))
        count = draw(st.sampled_from((1, 3, 40, 255, 256, 700, 1500)))
        sizes = draw(st.sampled_from(("near", "wide")))
        base = draw(st.integers(0, 200))
        if draw(st.integers(0, 3)) == 0:  # back into ids already used (dropped if named)
            next_id[p] = max(0, next_id[p] - draw(st.sampled_from((1, 2, 50, 1000))))
        width = draw(st.sampled_from(widths))
        messages = []
        for _ in range(count):
            size = base if kind == "v1 one size" else base + rnd.randrange(40) \
                if sizes == "near" else rnd.randrange(2000)
            data = rnd.randbytes(size)
            value, batch = None, None
            if kind == "v2 one length":
                value = rnd.choice(pools[width])
            elif kind == "v2 lengths":
                value = rnd.choice([None, "", *itertools.chain(*pools.values())])
            elif kind == "v1 batch" and rnd.randrange(8) == 0:
                records = [data, data[:5], b""]
                raw = encode_entries(records)
                compression = rnd.choice((0, 1))
                data = gzip.compress(raw, mtime=0) if compression else raw
                batch = (compression, len(records), len(raw))
            messages.append((HIGH_IDS + next_id[p], value, data, batch))
            next_id[p] += 1
        if draw(st.integers(0, 6)) == 0:  # ids not ascending inside the frame
            messages.reverse()
        frames.append((p, Publish(p + 1, tuple(messages), 2 if kind.startswith("v2") else 1)))
    return publishers, frames, draw(st.lists(st.integers(1, 1 << 20), max_size=12)), \
        draw(st.sampled_from((16, 17, 64, 255)))


def _chunks(log_dir) -> list[tuple[int, bytes, int, int, list[tuple[int, bytes]]]]:
    """Each user chunk of the stream's segments: (chunk id, filter bits, scheme, parameter,
    records)."""
    out = []
    for path in sorted(log_dir.glob("*.segment")):
        data = path.read_bytes()
        pos = SEGMENT_HEADER_BYTES
        while pos < len(data):
            h = decode_header(data, pos)
            bits_at = pos + 48
            body_at = bits_at + h.filter_size
            if h.type == CHUNK_USER:
                records = decode_records(data[body_at:body_at + h.data_length], h.chunk_id,
                                         entries=h.entries)
                out.append((h.chunk_id, data[bits_at:body_at], h.filter_scheme,
                            h.filter_param, records))
            pos += h.size
    return out


def _delivered(port: int, stream: str, last: int, properties: dict[str, str]) -> list:
    """The chunks a subscriber gets from the first offset until the one holding ``last``."""
    c = StreamClient("127.0.0.1", port, timeout=20)
    assert c.subscribe(0, stream, offset_first(), credit=1000, properties=properties) == OK
    got = []
    while not got or got[-1].chunk_id + got[-1].num_records <= last:
        got.append(c.next_chunk())
    c.close()
    return got


def _check_stream(broker: BrokerProcess, stream: str, model: _Model) -> None:
    chunks = _chunks(broker.data_dir / "streams" / stream / "log")
    stored = [r for *_, records in chunks for r in records]
    assert [o for o, _ in stored] == list(range(len(stored)))
    assert [b for _, b in stored] == model.records  # once, in order, byte for byte
    holding: dict[str, set[int]] = {}
    for chunk_id, bits, scheme, param, records in chunks:
        for offset, _ in records:
            value = model.values[offset]
            assert bloom.Matcher([value or ""]).matches(bits, scheme, param), (chunk_id, value)
            if value:
                holding.setdefault(value, set()).add(chunk_id)
    if not stored:
        return
    last = len(stored) - 1
    delivered = _delivered(broker.stream_port, stream, last, {})
    assert [r for ch in delivered for r in ch.records()] == stored
    for value, chunk_ids in sorted(holding.items())[:2]:
        got = _delivered(broker.stream_port, stream, max(chunk_ids), {"filter.0": value})
        assert chunk_ids <= {ch.chunk_id for ch in got}, value


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(_frames())
def test_random_frames_of_several_publishers_are_stored_as_rabbitmq_stores_them(broker, case):
    publishers, frames, cuts, filter_size = case
    streams = [f"paths-{next(_names)}" for _ in range(2)]
    c = StreamClient("127.0.0.1", broker.stream_port, frame_max=FRAME_MAX, timeout=30)
    for s in streams:
        assert c.create_stream(s, {"x-stream-filter-size-bytes": str(filter_size)}) == OK
    for k, (s, reference) in enumerate(publishers):
        assert c.declare_publisher(k + 1, streams[s], reference) == OK
    models = [_Model(), _Model()]
    ids: dict[int, set[int]] = {}  # every publisher's ids (a stored one is confirmed once durable)
    last = HIGH_IDS + (1 << 40)  # a last message of each publisher: confirmed after all before it
    frames = [*frames, *((p, Publish(p + 1, ((last, None, b"last", None),)))
                         for p in range(len(publishers)))]
    for p, frame in frames:
        s, reference = publishers[p]
        models[s].publish(reference, frame.messages)
        ids.setdefault(p + 1, set()).update(m[0] for m in frame.messages)
    live = StreamClient("127.0.0.1", broker.stream_port, timeout=30)  # reads as chunks come
    assert live.subscribe(0, streams[0], offset_first(), credit=1000) == OK
    data = b"".join(encode(frame) for _, frame in frames)
    at = sorted({cut % len(data) for cut in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(at):  # written in pieces cut at random places
        c.send_raw(data[a:b])
    for publisher_id, sent in ids.items():
        assert set(c.wait_confirms(publisher_id, sent).values()) == {OK}
    got: list = []
    while len(got) < len(models[0].records):
        got += live.next_chunk().records()
    assert [b for _, b in got] == models[0].records
    live.close()
    for s, reference in publishers:  # the last id stored for each reference: the model's
        if reference:
            code, sequence = c.query_publisher_sequence(reference, streams[s])
            assert (code, sequence) == (OK, models[s].last.get(reference, 0))
    c.close()
    for s, model in zip(streams, models, strict=True):
        _check_stream(broker, s, model)


def _v2_raw(publisher_id: int, first: int, fields: list[bytes], sizes: list[int]) -> bytes:
    """A Publish v2 frame whose entries carry the filter fields given as bytes (UTF-8 or not)."""
    entries = b"".join(struct.pack(">QH", first + k, len(v)) + v + struct.pack(">I", n)
                       + bytes([k % 251]) * n for k, (v, n) in enumerate(zip(fields, sizes,
                                                                               strict=True)))
    content = struct.pack(">HHBi", 0x02, 2, publisher_id, len(fields)) + entries
    return struct.pack(">I", len(content)) + content


@pytest.mark.parametrize("count", [3, 300])
@pytest.mark.parametrize("value", [b"\xff\xfe", b"ok-" + b"\xc3" + b"x" * 16, b"\xe9t\xe9"])
def test_a_filter_value_not_utf8_closes_the_connection_and_nothing_of_it_is_stored(
        broker, count, value):
    """The frame-at-once decoders refuse it as the walk does, however long the value (one word
    or rows), whether seen before or not: nothing of the frame is stored or confirmed."""
    stream = f"paths-{next(_names)}"
    c = StreamClient("127.0.0.1", broker.stream_port, frame_max=FRAME_MAX)
    assert c.create_stream(stream) == OK
    assert c.declare_publisher(1, stream) == OK
    good = "o" * len(value)  # a value of the same length, decoded (and kept) first
    c.publish(1, [(k, b"m" * (k % 9), good) for k in range(count)], version=2)
    c.wait_confirms(1, range(count))
    fields = [good.encode()] * count
    fields[count // 2] = value  # one length: the frame-at-once path
    c.send_raw(_v2_raw(1, count, fields, [k % 50 for k in range(count)]))
    closed = c.wait_closed()
    assert closed.code == ResponseCode.UNKNOWN_FRAME
    model = _Model(records=[b"m" * (k % 9) for k in range(count)], values=[good] * count)
    _check_stream(broker, stream, model)


def test_a_frame_of_the_hard_max_is_stored_byte_for_byte(broker):
    """A Publish v2 frame of exactly ``DEFAULT_FRAME_HARD_MAX`` bytes (16 times the negotiated
    frame max, messages of varying sizes, a 40-byte filter value each: rows) is stored and its
    values' chunks are found by a filtered subscriber."""
    stream = f"paths-{next(_names)}"
    c = StreamClient("127.0.0.1", broker.stream_port, frame_max=1 << 20, timeout=30)
    assert c.create_stream(stream) == OK
    assert c.declare_publisher(1, stream, "big") == OK
    values = [(f"region-{k:02d}-" + "v" * 40)[:40] for k in range(7)]
    rnd = random.Random(7)
    sizes, fields, total = [], [], 9
    while total < DEFAULT_FRAME_HARD_MAX - 3000:
        sizes.append(rnd.randrange(900, 1100))
        fields.append(values[len(fields) % 7].encode())
        total += 8 + 2 + 40 + 4 + sizes[-1]
    sizes[-1] += DEFAULT_FRAME_HARD_MAX - total  # the frame's size field: the hard max
    frame = _v2_raw(1, 0, fields, sizes)
    assert struct.unpack_from(">I", frame)[0] == DEFAULT_FRAME_HARD_MAX
    c.send_raw(frame)
    assert c.wait_confirms(1, [len(sizes) - 1])[len(sizes) - 1] == OK
    c.close()
    model = _Model(records=[bytes([k % 251]) * n for k, n in enumerate(sizes)],
                   values=[f.decode() for f in fields])
    _check_stream(broker, stream, model)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_named_publishers_large_frames_are_deduplicated_after_a_restart(tmp_path, how):
    """A named publisher's large frames (spanned, filter values as words, ids with their high
    bytes set) cut into chunks across frames, each trailer holding its last id: after a
    restart (or a crash: SIGKILL) the last stored id is the last sent, and frames that go back
    into it store exactly the ids above it."""
    rnd = random.Random(5)

    def frame(first: int, count: int) -> Publish:
        return Publish(1, tuple((HIGH_IDS + first + k, f"v{rnd.randrange(5)}",
                                 rnd.randbytes(rnd.randrange(20, 120)), None)
                                for k in range(count)), 2)
    model = _Model()
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]) as b:
        c = StreamClient("127.0.0.1", b.stream_port)
        assert c.create_stream("dedup") == OK
        assert c.declare_publisher(1, "dedup", "sink") == OK
        for first in (0, 700, 1400):
            sent = frame(first, 700)
            model.publish("sink", sent.messages)
            c.send_raw(encode(sent))
        assert set(c.wait_confirms(1, [HIGH_IDS + 2099]).values()) == {OK}
        c.close()
        if how == "stop":
            b.stop()
        else:
            b.kill()
        b.start()
        c = StreamClient("127.0.0.1", b.stream_port)
        assert c.query_publisher_sequence("sink", "dedup") == (OK, HIGH_IDS + 2099)
        assert c.declare_publisher(1, "dedup", "sink") == OK
        for first in (1800, 2300):  # 1800..2099 again, then new ones
            sent = frame(first, 500)
            model.publish("sink", sent.messages)
            c.send_raw(encode(sent))
        assert set(c.wait_confirms(1, [HIGH_IDS + 2799]).values()) == {OK}
        c.close()
        assert len(model.records) == 2800
        _check_stream(b, "dedup", model)
