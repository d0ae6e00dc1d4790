"""``stream_read.record_spans`` (numpy) finds the records ``record_starts`` (a walk) finds.

The chunks are made to mislead it: records that begin alike and others, the first record's
first bytes inside records (with a size before them that leads anywhere), sub-batch flags,
bytes that do not add up. Either it answers None (the walk decides) or the walk's answer.
"""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream.spark.stream_read import _record_spans, record_spans
from storage.format import record_starts

PREFIX = b"\x00\x53\x72\xc1"
_SIZE = struct.Struct(">I").pack


def _walk(data: bytes, pos: int, end: int) -> tuple[list[int], list[int]] | None:
    """(starts, ends) from ``record_starts``, the reference."""
    starts = record_starts(data, pos, end)
    if starts is None:
        return None
    return starts, [s - 4 for s in starts[1:]] + [end]


_piece = st.one_of(st.binary(max_size=12), st.just(PREFIX[:3]), st.just(PREFIX),
                   st.builds(lambda n, tail: _SIZE(n) + PREFIX[:3] + tail,
                             st.integers(0, 64) | st.integers(0, 2**32 - 1), st.binary(max_size=4)))
_mostly = st.sampled_from([True] * 5 + [False])
_record = st.tuples(_mostly, st.lists(_piece, max_size=4)).map(
    lambda t: (PREFIX if t[0] else b"") + b"".join(t[1]))


@settings(max_examples=1000, deadline=None)
@given(st.lists(_record, min_size=1, max_size=12), st.binary(max_size=6), _mostly, st.integers(-12, 11),
       st.sampled_from([0] * 6 + [-3, -2, -1, 1, 2, 3]), st.sampled_from([None, None, 0, 0, -1, 1]))
def test_the_spans_are_the_walks(records, head, whole, flagged, extra, count_off):
    """Whatever the records hold: None or the walk's spans; the caller's answer is the walk's.
    With a count (the header's; ``count_off`` from the records written), the spans are that
    many, or None."""
    sizes = [len(r) | (0x80000000 if i == flagged else 0) for i, r in enumerate(records)]
    data = head + b"".join(_SIZE(s) + r for s, r in zip(sizes, records, strict=True))
    pos = len(head)
    end = max(pos, len(data) + (0 if whole else extra))  # sometimes short of the records, or past them
    want = _walk(data, pos, end) if end <= len(data) else None
    count = None if count_off is None else len(records) + count_off
    got = record_spans(data, pos, end, count)
    if got is not None:
        assert want is not None and (got[0].tolist(), got[1].tolist()) == want
        assert count is None or len(got[0]) == count
    spans = _record_spans(data, pos, end, count)
    if end <= len(data):
        assert (None if spans is None else (spans[0].tolist(), spans[1].tolist())) == want


def test_a_writers_chunk_is_found_by_numpy_with_its_first_bytes_inside_a_record():
    """A writer's records (the same first section), one of which holds an int ``00 00 53 72``
    (21,362: the first record's first bytes after a plausible size): found without the walk."""
    records = []
    for i in range(2000):
        n = 21362 if i == 700 else i
        records.append(PREFIX + b"\x02\xa1\x01" + b"x" * (i % 7) + b"\x71" + struct.pack(">i", n) + b"\x00\x53\x75")
    data = b"HEAD" + b"".join(_SIZE(len(r)) + r for r in records)
    got = record_spans(data, 4, len(data))
    assert got is not None
    starts, ends = got
    assert (starts.tolist(), ends.tolist()) == _walk(data, 4, len(data))
    assert starts.dtype == ends.dtype == np.int64


def test_records_that_repeat_their_first_bytes_are_left_to_the_walk():
    """Records whose bodies hold the first record's first bytes over and over: more than four
    candidates a record, so numpy leaves them to the walk (~4 ns a candidate against a step a
    record), and the caller's spans are still the walk's."""
    records = [PREFIX + PREFIX[:3] * 50 for _ in range(10)]
    data = b"".join(_SIZE(len(r)) + r for r in records)
    assert record_spans(data, 0, len(data)) is not None  # without the header's count: found
    assert record_spans(data, 0, len(data), len(records)) is None
    spans = _record_spans(data, 0, len(data), len(records))
    assert spans is not None and (spans[0].tolist(), spans[1].tolist()) == _walk(data, 0, len(data))
