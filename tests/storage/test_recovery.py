"""Recovery at open, one named case per way a crash or a bad disk can leave a directory."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from storage import CorruptionError, OffsetSpec, Stream, StreamConfig, open_reader
from storage.format import (CHUNK_HEADER_BYTES, INDEX_HEADER_BYTES, INDEX_RECORD_BYTES, SEGMENT_HEADER_BYTES,
                            decode_header, encode_chunk, encode_entries, encode_index_record)

CFG = StreamConfig(fsync="never", max_segment_chunks=4)


def make(d, n_chunks=10, per_chunk=3) -> list[tuple[int, bytes]]:
    """A closed stream of ``n_chunks`` chunks (segments of 4 chunks); returns its records."""
    recs = []
    with Stream.open(d, CFG) as s:
        for c in range(n_chunks):
            bodies = [b"chunk%d-rec%d-" % (c, i) + b"p" * (c * 7 % 50) for i in range(per_chunk)]
            first = s.append_batch(bodies, [f"v{c % 3}"] * per_chunk)
            s.flush()
            recs += [(first + i, b) for i, b in enumerate(bodies)]
    return recs


def read_all(d) -> list[tuple[int, bytes]]:
    with open_reader(str(d), OffsetSpec.first()) as r:
        return [(o, bytes(b)) for c in r for o, b in c.records]


def seg(d, start):
    return d / f"{start:020d}.segment"


def idx(d, start):
    return d / f"{start:020d}.index"


def last_start(d) -> int:
    return max(int(n[:20]) for n in os.listdir(d) if n.endswith(".segment"))


def chunk_positions(path) -> list[int]:
    raw = path.read_bytes()
    pos, out = SEGMENT_HEADER_BYTES, []
    while pos < len(raw):
        out.append(pos)
        pos += decode_header(raw, pos).size
    return out


def reopen_and_check(d, expected) -> None:
    with Stream.open(d, CFG) as s:
        assert s.next_offset == (expected[-1][0] + 1 if expected else 0)
        assert read_all(d) == expected
        off = s.append(b"after-recovery")
        s.flush()
        assert off == s.committed_offset
    assert read_all(d)[-1] == (off, b"after-recovery")


def test_clean_directory_is_left_byte_for_byte(tmp_path):
    d = tmp_path / "s"
    make(d)
    before = {n: (d / n).read_bytes() for n in os.listdir(d) if n != ".writer.lock"}
    Stream.open(d, CFG).close()
    assert {n: (d / n).read_bytes() for n in os.listdir(d) if n != ".writer.lock"} == before


def test_torn_tail_is_truncated(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    s = seg(d, last_start(d))
    size = s.stat().st_size
    torn = b"".join(encode_chunk(30, 1, encode_entries([b"never-confirmed"] * 5), 5, 5))
    with open(s, "ab") as f:
        f.write(torn[:60])  # header and part of the data
    reopen_and_check(d, recs)
    assert s.stat().st_size > size  # the new append went where the torn chunk was


def test_index_entry_without_chunk_is_dropped(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    start = last_start(d)
    size = seg(d, start).stat().st_size
    with open(idx(d, start), "ab") as f:
        f.write(encode_index_record(30, 1, 1, size, 0))
    reopen_and_check(d, recs)


def test_trailing_zeros_in_the_index_are_dropped(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    start = last_start(d)
    want = idx(d, start).read_bytes()
    with open(idx(d, start), "ab") as f:
        f.write(b"\x00" * (INDEX_RECORD_BYTES * 3 + 5))
    Stream.open(d, CFG).close()
    assert idx(d, start).read_bytes() == want
    reopen_and_check(d, recs)


def test_missing_index_records_are_rebuilt(tmp_path):
    """Crash between the segment write and the index write."""
    d = tmp_path / "s"
    recs = make(d)
    start = last_start(d)
    want = idx(d, start).read_bytes()
    idx(d, start).write_bytes(want[:INDEX_HEADER_BYTES + INDEX_RECORD_BYTES])  # only the first record survived
    Stream.open(d, CFG).close()
    assert idx(d, start).read_bytes() == want
    assert not any(n.endswith(".tmp") for n in os.listdir(d))
    reopen_and_check(d, recs)


def test_crc_mismatch_in_the_last_chunk_truncates_it(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    start = last_start(d)
    s = seg(d, start)
    raw = bytearray(s.read_bytes())
    last = chunk_positions(s)[-1]
    h = decode_header(raw, last)
    raw[last + CHUNK_HEADER_BYTES + h.filter_size + 5] ^= 0xFF
    s.write_bytes(bytes(raw))
    lost = h.records
    reopen_and_check(d, recs[:-lost])
    assert s.stat().st_size > last  # truncated at `last`, then one new chunk


def test_crc_mismatch_in_the_middle_raises_corruption_naming_file_and_position(tmp_path):
    d = tmp_path / "s"
    make(d)
    start = last_start(d)
    s = seg(d, start)
    raw = bytearray(s.read_bytes())
    pos = chunk_positions(s)[0]
    raw[pos + CHUNK_HEADER_BYTES + 16 + 3] ^= 0x10
    s.write_bytes(bytes(raw))
    with pytest.raises(CorruptionError) as ei:
        Stream.open(d, CFG)
    assert ei.value.path == str(s) and ei.value.position == pos
    assert str(s) in str(ei.value)
    assert s.read_bytes() == bytes(raw)  # nothing was truncated


def test_corruption_in_an_older_segment_is_caught_when_read(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    s = seg(d, 0)
    raw = bytearray(s.read_bytes())
    pos = chunk_positions(s)[1]
    raw[pos + CHUNK_HEADER_BYTES + 16 + 2] ^= 0x01
    s.write_bytes(bytes(raw))
    with Stream.open(d, CFG) as st:  # older segments get the cheap check only
        with st.reader(OffsetSpec.first()) as r:
            first = r.read_chunk()
            assert first.records == recs[:3]
            with pytest.raises(CorruptionError) as ei:
                r.read_chunk()
        assert ei.value.path == str(s) and ei.value.position == pos
        # a reader starting after the damage is served
        with st.reader(OffsetSpec.offset(recs[12][0])) as r:
            assert [rec for c in r for rec in c.records] == recs[12:]


def test_orphan_segment_is_removed(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    nxt = recs[-1][0] + 1
    body = b"".join(encode_chunk(nxt, 1, encode_entries([b"orphan"]), 1, 1))
    seg(d, nxt).write_bytes(b"OSIL\x00\x00\x00\x01" + body)
    reopen_and_check(d, recs)
    assert all(b != b"orphan" for _, b in read_all(d))


def test_stale_index_without_segment_is_removed(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    stale = recs[-1][0] + 100
    idx(d, stale).write_bytes(b"OSII\x00\x00\x00\x01")
    reopen_and_check(d, recs)
    assert not idx(d, stale).exists()


def test_stale_index_disagreeing_with_its_segment_is_rebuilt(tmp_path):
    """An index from an earlier life of the segment: positions and ids that do not match."""
    d = tmp_path / "s"
    recs = make(d)
    start = last_start(d)
    want = idx(d, start).read_bytes()
    bogus = b"OSII\x00\x00\x00\x01" + b"".join(
        encode_index_record(start + 2 * k, 5, 1, 8 + 13 * k, 0) for k in range(6))
    idx(d, start).write_bytes(bogus)
    Stream.open(d, CFG).close()
    assert idx(d, start).read_bytes() == want
    reopen_and_check(d, recs)


def test_empty_trailing_segment_is_removed_but_an_only_segment_is_kept(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    nxt = recs[-1][0] + 1
    seg(d, nxt).write_bytes(b"OSIL\x00\x00\x00\x01")
    idx(d, nxt).write_bytes(b"OSII\x00\x00\x00\x01")
    with Stream.open(d, CFG) as s:
        assert nxt not in s.segment_starts()
    assert not seg(d, nxt).exists()
    # a lone empty segment (e.g. everything older removed by retention) keeps its name
    e = tmp_path / "e"
    e.mkdir()
    seg(e, 500).write_bytes(b"OSIL\x00\x00\x00\x01")
    idx(e, 500).write_bytes(b"")  # crash right after creating the index
    with Stream.open(e, CFG) as s:
        assert s.next_offset == 500 and s.first_offset == 500
        assert s.append(b"x") == 500


def test_leftover_temp_index_is_removed(tmp_path):
    d = tmp_path / "s"
    recs = make(d)
    (d / f"{0:020d}.index.tmp").write_bytes(b"half written")
    reopen_and_check(d, recs)
    assert not (d / f"{0:020d}.index.tmp").exists()


def test_bad_segment_header_raises(tmp_path):
    d = tmp_path / "s"
    make(d)
    raw = bytearray(seg(d, 0).read_bytes())
    raw[0:4] = b"XXXX"
    seg(d, 0).write_bytes(bytes(raw))
    with pytest.raises(CorruptionError) as ei:
        Stream.open(d, CFG)
    assert ei.value.position == 0


def test_random_bit_flips_are_never_served_silently(tmp_path):
    """Flip one bit anywhere in a segment or index, many times: opening and reading either raises
    CorruptionError or serves records identical to what was written (a prefix, when a torn-looking
    tail was cut). Header fields outside the CRC (timestamp, epoch, filter) may change unnoticed,
    but never a record's bytes or offset."""
    base = tmp_path / "base"
    recs = make(base, n_chunks=8)
    rng = random.Random(1234)
    files = sorted(n for n in os.listdir(base) if not n.startswith("."))
    outcomes = {"error": 0, "served": 0}
    for trial in range(40):
        d = tmp_path / f"t{trial}"
        shutil.copytree(base, d)
        name = rng.choice(files)
        raw = bytearray((d / name).read_bytes())
        bit = rng.randrange(len(raw) * 8)
        raw[bit // 8] ^= 0x80 >> (bit % 8)
        (d / name).write_bytes(bytes(raw))
        try:
            with Stream.open(d, CFG):
                got = read_all(d)
        except CorruptionError:
            outcomes["error"] += 1
            continue
        outcomes["served"] += 1
        assert got == recs[:len(got)], (name, bit)
        shutil.rmtree(d)
    assert outcomes["error"] > 0 and outcomes["served"] > 0
