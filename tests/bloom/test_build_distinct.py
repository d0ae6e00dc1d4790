"""``bloom.build_distinct`` (a chunk's filter from its set of values, cached by the set when
they are few and text) gives exactly ``build``'s filter, on a first call and from the cache."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bloom import Scheme, build, build_distinct
from bloom import filter as bloom_filter

_VALUES = st.one_of(st.none(), st.text(max_size=6), st.binary(max_size=6),
                    st.tuples(st.text(max_size=3), st.text(max_size=3)))


@given(st.sets(_VALUES, max_size=300), st.sampled_from((16, 17, 64, 255)),
       st.sampled_from((Scheme.OSIRIS, Scheme.MMH3)))
def test_the_filter_of_a_set_is_builds(values, size, scheme):
    expected = build(values, size, scheme)
    assert build_distinct(values, size, scheme) == expected
    assert build_distinct(set(values), size, scheme) == expected  # again: from the cache


def test_sets_of_few_text_values_are_cached_others_not():
    bloom_filter._build_cached.cache_clear()
    values = {f"r{k:02d}" for k in range(100)} | {None}
    first = build_distinct(values, 255, Scheme.OSIRIS)
    assert build_distinct(set(values), 255, Scheme.OSIRIS) is first
    assert bloom_filter._build_cached.cache_info().hits == 1
    build_distinct({b"r01", "r02"}, 255, Scheme.OSIRIS)  # bytes: a frame's buffer, not kept
    many = {str(k) for k in range(bloom_filter.DISTINCT_CACHED + 1)}
    assert build_distinct(many, 255, Scheme.OSIRIS) == build(many, 255, Scheme.OSIRIS)
    assert bloom_filter._build_cached.cache_info().currsize == 1


_RECORD_VALUES = st.one_of(st.none(), st.text(max_size=4), st.binary(max_size=4),
                           st.binary(max_size=4).map(bytearray),
                           st.tuples(st.text(max_size=3), st.binary(max_size=3)), st.just(()))


@given(st.lists(st.tuples(st.lists(_RECORD_VALUES, min_size=1, max_size=40),
                          st.sampled_from((0, 0, 0, 5, 255, 256, 257, 400)),
                          st.sampled_from((16, 17, 255)),
                          st.sampled_from((Scheme.OSIRIS, Scheme.MMH3))), min_size=1, max_size=6))
def test_the_writers_chunk_filter_is_builds_one_chunk_after_another(chunks):
    """``storage.chunking.chunk_filter`` (a chunk's values deduplicated by a set, its filter from
    ``build_distinct``'s cache when they are few and text) gives ``build``'s filter of the
    chunk's values, whatever chunks (sizes, schemes, many text values) came before."""
    from storage.format import TextValues
    from storage.chunking import chunk_filter as _filter
    for values, many, size, scheme in chunks:
        if many:  # text only, up to 400 distinct: cached up to 256, built above
            values = TextValues([None, *(f"v{k % many}" for k in range(many + 3))])
        assert _filter(values, size, scheme) == build(values, size, scheme)
        assert _filter(list(values), size, scheme) == build(values, size, scheme)
