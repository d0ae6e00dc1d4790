"""A Publish frame of messages of varying sizes (``SpannedEntries``: v1 without sub-entry
batches, v2 whose filter values have one length, several or none) is walked once and stored as one
``storage.format.EntrySpans``, for named publishers too (deduplication over the ids), and gives
the bytes and confirms of the per-message walk: for random turns of frames (v1 and v2, sizes
varying, filter values of one length, of several or none, sub-entry batches, messages too
large, ids going back into what was stored or not ascending inside a frame, chunks cut small),
the segments and indexes are byte-identical chunk by chunk (timestamps aside) and the
PublishConfirms and PublishErrors the same. The harness is ``test_publish_packed``'s."""

from __future__ import annotations

import dataclasses
import random
import struct

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import storage
from amqp_stream.core import ByteBudget
from amqp_stream.stream_listener.publishing import StreamPublisher
from amqp_stream.streamproto import Publish, PublishConfirm, SpannedEntries
from amqp_stream.streamproto import entries
from amqp_stream.streamproto.frames import decode, encode
from amqp_stream.streams import StreamEntry
from storage import format as fmt
from storage.format import EntrySpans, TextValues, encode_entries
from storage.kept import KeptBuffers
from tests.stream.test_publish_packed import _Socket, same_as_the_plain_path, scenario_of



@st.composite
def _frame(draw, next_id: list[int]) -> bytes:
    kind = draw(st.sampled_from(("v1", "v2 one length", "v2 one length", "v2 none",
                                 "v2 lengths", "v1 batch", "v2 one long length")))
    count = draw(st.integers(1, 60))
    if draw(st.integers(0, 4)) == 0:  # back into ids already used (deduplicated if named)
        next_id[0] = max(0, next_id[0] - draw(st.sampled_from((1, 1, 2, 10, 50))))
    step = draw(st.sampled_from((1, 1, 2)))
    values = {"v2 one length": st.sampled_from(("r01", "r02", "é1")),
              # fields of several 8-byte words (their codes mixed), NULs inside and at the end
              "v2 one long length": st.sampled_from(("region-eu-1\0", "region-eu-2\0",
                                                     "region-\0\0-3\0", "région-eu-1")),
              "v2 lengths": st.none() | st.sampled_from(("a", "bb", ""))}.get(kind, st.none())
    messages = []
    for k in range(count):
        data = bytes([k % 251]) * draw(st.integers(0, 45))
        batch = None
        if kind == "v1 batch" and draw(st.integers(0, 3)) == 0:
            records = [data, data[:3]]
            data, batch = encode_entries(records), (0, len(records), len(encode_entries(records)))
        messages.append((next_id[0], draw(values), data, batch))
        next_id[0] += step
    if draw(st.integers(0, 6)) == 0:  # ids not ascending inside the frame
        messages.reverse()
    return encode(Publish(1, tuple(messages), 2 if kind.startswith("v2") else 1))[4:]


def _scenario():
    return scenario_of(_frame, (45, 30, 0))


def _v2(first: int, last: int, value: str = "r07") -> bytes:
    return encode(Publish(1, tuple((i, value, b"m" * (i % 7), None)
                                   for i in range(first, last + 1)), 2))[4:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario(), st.sampled_from((1, 30, entries.NUMPY_FROM)))
@example((storage.StreamConfig(filter_size=16), "producer-a", 45,
          [[_v2(0, 9)], [_v2(9, 18), _v2(12, 30)]]), 1)  # 9 again next turn, 12-18 in the same one
def test_spanned_frames_store_the_bytes_and_send_the_confirms_of_the_plain_path(scenario, numpy_from):
    """``numpy_from``: the entries from which a frame's heads are gathered by numpy (the
    frames here hold at most 60: 1 takes every frame that way, the default none)."""
    config, reference, max_size, turns = scenario
    spanned = sum(type(decode(raw).messages) is SpannedEntries for frames in turns for raw in frames)
    event(f"spanned frames: {min(spanned, 3)}{'+' if spanned >= 3 else ''}")
    default, entries.NUMPY_FROM = entries.NUMPY_FROM, numpy_from
    if numpy_from == 30:  # the filter values decoded before forgotten: decoded afresh
        entries._FIELDS.clear()
        entries._TABLES.clear()
        entries._CODES.clear()
    try:
        same_as_the_plain_path(config, reference, max_size, turns)
    finally:
        entries.NUMPY_FROM = default


