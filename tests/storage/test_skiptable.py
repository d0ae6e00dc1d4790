"""The skip table (``storage.skiptable``) on real files: its rows follow the index and the
sidecar, a reader passes over the chunks it rules out without decoding their sidecar entries,
and a table that is damaged, stale, partial, for other keys or out of step with the index
never changes what a reader delivers (the property tests of ``test_derived`` run with it too).
"""

from __future__ import annotations

import os
import random
import struct
import zlib

import proton
import pytest

from amqp_stream.derived_keys import bounds, storage_settings, wanted
from bench.storage import drop_cache
from sqlfilter import compile_sql
from storage import OffsetSpec, Stream, StreamConfig
from storage import derived, reader, skiptable
from storage.derived import Cursor, derived_path, load
from storage.files import in_page_cache, index_path, read_index_records, segment_path
from storage.skiptable import (NO_NUMBER, ROW_BLOOM_BYTES, SKIP_HEADER, SKIP_ROW, Table, row_bytes,
                               skip_path)

KEYS = ("customer",)
ROW_BYTES = row_bytes(len(KEYS))


def _bodies(n: int, values: int, seed: int = 1) -> list[bytes]:
    rnd = random.Random(seed)
    return [proton.Message(body="x" * 30, properties={"customer": f"c{rnd.randrange(values)}"}
                           ).encode() for _ in range(n)]


def _config(**kw) -> StreamConfig:
    keys = kw.pop("keys", KEYS)
    entries = kw.pop("entries", 100)
    return StreamConfig(max_chunk_entries=entries, min_chunk_entries=entries,
                        **storage_settings(keys), **kw)


def _write(directory: str, bodies: list[bytes], chunk: int = 100, **kw) -> None:
    with Stream.open(directory, _config(entries=chunk, **kw)) as s:
        for i in range(0, len(bodies), chunk):
            s.append_batch(bodies[i:i + chunk])
            s.flush()


def _rows(directory: str, start: int = 0
          ) -> tuple[tuple, list[tuple[int, int, int, bytes, tuple[int, int]]]]:
    """The header and each row as (record number, entry position, chunk id, Bloom and bounds,
    (block position, block length))."""
    with open(skip_path(directory, start), "rb") as fh:
        raw = fh.read()
    head = SKIP_HEADER.unpack_from(raw)
    rows = []
    for r in range(head[3]):
        at = SKIP_HEADER.size + r * ROW_BYTES
        number, entry, chunk_id, block_at, length = SKIP_ROW.unpack_from(raw, at)
        rows.append((number, entry, chunk_id, raw[at + SKIP_ROW.size:at + ROW_BYTES], (block_at, length)))
    return head, rows


def _pack(number: int, entry: int, chunk_id: int, rest: bytes, place: tuple[int, int]) -> bytes:
    return SKIP_ROW.pack(number, entry, chunk_id, *place) + rest


def _rewrite(directory: str, rows: list[bytes], start: int = 0) -> None:
    """The table with these rows, under a header whose CRC holds (a lie only the log can
    expose)."""
    with open(skip_path(directory, start), "rb") as fh:
        head = SKIP_HEADER.unpack_from(fh.read(SKIP_HEADER.size))
    raw = b"".join(rows)
    with open(skip_path(directory, start), "wb") as fh:
        fh.write(SKIP_HEADER.pack(head[0], head[1], head[2], len(rows), zlib.crc32(raw), head[5], head[6]))
        fh.write(raw)


def _read(where: str | Stream, text: str, start: int = 0, **kw):
    """Matches from ``start`` (and the reader's stats) in a stream open already, or opened
    here (whose writer first checks the table against the index, see ``_opened``)."""
    f = compile_sql(text)
    if isinstance(where, str):
        with Stream.open(where, _config(**kw)) as s:
            return _read(s, text, start, keys=kw.get("keys", KEYS))
    keys = kw.get("keys", KEYS)
    with where.reader(OffsetSpec.offset(start), derived=wanted(keys, f), bounds=bounds(keys, f)) as r:
        return [o for c in r for o, b in c.records if f.matches(b)], r.stats


