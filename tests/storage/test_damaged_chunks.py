"""Chunks damaged on disk after they were written and indexed, read by every reader path of an
open stream (plain, stage-1 values, needles and columns, derived-key blocks; ``read_chunk`` and
``read_location``), and by recovery at the next open.

Damage (``os.pwrite``/``os.truncate`` on the files): a bit of the data section, a torn page
(4 KiB of zeros), the segment cut inside a chunk, an index record past the segment's end, and
header fields: magic, version, type, record count, chunk id, CRC, data length (less, more,
near 2 GiB), filter size (past the chunk, none, below the minimum).

What must hold: a reader gives chunks as they were written and, where it meets the damage,
raises ``CorruptionError`` naming the segment; an unfiltered reader never passes over a damaged
chunk in silence. ``read_location``'s data is sent unread (``os.sendfile``): it may point at a
damaged data section only under the CRC its header carries, which then fails, and never gives
a header whose counts or place disagree with the index. Not covered: the entry count and the
filter's bits, which nothing on disk checks (a filtered reader may pass over such a chunk).
"""

from __future__ import annotations

import os
import tracemalloc
import zlib

import proton
import pytest

from amqp_stream import derived_keys
from amqp_stream.columns import column_matcher
from sqlfilter import compile_sql
from sqlfilter.required import needles_of
from storage import SCAN_PAUSED, CorruptionError, OffsetSpec, Stream, StreamConfig, open_reader
from storage.files import read_index_tuples
from storage.format import CHUNK_HEADER_BYTES as HB
from storage.format import INDEX_HEADER_BYTES, INDEX_RECORD_BYTES, decode_header

pytestmark = pytest.mark.timeout(60)

CHUNKS, PER_CHUNK = 5, 100
DAMAGED = 1  # the chunk damaged: the middle one of the older segment (segments of 3 chunks)
ROTTEN = ("bit rot", "torn page", "crc")  # damage that the data CRC alone tells
SQL = compile_sql("region = 'r1'")


def _config(derived: bool) -> StreamConfig:
    return StreamConfig(fsync="never", min_chunk_entries=PER_CHUNK, max_chunk_entries=PER_CHUNK,
                        max_segment_chunks=3,
                        **(derived_keys.storage_settings(["region"]) if derived else {}))


def _fill(directory: str, derived: bool) -> Stream:
    s = Stream.open(directory, _config(derived))
    for c in range(CHUNKS):
        ids = range(c * PER_CHUNK, (c + 1) * PER_CHUNK)
        s.append_batch([bytes(proton.Message(body=b"m%05d" % i, properties={"region": f"r{i % 3}"})
                              .encode()) for i in ids], [f"r{i % 3}" for i in ids])
        s.flush()
    return s


def _index(directory: str) -> list[tuple[str, str, tuple]]:
    """(segment path, index path, index record) of every chunk, in order."""
    out = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".index")):
        ipath = os.path.join(directory, name)
        fd = os.open(ipath, os.O_RDONLY)
        try:
            out += [(ipath[:-6] + ".segment", ipath, r) for r in read_index_tuples(fd, 0, 100)]
        finally:
            os.close(fd)
    return out


def _pwrite(path: str, data: bytes, at: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, at)
    finally:
        os.close(fd)


def _field(at: int, size: int, value):
    """Damage: header field at byte ``at`` of the chunk set to ``value(header)``."""
    def damage(seg: str, ipath: str, rec: tuple, h) -> None:
        _pwrite(seg, (value(h) % (1 << 8 * size)).to_bytes(size, "big"), rec[3] + at)
    return damage


def _bit_rot(seg, ipath, rec, h):
    at = rec[3] + HB + h.filter_size + 200
    with open(seg, "rb") as f:
        f.seek(at)
        byte = f.read(1)[0]
    _pwrite(seg, bytes([byte ^ 0x08]), at)