def test_a_named_v2_publisher_hands_storage_the_frames_whole(tmp_path):
    """The fast path is taken for the Spark sink's traffic (a named publisher, Publish v2, a
    filter value each, sizes varying): no body per message, one ``EntrySpans`` a frame, the
    ids and values as flat sequences; the frames are stored and confirmed."""
    stream = storage.Stream.open(tmp_path / "s", storage.StreamConfig(filter_size=16))
    entry = StreamEntry("s", {}, tmp_path / "s", stream)
    sock, posted = _Socket(), []
    pub = StreamPublisher(sock, 1, "sink-0", entry, ByteBudget(1 << 40), 1 << 40, 100,
                          lambda fn, *a: posted.append((fn, a)), lambda p: None,
                          lambda p, e: None)
    try:
        for first in (5, 105):
            pub.publish(decode(_v2(first, first + 99)).messages)
        assert [type(b) for b in pub.bodies] == [EntrySpans, EntrySpans]
        assert pub.values == ["r07"] * 200
        assert type(pub.values) is TextValues  # str or None by construction: not checked again
        assert bytes(pub.confirm) == struct.pack(">200Q", *range(5, 205))
        pub.flush()
        stream.flush(10)
        while posted:
            fn, a = posted.pop(0)
            fn(*a)
        assert sock.sent == [encode(PublishConfirm(1, tuple(range(5, 205))))]
        assert stream.next_offset == 200 and stream.query_sequence("sink-0") == 204
    finally:
        stream.close()


def test_a_v2_frame_of_several_value_lengths_is_held_as_its_messages_bytes(tmp_path):
    """Filter values of several lengths (and none): one ``EntrySpans`` with each entry's own
    skip, the values in order, and the bytes held (what the budget and throttling count) those
    of the messages, not of their heads."""
    stream = storage.Stream.open(tmp_path / "s", storage.StreamConfig(filter_size=16))
    entry = StreamEntry("s", {}, tmp_path / "s", stream)
    pub = StreamPublisher(_Socket(), 1, "", entry, ByteBudget(1 << 40), 1 << 40, 100,
                          lambda fn, *a: None, lambda p: None, lambda p, e: None)
    messages = tuple((i, None if i % 11 == 0 else f"r{i * 7919 % 1000}", b"m" * (i % 9), None)
                     for i in range(entries.NUMPY_FROM + 44))
    try:
        pub.publish(decode(encode(Publish(1, messages, 2))[4:]).messages)
        assert [type(b) for b in pub.bodies] == [EntrySpans] and pub.bodies[0].skips is not None
        assert pub.values == [m[1] for m in messages]
        assert pub.held == sum(len(m[2]) for m in messages)
    finally:
        stream.close()


@st.composite
def _large_frame(draw, next_id: list[int]) -> bytes:
    """A frame of many messages (decoded by numpy, cut by the writer as rows or by a mask):
    v1 or v2 (values of 3 or 12 bytes: words or rows, or none), sizes near one another, spread,
    or near but for one, messages too large for some scenarios; the bytes from a seeded
    generator."""
    kind = draw(st.sampled_from(("v1", "v2 short", "v2 long", "v2 none", "v2 lengths")))
    count = draw(st.sampled_from((entries.NUMPY_FROM, 300, 900)))
    rnd = random.Random(draw(st.integers(0, 1 << 30)))
    if draw(st.integers(0, 4)) == 0:  # back into ids already used (deduplicated if named)
        next_id[0] = max(0, next_id[0] - draw(st.sampled_from((1, 100, 1000))))
    spread, base = draw(st.sampled_from(("near", "wide", "one large"))), draw(st.integers(0, 200))
    large = rnd.randrange(count)
    values = {"v2 short": ("r01", "r02", "é1"), "v2 long": ("region-eu-1\0", "région-eu-1"),
              "v2 lengths": ("r1", "r12", "région-eu-1", "", None)}
    messages = []
    for _ in range(count):
        size = rnd.randrange(1500) if spread == "wide" else base + rnd.randrange(30)
        if spread == "one large" and len(messages) == large:
            size = 1000  # (its chunk's part masked)
        value = rnd.choice(values[kind]) if kind in values else None
        messages.append((_HIGH + next_id[0], value, rnd.randbytes(size), None))
        next_id[0] += 1
    return encode(Publish(1, tuple(messages), 1 if kind == "v1" else 2))[4:]


_HIGH = 0x0102_0304_0506_0000  # ids whose every byte counts (a byte of one kept shows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario_of(_large_frame, (1500, 1000, 0)), st.sampled_from((1, fmt._MASKED_FROM)),
       st.integers(1, 3), st.sampled_from((1, 10)))
def test_large_spanned_frames_cut_as_rows_or_masked_store_the_plain_paths_bytes(
        scenario, masked_from, kept, larger):
    """Frames of hundreds of messages: the decoder's places (numpy) go to ``EntrySpans``, whose
    chunk parts the writer cuts as rows (several blocks of rows in chunks ``larger`` times the
    scenario's) or by a mask into few kept buffers (``_DATA``, reused once written): the same
    files and confirms as the walk's bodies."""
    config, reference, max_size, turns = scenario
    if larger > 1:
        config = dataclasses.replace(config, max_chunk_entries=config.max_chunk_entries * larger,
                                     max_chunk_bytes=1 << 20)
    default = fmt._MASKED_FROM, fmt._DATA
    fmt._MASKED_FROM, fmt._DATA = masked_from, KeptBuffers(kept, 32 << 20)
    try:
        same_as_the_plain_path(config, reference, max_size, turns)
    finally:
        fmt._MASKED_FROM, fmt._DATA = default
