"""Bringing a stream directory back to a consistent log when a stream opens.

Why: a crash can leave a torn last chunk, an index that is behind or ahead of its segment,
trailing zero index records, a segment without an index (orphan), an index without a segment
(stale), or an empty last segment. Readers trust the index (a record means "this chunk is
complete"), so recovery makes segment and index agree before anyone reads.

Strategy:
- Stale indexes and orphan segments are removed (index first, then segment, like retention).
- The last segment is scanned chunk by chunk with ``storage.walk`` (header, bounds, CRC of the
  data section; the same walk ``inspect`` shows). At the first bad chunk we look for any valid
  chunk after it (index records pointing further, the position the bad header claims, then a
  byte scan for a chunk magic whose header and CRC check out). If one exists the damage is in
  the middle: ``CorruptionError`` naming file and position, nothing is served. If none exists
  it is a torn tail: the segment is truncated there.
- Older segments get a cheap check (header, and the last index record's chunk ending exactly at
  the end of the file); only when that fails are they scanned. Their data CRCs are checked by
  the readers as they read (a mismatch raises ``CorruptionError`` then).
- The index is rewritten (temp file + ``os.replace``) only when it differs from the records the
  valid chunks call for: trailing zeros and records without a chunk dropped, missing ones added.
- Empty segments are removed unless the log would be left with none (the only segment keeps its
  name, which is the next offset).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from storage.errors import CorruptionError
from storage.files import (
    fsync_dir,
    index_path,
    list_files,
    read_index_record,
    read_index_records,
    replace_file,
    segment_path,
)
from storage.format import (
    CHUNK_HEADER_BYTES,
    CHUNK_MAGIC_VERSION,
    CHUNK_USER,
    INDEX_HEADER_BYTES,
    INDEX_MAGIC,
    INDEX_RECORD_BYTES,
    LOG_VERSION,
    SEGMENT_HEADER,
    SEGMENT_HEADER_BYTES,
    SEGMENT_MAGIC,
    ChunkHeader,
    IndexRecord,
    decode_header,
    encode_index_record,
    index_header,
    segment_header,
)
from storage.walk import check_chunk, walk_segment

__all__ = ["SegmentInfo", "recover", "scan_segment", "last_record", "last_chunk_id"]

_SCAN_BLOCK = 1 << 20


@dataclass
class SegmentInfo:
    """What the writer and retention need to know about one segment."""

    start: int
    size: int
    chunks: int
    end: int  # the offset after the segment's last chunk (= start when empty)
    last_timestamp: int | None
    # the chunks that carry tracking (tracking chunks, user chunks with a trailer) as
    # ``(position, header)``, file order; None when recovery did not scan the segment (it
    # scans the newest, and older ones only when their cheap check fails)
    tracking: list[tuple[int, ChunkHeader]] | None = None


def _valid_after(fd: int, bad: int, file_size: int, path: str, hints: Sequence[int]) -> int | None:
    """Position of some valid chunk after ``bad``, or None (then the damage is a torn tail)."""
    for pos in hints:
        if pos > bad and check_chunk(fd, pos, file_size, path).valid:
            return pos
    magic = CHUNK_MAGIC_VERSION.to_bytes(1, "big")
    pos = bad + 1
    while pos < file_size:
        block = os.pread(fd, _SCAN_BLOCK, pos)
        if not block:
            break
        i = block.find(magic)
        while i != -1:
            if check_chunk(fd, pos + i, file_size, path).valid:
                return pos + i
            i = block.find(magic, i + 1)
        pos += len(block)
    return None


def scan_segment(fd: int, path: str,
                 hints: Sequence[int] = ()) -> tuple[list[tuple[int, ChunkHeader]], int]:
    """Walk a segment's chunks (``walk.walk_segment``) checking bounds, CRCs and that chunk ids
    follow each other.

    Returns ``(chunks, good_end)``: the valid chunks as ``(position, header)`` and the byte
    position after the last one. Raises CorruptionError when a bad chunk has a valid one after
    it (damage in the middle); a bad chunk with nothing valid after it ends the list.
    """
    file_size = os.fstat(fd).st_size
    chunks: list[tuple[int, ChunkHeader]] = []
    pos = SEGMENT_HEADER_BYTES
    for chunk in walk_segment(fd, path):
        h = chunk.header
        if h is None or not chunk.valid:
            claimed = [] if chunk.end is None else [chunk.end]
            later = _valid_after(fd, pos, file_size, path, sorted(set(hints)) + claimed)
            if later is not None:
                raise CorruptionError(path, pos, f"invalid chunk followed by a valid chunk at byte {later}")
            break
        if chunks and h.chunk_id != chunks[-1][1].next_offset:
            raise CorruptionError(path, pos, f"chunk id {h.chunk_id} does not follow "
                                             f"{chunks[-1][1].next_offset}")
        chunks.append((pos, h))
        pos += h.size
    return chunks, pos


def _expected_index(chunks: list[tuple[int, ChunkHeader]]) -> bytes:
    return index_header() + b"".join(
        encode_index_record(h.chunk_id, h.timestamp, h.epoch, pos, h.type) for pos, h in chunks)


def _read_whole(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _cheap_ok(fd: int, path: str, records: list[IndexRecord], idx_bytes: bytes) -> bool:
    """An older segment looks consistent: index well-formed and its last chunk ends the file."""
    size = os.fstat(fd).st_size
    if ((len(idx_bytes) - INDEX_HEADER_BYTES) % INDEX_RECORD_BYTES
            or len(records) * INDEX_RECORD_BYTES + INDEX_HEADER_BYTES != len(idx_bytes)
            or not records):
        return False
    if records[0].position != SEGMENT_HEADER_BYTES:
        return False
    last = records[-1]
    head = os.pread(fd, CHUNK_HEADER_BYTES, last.position)
    if len(head) < CHUNK_HEADER_BYTES:
        return False
    try:
        h = decode_header(head, path=path, position=last.position)
    except CorruptionError:
        return False
    return h.chunk_id == last.chunk_id and last.position + h.size == size


def _recover_segment(directory: str, start: int, is_last: bool) -> SegmentInfo:
    spath, ipath = segment_path(directory, start), index_path(directory, start)
    fd = os.open(spath, os.O_RDWR)
    try:
        head = os.pread(fd, SEGMENT_HEADER_BYTES, 0)
        if len(head) < SEGMENT_HEADER_BYTES:
            if not is_last and os.fstat(fd).st_size:
                raise CorruptionError(spath, 0, "segment shorter than its header")
            os.ftruncate(fd, 0)
            os.pwrite(fd, segment_header(), 0)
            os.fsync(fd)
        elif SEGMENT_HEADER.unpack(head) != (SEGMENT_MAGIC, LOG_VERSION):
            raise CorruptionError(spath, 0, f"bad segment header {head!r}")
        idx_bytes = _read_whole(ipath)
        idx_ok = idx_bytes[:INDEX_HEADER_BYTES] == index_header()
        records: list[IndexRecord] = []
        if idx_ok:
            ifd = os.open(ipath, os.O_RDONLY)
            try:
                records = read_index_records(ifd)
            finally:
                os.close(ifd)
        elif len(idx_bytes) >= INDEX_HEADER_BYTES and idx_bytes[:4] != INDEX_MAGIC:
            idx_ok = False  # rewritten below from the segment
        if not is_last and idx_ok and _cheap_ok(fd, spath, records, idx_bytes):
            size = os.fstat(fd).st_size
            last = records[-1]
            h = decode_header(os.pread(fd, CHUNK_HEADER_BYTES, last.position))
            return SegmentInfo(start, size, len(records), h.next_offset, last.timestamp)
        chunks, good_end = scan_segment(fd, spath, [r.position for r in records])
        if chunks and chunks[0][1].chunk_id != start:
            raise CorruptionError(spath, SEGMENT_HEADER_BYTES, f"first chunk id {chunks[0][1].chunk_id} differs "
                                            f"from the file name ({start})")
        size = os.fstat(fd).st_size
        if good_end < size:
            if not is_last:
                raise CorruptionError(spath, good_end, "invalid data after the last valid chunk "
                                                       "of an older segment")
            os.ftruncate(fd, good_end)
            os.fsync(fd)
            size = good_end
        expected = _expected_index(chunks)
        if idx_bytes != expected:
            replace_file(ipath, expected)
        end = chunks[-1][1].next_offset if chunks else start
        last_ts = chunks[-1][1].timestamp if chunks else None
        tracking = [(p, h) for p, h in chunks if h.type != CHUNK_USER or h.trailer_length]
        return SegmentInfo(start, size, len(chunks), end, last_ts, tracking)
    finally:
        os.close(fd)


def _remove(directory: str, start: int) -> None:
    """Index first, then segment (a crash in between leaves an orphan, removed next time)."""
    for path in (index_path(directory, start), segment_path(directory, start)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def recover(directory: str) -> list[SegmentInfo]:
    """Make the directory a consistent log; return its segments, oldest first (maybe none)."""
    for name in os.listdir(directory):
        if name.endswith(".index.tmp"):
            os.unlink(os.path.join(directory, name))
    segments, indexes = list_files(directory)
    seg_set, idx_set = set(segments), set(indexes)
    changed = False
    for start in indexes:
        if start not in seg_set:
            os.unlink(index_path(directory, start))  # stale index
            changed = True
    for start in segments:
        if start not in idx_set:
            os.unlink(segment_path(directory, start))  # orphan segment
            changed = True
    live = [s for s in segments if s in idx_set]
    infos = [_recover_segment(directory, s, i == len(live) - 1) for i, s in enumerate(live)]
    for info in list(infos):
        if info.chunks == 0 and len(infos) > 1:
            _remove(directory, info.start)
            infos.remove(info)
            changed = True
    for prev, nxt in zip(infos, infos[1:], strict=False):
        if prev.end != nxt.start:
            raise CorruptionError(segment_path(directory, nxt.start), 0,
                                  f"segment starts at {nxt.start} but the previous one ends at {prev.end}")
    if changed:
        fsync_dir(directory)
    return infos


def last_chunk_id(directory: str, segments: Sequence[SegmentInfo]) -> int:
    """The id of the log's last chunk (from the last non-empty segment's index), -1 if none."""
    rec = last_record(directory, segments)
    return rec.chunk_id if rec is not None else -1


def last_record(directory: str, segments: Sequence[SegmentInfo]) -> IndexRecord | None:
    """The index record of the log's last chunk (from the last non-empty segment's index)."""
    for info in reversed(segments):
        if info.chunks:
            fd = os.open(index_path(directory, info.start), os.O_RDONLY)
            try:
                rec = read_index_record(fd, info.chunks - 1)
            finally:
                os.close(fd)
            if rec is not None:
                return rec
    return None