def _torn_page(seg, ipath, rec, h):
    _pwrite(seg, bytes(4096), (rec[3] + 100) // 4096 * 4096)


def _cut(seg, ipath, rec, h):
    os.truncate(seg, rec[3] + HB + h.filter_size + 50)


def _index_past_end(seg, ipath, rec, h):
    number = next(i for i, r in enumerate(_index(os.path.dirname(seg))) if r[2] == rec)
    number -= sum(1 for s, _, _ in _index(os.path.dirname(seg)) if s < seg)  # in its segment
    _pwrite(ipath, (os.path.getsize(seg) + 1000).to_bytes(4, "big"),
            INDEX_HEADER_BYTES + number * INDEX_RECORD_BYTES + 24)


DAMAGE = {
    "bit rot": _bit_rot, "torn page": _torn_page, "segment cut": _cut,
    "index past the end": _index_past_end,
    "magic": _field(0, 1, lambda h: 0x60), "version": _field(0, 1, lambda h: 0x51),
    "type tracking": _field(1, 1, lambda h: 1), "type unknown": _field(1, 1, lambda h: 7),
    "records less": _field(4, 4, lambda h: h.records - 1),
    "records more": _field(4, 4, lambda h: h.records + 1),
    "chunk id": _field(24, 8, lambda h: h.chunk_id + 1), "crc": _field(32, 4, lambda h: h.crc ^ 1),
    "data length less": _field(36, 4, lambda h: h.data_length - 1),
    "data length more": _field(36, 4, lambda h: h.data_length + 1),
    "data length huge": _field(36, 4, lambda h: 0x7FFFFFFF),
    "filter past the chunk": _field(44, 1, lambda h: 255), "no filter": _field(44, 1, lambda h: 0),
    "filter too small": _field(44, 1, lambda h: 8),
}

READERS = {  # (derived stream, reader arguments)
    "plain": (False, {}),
    "stage 1": (False, {"filter_values": ["r0", "r1", "r2"]}),  # every chunk may match
    "needles and columns": (False, {"needles": needles_of(SQL), "columns": column_matcher(SQL)}),
    "derived blocks": (True, {"derived": derived_keys.wanted(("region",), SQL)}),
}


def _damaged(directory: str, derived: bool, damage: str, chunk: int = DAMAGED):
    """The stream open, its chunks as written ({chunk id: (header, data)}), then chunk number
    ``chunk`` damaged; and the damaged chunk's segment."""
    s = _fill(directory, derived)
    written = {}
    for seg, _, rec in _index(directory):
        with open(seg, "rb") as f:
            f.seek(rec[3])
            raw = f.read(HB + 255)
            h = decode_header(raw)
            f.seek(rec[3] + HB + h.filter_size)
            written[rec[0]] = (h, f.read(h.data_length))
    seg, ipath, rec = _index(directory)[chunk]
    DAMAGE[damage](seg, ipath, rec, written[rec[0]][0])
    return s, written, seg


def _read_all(reader, locations: bool, written: dict) -> tuple[list[int], Exception | None]:
    """Chunk ids given until the end or an error; each checked against what was written."""
    got: list[int] = []
    for _ in range(10 * CHUNKS):  # (a reader going round in circles fails here, not hangs)
        try:
            out = reader.read_location() if locations else reader.read_chunk()
        except CorruptionError as exc:
            return got, exc
        if out is None:
            return got, None
        if out is SCAN_PAUSED:
            continue
        h, data = written[out.chunk_id]
        if locations:
            _check_location(out, h, data)
        else:
            records = dict(_records(data, out.chunk_id))
            assert all(records[offset] == body for offset, body in out.records)
        got.append(out.chunk_id)
    raise AssertionError("the reader did not come to an end")


def _records(data: bytes, chunk_id: int) -> list[tuple[int, bytes]]:
    """A data section of simple entries, as written, walked here (not by the reader's code)."""
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        out.append((chunk_id + len(out), data[pos + 4:pos + 4 + size]))
        pos += 4 + size
    return out


def _check_location(loc, h, data: bytes) -> None:
    """The header's counts and the data's place as written; bytes that differ only under a
    CRC that fails (the receiver's check refuses them)."""
    assert (loc.entries, loc.records, loc.length, loc.next_offset) == (
        h.entries, h.records, h.data_length, h.chunk_id + h.records)
    pieces = [(b.offset, b.length, b.crc) for b in loc.blocks] if loc.blocks else [(0, loc.length, loc.crc)]
    for offset, length, crc in pieces:
        sent = os.pread(loc.fd, length, loc.position + offset)
        if sent != data[offset:offset + length] or crc != zlib.crc32(sent):
            assert zlib.crc32(sent) != crc


@pytest.mark.parametrize("locations", [False, True], ids=["read_chunk", "read_location"])
@pytest.mark.parametrize("path", READERS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_reader_gives_intact_chunks_or_names_the_damage(tmp_path, damage, path, locations):
    derived, arguments = READERS[path]
    s, written, seg = _damaged(str(tmp_path / "s"), derived, damage)
    try:
        with s.reader(OffsetSpec.first(), **arguments) as r:
            got, error = _read_all(r, locations, written)
    finally:
        s.close()
    assert error is None or error.path == seg
    if path in ("plain", "stage 1", "needles and columns"):  # every chunk looked at: none passed over
        assert got == sorted(written)[:len(got)]
        assert error is not None or locations and damage in ROTTEN


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("segment", ["older", "last"])
def test_recovery_refuses_or_cuts_the_damage_and_serves_only_what_was_written(tmp_path, damage,
                                                                               segment):
    """At the next open a damaged chunk of the newest segment is a torn tail (cut) or damage
    in the middle (``CorruptionError``, files left as they are); an older segment's is found
    by the reader that reaches it. Either way no record read differs from the one written."""
    directory = str(tmp_path / "s")
    s, written, seg = _damaged(directory, False, damage, DAMAGED if segment == "older" else 3)
    s.close()

    def files() -> dict[str, bytes]:
        return {n: open(os.path.join(directory, n), "rb").read() for n in os.listdir(directory)}

    before = files()
    try:
        s = Stream.open(directory, _config(False))
    except CorruptionError as exc:
        assert exc.path in (seg, seg[:-8] + ".index")
        assert files() == before
        return
    with s, s.reader(OffsetSpec.first()) as r:
        got, error = _read_all(r, False, written)
    assert error is None or error.path == seg
    assert got == sorted(written)[:len(got)]


def test_a_reader_of_the_files_alone_names_a_damaged_last_chunk(tmp_path):
    """``open_reader`` (the CLI's ``read``) looks at the last chunk's header to find the end:
    when it is damaged the error names the segment and the chunk's position."""
    directory = str(tmp_path / "s")
    _fill(directory, False).close()
    seg, _, rec = _index(directory)[-1]
    _pwrite(seg, b"\x60", rec[3])
    with pytest.raises(CorruptionError) as ei:
        open_reader(directory, OffsetSpec.next())
    assert (ei.value.path, ei.value.position) == (seg, rec[3])


@pytest.mark.parametrize("path", ["stage 1", "plain"])
def test_a_damaged_data_length_allocates_no_more_than_the_file_holds(tmp_path, path):
    """A data length near 4 GiB in a header: stage 1 reads a matching chunk's data by it, a
    plain reader the last chunk's whole size. The read fails its checks having allocated at
    most what the segment holds (before, a buffer of the header's length: 4 GiB)."""
    directory = str(tmp_path / "s")
    s = _fill(directory, False)
    chunk = 0 if path == "stage 1" else -1
    seg, _, rec = _index(directory)[chunk]
    _pwrite(seg, (0xFFFFFFF0).to_bytes(4, "big"), rec[3] + 36)
    tracemalloc.start()
    try:
        with s, s.reader(OffsetSpec.offset(rec[0]), **READERS[path][1]) as r:
            with pytest.raises(CorruptionError) as ei:
                r.read_chunk()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (ei.value.path, ei.value.position) == (seg, rec[3])
    assert peak < 64 << 20


@pytest.mark.parametrize("damage", ["records less", "records more", "data length less", "no filter"])
def test_a_chunk_at_the_end_of_a_batch_of_index_records_is_checked_against_the_next(
        tmp_path, monkeypatch, damage):
    """A reader takes index records in batches (4,096; two with a derived-key skip table): the
    last chunk of a batch has no next record in hand, and is checked against the index's next
    record all the same (batches of one here: every chunk is such a last one)."""
    from storage import reader as reader_module
    monkeypatch.setattr(reader_module, "_INDEX_BATCH", 1)
    s, written, seg = _damaged(str(tmp_path / "s"), False, damage)
    try:
        with s.reader(OffsetSpec.first()) as r:
            got, error = _read_all(r, True, written)
    finally:
        s.close()
    assert error is not None and error.path == seg
    assert got == sorted(written)[:len(got)] and len(got) < len(written)
