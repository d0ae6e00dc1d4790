"""Offset planning: resolving offset options and splitting ranges into partitions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from amqp_stream.spark.offsets import resolve, split


def test_resolve_names_and_numbers():
    assert resolve("first", 10, 50) == 10 and resolve("earliest", 10, 50) == 10
    assert resolve("latest", 10, 50) == 50 and resolve("next", 10, 50) == 50
    assert resolve("20", 10, 50) == 20 and resolve(5, 10, 50) == 10 and resolve(99, 10, 50) == 50
    with pytest.raises(ValueError, match="startingOffset"):
        resolve("yesterday", 0, 1, what="startingOffset")
    with pytest.raises(ValueError):
        resolve(-1, 0, 1)


@settings(max_examples=60)
@given(st.integers(0, 10**9), st.integers(0, 5000), st.one_of(st.none(), st.integers(1, 64)),
       st.integers(1, 1000))
def test_split_covers_the_range_exactly(start, length, parts, max_records):
    ranges = split(start, start + length, num_partitions=parts, max_records=max_records)
    assert ranges[0].start == start and ranges[-1].end == start + length
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    if length:
        assert all(r.end > r.start for r in ranges)
        if parts:
            assert len(ranges) == min(parts, length)
        else:
            assert all(r.end - r.start <= max_records for r in ranges)
    else:
        assert len(ranges) == 1
