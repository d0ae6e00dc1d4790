"""Erlang phash2 for binaries and one-element lists: every reference vector from osiris."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from bloom.phash2 import HCONST_13, phash2_binary, phash2_list, phash2_pair

from tests.bloom import VECTORS

HASHES = VECTORS["hashes"]


@pytest.mark.parametrize("vec", HASHES, ids=lambda v: f"{v['value_hex'][:16]}-{v['bits']}")
def test_raw_hashes_match_erlang(vec):
    value = bytes.fromhex(vec["value_hex"])
    assert phash2_binary(value) == vec["phash2_bin_u32"]
    assert phash2_list(value) == vec["phash2_list_u32"]
    assert phash2_pair(value) == (vec["phash2_bin_u32"], vec["phash2_list_u32"])


def test_vectors_cover_block_boundaries():
    # lookup2 has a loop over 12-byte blocks and an 11-byte tail: the vectors must exercise
    # an empty loop, exactly one block, one block plus tail and a long value.
    lengths = {len(bytes.fromhex(v["value_hex"])) for v in HASHES}
    assert {1, 12, 13} <= lengths and max(lengths) > 24


def test_empty_binary_is_the_seed():
    assert phash2_binary(b"") == HCONST_13


@settings(max_examples=200)
@given(st.binary(max_size=64), st.integers(min_value=0, max_value=63))
def test_hashes_are_32_bit_and_deterministic(value, index):
    a, b = phash2_pair(value)
    assert 0 <= a < 2**32 and 0 <= b < 2**32
    phash2_binary.cache_clear()
    phash2_list.cache_clear()
    assert phash2_pair(value) == (a, b)
    # Every byte counts: an accidental collision has probability 2**-32, a byte the code
    # forgot to mix in would collide every time.
    if value:
        i = index % len(value)
        flipped = value[:i] + bytes([value[i] ^ 1]) + value[i + 1 :]
        assert phash2_binary(flipped) != a
        assert phash2_list(flipped) != b
