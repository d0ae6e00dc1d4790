"""bloom.build: osiris filters byte for byte, bit 0, size 0, argument checks, mmh3's k."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

import bloom
from bloom import BloomError, ChunkFilter, Scheme, build, choose_k, theoretical_fpr

from tests.bloom import VECTORS


def bit(bits: bytes, n: int) -> bool:
    """Bit n, MSB-first, as the storage format numbers them."""
    return bool(bits[n // 8] & (0x80 >> (n % 8)))


@pytest.mark.parametrize("vec", VECTORS["filters"], ids=lambda v: f"{len(v['values_hex'])}v-{v['size_bytes']}B")
def test_osiris_filters_byte_for_byte(vec):
    values = [bytes.fromhex(h) for h in vec["values_hex"]]
    cf = build(values, vec["size_bytes"], Scheme.OSIRIS)
    if vec["bloom_hex"] == "":
        assert cf is None
    else:
        assert cf == ChunkFilter(bytes.fromhex(vec["bloom_hex"]), 0, 0)
        assert cf.size == vec["size_bytes"]


@pytest.mark.parametrize("vec", VECTORS["hashes"], ids=lambda v: f"{v['value_hex'][:16]}-{v['bits']}")
def test_osiris_positions_of_each_vector(vec):
    # A single value sets exactly its two positions h1, h2 (MSB-first) and nothing else.
    cf = build([bytes.fromhex(vec["value_hex"])], vec["bits"] // 8, Scheme.OSIRIS)
    assert {n for n in range(vec["bits"]) if bit(cf.bits, n)} == {vec["h1"], vec["h2"]}


def test_text_values_are_hashed_as_utf8():
    a = build(["bänana", None, "apple"], 32, Scheme.OSIRIS)
    b = build(["bänana".encode(), b"", b"apple"], 32, Scheme.OSIRIS)
    assert a == b and bit(a.bits, 0)


@pytest.mark.parametrize("scheme", list(Scheme))
def test_no_values_means_no_filter(scheme):
    assert build([], 16, scheme) is None
    assert build([None, "", b"", None], 16, scheme) is None


@pytest.mark.parametrize("scheme", list(Scheme))
@settings(max_examples=50)
@given(
    values=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40),
    size=st.integers(min_value=16, max_value=255),
    unfiltered=st.integers(min_value=0, max_value=3),
)
def test_bit0_exactly_when_an_entry_has_no_value(scheme, values, size, unfiltered):
    with_none = build(values + [None] * unfiltered, size, scheme)
    without = build(values, size, scheme)
    assert len(with_none.bits) == size
    assert bit(with_none.bits, 0) == (unfiltered > 0)
    assert not bit(without.bits, 0)
    # Bit 0 is the only difference; order and duplicates do not matter.
    assert int.from_bytes(with_none.bits, "big") & ~(1 << (8 * size - 1)) == int.from_bytes(without.bits, "big")
    assert build(list(reversed(values)) * 2, size, scheme) == without


@pytest.mark.parametrize("size", [0, 15, 256, -1, 16.0, True, "16", None])
def test_invalid_size_is_refused(size):
    with pytest.raises(BloomError, match="filter size"):
        build(["a"], size, Scheme.MMH3)


@pytest.mark.parametrize("scheme", [2, 7, -1, 255, "mmh3", None, 1.0])
def test_unknown_scheme_is_refused(scheme):
    with pytest.raises(BloomError, match="scheme"):
        build(["a"], 16, scheme)


def test_bloom_error_is_a_value_error():
    assert issubclass(BloomError, ValueError)


@pytest.mark.parametrize("value", [1, 2.5, ["a"], object()])
def test_non_text_value_is_refused(value):
    with pytest.raises(BloomError, match="filter value"):
        build(["a", value], 16, Scheme.OSIRIS)


def test_sizes_16_and_255_are_valid():
    for size in (16, 255):
        for scheme in Scheme:
            assert len(build(["x"], size, scheme).bits) == size


@pytest.mark.parametrize("size", [16, 17, 32, 64, 128, 255])
@pytest.mark.parametrize("n", [1, 2, 5, 10, 20, 50, 100, 200, 1000])
def test_mmh3_k_is_the_best_integer_k(size, n):
    m = 8 * size - 1
    k = choose_k(n, size)
    assert 1 <= k <= bloom.MAX_K
    best = min(range(1, bloom.MAX_K + 1), key=lambda j: theoretical_fpr(m, n, j))
    assert theoretical_fpr(m, n, k) == pytest.approx(theoretical_fpr(m, n, best), rel=1e-12)
    assert abs(k - min(bloom.MAX_K, m / n * math.log(2))) <= 1.5


def test_mmh3_records_k_and_sets_at_most_k_bits_per_value():
    for n in (1, 3, 10, 40):
        values = [f"v{i}" for i in range(n)]
        cf = build(values + values[:1], 32, Scheme.MMH3)  # a duplicate does not count
        assert cf.scheme == 1 and cf.param == choose_k(n, 32)
        ones = bin(int.from_bytes(cf.bits, "big")).count("1")
        assert 1 <= ones <= n * cf.param
        assert not bit(cf.bits, 0)


def test_mmh3_k_at_16_bytes_10_values():
    # The design target: 16 B / 10 values at most 0.3 % (scheme 0 gives about 2 %).
    k = choose_k(10, 16)
    assert k == 9 and theoretical_fpr(127, 10, k) < 0.003
    assert theoretical_fpr(127, 10, 2) > 0.015


@pytest.mark.parametrize("scheme", list(Scheme))
@settings(max_examples=50)
@given(records=st.lists(st.one_of(st.none(), st.text(min_size=1, max_size=8),
                                  st.lists(st.text(max_size=8), max_size=4).map(tuple)),
                        min_size=1, max_size=30),
       size=st.integers(min_value=16, max_value=255))
def test_a_record_with_several_values_adds_each_of_them(scheme, records, size):
    """A tuple is a record with several values: the filter is the one of every value as its
    own record (an empty value, or an empty tuple, is a record without a value: bit 0)."""
    flat: list = []
    for r in records:
        if type(r) is tuple:
            flat.extend(r if r else [None])
        else:
            flat.append(r)
    assert build(records, size, scheme) == build(flat, size, scheme)


def test_a_tuple_of_values_matches_a_reader_of_any_of_them():
    cf = build([("red", "blue"), "green"], 64, Scheme.OSIRIS)
    for wanted in ("red", "blue", "green"):
        assert bloom.Matcher([wanted]).matches(cf.bits, cf.scheme, cf.param)
    assert not bit(cf.bits, 0)  # no unfiltered record
    assert bit(build([(), "x"], 16, Scheme.OSIRIS).bits, 0)  # an empty tuple: no value
    assert bit(build([("x", "")], 16, Scheme.OSIRIS).bits, 0)  # an empty value: likewise
