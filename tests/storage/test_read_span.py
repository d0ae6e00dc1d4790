"""``Reader.read_span`` (consecutive chunks with one ``preadv``) and ``Reader.span_matches``
(the columns over them at once) against ``read_location`` chunk by chunk on the same stream.

Streams of random chunks written for real (a publisher's frames, cut by the writer; named
publishers' batches, one chunk each with a trailer; filter values or none, so chunks with a
Bloom filter or without), of records of one layout and size or of several, read from a random
start to a random end, in spans of random sizes mixed with single chunks. What must hold: the
same chunks (header fields and data sections, as written), the same records chosen and the
same counts (``ReaderStats``) as chunk by chunk; where a chunk is damaged, the chunks before it
and then the error ``read_location`` (and the caller's CRC check) gives."""

from __future__ import annotations

import os
import zlib

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_stream.columns import column_matcher
from sqlfilter import compile_sql
from storage import CorruptionError, OffsetSpec, Stream, StreamConfig
from storage.format import decode_header
from storage.reader import Matches
from tests.storage.test_damaged_chunks import DAMAGE, _index

pytestmark = pytest.mark.timeout(120)

SQL = ("k = 1", "k < 2", "k IN (0, 3)", "zone = 'z01'", "k <> 2")


def _message(k: int, i: int, layout: int) -> bytes:
    """Layout 0: one size and layout for every record (columns tell); 1: the body's length
    varies; 2: another key first (another layout of its own size)."""
    if layout == 0:
        return bytes(proton.Message(body=b"m%06d" % i, properties={"k": k, "zone": "z%02d" % k}).encode())
    if layout == 1:
        return bytes(proton.Message(body=b"m%d" % i, properties={"k": k, "zone": "z%02d" % k}).encode())
    return bytes(proton.Message(body=b"m%06d" % i, properties={"a": 1, "k": k, "zone": "z%02d" % k}).encode())


def _write(directory: str, batches: list[tuple[list[int], int, bool]], values: bool) -> Stream:
    """Each batch: the ``k`` of its records, their layout, named (one chunk with a trailer)
    or a publisher's frame (cut by the writer)."""
    s = Stream.open(directory, StreamConfig(fsync="never", min_chunk_entries=1,
                                            max_chunk_entries=4096, max_segment_chunks=64))
    offset = seq = 0
    for ks, layout, named in batches:
        bodies = [_message(k, offset + i, layout) for i, k in enumerate(ks)]
        fv = [f"v{k}" for k in ks] if values else None
        if named:
            seq += len(ks)
            s.append_batch(bodies, fv, writer=("w", seq))
        else:
            s.append_batch(bodies, fv, frames=[0])
        s.flush()
        offset += len(ks)
    return s


def _walk(s: Stream, spans: list[int] | None, start: int, end: int | None, sql: str):
    """Read from offset ``start`` as stage 2's prefetch does (spans of ``spans[i]`` records at
    most, in turn, else single chunks; None: never a span): per chunk, its header fields, its
    data section and the records chosen (or None: the caller decodes them); the error met;
    the reader's counts."""
    f = compile_sql(sql)
    out: list[tuple] = []
    error = None
    with s.reader(OffsetSpec.offset(start), columns=column_matcher(f)) as r:
        turn = 0
        try:
            for _ in range(10_000):
                if end is not None and r.position >= end:
                    break
                span = r.read_span(spans[turn % len(spans)], end) if spans else None
                turn += 1
                if span is not None:
                    found = r.span_matches(span)
                    for j, t in enumerate(span.headers):
                        data = bytes(span.data[span.starts[j]:span.starts[j + 1]])
                        if found is None:
                            chosen = r.candidates(data, t[6], t[2], t[13])
                        else:
                            chosen = Matches(x for x in found if t[6] <= x[0] < t[6] + t[3])
                        out.append((t[6], t[4], t[5], t[2], t[3], t[7], data, _chosen(chosen)))
                    continue
                loc = r.read_location(1000)
                if loc is None:
                    break
                data = os.pread(loc.fd, loc.length, loc.position)
                if len(data) != loc.length or zlib.crc32(data) != loc.crc:  # (as stage 2 does)
                    raise CorruptionError("s", loc.position, f"chunk {loc.chunk_id}: CRC mismatch")
                h = decode_header(loc.header)
                chosen = r.candidates(data, loc.chunk_id, loc.entries, h.flags)
                out.append((loc.chunk_id, loc.timestamp, h.epoch, loc.entries, loc.records, loc.crc,
                            data, _chosen(chosen)))
            else:
                raise AssertionError("the reader did not come to an end")
        except CorruptionError as exc:
            error = str(exc)
        return out, error, r.stats, r.position


