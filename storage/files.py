"""File-level helpers shared by the writer, readers, recovery and the CLI tools.

Why a module of its own: listing a stream directory, reading index records with ``os.pread``
and replacing a file atomically are needed by every part of the package, and all of them must
agree on which files make up the log (a segment counts only with its index beside it). Making
them is here too: a new segment with its index (the writer's rollover, ``Stream.open``, a
truncated log), the writer's directory lock, and appending a group of buffers whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from typing import Iterable, Iterator, Sequence

from storage.errors import StorageError
from storage.format import (
    INDEX_HEADER_BYTES,
    INDEX_RECORD,
    INDEX_RECORD_BYTES,
    IndexRecord,
    index_header,
    index_name,
    parse_file_name,
    segment_header,
    segment_name,
)

__all__ = [
    "list_files", "list_segments", "segment_path", "index_path", "fsync_dir", "replace_file",
    "index_count", "read_index_records", "read_index_tuples", "read_index_record", "pread_exact",
    "pread_scratch", "scratch", "IndexTuple", "in_page_cache", "advise", "LOCK_FILE", "lock_directory",
    "create_segment", "IOV_MAX", "writev_all", "truncate_quietly",
]

IndexTuple = tuple[int, int, int, int, int]  # an INDEX_RECORD as unpacked: id, ts, epoch, pos, type
LOCK_FILE = ".writer.lock"
IOV_MAX = 1020  # buffers per ``os.writev`` at most (``writev_all``; Linux takes 1024)
_REC = INDEX_RECORD_BYTES
_IHB = INDEX_HEADER_BYTES


def segment_path(directory: str, start: int) -> str:
    return os.path.join(directory, segment_name(start))


def index_path(directory: str, start: int) -> str:
    return os.path.join(directory, index_name(start))


def list_files(directory: str) -> tuple[list[int], list[int]]:
    """Sorted first offsets of the ``.segment`` files and of the ``.index`` files."""
    segments: list[int] = []
    indexes: list[int] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    for name in names:
        parsed = parse_file_name(name)
        if parsed is None:
            continue
        (segments if parsed[1] == "segment" else indexes).append(parsed[0])
    return sorted(segments), sorted(indexes)


def list_segments(directory: str) -> list[int]:
    """First offsets of the segments that have an index beside them (the readable log)."""
    segments, indexes = list_files(directory)
    have = set(indexes)
    return [s for s in segments if s in have]


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_directory(directory: str) -> int:
    """One writer per stream directory: an exclusive ``flock`` on ``.writer.lock``, held while
    the stream is open (the kernel drops it when the process dies; readers never take it)."""
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(f"{directory} is open by another writer (lock {LOCK_FILE})") from None
    return fd


def create_segment(directory: str, start: int, sync: bool) -> None:
    """Segment file, then its index (a crash in between leaves an orphan, removed at open)."""
    for path, header in ((segment_path(directory, start), segment_header()),
                         (index_path(directory, start), index_header())):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, header)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    if sync:
        fsync_dir(directory)


def writev_all(fd: int, bufs: Sequence[bytes | bytearray | memoryview]) -> None:
    """All of ``bufs`` appended to ``fd``: one ``os.writev`` per ``IOV_MAX`` buffers."""
    for k in range(0, len(bufs), IOV_MAX):
        part = bufs[k:k + IOV_MAX]
        want = sum(map(len, part))
        done = os.writev(fd, part)
        if done != want:  # rare for regular files: finish the rest
            rest = memoryview(b"".join(part))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


def truncate_quietly(fd: int, size: int) -> None:
    """Cut ``fd`` back to ``size``, as far as it goes: a write has failed already, and that
    failure is the one to report."""
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def replace_file(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically: temp file, fsync, ``os.replace``, fsync dir.
    ``mode`` is the new file's (0o600 for secrets: never readable by others, not even briefly)."""
    tmp = path + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover keeps its mode: start afresh
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def pread_exact(fd: int, size: int, position: int) -> bytes:
    """``os.pread`` until ``size`` bytes or end of file (short result = end of file)."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


#: a thread's scratch buffer for ``pread_scratch`` (one per thread: the broker's loop, a
#: Spark read's thread), kept up to this size; a larger read gets a buffer of its own
SCRATCH_KEEP = 16 << 20
_scratch = threading.local()


def scratch(size: int) -> memoryview:
    """This thread's scratch buffer (``pread_scratch``), at least ``size`` bytes, writable:
    valid only until this thread's next use of it."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(1 << max(16, (size - 1).bit_length()))
        if len(buf) <= SCRATCH_KEEP:
            _scratch.buf = buf
    return memoryview(buf)


