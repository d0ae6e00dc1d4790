"""Broker-derived filter keys on real files (``storage.derived``): readers that skip chunks and
blocks by the sidecar index deliver, after stage 2, exactly what a full scan delivers (random
streams, random filters, random chunk and block sizes and start offsets, derived keys on and
off), read less, and stay right when the sidecar is lost, torn, stale or damaged."""

from __future__ import annotations

import json
import os
import random
import struct
import tempfile
import zlib

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.derived as derived
import storage.reader as reader
from storage import skiptable
from amqp_stream.derived_keys import bounds, deriver, storage_settings, wanted
from sqlfilter import compile_sql
from sqlfilter.required import needles_of
from storage import OffsetSpec, Stream, StreamConfig
from storage.derived import Cursor, derived_path, read_keys
from tests.sqlfilter.test_required import A, P, _number_messages, _range_filters, filters, messages
from tests.polling import wait_for

KEYS = ("k", "m", "n", "p.subject")


def _encode(m: dict) -> bytes:
    return proton.Message(body="x" * 20, properties=m[A], subject=m[P].get("subject")).encode()


def _config(derive: bool, entries: int, keys: tuple[str, ...] = KEYS) -> StreamConfig:
    if derive:
        return StreamConfig(max_chunk_entries=entries, min_chunk_entries=entries, **storage_settings(keys))
    return StreamConfig(max_chunk_entries=entries, min_chunk_entries=entries)


def _write(directory: str, bodies: list[bytes], derive: bool, entries: int,
           batches: list[int], keys: tuple[str, ...] = KEYS) -> None:
    with Stream.open(directory, _config(derive, entries, keys)) as s:
        i = 0
        for size in batches + [len(bodies)]:
            if i >= len(bodies):
                break
            s.append_batch(bodies[i:i + size])
            s.flush()  # one write group per batch: chunks of several sizes
            i += size


def _cut_table(directory: str, how: str) -> None:
    """The skip table (``storage.skiptable``) as a reader may find it: gone, or covering only
    the first or the last half of the segment's chunks (a CRC that holds; a chunk's rows are
    written together, so a table holds all of a chunk's rows or none)."""
    path = skiptable.skip_path(directory, 0)
    if how == "whole" or not os.path.exists(path):
        return
    if how == "none":
        os.unlink(path)
        return
    raw = open(path, "rb").read()
    head = list(skiptable.SKIP_HEADER.unpack_from(raw))
    row = skiptable.row_bytes(head[6])
    rows = [raw[at:at + row] for at in range(skiptable.SKIP_HEADER.size, len(raw), row)][:head[3]]
    cut = len(rows) // 2
    while 0 < cut < len(rows) and rows[cut][:4] == rows[cut - 1][:4]:  # a chunk's first row
        cut += 1
    rows = rows[:cut] if how == "first half" else rows[cut:]
    head[3], head[4] = len(rows), zlib.crc32(b"".join(rows))
    open(path, "wb").write(skiptable.SKIP_HEADER.pack(*head) + b"".join(rows))


def _scan(directory: str, text: str, start: int, use_index: bool, entries: int,
          use_needles: bool = False, table: str = "whole"):
    f = compile_sql(text)
    match = f.bytes_matcher()
    with Stream.open(directory, _config(True, entries)) as s:
        _cut_table(directory, table)  # after the writer's checks at open
        w = wanted(KEYS, f) if use_index else None
        b = bounds(KEYS, f) if use_index else None
        with s.reader(OffsetSpec.offset(start), derived=w, bounds=b,  # its fds: not left to leak
                      needles=needles_of(f) if use_needles else ()) as r:
            got = [o for chunk in r for o, b in chunk.records if match(b)]
            return got, r.stats


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_TABLES = st.sampled_from(["none", "first half", "last half"])


@SETTINGS
@given(filters(), st.lists(messages(), max_size=150), st.sampled_from([3, 64]),
       st.sampled_from([5, 40, 200]), st.lists(st.integers(1, 60), max_size=5),
       st.integers(0, 160), _TABLES)
