"""Readers against a simple in-memory model of the log (hypothesis).

The model knows each chunk's records and their filter values (chunking is deterministic: each
batch is flushed alone and cut every ``max_chunk_entries``). What a stage-1 reader must return is
exact: the records, from the spec's start, of every chunk whose filter -- built by the model from
the chunk's values with ``bloom.build`` -- the reader's ``bloom.Matcher`` accepts. Bloom false
positives are therefore part of the expectation, not a tolerance, and the model separately checks
there is never a false negative (a chunk truly holding a wanted value is always expected).
"""

from __future__ import annotations

import shutil
import tempfile

import bloom
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import OffsetSpec, Stream, StreamConfig, open_reader

VALUES = [None, "", "a", "b", "c", "d"]

batches_st = st.lists(
    st.lists(st.tuples(st.binary(max_size=12), st.sampled_from(VALUES)), min_size=1, max_size=9),
    min_size=0, max_size=8)
query_st = st.tuples(
    st.sampled_from(["first", "last", "next", "offset", "timestamp"]),
    st.integers(0, 60),
    st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=3, unique=True),
    st.booleans())


def _model_chunks(batches, max_entries):
    chunks, offset = [], 0
    for batch in batches:
        for i in range(0, len(batch), max_entries):
            part = batch[i:i + max_entries]
            chunks.append((offset, [(offset + k, b, v) for k, (b, v) in enumerate(part)]))
            offset += len(part)
    return chunks, offset


def _may_match(records, values, match_unfiltered, scheme) -> bool:
    if not values:
        return True
    vals = [v for _, _, v in records]
    f = bloom.build(vals, 16, scheme)
    m = bloom.Matcher(values, match_unfiltered)
    positive = m.matches(f.bits, f.scheme, f.param) if f else m.matches(b"", 0, 0)
    truly = any(v in values for v in vals) or (match_unfiltered and any(not v for v in vals))
    assert positive or not truly, "the filter would lose a matching chunk"
    return positive


def _expected(chunks, end, stamps, kind, n, values, mu, scheme):
    if kind == "first":
        start, low = 0, 0
    elif kind == "last":
        start, low = max(0, len(chunks) - 1), 0
        if not chunks:
            return []
    elif kind == "next":
        return []
    elif kind == "offset":
        if n >= end:
            return []
        start = max(i for i, (cid, _) in enumerate(chunks) if cid <= n)
        low = n
    else:  # timestamp: the n-th chunk's own timestamp (or after the end)
        if n >= len(chunks):
            return []
        t = stamps[n]
        start = next(i for i, ts in enumerate(stamps) if ts >= t)
        low = 0
    out = []
    for _, recs in chunks[start:]:
        if _may_match(recs, values, mu, scheme):
            out += [(o, b) for o, b, _ in recs if o >= low]
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches_st, max_entries=st.integers(1, 5), seg_chunks=st.integers(1, 4),
       scheme=st.sampled_from([bloom.Scheme.OSIRIS, bloom.Scheme.MMH3]),
       queries=st.lists(query_st, min_size=1, max_size=6))
def test_readers_return_exactly_the_model_records(batches, max_entries, seg_chunks, scheme, queries):
    d = tempfile.mkdtemp(prefix="model-")
    try:
        cfg = StreamConfig(fsync="never", max_chunk_entries=max_entries,
                           max_segment_chunks=seg_chunks, filter_size=16, filter_scheme=scheme)
        chunks, end = _model_chunks(batches, max_entries)
        with Stream.open(d, cfg) as s:
            for batch in batches:
                s.append_batch([b for b, _ in batch], [v for _, v in batch])
                s.flush()
            assert s.next_offset == end
            with s.reader(OffsetSpec.first()) as r:
                stamps = [c.timestamp for c in r]
            assert len(stamps) == len(chunks)
            for kind, n, values, mu in queries:
                if kind == "offset":
                    spec = OffsetSpec.offset(n)
                elif kind == "timestamp":
                    spec = OffsetSpec.timestamp(stamps[n] if n < len(stamps) else 2**62)
                else:
                    spec = getattr(OffsetSpec, kind)()
                want = _expected(chunks, end, stamps, kind, n, values, mu, scheme)
                for reader in (s.reader(spec, values, mu), open_reader(d, spec, values, mu)):
                    with reader:
                        got = [(o, bytes(b)) for c in reader for o, b in c.records]
                        assert got == want, (kind, n, values, mu)
                        st_ = reader.stats
                        if not values:
                            assert st_.chunks_skipped == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)
