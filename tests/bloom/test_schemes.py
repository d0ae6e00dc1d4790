"""bloom.schemes: positions in range, mmh3's distinct positions, masks equal to positions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from bloom.schemes import Scheme, digest, digest_mask, positions, unfiltered_mask


@settings(max_examples=150)
@given(
    value=st.binary(max_size=40),
    size=st.integers(min_value=16, max_value=255),
    k=st.integers(min_value=1, max_value=255),
    scheme=st.sampled_from(list(Scheme)),
)
def test_positions_in_range_and_mask_agrees(value, size, k, scheme):
    param = k if scheme == Scheme.MMH3 else 0
    dig = digest(value, scheme)
    pos = positions(dig, size, scheme, param)
    top = 8 * size - 1
    assert all(1 <= p <= top for p in pos)  # never bit 0, never past the end
    if scheme == Scheme.MMH3:
        assert len(pos) == len(set(pos)) == min(k, top)
        assert positions(dig, size, scheme, max(1, k - 1)) == pos[: max(1, k - 1)]  # a prefix
    else:
        assert len(pos) == 2
    mask = digest_mask(dig, size, scheme, param)
    assert mask == sum(1 << (top - p) for p in set(pos))
    assert not mask & unfiltered_mask(size)


@pytest.mark.parametrize("dig", [(0, 0), (1, 0), (2**64 - 1, 2**64 - 1), (12345, 2**63)])
def test_degenerate_mmh3_digests_terminate_with_distinct_positions(dig):
    for size in (16, 255):
        pos = positions(dig, size, Scheme.MMH3, 255)
        assert len(pos) == len(set(pos)) == min(255, 8 * size - 1)


def test_digest_is_per_scheme_and_size_independent():
    a = digest(b"orders", Scheme.MMH3)
    assert a != digest(b"orders", Scheme.OSIRIS)
    assert all(0 <= h < 2**64 for h in a)
    # One digest serves every size: positions at two sizes come from the same pair.
    assert positions(a, 16, Scheme.MMH3, 4) != positions(a, 255, Scheme.MMH3, 4)
