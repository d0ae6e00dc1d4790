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


def _by_bytes(segs, max_bytes):
    """The fewest oldest segments to drop so that the rest, the newest counted as empty (as at
    the roll), fit in ``max_bytes`` (the newest always stays)."""
    for k in range(len(segs) - 1):
        if sum(s.size for s in segs[k:-1]) <= max_bytes:
            return k
    return len(segs) - 1


def _by_age(segs, max_age, now):
    """The older segments (never the newest) whose last chunk is older than ``now - max_age``
    (timestamps only grow, so they are a prefix)."""
    return sum(1 for s in segs[:-1] if s.last_timestamp < now - max_age)


@settings(max_examples=300, deadline=None)
@given(segs_st, st.one_of(st.none(), st.integers(0, 5000)), st.one_of(st.none(), st.integers(0, 50_000)),
       st.integers(0, 100_000))
def test_retention_rules(spec, max_bytes, max_age, now):
    """Every combination of policies is checked: each policy set holds for what is kept, the
    drop is exactly the larger of the two policies' own drops (minimal: one segment fewer
    would break the policy that wins), and nothing is dropped without a policy."""
    segs = _segments(spec)
    drop = segments_to_drop(segs, max_bytes, max_age, now)
    kept = segs[drop:]
    assert kept and kept[-1] is segs[-1]  # never the newest
    want = max(0 if max_bytes is None else _by_bytes(segs, max_bytes),
               0 if max_age is None else _by_age(segs, max_age, now))
    assert drop == want
    if max_bytes is not None and len(kept) > 1:
        assert sum(s.size for s in kept[:-1]) <= max_bytes
    if max_age is not None:
        assert all(s.last_timestamp >= now - max_age for s in kept[:-1])
    if drop:  # the segment before the kept ones breaks a policy that is set
        prev = segs[drop - 1]
        too_big = max_bytes is not None and sum(s.size for s in segs[drop - 1:-1]) > max_bytes
        too_old = max_age is not None and prev.last_timestamp < now - max_age
        assert too_big or too_old


def test_examples():
    segs = _segments([(100, 0), (100, 10), (100, 10), (100, 10)])  # ts 0, 10, 20, 30
    assert segments_to_drop(segs, 250, None, 0) == 1  # the newest counts as empty
    assert segments_to_drop(segs, 50, None, 0) == 3  # the newest stays
    assert segments_to_drop(segs, None, 15, 30) == 2  # last chunks at 0 and 10 are older than 15
    assert segments_to_drop(segs, None, 0, 10**6) == 3
    assert segments_to_drop(segs, 1000, 15, 30) == 2
    assert segments_to_drop(segs, 90, 15, 30) == 3  # both set: bytes deletes more and wins