def _full(bodies: list[bytes], text: str, start: int = 0) -> list[int]:
    f = compile_sql(text)
    return [i for i, b in enumerate(bodies) if i >= start and f.matches(b)]


def test_rows_follow_the_index_and_the_sidecar(tmp_path):
    d = str(tmp_path)
    bodies = _bodies(1000, 300)
    with Stream.open(d, _config(entries=100)) as s:
        for i in range(0, 1000, 250):  # groups of several chunks
            s.append_batch(bodies[i:i + 250])
            if i == 500:
                s.store_offset("reader", 42)  # a tracking chunk between user chunks
            s.flush()
    head, rows = _rows(d)
    fd = os.open(index_path(d, 0), os.O_RDONLY)
    try:
        index = read_index_records(fd)
    finally:
        os.close(fd)
    keys, entries, bad, size = load(d, 0)
    assert bad == 0 and head[5] == size  # the rows cover the whole sidecar
    by_chunk = {e.chunk_id: e for e in entries}
    numbers = [r[0] for r in rows]
    assert sorted(set(numbers)) == list(range(len(index)))  # every record, in order
    assert numbers == sorted(numbers)
    for number, rec in enumerate(index):
        mine = [r for r in rows if r[0] == number]
        assert {r[2] for r in mine} == {rec.chunk_id}
        if rec.type:  # tracking: one row that nothing matches, no block
            assert len(mine) == 1 and mine[0][1] == 0 and mine[0][3] == bytes(ROW_BLOOM_BYTES) + NO_NUMBER
            assert mine[0][4] == (0, 0)
            continue
        e = by_chunk[rec.chunk_id]
        assert len(mine) == e.nblocks  # a row per block, with the place of its bytes
        assert [r[4] for r in mine] == [(rec.position + e.data_start + b.offset, b.length)
                                        for b in e.blocks]
        with open(segment_path(d, 0), "rb") as fh:  # (the block's own CRC holds over them)
            for (at, length), b in zip([r[4] for r in mine], e.blocks, strict=True):
                fh.seek(at)
                assert zlib.crc32(fh.read(length)) == b.crc
        with open(derived_path(d, 0), "rb") as fh:  # the entry lies where the row says
            fh.seek(mine[0][1])
            assert struct.unpack(">Q", fh.read(16)[8:])[0] == rec.chunk_id
        assert {r[1] for r in mine} == {mine[0][1]}
    assert any(rec.type for rec in index)


def test_a_reader_passes_over_what_the_table_rules_out(tmp_path, monkeypatch):
    """300 chunks of 40 records, a customer in one record of 10,000: the reader delivers what
    a full scan does and decodes the sidecar entries of a few chunks, not of all 300, nor
    their index records (it reads up to the record after each stop, then leaps)."""
    d = str(tmp_path)
    bodies = _bodies(12_000, 10_000)
    _write(d, bodies, chunk=40)
    decoded = []
    real = reader.read_index_tuples
    monkeypatch.setattr(reader, "read_index_tuples",
                        lambda *a: decoded.append(len(got := real(*a))) or got)
    for text in ("customer = 'c42'", "customer IN ('c1', 'c2', 'c3')", "customer = 'none'"):
        decoded.clear()
        got, stats = _read(d, text, entries=40)
        assert got == _full(bodies, text), text
        assert stats.derived_entries_read <= 3 * len(got) + 6, (text, stats)
        assert stats.derived_chunks_skipped >= 300 - 3 * len(got) - 6
        assert sum(decoded) <= 4 * stats.derived_entries_read + 8, (text, decoded)
    # without the table the same answer, walking every entry
    os.unlink(skip_path(d, 0))
    got, stats = _read(d, "customer = 'c42'", entries=40)
    assert got == _full(bodies, "customer = 'c42'") and stats.derived_entries_read >= 299
    # too many wanted tokens for the table: walked, same answer
    many = "customer IN (" + ", ".join(f"'c{i}'" for i in range(skiptable.MAX_TOKENS + 1)) + ")"
    _write(str(tmp_path / "again"), bodies, chunk=40)
    got, stats = _read(str(tmp_path / "again"), many, entries=40)
    assert got == _full(bodies, many) and stats.derived_entries_read >= 290