def test_skipping_by_the_sidecar_gives_exactly_a_full_scan(text, stream, block, entries,
                                                           batches, start, table):
    bodies = [_encode(m) for m in stream]
    saved, batch = derived.BLOCK_RECORDS, reader._INDEX_BATCH
    derived.BLOCK_RECORDS = block
    reader._INDEX_BATCH = 3  # index records read a few at a time: the skip table's stops lie
    try:                     # past them, and readers go on reading the index from a stop
        with tempfile.TemporaryDirectory() as on, tempfile.TemporaryDirectory() as off:
            _write(on, bodies, True, entries, batches)
            _write(off, bodies, False, entries, batches)
            f = compile_sql(text)
            full = [i for i, b in enumerate(bodies) if i >= start and f.matches(b)]
            assert _scan(off, text, start, False, entries)[0] == full
            assert _scan(off, text, start, True, entries)[0] == full  # no sidecar: read all
            assert _scan(on, text, start, True, entries)[0] == full, text
            # as the broker reads: the blocks that may match, then their records holding the
            # filter's bytes
            assert _scan(on, text, start, True, entries, True)[0] == full, text
            # the skip table gone, or covering only part of the segment
            assert _scan(on, text, start, True, entries, True, table)[0] == full, (text, table)
    finally:
        derived.BLOCK_RECORDS, reader._INDEX_BATCH = saved, batch


# a key of many values (strings, and numbers in several AMQP types), so that a filter on it
# selects few blocks of a chunk: the blocks read in part, then narrowed by the filter's bytes
_SPREAD = [f"v{i}" for i in range(30)] + list(range(30)) + [proton.int32(7), proton.ubyte(7),
                                                            proton.float32(7.0), proton.ulong(300)]
_spread_messages = st.fixed_dictionaries(
    {A: st.fixed_dictionaries({"k": st.sampled_from(_SPREAD)},
                              optional={"m": st.sampled_from(["a", "b"])}),
     P: st.just({})})
_spread_atoms = st.one_of(
    st.builds("k = 'v{}'".format, st.integers(0, 29)), st.builds("k = {}".format, st.integers(0, 29)),
    st.builds("k IN ('v{}', {}, 300)".format, st.integers(0, 29), st.integers(0, 29)),
    st.sampled_from(["m = 'a'", "m IS NULL", "k <> 'v1'", "k = 7.0"]))