def pread_scratch(fd: int, size: int, position: int) -> memoryview:
    """``pread_exact`` into this thread's scratch buffer: a read-only view of what was read
    (short = end of file), valid only until this thread's next call (copy out what is kept).

    Why: a reader that scans chunks it mostly drops (stage 2 keeps 1 % of the records) paid
    more for the fresh buffer each ``os.pread`` makes (~115 ns a 106-byte record for a 690 KB
    chunk: malloc hands large blocks back to the system, so every read faults its pages in
    again, zeroed) than for the read (~8 ns) and its CRC (~9 ns); the same buffer, reused,
    is already mapped. A read beyond ``SCRATCH_KEEP`` allocates no more than the file holds
    from ``position``: the size comes from a chunk header, and one damaged on disk (a data
    length near 4 GiB) must fail its checks, not allocate its length first."""
    if size > SCRATCH_KEEP:  # (rare: chunks are cut at ``max_chunk_bytes``, 8 MiB by default)
        size = max(0, min(size, os.fstat(fd).st_size - position))
    view = scratch(size)
    got = 0
    while got < size:
        n = os.preadv(fd, [view[got:size]], position + got)
        if n <= 0:
            break
        got += n
    return view[:got].toreadonly()


def in_page_cache(fd: int, position: int) -> bool | None:
    """Whether the byte at ``position`` of ``fd`` is in the page cache (a read of it would not
    wait for the disk); None when the system cannot tell (no ``RWF_NOWAIT``)."""
    nowait = getattr(os, "RWF_NOWAIT", None)
    if nowait is None:
        return None
    try:
        return os.preadv(fd, [bytearray(1)], position, nowait) >= 0
    except BlockingIOError:
        return False
    except OSError:  # a file system without it (EOPNOTSUPP)
        return None


def advise(fd: int, places: Iterable[tuple[int, int]]) -> None:
    """Ask the kernel for the pages of each (position, length) of ``fd`` now, without waiting
    (``POSIX_FADV_WILLNEED``): reads known ahead then overlap on the disk rather than each
    waiting for the last. A few µs a call; nothing where the system has no such advice."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return
    for at, length in places:
        fadvise(fd, at, length, os.POSIX_FADV_WILLNEED)


def index_count(fd: int) -> int:
    """Complete records in an index file (trailing zero records included)."""
    return max(0, (os.fstat(fd).st_size - _IHB) // _REC)


def read_index_record(fd: int, i: int) -> IndexRecord | None:
    buf = os.pread(fd, _REC, _IHB + i * _REC)
    if len(buf) < _REC:
        return None
    rec = IndexRecord._make(INDEX_RECORD.unpack(buf))
    return None if rec.position == 0 else rec


def read_index_records(fd: int, first: int = 0, limit: int = 1 << 30) -> list[IndexRecord]:
    """Records ``first ..`` (at most ``limit``), stopping at a zero record or a partial one."""
    buf = pread_exact(fd, min(limit, 1 << 22) * _REC, _IHB + first * _REC)
    out = []
    for rec in _iter_records(buf):
        if rec.position == 0:
            break
        out.append(rec)
    return out


def read_index_tuples(fd: int, first: int = 0, limit: int = 1 << 30) -> list[IndexTuple]:
    """Like ``read_index_records`` but plain ``(chunk id, ts, epoch, position, type)`` tuples
    (the readers' hot path: no named tuple per record)."""
    buf = pread_exact(fd, min(limit, 1 << 22) * _REC, _IHB + first * _REC)
    usable = len(buf) - len(buf) % _REC
    out = list(INDEX_RECORD.iter_unpack(memoryview(buf)[:usable]))
    if out and out[-1][3] == 0:  # trailing zero records (a crash, not yet recovered)
        out = out[:next(i for i, r in enumerate(out) if r[3] == 0)]
    return out


def _iter_records(buf: bytes) -> Iterator[IndexRecord]:
    usable = len(buf) - len(buf) % _REC
    return map(IndexRecord._make, INDEX_RECORD.iter_unpack(memoryview(buf)[:usable]))
