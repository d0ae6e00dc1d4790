"""Records and whole chunks left out by the bytes a filter requires (``Reader(needles=...)``,
``format.records_holding``): after stage 2, a reader with needles delivers exactly what a full
scan delivers (random streams, random filters, random chunk sizes and start offsets,
sub-batches compressed or not), gives nothing of the chunks without the bytes when the filter is
selective, and never leaves out records that hide their bytes in a compressed sub-batch."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile

import proton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlfilter import compile_sql
from sqlfilter.required import needles_of
from storage import OffsetSpec, Stream, StreamConfig
from storage.format import (COMPRESSION_GZIP, COMPRESSION_NONE, SubBatchEntry, encode_entries,
                            encode_mixed_entries, records_holding)
from tests.sqlfilter.test_required import A, P, filters, messages
from tests.storage.test_derived import _encode


def _sub_batch(bodies: list[bytes], compression: int) -> SubBatchEntry:
    raw = encode_entries(bodies)
    data = gzip.compress(raw) if compression == COMPRESSION_GZIP else raw
    return SubBatchEntry(compression, len(bodies), len(raw), data)


def _write(directory: str, batches: list[list], entries: int) -> None:
    with Stream.open(directory, StreamConfig(max_chunk_entries=entries, min_chunk_entries=entries)) as s:
        for batch in batches:
            records = sum(b.records if isinstance(b, SubBatchEntry) else 1 for b in batch)
            s.append_batch(batch, records=records)
            s.flush()  # one write group per batch: chunks of several sizes


def _scan(directory: str, text: str, start: int, use_needles: bool):
    f = compile_sql(text)
    match = f.bytes_matcher()
    with Stream.open(directory, StreamConfig()) as s, \
            s.reader(OffsetSpec.offset(start), needles=needles_of(f) if use_needles else ()) as r:
        return [o for chunk in r for o, b in chunk.records if match(b)], r.stats


_KINDS = st.sampled_from([None, COMPRESSION_NONE, COMPRESSION_GZIP])
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _writes(messages):
    """Writes of 1-30 messages, each simple entries (None) or one sub-batch (compressed or
    not)."""
    return st.lists(st.tuples(st.lists(messages, min_size=1, max_size=30), _KINDS), max_size=8)


@SETTINGS
@given(filters(), _writes(messages()), st.sampled_from([2, 7, 100]), st.integers(0, 60))
def test_dropping_chunks_by_needles_gives_exactly_a_full_scan(text, writes, entries, start):
    batches, flat = [], []
    for group, kind in writes:
        bodies = [_encode(m) for m in group]
        flat.extend(bodies)
        batches.append(bodies if kind is None else [_sub_batch(bodies, kind)])
    f = compile_sql(text)
    full = [i for i, b in enumerate(flat) if i >= start and f.matches(b)]
    with tempfile.TemporaryDirectory() as d:
        _write(d, batches, entries)
        assert _scan(d, text, start, False)[0] == full
        assert _scan(d, text, start, True)[0] == full, text


# values long enough not to turn up by chance in other bytes (compressed ones included), so
# that chunks really are dropped
_WORDS = ["alpha7", "beta7", "gamma7"]
_word_messages = st.fixed_dictionaries({
    A: st.dictionaries(st.sampled_from(["k", "m"]), st.sampled_from(_WORDS + [1, None]), max_size=2),
    P: st.just({})})
_word_atoms = st.one_of(
    st.builds("{} = '{}'".format, st.sampled_from(["k", "m"]), st.sampled_from(_WORDS)),
    st.builds("{} IN ('{}', '{}')".format, st.sampled_from(["k", "m"]), st.sampled_from(_WORDS),
              st.sampled_from(_WORDS)),
    st.sampled_from(["k <> 'alpha7'", "k = 1", "m IS NULL"]))
_word_filters = st.recursive(_word_atoms, lambda inner: st.tuples(
    inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
    max_leaves=4)


@SETTINGS
@given(_word_filters, _writes(_word_messages), st.sampled_from([2, 7, 100]), st.integers(0, 60))
def test_dropping_chunks_by_words_gives_exactly_a_full_scan(text, writes, entries, start):
    test_dropping_chunks_by_needles_gives_exactly_a_full_scan.hypothesis.inner_test(
        text, writes, entries, start)


def _customers(n: int, every: int) -> list[bytes]:
    return [proton.Message(body="x" * 50, properties={"customer": "c42" if i % every == 0 else f"d{i}"}
                           ).encode() for i in range(n)]


def test_a_selective_filter_decodes_only_the_chunks_holding_its_bytes(tmp_path):
    bodies = _customers(10_000, 2_500)  # c42 in 4 records, so in at most 4 chunks of 100
    _write(str(tmp_path), [bodies[i:i + 100] for i in range(0, len(bodies), 100)], 100)
    expected = [0, 2500, 5000, 7500]
    got, stats = _scan(str(tmp_path), "customer = 'c42'", 0, True)
    assert got == expected
    assert stats.chunks_read == 100 and stats.prefilter_chunks_skipped == 96
    got, stats = _scan(str(tmp_path), "customer = 'c42'", 0, False)
    assert got == expected and stats.prefilter_chunks_skipped == 0


def test_compressed_sub_batches_are_never_dropped_by_their_bytes(tmp_path):
    inner = [proton.Message(body="y", properties={"customer": "c42"}).encode() for _ in range(10)]
    sub = _sub_batch(inner, COMPRESSION_GZIP)
    assert b"c42" not in bytes(sub)  # the bytes are hidden: the chunk must be decoded
    others = _customers(50, 10**9)[1:]  # no c42
    _write(str(tmp_path), [others[:20] + [sub] + others[20:]], 1000)
    got, stats = _scan(str(tmp_path), "customer = 'c42'", 0, True)
    assert got == list(range(20, 30)) and stats.prefilter_chunks_skipped == 0


def test_records_holding():
    data = encode_entries([b"alpha", b"beta", b"gamma-alpha"])
    assert records_holding(data, 10, ((b"alp",),)) == [(10, b"alpha"), (12, b"gamma-alpha")]
    assert records_holding(data, 10, ((b"zz", b"bet"), (b"a",))) == [(11, b"beta")]
    assert records_holding(data, 10, ((b"zz",),)) == []
    assert records_holding(data, 10, ((b"alpha",), (b"zz", b"yy"))) == []
    assert records_holding(data, 10, ((),)) == []  # an empty group: nothing can match
    assert records_holding(data, 10, ()) is None  # no requirement: split the chunk
    assert records_holding(b"", 10, ((b"a",),)) == []
    # a needle across two records is in neither
    assert records_holding(encode_entries([b"xxab", b"cdxx"]), 0, ((b"abcd",),)) == []
    # a sub-batch, a section whose entries do not add up, or a needle in most records: None
    sub = _sub_batch([b"alpha"], COMPRESSION_GZIP)
    assert records_holding(encode_mixed_entries([sub]), 0, ((b"zz",),)) is None
    assert records_holding(data[:-1], 0, ((b"zz",),)) is None
    many = encode_entries([b"a%d" % i for i in range(100)])
    assert records_holding(many, 0, ((b"a",),), entries=100) is None
    assert records_holding(many, 0, ((b"a7",),), entries=100) == [
        (i, b"a%d" % i) for i in (7, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79)]


def test_the_writer_flags_chunks_of_simple_entries_only(tmp_path):
    """Header byte 47 bit 0 (``FLAG_SIMPLE_ENTRIES``) on the user chunks whose entries are all
    simple, so that a reader drops such a chunk without the filter's bytes unwalked; never on a
    chunk holding a sub-batch, compressed or not."""
    from storage.format import FLAG_SIMPLE_ENTRIES, HEADER_FLAGS_AT

    plain = _customers(30, 10**9)[1:]
    writes = [plain[:10], [_sub_batch(plain[:3], COMPRESSION_GZIP)], plain[10:20],
              plain[20:22] + [_sub_batch(plain[:2], COMPRESSION_NONE)]]
    _write(str(tmp_path), writes, 1000)
    with Stream.open(str(tmp_path), StreamConfig()) as s, s.reader(OffsetSpec.first()) as r:
        flags = []
        while (loc := r.read_location()) is not None:
            flags.append(loc.header[HEADER_FLAGS_AT] & FLAG_SIMPLE_ENTRIES)
    assert flags == [FLAG_SIMPLE_ENTRIES, 0, FLAG_SIMPLE_ENTRIES, 0]
    out = subprocess.run([sys.executable, "-m", "amqp_stream", "inspect", str(tmp_path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    shown = [c["simple_entries"] for c in map(json.loads, out.splitlines()) if "chunk_id" in c]
    assert shown == [True, False, True, False]
    # the flag spares the walk, so it is trusted: a lying header would hide the sub-batch's
    # records, which is why only the writer that built the section sets it
    section = encode_mixed_entries([_sub_batch([b"c42"], COMPRESSION_GZIP)])
    assert records_holding(section, 0, ((b"c42",),)) is None
    assert records_holding(section, 0, ((b"c42",),), simple=True) == []


#: short strings of a, b, c and NUL (a NUL can also match in an entry's 4-byte header)
_bytes = st.binary(min_size=0, max_size=6).map(lambda b: bytes(b"\0abc"[c % 4] for c in b))


@settings(max_examples=400, deadline=None)
@given(st.lists(_bytes, max_size=40), st.booleans(),
       st.lists(st.lists(_bytes.filter(bool), min_size=1, max_size=3), min_size=1, max_size=2))
def test_records_holding_is_the_records_that_hold_a_string_of_every_group(bodies, same, groups):
    """Against the rule itself, record by record: records of one size (found by position, no
    walk) or of many, strings that overlap each other or span two records (several strings
    are searched as one regular expression, overlaps included)."""
    if same:
        bodies = [(b * 6)[:4] or b"aaaa" for b in bodies]
    data = encode_entries(bodies)
    wanted = [(7 + i, b) for i, b in enumerate(bodies)
              if all(any(n in b for n in g) for g in groups)]
    got = records_holding(data, 7, groups, entries=len(bodies), simple=True)
    # the search may stop at the tail of a string too (``format._finder`` merges clusters)
    starts = {i for n in groups[0] for k in range(len(n)) for i in range(len(data))
              if data.startswith(n[k:], i)}
    if got is None:  # allowed only when the first group turns up in many records
        assert len(starts) > max(16, len(bodies) // 4)
    else:
        assert got == wanted


def test_a_number_behind_both_encodings_of_a_one_letter_key_is_found_in_one_search():
    """``k = 7``'s needles: the 32 encodings of 7 behind ``\\x01k`` (str8/sym8) and behind
    ``s\\0\\0\\0k`` (a char key), which ``_finder`` searches as one expression from ``k``:
    records holding either form are found, records holding only the tail (``k`` and an
    encoding of 7 behind another key) or a 7 under another key are not."""
    from sqlfilter.required import needles_of
    from storage.format import _finder

    groups = needles_of(compile_sql("k = 7"))
    (group,) = groups
    assert len(group) == 32 and {n[:1] for n in group} == {b"\x01", b"s"}

    def encoded(props: dict) -> bytes:
        return bytes(proton.Message(body="x", properties=props).encode())

    # the char key 'k' (bytes only: the map's size is not fixed up, nothing decodes it here)
    char_key = encoded({"j": 7}).replace(b"\xa1\x01j", b"s\x00\x00\x00k")
    assert char_key != encoded({"j": 7})
    bodies = [encoded({"k": 8}), encoded({"k": 7}), encoded({"kk": 7}), encoded({"k": 7.0}),
              encoded({"m": 7}), char_key, encoded({"k": 8})]
    data = encode_entries(bodies)
    assert len(set(map(len, bodies))) > 1  # found by the walk; then as same-sized records
    assert [o for o, _ in records_holding(data, 0, groups, len(bodies))] == [1, 3, 5]
    same = [b + b"." * (40 - len(b)) for b in bodies]
    assert [o for o, _ in records_holding(encode_entries(same), 0, groups, len(same))] == [1, 3, 5]
    hits = _finder(group)(data, 100)
    assert hits is not None and len(hits) == 4  # one search: 'k' and an encoding of 7 ('kk' too)