def _watch_io(monkeypatch) -> tuple[dict[str, list[tuple[int, int]]], list[tuple[int, int]]]:
    """What the reader asks the kernel for (by file kind: "segment", "derived") and the
    (position, size) of each segment read it makes; both still done for real."""
    advised: dict[str, list[tuple[int, int]]] = {"segment": [], "derived": []}
    read: list[tuple[int, int]] = []
    real_advise, real_pread, real_scratch = reader.advise, reader.pread_exact, reader.pread_scratch

    def advise(fd, places):
        places = list(places)
        advised[os.readlink(f"/proc/self/fd/{fd}").rsplit(".", 1)[1]].extend(places)
        real_advise(fd, places)

    def pread_exact(fd, size, position):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".segment"):
            read.append((position, size))
        return real_pread(fd, size, position)

    def pread_scratch(fd, size, position):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".segment"):
            read.append((position, size))
        return real_scratch(fd, size, position)

    monkeypatch.setattr(reader, "advise", advise)
    monkeypatch.setattr(derived, "advise", advise)
    monkeypatch.setattr(reader, "pread_exact", pread_exact)
    monkeypatch.setattr(reader, "pread_scratch", pread_scratch)
    return advised, read


def _within(at: int, size: int, places: list[tuple[int, int]]) -> bool:
    return any(a <= at and at + size <= a + n for a, n in places)


def test_a_cold_reader_asks_for_its_stops_pages_at_once(tmp_path, monkeypatch):
    """Out of the page cache, the reader asks the kernel at its first stop for every page its
    stops will read (blocks, whole chunks, sidecar entries), so that those reads overlap; in
    the cache it asks for nothing. What it delivers is the same either way."""
    d = str(tmp_path)
    bodies = _bodies(20_000, 10_000)
    _write(d, bodies, chunk=200)  # blocks of 64, 64, 64 and 8 records: some stops read a block
    advised, read = _watch_io(monkeypatch)
    text = "customer IN (" + ", ".join(f"'c{i}'" for i in range(1, 16)) + ")"
    with Stream.open(d, _config(entries=200)) as s:
        drop_cache(d)  # (written back, dropped, none left resident: for real)
        got, stats = _read(s, text)
        assert got == _full(bodies, text) and len(got) >= 20
        assert stats.derived_chunks_skipped > 40  # (a selective read: stops, not a scan)
        assert read and all(_within(at, size, advised["segment"]) for at, size in read), (read, advised)
        assert any(size < 200 * 30 for _, size in read)  # blocks alone, some of them
        assert len(advised["derived"]) >= stats.chunks_read  # each stop's entry
        for kind in advised:
            advised[kind].clear()
        read.clear()
        assert _read(s, text)[0] == got  # warm now: the probe finds the pages, asks nothing
        assert read and advised == {"segment": [], "derived": []}
        # the sendfile path (``read_location``) stops the same way: cold, it asks for the
        # window's pages too, and what each location names lies inside them
        warm = _located(s, text)
        drop_cache(d)  # (written back, then dropped: for real)
        cold = _located(s, text)
        assert cold == warm and any(blocks is not None for _, _, blocks in cold)
        for _, (at, size), blocks in cold:
            places = [(at + b.offset, b.length) for b in blocks] if blocks is not None else [(at, size)]
            assert all(_within(p, n, advised["segment"]) for p, n in places), (places, advised)


