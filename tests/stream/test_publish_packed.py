"""A Publish frame of one message size (``PackedEntries``, no Python code per message: an
unnamed publisher hands storage the frame's bytes as one ``EntryRun`` and confirms with the
frame's id bytes) is stored as the per-message walk stores it: for random frames (v1 of one size or not, v2 with
and without filter values, messages too large, publishing ids overlapping what a named
publisher stored or not, chunks cut small), the segments and indexes are byte-identical
chunk by chunk (timestamps aside) and the PublishConfirms and PublishErrors are the same.

The publisher runs on a real stream directory (``storage.Stream``) through the broker's
``StreamEntry``; only its socket is replaced by a recorder of the frames it sends. The
other half, a real client over a real broker, is ``test_rstream_packed``."""

from __future__ import annotations

from types import SimpleNamespace

import os
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import storage
from amqp_stream.metrics import Metrics
from amqp_stream.core import ByteBudget
from amqp_stream.stream_listener.publishing import StreamPublisher
from amqp_stream.streamproto import PackedEntries, Publish, PublishConfirm
from amqp_stream.streamproto.frames import decode, encode
from amqp_stream.streamproto.entries import walk_messages
from amqp_stream.streams import StreamEntry
from storage.format import (CHUNK_HEADER, EntryRun, CHUNK_HEADER_BYTES, INDEX_HEADER_BYTES,
                            INDEX_RECORD_BYTES, SEGMENT_HEADER_BYTES)