def _chosen(found) -> tuple[bool, list] | None:
    """The records chosen: by the columns (``Matches``: stage 2 is done for them) or not."""
    return None if found is None else (type(found) is Matches, list(found))


_batches = st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=80),
                              st.sampled_from([0, 0, 0, 1, 2]), st.sampled_from([False] * 3 + [True])),
                    min_size=1, max_size=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_batches, values=st.booleans(), sql=st.sampled_from(SQL),
       spans=st.lists(st.one_of(st.integers(1, 300), st.just(8192)), min_size=1, max_size=4), data=st.data())
def test_spans_give_what_chunk_by_chunk_gives(tmp_path_factory, batches, values, sql, spans, data):
    total = sum(len(ks) for ks, _, _ in batches)
    start = data.draw(st.integers(0, total), label="start")
    end = data.draw(st.one_of(st.none(), st.integers(start, total + 1)), label="end")
    s = _write(str(tmp_path_factory.mktemp("span")), batches, values)
    try:
        plain = _walk(s, None, start, end, sql)
        spanned = _walk(s, spans, start, end, sql)
    finally:
        s.close()
    assert spanned[0] == plain[0]
    assert spanned[1:] == plain[1:]


def test_a_run_of_chunks_of_one_layout_is_read_as_one_span(tmp_path):
    """The case it is for: chunks of one layout, values in round robin."""
    s = _write(str(tmp_path / "s"), [([i % 4 for i in range(100)], 0, False)] * 6, False)
    try:
        with s.reader(OffsetSpec.first(), columns=column_matcher(compile_sql("k = 1"))) as r:
            span = r.read_span(10_000)
            while span is None:  # (the writer's first chunks are small: they are spans too)
                assert r.read_location() is not None
                span = r.read_span(10_000)
            assert len(span.headers) >= 2
            found = r.span_matches(span)
            assert type(found) is Matches and found
            assert all(int(body[-6:]) % 4 == 1 for _, body in found)
    finally:
        s.close()


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_chunk_ends_a_span_and_read_location_names_it(tmp_path, damage):
    """Six chunks of 100 records in a segment, the fifth damaged: spans give the chunks before
    it as written, then the error chunk by chunk reading gives (the same words)."""
    directory = str(tmp_path / "s")
    s = _write(directory, [([i % 4 for i in range(100)], 0, True)] * 6, False)
    try:
        seg, ipath, rec = _index(directory)[4]
        with open(seg, "rb") as f:
            f.seek(rec[3])
            h = decode_header(f.read(64))
        intact = _walk(s, None, 0, None, "k = 1")
        DAMAGE[damage](seg, ipath, rec, h)
        plain = _walk(s, None, 0, None, "k = 1")
        spanned = _walk(s, [1000], 0, None, "k = 1")
    finally:
        s.close()
    assert spanned[1] == plain[1]
    if plain[1] is None:  # ("no filter" on chunks without one: no damage)
        assert damage == "no filter" and spanned[0] == plain[0] == intact[0]
        return
    assert spanned[0] == plain[0] == intact[0][:len(plain[0])]  # (a torn page: from chunk 3)
    assert len(plain[0]) >= 3
    assert spanned[1] == plain[1]
