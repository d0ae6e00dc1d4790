"""storage.retention.segments_to_drop: the retention decision on its own (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.recovery import SegmentInfo
from storage.retention import segments_to_drop

segs_st = st.lists(st.tuples(st.integers(8, 1000), st.integers(0, 10_000)), min_size=1,
                   max_size=12)


def _segments(spec):
    out, start, ts = [], 0, 0
    for size, dt in spec:
        ts += dt
        out.append(SegmentInfo(start, size, 1, start + 1, ts))
        start += 1
    return out


@settings(max_examples=200, deadline=None)
@given(segs_st, st.one_of(st.none(), st.integers(0, 5000)), st.one_of(st.none(), st.integers(0, 50_000)),
       st.integers(0, 100_000))
def test_retention_rules(spec, max_bytes, max_age, now):
    segs = _segments(spec)
    drop = segments_to_drop(segs, max_bytes, max_age, now)
    kept = segs[drop:]
    assert kept and kept[-1] is segs[-1]  # never the newest
    if max_bytes is not None:
        if len(kept) > 1:
            assert sum(s.size for s in kept) <= max_bytes or max_age is not None
        if drop and max_age is None:  # keeping one more older segment would not have fit
            assert sum(s.size for s in segs[drop - 1:]) > max_bytes
    if max_age is not None:
        assert all(s.last_timestamp >= now - max_age for s in kept[:-1]) or max_bytes is not None
    if max_bytes is None and max_age is None:
        assert drop == 0


def test_examples():
    segs = _segments([(100, 0), (100, 10), (100, 10), (100, 10)])  # ts 0, 10, 20, 30
    assert segments_to_drop(segs, 250, None, 0) == 2
    assert segments_to_drop(segs, 50, None, 0) == 3  # the newest stays even if too big
    assert segments_to_drop(segs, None, 15, 30) == 2  # last chunks at 0 and 10 are older than 15
    assert segments_to_drop(segs, None, 0, 10**6) == 3
    assert segments_to_drop(segs, 1000, 15, 30) == 2