class _Socket:
    """What a publisher uses of its connection; the frames it sends, encoded, in order."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.serving = True
        self.peer = "test"
        self.adapter = self
        self.core = SimpleNamespace(metrics=Metrics())  # the broker's counters, real ones
        self.to_write: set = set()

    def send(self, frame) -> None:
        self.sent.append(encode(frame))

    def count(self, name: str, n: int) -> None:
        pass

    def throttle(self, publisher, on: bool) -> None:
        pass


def _store(directory: Path, config: storage.StreamConfig, reference: str, max_size: int,
           turns: list[list[bytes]], packed: bool) -> tuple[list[bytes], dict[str, bytes]]:
    """Publish ``turns`` (each a loop turn's Publish frames, then a flush); the frames sent
    back and the stream's files with their timestamps zeroed. ``packed`` False: each frame's
    messages go as the plain tuple, as frames of several sizes do, found by the per-message
    walk (``walk_messages``: nothing of the frame-at-once decoding is used, so a wrong byte
    there shows)."""
    stream = storage.Stream.open(directory, config)
    entry = StreamEntry("s", {}, directory, stream)
    sock, posted = _Socket(), []
    pub = StreamPublisher(sock, 1, reference, entry, ByteBudget(1 << 40), 1 << 40, max_size,
                          lambda fn, *a: posted.append((fn, a)), lambda p: None,
                          lambda p, e: None)
    try:
        for frames in turns:
            for raw in frames:
                frame = decode(raw)
                assert isinstance(frame, Publish)
                pub.publish(frame.messages if packed else _walked(raw))
            pub.flush()
            stream.flush(10)
            while posted:
                fn, a = posted.pop(0)
                fn(*a)
    finally:
        stream.close()
    return sock.sent, _files(directory)


def same_as_the_plain_path(config: storage.StreamConfig, reference: str, max_size: int,
                           turns: list) -> None:
    """The turns stored with the frame-at-once paths and with the walk: the same confirms and
    errors in order, and byte-identical files."""
    with tempfile.TemporaryDirectory() as tmp:
        fast = _store(Path(tmp, "fast"), config, reference, max_size, turns, packed=True)
        plain = _store(Path(tmp, "plain"), config, reference, max_size, turns, packed=False)
    assert fast[0] == plain[0]  # the same PublishConfirms and PublishErrors, in order
    assert fast[1].keys() == plain[1].keys()
    for name in fast[1]:
        assert fast[1][name] == plain[1][name], name


def _walked(raw: bytes) -> tuple:
    """A Publish frame's messages (``raw``: the frame less its size) by the per-message walk."""
    version = struct.unpack_from(">H", raw, 2)[0]
    count = struct.unpack_from(">i", raw, 5)[0]
    return walk_messages(memoryview(raw), 9, count, version)


def _files(directory: Path) -> dict[str, bytes]:
    """Each segment and index, the timestamps (chunk headers, index records) zeroed."""
    out = {}
    for name in sorted(os.listdir(directory)):
        data = bytearray((directory / name).read_bytes())
        if name.endswith(".segment"):
            pos = SEGMENT_HEADER_BYTES
            while pos < len(data):
                h = CHUNK_HEADER.unpack_from(data, pos)
                data[pos + 8:pos + 16] = bytes(8)
                pos += CHUNK_HEADER_BYTES + h[10] + h[8] + h[9]  # filter, data, trailer
        elif name.endswith(".index"):
            for pos in range(INDEX_HEADER_BYTES, len(data), INDEX_RECORD_BYTES):
                data[pos + 8:pos + 16] = bytes(8)
        else:
            continue
        out[name] = bytes(data)
    return out


@st.composite
def _frame(draw, next_id: list[int]) -> bytes:
    """One Publish frame: v1 of one size (packed) most often, else v1 of mixed sizes or v2
    with or without filter values; ids ascending from ``next_id`` or going back."""
    kind = draw(st.sampled_from(("one size", "one size", "mixed", "v2")))
    count = draw(st.integers(1, 60))
    size = draw(st.integers(0, 40))
    if draw(st.integers(0, 4)) == 0:  # back into ids already used (deduplicated if named)
        next_id[0] = max(0, next_id[0] - draw(st.sampled_from((1, 1, 2, 10, 50))))
    step = draw(st.sampled_from((1, 1, 2)))
    messages = []
    for k in range(count):
        data = bytes([k % 251]) * (size if kind == "one size" else draw(st.integers(0, 40)))
        value = (draw(st.none() | st.sampled_from(("a", "b", "")))) if kind == "v2" else None
        messages.append((next_id[0], value, data, None))
        next_id[0] += step
    if draw(st.integers(0, 6)) == 0:  # ids not ascending inside the frame
        messages.reverse()
    return encode(Publish(1, tuple(messages), 2 if kind == "v2" else 1))[4:]


@st.composite
def scenario_of(draw, frame, max_sizes: tuple[int, ...]):
    """(stream config, publisher reference, max message size, turns of ``frame``s): random
    chunk cutting, named or not, some messages too large."""
    next_id = [draw(st.integers(0, 5))]
    turns = [[draw(frame(next_id)) for _ in range(draw(st.integers(1, 3)))]
             for _ in range(draw(st.integers(1, 4)))]
    lo = draw(st.integers(1, 64))
    config = storage.StreamConfig(min_chunk_entries=lo,
                                  max_chunk_entries=draw(st.integers(lo, 128)),
                                  max_chunk_bytes=draw(st.sampled_from((200, 1000, 1 << 20))),
                                  filter_size=draw(st.sampled_from((0, 16))))
    return (config, draw(st.sampled_from(("", "producer-a"))), draw(st.sampled_from(max_sizes)),
            turns)


def _scenario():
    return scenario_of(_frame, (40, 20, 0))


def _ids(first: int, last: int) -> bytes:
    return encode(Publish(1, tuple((i, None, b"m", None) for i in range(first, last + 1))))[4:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario())
@example((storage.StreamConfig(), "producer-a", 40, [[_ids(0, 9)], [_ids(9, 18)]]))  # 9 again
def test_packed_frames_store_the_bytes_and_send_the_confirms_of_the_plain_path(scenario):
    config, reference, max_size, turns = scenario
    packed = sum(type(decode(raw).messages) is PackedEntries for frames in turns for raw in frames)
    event(f"packed frames: {min(packed, 3)}{'+' if packed >= 3 else ''}")
    same_as_the_plain_path(config, reference, max_size, turns)


def test_an_unnamed_publisher_hands_storage_the_frame_whole(tmp_path):
    """The fast path is taken: no body per message, the ids as the frame's bytes (the test
    above would pass on the walk too)."""
    stream = storage.Stream.open(tmp_path / "s", storage.StreamConfig())
    entry = StreamEntry("s", {}, tmp_path / "s", stream)
    sock, posted = _Socket(), []
    pub = StreamPublisher(sock, 1, "", entry, ByteBudget(1 << 40), 1 << 40, 100,
                          lambda fn, *a: posted.append((fn, a)), lambda p: None,
                          lambda p, e: None)
    try:
        for first in (5, 105):
            pub.publish(decode(_ids(first, first + 99)).messages)
        assert [type(b) for b in pub.bodies] == [EntryRun, EntryRun]
        assert bytes(pub.confirm) == struct.pack(">200Q", *range(5, 205))
        pub.flush()
        stream.flush(10)
        while posted:
            fn, a = posted.pop(0)
            fn(*a)
        assert sock.sent == [encode(PublishConfirm(1, tuple(range(5, 205))))]
        assert stream.next_offset == 200
    finally:
        stream.close()