def test_a_reader_found_cold_asks_for_each_later_window_unprobed(tmp_path, monkeypatch):
    """Windows of 4 stops: the page of the second window's first stop is in the cache (read
    ahead, say) and the rest of that window is not. A reader that found the first window cold
    still asks for the second one's pages: every read it makes lies in what it asked for."""
    d = str(tmp_path)
    bodies = _bodies(20_000, 10_000)
    _write(d, bodies, chunk=200)
    monkeypatch.setattr(reader, "_ADVISE_STOPS", 4)
    probed: list[int] = []
    real_probe = reader.in_page_cache
    monkeypatch.setattr(reader, "in_page_cache", lambda fd, at: probed.append(at) or real_probe(fd, at))
    advised_by_file, read = _watch_io(monkeypatch)
    advised = advised_by_file["segment"]
    text = "customer IN (" + ", ".join(f"'c{i}'" for i in range(1, 16)) + ")"
    with Stream.open(d, _config(entries=200)) as s:
        got = _read(s, text)[0]  # warm: each window probed at its first stop
        assert got == _full(bodies, text) and len(probed) >= 3 and not advised
        second = probed[1]
        drop_cache(d)  # (written back, then dropped: for real)
        fd = os.open(segment_path(d, 0), os.O_RDONLY)
        try:
            os.pread(fd, 1, second)  # that one page back in the cache
            assert in_page_cache(fd, second) is True
        finally:
            os.close(fd)
        read.clear()
        assert _read(s, text)[0] == got
        assert read and all(_within(at, size, advised) for at, size in read), (read, advised)


def _located(s: Stream, text: str) -> list[tuple[int, tuple[int, int], list | None]]:
    """(chunk id, (data position, length), blocks) of each location a derived-key reader gives."""
    f = compile_sql(text)
    out = []
    with s.reader(OffsetSpec.first(), derived=wanted(KEYS, f), bounds=bounds(KEYS, f)) as r:
        while (loc := r.read_location()) is not None:
            if loc is not reader.SCAN_PAUSED:
                out.append((loc.chunk_id, (loc.position, loc.length), loc.blocks))
    return out


def _sequenced(n: int) -> list[bytes]:
    """Records whose ``seq`` grows with the offset (every 7th a string, every 11th without it)
    and whose creation time does too: what a range over a time or a sequence number meets."""
    out = []
    for i in range(n):
        props = {} if i % 11 == 0 else {"seq": f"s{i}" if i % 7 == 0 else i}
        out.append(proton.Message(body="x" * 30, properties=props, creation_time=1_000_000 + i).encode())
    return out


def test_a_range_over_growing_numbers_reads_the_chunks_inside_only(tmp_path):
    """Each row keeps its block's least and greatest number per key: ``seq >= 11_000`` over
    12,000 records in 300 chunks reads the last ~25 chunks, and gives what a full scan gives,
    also when combined with an equality or another key's range."""
    d = str(tmp_path)
    keys = ("seq", "p.creation_time")
    bodies = _sequenced(12_000)
    _write(d, bodies, chunk=40, keys=keys)
    for text, most in (("seq >= 11000", 26), ("seq BETWEEN 100 AND 180 OR seq IN (120, 181)", 4),
                       ("seq > 1000 AND p.creation_time < 1000500", 0),  # (empty: 1000-499)
                       ("11960 < seq AND seq <> 11990", 2), ("seq > 100000", 0),
                       ("seq = 'a' OR seq > 11000", 300), ("p.creation_time BETWEEN 1002000 AND 1002039", 2)):
        f = compile_sql(text)
        with Stream.open(d, _config(entries=40, keys=keys)) as s:
            with s.reader(OffsetSpec.offset(0), derived=wanted(keys, f), bounds=bounds(keys, f)) as r:
                got = [o for c in r for o, b in c.records if f.matches(b)]
                stats = r.stats
        assert got == _full(bodies, text), text
        assert stats.chunks_read <= most, (text, stats)
        if most < 300:
            assert stats.derived_chunks_skipped >= 300 - most - 1, (text, stats)
    # without a table, bounds alone skip nothing (the sidecar keeps no numbers): same answer
    os.unlink(skip_path(d, 0))
    f = compile_sql("seq >= 11000")
    with Stream.open(d, _config(entries=40, keys=keys)) as s:
        with s.reader(OffsetSpec.offset(0), bounds=bounds(keys, f)) as r:
            assert [o for c in r for o, b in c.records if f.matches(b)] == _full(bodies, "seq >= 11000")
            assert r.stats.chunks_read == 300 and r.stats.derived_entries_read == 0


@pytest.mark.parametrize("text", ["seq > 11959", "seq >= 11960", "seq > 11960", "seq >= 11999", "seq < 40",
                                  "seq <= 39", "seq < 1", "seq <= 0", "seq BETWEEN 39 AND 40", "seq = 11999",
                                  "40 > seq", "11959 < seq", "seq IN (79, 80)", "seq > 11999", "seq < 0"])