_spread_filters = st.recursive(_spread_atoms, lambda inner: st.tuples(
    inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
    max_leaves=3)


@SETTINGS
@given(_spread_filters, st.lists(_spread_messages, min_size=40, max_size=200),
       st.sampled_from([3, 8]), st.sampled_from([40, 200]),
       st.lists(st.integers(1, 60), max_size=5), st.integers(0, 160), _TABLES)
def test_blocks_read_in_part_give_exactly_a_full_scan(text, stream, block, entries, batches,
                                                      start, table):
    test_skipping_by_the_sidecar_gives_exactly_a_full_scan.hypothesis.inner_test(
        text, stream, block, entries, batches, start, table)


@SETTINGS
@given(_range_filters, st.lists(_number_messages, min_size=20, max_size=200), st.booleans(),
       st.sampled_from([3, 8]), st.sampled_from([5, 40]), st.lists(st.integers(1, 60), max_size=5),
       st.integers(0, 160), _TABLES)
def test_skipping_by_number_bounds_gives_exactly_a_full_scan(text, stream, ordered, block, entries,
                                                             batches, start, table):
    """Filters that bound numbers (``k > 2``, ``k BETWEEN ...``), over numbers in random order
    or (``ordered``) growing with the offset, where the skip table's bounds rule out most."""
    if ordered:
        stream = [{A: {**m[A], "k": i // 7}, P: m[P]} if i % 5 else m for i, m in enumerate(stream)]
    test_skipping_by_the_sidecar_gives_exactly_a_full_scan.hypothesis.inner_test(
        text, stream, block, entries, batches, start, table)


def _customers(n: int, values: int, seed: int = 1) -> list[bytes]:
    rnd = random.Random(seed)
    return [proton.Message(body="x" * 50, properties={"customer": f"c{rnd.randrange(values)}"}
                           ).encode() for _ in range(n)]


def test_a_selective_filter_reads_a_small_part_of_the_stream(tmp_path):
    bodies = _customers(20_000, 2000)
    _write(str(tmp_path), bodies, True, 4000, [], ("customer",))
    keys = ("customer",)
    f = compile_sql("customer = 'c42'")
    match = f.bytes_matcher()
    expected = [i for i, b in enumerate(bodies) if match(b)]
    with Stream.open(str(tmp_path), StreamConfig(max_chunk_entries=4000, min_chunk_entries=4000, derived_keys=keys,
                                                 derive=deriver(keys))) as s:
        plain = s.reader(OffsetSpec.first())
        assert [o for c in plain for o, b in c.records if match(b)] == expected
        r = s.reader(OffsetSpec.first(), derived=wanted(keys, f))
        assert [o for c in r for o, b in c.records if match(b)] == expected
        assert r.stats.derived_blocks_skipped > 0
        assert r.stats.bytes_read < plain.stats.bytes_read / 10
        # a value no record holds: (but for a Bloom false positive) chunks skipped unread
        zz = s.reader(OffsetSpec.first(), derived=wanted(keys, compile_sql("customer = 'zz'")))
        assert sum(len(c.records) for c in zz) <= 2 * derived.BLOCK_RECORDS
        assert zz.stats.derived_chunks_skipped >= 3
        # no value can match: every chunk skipped without reading it
        none = s.reader(OffsetSpec.first(), derived=wanted(keys, compile_sql(
            "customer = 'a' AND customer = 'b'")))
        assert list(none) == []
        assert none.stats.derived_chunks_skipped == none.stats.chunks_skipped == 5
        assert none.stats.chunks_read == 0


def _keep_reading(directory: str, text: str, bodies: list[bytes]) -> None:
    keys = ("customer",)
    f = compile_sql(text)
    match = f.bytes_matcher()
    expected = [i for i, b in enumerate(bodies) if match(b)]
    with Stream.open(directory, StreamConfig(max_chunk_entries=500, min_chunk_entries=500, derived_keys=keys,
                                             derive=deriver(keys))) as s:
        r = s.reader(OffsetSpec.first(), derived=wanted(keys, f))
        assert [o for c in r for o, b in c.records if match(b)] == expected


def test_damaged_stale_or_missing_sidecars_never_change_the_answer(tmp_path):
    bodies = _customers(3000, 50)
    d = str(tmp_path)
    _write(d, bodies, True, 500, [], ("customer",))
    side = derived_path(d, 0)
    raw = open(side, "rb").read()
    found = read_keys(os.open(side, os.O_RDONLY))
    assert found is not None and found[0] == ["customer"]
    # every Bloom byte zeroed (entries' CRCs fail): as good as no index, nothing lost
    start = found[1]
    damaged = bytearray(raw)
    for i in range(start + derived.DERIVED_CHUNK.size + 10, len(damaged), 7):
        damaged[i] = 0
    open(side, "wb").write(bytes(damaged))
    _keep_reading(d, "customer = 'c7'", bodies)
    # a torn tail and a missing sidecar
    open(side, "wb").write(raw[:len(raw) - 5])
    _keep_reading(d, "customer = 'c7'", bodies)
    os.unlink(side)
    _keep_reading(d, "customer = 'c7'", bodies)
    # the writer recreated it for new chunks only: the old ones are read whole
    assert read_keys(os.open(side, os.O_RDONLY)) is not None


def test_recovery_cuts_entries_whose_chunk_is_gone_and_retention_deletes_sidecars(tmp_path):
    d = str(tmp_path)
    bodies = _customers(2000, 50)
    _write(d, bodies, True, 500, [], ("customer",))
    seg = os.path.join(d, "00000000000000000000.segment")
    idx = os.path.join(d, "00000000000000000000.index")
    # cut the last chunk from the segment and the index: its sidecar entry must go too
    size_before = os.path.getsize(derived_path(d, 0))
    with open(idx, "rb") as fh:
        records = fh.read()
    last_pos = int.from_bytes(records[-29 + 24:-29 + 28], "big")
    os.truncate(seg, last_pos)
    os.truncate(idx, len(records) - 29)
    keys = ("customer",)
    cfg = StreamConfig(max_chunk_entries=500, min_chunk_entries=500, max_segment_bytes=15_000, retention_bytes=80_000,
                       derived_keys=keys, derive=deriver(keys))
    with Stream.open(d, cfg) as s:
        assert os.path.getsize(derived_path(d, 0)) < size_before
        c = Cursor.open(d, 0, {"customer": [b"x"]})
        assert c is not None and c.entry_for(1500) is None and c.entry_for(1000) is not None
        c.close()
        # retention removes old segments' sidecars with them
        for _ in range(10):
            s.append_batch(_customers(500, 50, seed=_))
            s.flush()
    names = os.listdir(d)
    segments = {n.split(".")[0] for n in names if n.endswith(".segment")}
    sidecars = {n.split(".")[0] for n in names if n.endswith(".derived")}
    tables = {n.split(".")[0] for n in names if n.endswith(".skip")}
    assert "00000000000000000000" not in segments
    assert sidecars == segments == tables  # (and their skip tables)


def test_inspect_shows_the_derived_index(tmp_path):
    from tests.storage.test_cli import run

    d = str(tmp_path)
    _write(d, _customers(1000, 50), True, 300, [], ("customer",))
    lines = [json.loads(line) for line in run("inspect", d, "--json").stdout.splitlines()]
    assert lines[0] == {"segment": 0, "derived_keys": ["customer"],
                        "derived_bytes": os.path.getsize(derived_path(d, 0)),
                        "derived_entries": 4, "derived_bad_entries": 0,
                        "skip_table": {"rows": 17, "first": 0, "last": 3, "ok": True,
                                       "bytes": os.path.getsize(skiptable.skip_path(d, 0))}}
    chunks = [c for c in lines[1:] if c.get("type") == "user"]
    assert [c["derived"]["records"] for c in chunks] == [300, 300, 300, 100]
    assert all(c["derived"]["indexed_blocks"] == c["derived"]["blocks"] > 0 for c in chunks)
    table = run("inspect", d).stdout
    assert "derived index 00000000000000000000.derived: keys customer" in table
    assert "derived: 5 blocks of 300 records, 5 indexed" in table and "clean" in table
    assert "skip table 00000000000000000000.skip: 17 rows" in table
    assert "index records 0..3" in table
    raw = bytearray(open(skiptable.skip_path(d, 0), "rb").read())
    raw[-1] ^= 1  # a table whose CRC fails is shown so, and is no problem (derived data)
    open(skiptable.skip_path(d, 0), "wb").write(bytes(raw))
    r = run("inspect", d)
    assert "CRC fails (not used)" in r.stdout and r.returncode == 0


def test_sub_batch_entries_are_never_skipped(tmp_path):
    import gzip

    from storage.format import COMPRESSION_GZIP, SubBatchEntry, encode_entries

    keys = ("customer",)
    plain = _customers(640, 100_000)  # c1 nowhere (but for a rare draw)
    inner = [proton.Message(body="y", properties={"customer": "c1"}).encode() for _ in range(10)]
    raw = encode_entries(inner)
    sub = SubBatchEntry(COMPRESSION_GZIP, len(inner), len(raw), gzip.compress(raw))
    bodies = plain[:100] + [sub] + plain[100:]
    with Stream.open(str(tmp_path), _config(True, 1000, keys)) as s:
        s.append_batch(bodies, records=len(bodies) - 1 + len(inner))
        s.flush()
        f = compile_sql("customer = 'c1'")
        match = f.bytes_matcher()
        full = [o for c in s.reader(OffsetSpec.first()) for o, b in c.records if match(b)]
        assert set(range(100, 110)) <= set(full)  # the matches inside the sub-batch
        r = s.reader(OffsetSpec.first(), derived=wanted(keys, f))
        assert [o for c in r for o, b in c.records if match(b)] == full
        assert r.stats.derived_blocks_skipped >= 8  # the other blocks were skipped


# ---- a sidecar entry that says "no match" is trusted only as far as the log agrees ----
_TAMPER = ["crc", "position", "chunk_id", "records"]


def _tampered(directory: str, chunk: int, how: str) -> None:
    """Rewrite the sidecar so that ``chunk``'s entry says no block may match, and is wrong in
    one way the reader must not trust: a stale CRC, or (with a CRC that holds) another position
    or chunk id; or (``records``) give the entry before it one record too many (a CRC that
    holds): the index, not the entry, says where the next chunk starts."""
    path = derived.derived_path(directory, 0)
    with open(path, "rb") as fh:
        buf = fh.read()
    fd = os.open(path, os.O_RDONLY)
    try:
        keys_end = read_keys(fd)[1]
    finally:
        os.close(fd)
    out, at, index = [buf[:keys_end]], keys_end, 0
    while at < len(buf):
        size = struct.unpack_from(">I", buf, at)[0] + 4
        entry = bytearray(buf[at:at + size])
        cid, pos, recs, start, nblocks = struct.unpack_from(">QIIIH", entry, 8)
        if index == chunk and how != "records":
            p = derived.DERIVED_CHUNK.size
            for _ in range(nblocks):  # every Bloom bit cleared: "cannot match"
                nbytes = struct.unpack_from(">H", entry, p + 15)[0]
                entry[p + 17:p + 17 + nbytes] = bytes(nbytes)
                p += 17 + nbytes
            if how == "position":
                struct.pack_into(">I", entry, 16, pos + 1)
            if how == "chunk_id":
                struct.pack_into(">Q", entry, 8, cid + 1)
        if how == "records" and index == chunk - 1:
            struct.pack_into(">I", entry, 20, recs + 1)
        if how != "crc" and index in (chunk - 1, chunk):
            struct.pack_into(">I", entry, 4, zlib.crc32(bytes(entry[8:])))
        out.append(bytes(entry))
        at += size
        index += 1
    with open(path, "wb") as fh:
        fh.write(b"".join(out))


@pytest.mark.parametrize("how", _TAMPER)
def test_an_entry_that_disagrees_with_the_log_is_not_trusted(tmp_path, how):
    """60 chunks of 20 records, every customer once but for chunk 40's last record, the
    wanted one. Chunk 40's entry is made to say "no match" with one thing wrong (after the
    stream's open, whose repair would cut it): the reader must not take it, read chunk 40
    whole, and deliver the match; or its predecessor's record count is wrong: the reader must
    not take that entry (it made the chunk after it fail as corrupt)."""
    keys = ("customer",)
    bodies = [proton.Message(body="x", properties={"customer": f"c{i:05d}"}).encode()
              for i in range(1200)]
    bodies[40 * 20 + 19] = proton.Message(body="x", properties={"customer": "c99999"}).encode()
    f = compile_sql("customer = 'c99999'")
    config = StreamConfig(max_chunk_entries=20, min_chunk_entries=20, derived_keys=keys, derive=deriver(keys))
    with Stream.open(str(tmp_path), config) as s:
        for first in range(0, 1200, 20):
            s.append_batch(bodies[first:first + 20])
        s.flush()
    with Stream.open(str(tmp_path), config) as s:
        if how:  # once open: its repair of the sidecar would cut a lying entry
            _tampered(str(tmp_path), 40, how)
        with s.reader(OffsetSpec.first(), derived=wanted(keys, f)) as r:
            got = [o for c in r for o, b in c.records if f.matches(b)]
            assert got == [819], how
            assert r.stats.derived_chunks_skipped >= 38


def test_entries_that_agree_with_the_log_skip_every_chunk_but_the_match(tmp_path):
    test_an_entry_that_disagrees_with_the_log_is_not_trusted(tmp_path, "")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.binary(max_size=6), max_size=40), min_size=1, max_size=12),
       st.lists(st.sampled_from([8, 12, 96, 128, 384]), min_size=1, max_size=3, unique=True),
       st.integers(1, 30))
def test_block_filters_set_exactly_each_tokens_bits(blocks, sizes, seen_max):
    """The writer's filters, whichever way a token's bits go in (first met, a cached mask,
    every mask known, the cache started again), hold exactly the bits of ``(h1 + i*h2) mod m``
    for their tokens; a bit misplaced would skip a chunk that holds a match."""
    caches: dict = {}
    old = derived._SEEN_MAX
    derived._SEEN_MAX = seen_max
    try:
        # the second pass meets every token again (masks made), the third finds them made
        for tokens in blocks + blocks[::-1] + blocks:
            got = derived._filters(tokens, sizes, caches)
            for n, bits in zip(sizes, got, strict=True):
                want = 0
                for t in tokens:
                    for b in derived._bit_positions(derived._digest(t), 8 * n, 4):
                        want |= 1 << b
                assert bits == want.to_bytes(n, "little")
            # bounded: the cache starts again past seen_max tokens, masks and all
            assert all(len(c) <= seen_max + len(tokens) for c in caches.values())
    finally:
        derived._SEEN_MAX = old


def test_a_replica_builds_the_leaders_sidecars_from_the_chunks_it_takes(tmp_path):
    """``append_chunks`` on a stream with derived keys (a cluster replica): the chunks as the
    leader wrote them, simple and sub-batch entries, tracking chunks and segment splits, give
    the same ``.derived`` and ``.skip`` files as the leader's, and a filtered read on the
    replica skips as on the leader and finds the same records."""
    import gzip

    from storage.format import COMPRESSION_GZIP, SubBatchEntry, encode_entries

    keys = ("customer",)
    config = StreamConfig(max_chunk_entries=50, min_chunk_entries=50, max_segment_bytes=15_000,
                          **storage_settings(keys))
    plain = _customers(900, 100_000)
    inner = [proton.Message(body="y", properties={"customer": "c1"}).encode() for _ in range(10)]
    raw = encode_entries(inner)
    sub = SubBatchEntry(COMPRESSION_GZIP, len(inner), len(raw), gzip.compress(raw))
    leader = Stream.open(str(tmp_path / "leader"), config)
    replica = Stream.open(str(tmp_path / "replica"), config)
    try:
        for k in range(0, 900, 300):
            leader.append_batch(plain[k:k + 100] + [sub] + plain[k + 100:k + 300],
                                records=300 + len(inner))
            leader.store_offset("reader", k)  # a tracking chunk
            leader.flush()
        # the last rollover's snapshot chunk is written after the batch that filled the segment
        wait_for(lambda: leader.local_end == leader._writer.next, 10, "the leader's snapshot")
        with leader.replication_reader(0) as r:
            chunks = []
            while (c := r.read_raw()) is not None:
                chunks.append((os.pread(c.fd, c.size, c.position), c.first))
        assert sum(first for _, first in chunks[1:]) >= 2  # several segments
        replica.set_follower(True)
        for at in range(0, len(chunks), 7):  # batches as the replica's link takes them
            replica.append_chunks(chunks[at:at + 7])
        files = {}
        for name, stream in (("leader", leader), ("replica", replica)):
            files[name] = {f: open(os.path.join(stream.directory, f), "rb").read()
                           for f in sorted(os.listdir(stream.directory))
                           if f.endswith((".derived", ".skip"))}
        assert files["replica"] == files["leader"] and files["leader"]
        f = compile_sql("customer = 'c1'")
        match = f.bytes_matcher()
        found = {}
        for name, stream in (("leader", leader), ("replica", replica)):
            r = stream.reader(OffsetSpec.first(), derived=wanted(keys, f))
            found[name] = ([o for c in r for o, b in c.records if match(b)],
                           r.stats.derived_blocks_skipped + r.stats.chunks_skipped)
        assert found["replica"] == found["leader"]
        assert len(found["leader"][0]) >= 30 and found["leader"][1] > 0
    finally:
        leader.close()
        replica.close()