def test_bounds_at_the_edges_of_chunks(tmp_path, text):
    """A chunk per 40 numbers: each filter's interval ends exactly at a chunk's least or
    greatest number; the chunks read hold exactly the matches (no fewer: a wrong comparison at
    an edge would lose them)."""
    d = str(tmp_path)
    bodies = [proton.Message(body="x", properties={"seq": i}).encode() for i in range(12_000)]
    _write(d, bodies, chunk=40, keys=("seq",))
    got, stats = _read(d, text, entries=40, keys=("seq",))
    want = _full(bodies, text)
    assert got == want
    assert stats.chunks_read == len({o // 40 for o in want}), stats


def test_bounds_are_rounded_outwards_and_kept_per_key(tmp_path):
    """Numbers past 2**53 round outwards to doubles (a match is never outside its row's
    bounds); a row without a number of a key bounds it to nothing; a key of strings only too."""
    d = str(tmp_path)
    keys = ("customer", "big")
    base = 2 ** 60  # doubles here are 256 apart: +200 and +300 both round to +256
    big = [base + 200, base + 250, base + 300]
    bodies = [proton.Message(body="x", properties={"customer": "c1", "big": proton.ulong(v)}).encode()
              for v in big] + [proton.Message(body="x", properties={"customer": "c2"}).encode()]
    with Stream.open(d, _config(entries=3, keys=keys)) as s:
        s.append_batch(bodies)
        s.flush()
    head, rows = _rows(d)
    assert head[6] == 2 and len(rows) == 2
    bloomed = SKIP_ROW.size + ROW_BLOOM_BYTES
    raw = open(skip_path(d, 0), "rb").read()
    row = row_bytes(2)
    first = struct.unpack_from(">dddd", raw, SKIP_HEADER.size + bloomed)
    assert first[:2] == (float("inf"), float("-inf"))  # customer: strings only
    assert first[2] <= big[0] and first[3] >= big[2] and first[2] < first[3]
    second = struct.unpack_from(">dddd", raw, SKIP_HEADER.size + row + bloomed)
    assert second == (float("inf"), float("-inf"), float("inf"), float("-inf"))
    for text in (f"big < {base + 201}", f"big > {base + 299}", f"big = {base + 250}", f"big > {base + 300}"):
        assert _read(d, text, entries=3, keys=keys)[0] == _full(bodies, text), text


@pytest.mark.parametrize("start", [0, 5_555])
def test_a_table_that_ends_early_or_begins_late(tmp_path, start):
    """The table covers only part of the segment (cut, or begun after the segment): before
    and after it the sidecar is walked; the answer never changes."""
    d = str(tmp_path)
    bodies = _bodies(8000, 2000)
    _write(d, bodies, chunk=50)
    text = "customer = 'c7'"
    head, rows = _rows(d)
    raw_rows = [_pack(*r) for r in rows]
    with Stream.open(d, _config(entries=50)) as s:  # (tables changed after the writer's checks)
        _rewrite(d, raw_rows[:len(raw_rows) // 2])  # ends halfway (the header's sidecar end
        got, stats = _read(s, text, start)          # is the whole sidecar's: a stale one)
        assert got == _full(bodies, text, start)
        if start == 0:  # the second half walked from the table's end (a reader starting
            assert stats.derived_entries_read < 100  # past the table walks from the start)
        _rewrite(d, raw_rows[len(raw_rows) // 2:])  # begins halfway
        got, stats = _read(s, text, start)
        assert got == _full(bodies, text, start)
        if start == 0:
            assert 50 <= stats.derived_entries_read < 100  # the first half walked
    # the writer at open keeps no table that does not reach the index's end (rows lost):
    # it starts again, and covers the chunks written from then on
    _rewrite(d, raw_rows[:10])
    more = _bodies(2000, 2000, seed=2)
    _write(d, more, chunk=50)
    head, rows = _rows(d)
    assert rows and min(r[0] for r in rows) == 160  # the 160 chunks before: not covered
    got, stats = _read(d, text, start)
    assert got == _full(bodies + more, text, start)


def _tampered_rows(d: str, how: str) -> list[bytes]:
    head, rows = _rows(d)
    out = []
    for number, entry, chunk_id, bloom, place in rows:
        if how == "shifted":
            number += 1
        elif how == "chunk_id":
            chunk_id += 1
        elif how == "cleared" and number % 2:
            bloom = bytes(len(bloom))  # "nothing here"
        out.append(_pack(number, entry, chunk_id, bloom, place))
    return out


@pytest.mark.parametrize("how", ["crc", "shifted", "chunk_id", "keys", "torn"])
def test_a_table_out_of_step_with_the_log_is_not_trusted(tmp_path, how):
    """A stale CRC, rows whose record numbers or chunk ids disagree with the index (with a
    CRC that holds), a table of other keys, a header counting rows not there: the reader
    delivers exactly what a full scan does."""
    d = str(tmp_path)
    bodies = _bodies(6000, 3000)
    _write(d, bodies, chunk=30)
    text = "customer IN ('c5', 'c9')"
    with Stream.open(d, _config(entries=30)) as s:  # once open: the writer's checks are done
        path = skip_path(d, 0)
        if how == "crc":
            raw = bytearray(open(path, "rb").read())
            raw[SKIP_HEADER.size + SKIP_ROW.size + 3] ^= 0xFF
            open(path, "wb").write(bytes(raw))
        elif how in ("shifted", "chunk_id"):
            _rewrite(d, _tampered_rows(d, how))
        elif how == "keys":
            raw = bytearray(open(path, "rb").read())
            struct.pack_into(">I", raw, 8, skiptable.keys_crc(["other"]))
            open(path, "wb").write(bytes(raw))
        else:
            raw = bytearray(open(path, "rb").read())
            struct.pack_into(">I", raw, 12, SKIP_HEADER.unpack_from(raw)[3] + 5)
            open(path, "wb").write(bytes(raw))
        f = compile_sql(text)
        cur = Cursor.open(d, 0, wanted(KEYS, f))
        assert cur is not None
        table, _ = Table.load(d, 0, cur.keys, cur.wanted)
        cur.close()
        assert (table is None) == (how in ("crc", "keys", "torn"))
        got, stats = _read(s, text)
        assert got == _full(bodies, text), how
    # at the next open the writer starts such a table again (covering what comes next)
    got, stats = _read(d, text, entries=30)
    assert got == _full(bodies, text) and _rows(d)[0][3] == 0


def test_a_lying_table_is_what_only_its_crc_guards(tmp_path):
    """Bloom bits cleared under a CRC that holds lose matches: the table is trusted as far as
    the sidecar is (its CRC, its record numbers and chunk ids); the writer never writes one."""
    d = str(tmp_path)
    bodies = _bodies(3000, 300)
    _write(d, bodies, chunk=30)
    text = "customer = 'c5'"
    with Stream.open(d, _config(entries=30)) as s:
        assert _read(s, text)[0] == _full(bodies, text)
        _rewrite(d, _tampered_rows(d, "cleared"))
        assert len(_read(s, text)[0]) < len(_full(bodies, text))


def test_recovery_cuts_the_rows_of_chunks_gone_and_orphans_go(tmp_path):
    d = str(tmp_path)
    bodies = _bodies(2000, 50)
    _write(d, bodies, chunk=500)
    head, rows = _rows(d)
    # the last chunk lost from segment and index (as after a crash): its rows go at open
    idx = index_path(d, 0)
    with open(idx, "rb") as fh:
        records = fh.read()
    last_pos = int.from_bytes(records[-29 + 24:-29 + 28], "big")
    os.truncate(os.path.join(d, "00000000000000000000.segment"), last_pos)
    os.truncate(idx, len(records) - 29)
    cfg = _config(entries=500)
    with Stream.open(d, cfg) as s:
        head2, rows2 = _rows(d)
        assert [r[0] for r in rows2] == [r[0] for r in rows if r[0] < 3]
        assert rows2 == [r for r in rows if r[0] < 3]
        assert head2[5] == os.path.getsize(derived_path(d, 0))  # where the next entry goes
        f = compile_sql("customer = 'c7'")
        with s.reader(OffsetSpec.first(), derived=wanted(KEYS, f)) as r:
            got = [o for c in r for o, b in c.records if f.matches(b)]
        assert got == _full(bodies[:1500], "customer = 'c7'") and got
    # a table whose segment is gone (a crash between deleting the two) goes at open;
    # retention deletes tables with their segments (test_derived's recovery test)
    orphan = skip_path(d, 99_999)
    open(orphan, "wb").write(b"x")
    with Stream.open(d, cfg):
        assert not os.path.exists(orphan)


def test_rows_read_once_are_not_read_again(tmp_path):
    """A table read before is kept in memory: a later reader reads only the rows added since
    (carrying the CRC on over them), and reads it whole when the table was rewritten."""
    d = str(tmp_path)
    bodies = _bodies(4000, 1000)
    text = "customer = 'c3'"
    f = compile_sql(text)
    with Stream.open(d, _config(entries=40)) as s:
        for i in range(0, 2000, 40):
            s.append_batch(bodies[i:i + 40])
        s.flush()
        cur = Cursor.open(d, 0, wanted(KEYS, f))
        assert cur is not None
        rows_before = _rows(d)[0][3]
        first, read_first = Table.load(d, 0, cur.keys, cur.wanted)
        assert first is not None and read_first >= rows_before * ROW_BYTES
        again, read_again = Table.load(d, 0, cur.keys, cur.wanted)
        assert again is not None and read_again < ROW_BYTES  # the header and the last row id
        for i in range(2000, 4000, 40):  # the writer appends: only the new rows are read
            s.append_batch(bodies[i:i + 40])
        s.flush()
        rows_after = _rows(d)[0][3]
        grown, read_grown = Table.load(d, 0, cur.keys, cur.wanted)
        assert grown is not None and grown.last == 99
        assert read_grown < (rows_after - rows_before + 1) * ROW_BYTES
        assert _read(s, text)[0] == _full(bodies, text)
        # rewritten with as many rows (other bits, a CRC that holds): read whole again
        _rewrite(d, _tampered_rows(d, "cleared"))
        _, read_rewritten = Table.load(d, 0, cur.keys, cur.wanted)
        assert read_rewritten >= rows_after * ROW_BYTES
        cur.close()


def test_the_rows_kept_in_memory_stay_within_their_budget(tmp_path, monkeypatch):
    """Tables kept in memory (rows, record numbers and chunk ids) never add up to more than
    ``CACHE_BYTES``: the least recently used goes first and is read whole again; what a
    reader delivers does not change."""
    bodies = _bodies(1200, 300)
    text = "customer = 'c7'"
    f = compile_sql(text)
    dirs = []
    for n in range(6):
        d = str(tmp_path / f"s{n}")
        _write(d, bodies, chunk=40)
        dirs.append(d)
    rows = _rows(dirs[0])[0][3]
    # four tables fit, with their rows' record numbers (4 bytes) and chunk ids (8); five
    # would if only the rows counted
    budget = rows * (5 * ROW_BYTES + 30)
    assert 4 * rows * (ROW_BYTES + 12) <= budget < 5 * rows * (ROW_BYTES + 12)
    monkeypatch.setattr(skiptable, "CACHE_BYTES", budget)
    monkeypatch.setattr(skiptable, "_CACHE", type(skiptable._CACHE)())
    for d in dirs:
        cur = Cursor.open(d, 0, wanted(KEYS, f))
        assert cur is not None
        table, read = Table.load(d, 0, cur.keys, cur.wanted)
        assert table is not None and read >= rows * ROW_BYTES  # new: read whole
        cur.close()
        kept = sum(len(v[2]) + v[3].nbytes + v[4].nbytes for v in skiptable._CACHE.values())
        assert kept <= budget
    assert len(skiptable._CACHE) == 4
    for d, whole in ((dirs[-1], False), (dirs[0], True)):  # kept; gone (read whole again)
        cur = Cursor.open(d, 0, wanted(KEYS, f))
        assert cur is not None
        _, read = Table.load(d, 0, cur.keys, cur.wanted)
        cur.close()
        assert (read >= rows * ROW_BYTES) is whole
        assert _read(d, text)[0] == _full(bodies, text)
