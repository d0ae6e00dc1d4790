"""Every byte of the stream log: segment and index files, chunks, entries, tracking records.

Strategy: this module is the one home of the on-disk format (RabbitMQ's osiris log, version 1;
see ``design/storage-format.md``). Each layout is a named ``struct.Struct`` below, used both to
encode and to decode; everything here is a pure function over bytes (no file I/O), so the
writer, the readers, recovery and the ``inspect`` tool share one definition and the saved
fixtures in ``tests/storage/fixtures`` pin it. All integers are big-endian.

Segment file (``NNNNNNNNNNNNNNNNNNNN.segment``, N = first offset, 20 digits)::

    0       4       8
    +-------+-------+-------------------------------+
    | "OSIL"| u32 1 | chunk | chunk | ... (to EOF)  |
    +-------+-------+-------------------------------+

Index file (``NNNNNNNNNNNNNNNNNNNN.index``), one 29-byte record per chunk::

    0       4       8
    +-------+-------+---------+---------+----
    | "OSII"| u32 1 | record  | record  | ...
    +-------+-------+---------+---------+----

    INDEX_RECORD  >QqQIB
    0        8        16       24    28 29
    +--------+--------+--------+-----+--+
    |chunk id|  ts ms | epoch  | pos |ty|      pos = byte position of the chunk header
    +--------+--------+--------+-----+--+

Chunk: 48-byte header, filter bytes, data section, trailer::

    CHUNK_HEADER  >BBHIqQQIIIBBBB
    byte 0    0x50: magic 5 (high nibble), chunk format version 0 (low nibble)
    byte 1    chunk type: 0 user, 1 tracking delta, 2 tracking snapshot
    2-3       entries (u16)          4-7   records = offsets consumed (u32)
    8-15      timestamp (s64 ms)     16-23 epoch (u64)      24-31 chunk id (u64)
    32-35     CRC-32 (zlib) of the data section only
    36-39     data length (u32)      40-43 trailer length (u32)
    44        filter size in bytes (0 = no filter)
    45        filter scheme (0 = osiris; ours otherwise)   46 scheme parameter
    47        flags, ours (osiris writes 0 and ignores it): bit 0 FLAG_SIMPLE_ENTRIES, every
              entry of the data section is a simple entry (0: not known, e.g. RabbitMQ's)

Entries in the data section::

    SIMPLE_ENTRY    >I    |0| length:31 |  then `length` bytes; one offset
    SUBBATCH_HEADER >BHII |1|cmp:3|rsv:4| records:16 | uncompressed length:32 | length:32 |
                          then `length` bytes; `records` offsets; uncompressed, the body is a
                          run of simple entries. cmp: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd,
                          7 user-defined. With cmp 0 the uncompressed length is not checked
                          (RabbitMQ serves such sub-batches whatever the field says).

Tracking records (trailer of a user chunk, or the single entry of a tracking chunk)::

    TRACKING_PREFIX >BB   | type:8 | id length:8 | then the id, then
    TRACKING_VALUE  >Q    value:64                    (types 0 and 1 in deltas and trailers,
                                                       type 1 in snapshots)
    TRACKING_TIMESTAMP >q  timestamp:64, signed        (type 2, everywhere)
    TRACKING_SNAP   >QQ   chunk id:64, sequence:64    (type 0 in a snapshot chunk)

    types: 0 publisher sequence (by publisher reference), 1 consumer offset (by consumer
    name), 2 timestamp. A tracking chunk (delta or snapshot) has one entry, one record: a
    simple entry whose body is a run of tracking records. Ids are 0..255 bytes.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import operator
import re
import struct
import zlib
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

import bloom

from storage.crc import crc32
from storage.errors import CorruptionError, StorageError
from storage.kept import KeptBuffers

__all__ = [
    "SEGMENT_HEADER", "INDEX_HEADER", "INDEX_RECORD", "CHUNK_HEADER", "SIMPLE_ENTRY",
    "SUBBATCH_HEADER", "TRACKING_PREFIX", "TRACKING_VALUE", "TRACKING_TIMESTAMP", "TRACKING_SNAP",
    "TRACKING_SEQUENCE", "TRACKING_OFFSET", "TRACKING_TYPE_TIMESTAMP",
    "SEGMENT_MAGIC", "INDEX_MAGIC", "LOG_VERSION", "CHUNK_MAGIC_VERSION", "SEGMENT_HEADER_BYTES",
    "INDEX_HEADER_BYTES", "INDEX_RECORD_BYTES", "CHUNK_HEADER_BYTES", "SUBBATCH_HEADER_BYTES",
    "HEADER_TYPE_AT", "HEADER_CHUNK_ID_AT", "HEADER_CRC_AT", "HEADER_DATA_LENGTH_AT",
    "HEADER_FILTER_SIZE_AT", "HEADER_FILTER_SCHEME_AT", "HEADER_FILTER_PARAM_AT", "HEADER_FLAGS_AT",
    "FLAG_SIMPLE_ENTRIES",
    "CHUNK_USER", "CHUNK_TRACKING_DELTA", "CHUNK_TRACKING_SNAPSHOT",
    "COMPRESSION_NONE", "COMPRESSION_GZIP", "COMPRESSION_SNAPPY", "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD", "COMPRESSION_USER",
    "ChunkHeader", "IndexRecord", "TrackingRecord", "entry_stride", "first_stride", "record_starts",
    "segment_name", "index_name", "parse_file_name",
    "segment_header", "index_header", "encode_entries", "encode_chunk", "encode_index_record",
    "decode_header", "chunk_size", "decode_records", "decode_tracking", "encode_subbatch",
    "encode_tracking", "SubBatchEntry", "EntryRun", "EntrySpans", "PublishingIds", "run_entries",
    "encode_mixed_entries", "records_holding",
]

# -- layouts -----------------------------------------------------------------------------------
SEGMENT_HEADER = struct.Struct(">4sI")
INDEX_HEADER = struct.Struct(">4sI")
INDEX_RECORD = struct.Struct(">QqQIB")
CHUNK_HEADER = struct.Struct(">BBHIqQQIIIBBBB")
SIMPLE_ENTRY = struct.Struct(">I")
SUBBATCH_HEADER = struct.Struct(">BHII")
TRACKING_PREFIX = struct.Struct(">BB")
TRACKING_VALUE = struct.Struct(">Q")
TRACKING_TIMESTAMP = struct.Struct(">q")
TRACKING_SNAP = struct.Struct(">QQ")

SEGMENT_MAGIC = b"OSIL"
INDEX_MAGIC = b"OSII"
LOG_VERSION = 1
CHUNK_MAGIC_VERSION = 0x50

# sizes: where the first chunk / index record starts, and how far apart they are
SEGMENT_HEADER_BYTES = SEGMENT_HEADER.size  # 8
INDEX_HEADER_BYTES = INDEX_HEADER.size  # 8
INDEX_RECORD_BYTES = INDEX_RECORD.size  # 29
CHUNK_HEADER_BYTES = CHUNK_HEADER.size  # 48; a chunk's filter bytes start here
SUBBATCH_HEADER_BYTES = SUBBATCH_HEADER.size  # 11

# byte positions of chunk header fields (the diagram above), for code and tests that poke them
HEADER_TYPE_AT = 1
HEADER_CHUNK_ID_AT = 24
HEADER_CRC_AT = 32
HEADER_DATA_LENGTH_AT = 36
HEADER_FILTER_SIZE_AT = 44
HEADER_FILTER_SCHEME_AT = 45
HEADER_FILTER_PARAM_AT = 46
HEADER_FLAGS_AT = 47

FLAG_SIMPLE_ENTRIES = 0x01  # header flags (byte 47)

TRACKING_SEQUENCE = 0  # tracking record types
TRACKING_OFFSET = 1
TRACKING_TYPE_TIMESTAMP = 2

CHUNK_USER = 0
CHUNK_TRACKING_DELTA = 1
CHUNK_TRACKING_SNAPSHOT = 2

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_USER = 7

_SIMPLE_MAX = 0x7FFFFFFF
_pack_len = SIMPLE_ENTRY.pack
_unpack_len = SIMPLE_ENTRY.unpack_from

assert (CHUNK_HEADER_BYTES, INDEX_RECORD_BYTES, SUBBATCH_HEADER_BYTES) == (48, 29, 11)
assert [struct.calcsize(CHUNK_HEADER.format[:k + 1]) for k in (1, 6, 7, 8, 10, 11, 12, 13)] == [
    HEADER_TYPE_AT, HEADER_CHUNK_ID_AT, HEADER_CRC_AT, HEADER_DATA_LENGTH_AT,
    HEADER_FILTER_SIZE_AT, HEADER_FILTER_SCHEME_AT, HEADER_FILTER_PARAM_AT, HEADER_FLAGS_AT]


class ChunkHeader(NamedTuple):
    """The chunk header (``CHUNK_HEADER_BYTES``), decoded (field order = byte order)."""

    magic_version: int
    type: int
    entries: int
    records: int
    timestamp: int
    epoch: int
    chunk_id: int
    crc: int
    data_length: int
    trailer_length: int
    filter_size: int
    filter_scheme: int
    filter_param: int
    flags: int

    @property
    def size(self) -> int:
        """Bytes from the header's first byte to the next chunk."""
        return CHUNK_HEADER_BYTES + self.filter_size + self.data_length + self.trailer_length

    @property
    def next_offset(self) -> int:
        return self.chunk_id + self.records


class IndexRecord(NamedTuple):
    chunk_id: int
    timestamp: int
    epoch: int
    position: int
    type: int


class TrackingRecord(NamedTuple):
    """type 0 publisher sequence, 1 consumer offset, 2 timestamp; ``chunk_id`` only in a
    snapshot's type-0 record."""

    type: int
    id: bytes
    value: int
    chunk_id: int | None = None


# -- file names --------------------------------------------------------------------------------
_NAME = re.compile(r"^(\d{20})\.(segment|index)$")


def segment_name(first_offset: int) -> str:
    return f"{first_offset:020d}.segment"


def index_name(first_offset: int) -> str:
    return f"{first_offset:020d}.index"


def parse_file_name(name: str) -> tuple[int, str] | None:
    """``(first offset, "segment" | "index")`` for a log file name, else None."""
    m = _NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def segment_header() -> bytes:
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, LOG_VERSION)


def index_header() -> bytes:
    return INDEX_HEADER.pack(INDEX_MAGIC, LOG_VERSION)


# -- encoding ----------------------------------------------------------------------------------
def encode_entries(bodies: Sequence[bytes]) -> bytes:
    """The data section for simple entries, one per body (one join, no per-entry copies)."""
    if not bodies:
        return b""
    lens = set(map(len, bodies))
    if len(lens) == 1:  # same-sized (the common case): the header is the join's separator
        header = _pack_len(len(bodies[0]))
        return header + header.join(bodies)
    parts: list[bytes] = [b""] * (2 * len(bodies))
    parts[0::2] = map(_pack_len, map(len, bodies))
    parts[1::2] = bodies
    return b"".join(parts)


class SubBatchEntry(bytes):
    """A sub-batch entry ready for a data section (``SUBBATCH_HEADER`` and its body, as a
    client sent it) that holds ``records`` records: what ``Stream.append_batch`` stores as
    one entry instead of a simple one."""

    records: int

    def __new__(cls, compression: int, records: int, uncompressed: int,
                body: bytes | memoryview) -> SubBatchEntry:
        head = SUBBATCH_HEADER.pack(0x80 | (compression << 4), records, uncompressed, len(body))
        entry = super().__new__(cls, head + bytes(body))
        entry.records = records
        return entry


class EntryRun:
    """``count`` simple entries of ``size``-byte records as a client's frame holds them, each
    after ``skip`` bytes that are not stored (a Publish v1 frame's publishing id): ``raw`` is
    exactly ``count * (skip + 4 + size)`` bytes. ``Stream.append_batch`` takes it as one item
    for ``count`` records (``entries=``), and the writer cuts it into chunks as it cuts bodies.

    Why: a frame of messages of one size already lies as a data section's simple entries bar
    the ids; copying a chunk's part of it once and dropping the ids with ``skip`` strided
    ``del``s (C loops over the buffer) stores it with no Python object per record, where a
    body per record costs an object, a list slot and a join. Every entry's size field must be
    ``size``: the caller checks it (``streamproto``'s decoder does, with strided slices)."""

    __slots__ = ("raw", "count", "size", "skip")

    def __init__(self, raw: bytes | memoryview, count: int, size: int, skip: int = 0) -> None:
        if not 0 <= size <= 0x7FFF_FFFF or count < 1 or skip < 0 or \
                len(raw) != count * (skip + 4 + size):
            raise StorageError(f"an entry run of {count} records of {size} bytes after {skip} "
                               f"bytes each is not {len(raw)} bytes")
        self.raw, self.count, self.size, self.skip = raw, count, size, skip

    def entries(self, first: int, n: int) -> bytes | bytearray:
        """The data section bytes of entries ``first .. first + n`` (one copy)."""
        stride = self.skip + 4 + self.size
        part = self.raw[first * stride:(first + n) * stride]
        if not self.skip:
            return bytes(part)
        out = bytearray(part)
        for k in range(self.skip):  # byte k of every entry is at each (stride - k)th now
            del out[::stride - k]
        return out

    def bodies(self, first: int, n: int) -> list[bytes]:
        """The records of entries ``first .. first + n``, one bytes each (for the paths that
        need them one by one: a stream's derived keys, a chunk with sub-batch entries)."""
        stride = self.skip + 4 + self.size
        one = struct.Struct(f"{self.skip + 4}x{self.size}s")
        view = memoryview(self.raw)[first * stride:(first + n) * stride]
        return list(map(operator.itemgetter(0), one.iter_unpack(view)))

    def __repr__(self) -> str:
        return f"EntryRun({self.count} records of {self.size} bytes, skip {self.skip})"


_MASKED_FROM = 256  # entries from which ``EntrySpans.entries`` masks rather than joins
#: buffers ``EntrySpans.entries`` puts data sections in (the writer's chunk parts, held until
#: written: up to ``storage.chunking.PARTS_MAX`` a chunk)
_DATA = KeptBuffers(128, 32 << 20)
#: the bytes of source it compresses at once (its result: below glibc's smallest mmap
#: threshold, 128 KiB, so the allocator reuses it)
_BLOCK = 64 << 10
#: bool buffers ``EntrySpans.entries`` builds its masks in, kept for the next call: a thread
#: takes one (``list.pop`` and ``append`` are atomic), so at most ``_MASKS_KEPT`` of at most
#: ``_MASK_KEPT_MAX`` bytes each stay allocated. Why: a fresh mask of a 1 MiB frame is 256
#: fresh pages, ~3 µs each on a VM that gives freed pages back to its host (``bench.page_cost``)
_MASKS: list[np.ndarray] = []
_MASKS_KEPT = 2
_MASK_KEPT_MAX = 8 << 20


def _mask(size: int) -> tuple[np.ndarray, np.ndarray]:
    """A buffer of at least ``size`` bools (give it back with ``_unmask``) and its first
    ``size``, all True."""
    try:
        buf = _MASKS.pop()
    except IndexError:
        buf = None
    if buf is None or len(buf) < size:
        buf = np.empty(size + (size >> 3), bool)  # (room for the next frames' sizes)
    keep = buf[:size]
    keep.fill(True)
    return buf, keep


def _unmask(buf: np.ndarray) -> None:
    if len(_MASKS) < _MASKS_KEPT and len(buf) <= _MASK_KEPT_MAX:
        _MASKS.append(buf)


#: ``EntrySpans.entries`` copies rows when the longest entry times the entries is at most this
#: many times the data section (rows of about one size); else it masks
_ROWS_SPREAD = 2


def _rows(raw: bytes | bytearray, begins: np.ndarray, sizes: np.ndarray, longest: int,
          total: int) -> memoryview:
    """The entries of ``raw`` that start at ``begins`` (``sizes`` bytes each, ascending and
    apart), one after the other: ``total`` bytes, in a kept buffer.

    How: ``raw`` seen as rows of ``longest`` bytes, one starting at each byte (a strided view,
    no copy), gives each entry with what follows it by one fancy index (a memcpy a row), and
    the output seen the same way takes them at their places by one fancy assignment, a block
    of rows at a time. A row is longer than its entry: its tail lands where the next entries
    go, and they are written after it (numpy assigns the rows of a 1-d index in order, which
    ``_ROWS_IN_ORDER`` checks at import), so every byte ends as the last row over it puts it.
    The last entries, whose row would run past ``raw``, are copied one by one."""
    n = len(begins)
    dest = np.empty(n, np.intp)
    dest[0] = 0
    np.cumsum(sizes[:-1], out=dest[1:])
    last = len(raw) - longest  # the last place a row of ``raw`` may start
    whole = n if int(begins[-1]) <= last else int(np.searchsorted(begins, last, "right"))
    data = _DATA.take(total + longest)  # (room for the last row's tail)
    src = np.ndarray((last + 1, longest), np.uint8, raw, 0, (1, 1))
    out = np.ndarray((total + 1, longest), np.uint8, data, 0, (1, 1))
    step = max(1, _BLOCK // longest)  # rows a block: each fancy index's result is small
    for a in range(0, whole, step):
        b = min(a + step, whole)
        out[dest[a:b]] = src[begins[a:b]]
    del src, out
    if whole < n:
        view = memoryview(raw)
        for k in range(whole, n):
            d, b, size = int(dest[k]), int(begins[k]), int(sizes[k])
            data[d:d + size] = view[b:b + size]
        del view
    return memoryview(data)[:total].toreadonly()


def _rows_in_order() -> bool:
    """numpy assigns overlapping rows of a fancy index in the index's order (a later row's
    bytes win): what ``_rows`` relies on, checked here, so that a numpy that does otherwise
    makes ``entries`` mask instead of storing wrong bytes."""
    rows = np.arange(1, 65, dtype=np.uint8).reshape(16, 4)
    out = np.zeros(20, np.uint8)
    at = np.arange(16, dtype=np.intp)
    np.ndarray((17, 4), np.uint8, out, 0, (1, 1))[at] = rows
    return bool((out[:16] == rows[:, 0]).all() and (out[16:19] == rows[15, 1:]).all())


_ROWS_IN_ORDER = _rows_in_order()


class EntrySpans:
    """Simple entries of varying sizes as a client's frame holds them: entry ``k`` is
    ``raw[starts[k] + skip:starts[k + 1]]`` (its size field and record), after ``skip`` bytes
    that are not stored (a Publish frame's publishing id, and in Publish v2 the filter value
    and its length), or after ``skips[k]`` bytes where they differ from entry to entry (filter
    values of several lengths). ``starts`` holds ``count + 1`` ascending places. Taken as
    ``EntryRun`` is (``Stream.append_batch(..., entries=)``).

    Why: a frame of messages of varying sizes holds a data section's simple entries apart by
    the same few bytes each; the decoder walks the frame once to find where each entry starts
    (unavoidable: sizes chain), and the records then never become objects of their own: a
    chunk's part is cut with C-level maps over ``starts``. The caller checks that each entry's
    size field matches its span (``streamproto``'s decoder finds ``starts`` by those fields)."""

    __slots__ = ("raw", "starts", "skip", "skips", "count", "_largest", "_places")

    def __init__(self, raw: bytes | bytearray, starts: list[int], skip: int,
                 largest: int | None = None, places: np.ndarray | None = None,
                 skips: np.ndarray | None = None) -> None:
        if (len(starts) < 2 or skip < 0 or starts[-1] > len(raw) or starts[0] < 0
                or (skips is not None and (len(skips) != len(starts) - 1 or int(skips.min()) < 0))):
            raise StorageError(f"entry spans of {len(starts) - 1} entries do not lie in "
                               f"{len(raw)} bytes")
        self.raw, self.starts, self.skip, self.count = raw, starts, skip, len(starts) - 1
        self.skips = skips  # each entry's, when they differ (``skip`` is then not used)
        self._largest = largest  # the largest record's size, when the caller knows it
        # ``starts`` as an array of ``np.intp``, when the caller has made one
        self._places = places if places is not None and len(places) == len(starts) else None

    def _from(self, first: int, n: int, extra: int) -> Iterable[slice]:
        starts = self.starts
        skips = itertools.repeat(self.skip + extra) if self.skips is None else \
            (self.skips[first:first + n] + extra).tolist()
        return map(slice, map(operator.add, starts[first:first + n], skips), starts[first + 1:first + n + 1])

    def _skipped(self, first: int, n: int) -> int:
        """The bytes entries ``first .. first + n`` have before their size fields."""
        return n * self.skip if self.skips is None else int(self.skips[first:first + n].sum())

    def records_bytes(self) -> int:
        """The bytes of all the records (their size fields not counted)."""
        return self.starts[-1] - self.starts[0] - 4 * self.count - self._skipped(0, self.count)

    def entries(self, first: int, n: int) -> bytes | memoryview:
        """The data section bytes of entries ``first .. first + n``: the span less each
        entry's first ``skip`` bytes, by numpy (no object per entry), or for a few entries one
        join. The result of numpy's cut is a read-only ``memoryview`` of a kept buffer
        (``_DATA``, taken again once the writer has written it and nothing holds it): a
        buffer made anew costs a page fault per 4 KiB on this VM (``bench.page_cost``).

        Entries of about one size (the usual frame) are copied as rows (``_rows``: a few
        bytes of memcpy each); the others by a mask over the span's bytes (``_masked``)."""
        skip = self.skip
        if n < _MASKED_FROM or (not skip and self.skips is None):
            return b"".join(map(self.raw.__getitem__, self._from(first, n, 0)))
        starts, places = self.starts, self._places
        at = places[first:first + n + 1] if places is not None else \
            np.fromiter(starts[first:first + n + 1], np.intp, n + 1)
        # where each entry's size field is
        begins = at[:-1] + (skip if self.skips is None else self.skips[first:first + n])
        sizes = at[1:] - begins  # what each takes in the data section
        longest = int(sizes.max())
        total = starts[first + n] - starts[first] - self._skipped(first, n)
        if _ROWS_IN_ORDER and longest * n <= _ROWS_SPREAD * total:
            return _rows(self.raw, begins, sizes, longest, total)
        return self._masked(first, n)

    def _masked(self, first: int, n: int) -> memoryview:
        """``entries`` by a mask and a compress, filled a block at a time (numpy's compress
        makes its result anew: a block's is small enough for the allocator to reuse); the mask
        is a kept buffer (``_mask``), its heads cleared through a view of it with a row per
        byte (one fancy assignment, no index per masked byte)."""
        skip = self.skip
        starts = self.starts
        low, high = starts[first], starts[first + n]
        span = high - low
        buf, keep = _mask(span)
        heads = np.fromiter(starts[first:first + n], np.intp, n)
        heads -= low
        # row k: keep[k .. k + skip] (entries are longer than ``skip``: the rows never overlap)
        if self.skips is None:
            np.ndarray((span - skip + 1, skip), bool, keep, 0, (1, 1))[heads] = False
        else:  # the entries of each skip apart
            mine = self.skips[first:first + n]
            for width in np.unique(mine).tolist():
                if width:
                    np.ndarray((span - width + 1, width), bool, keep, 0, (1, 1))[heads[mine == width]] = False
        src = np.frombuffer(self.raw, np.uint8, span, low)
        data = _DATA.take(span - self._skipped(first, n))
        out = np.frombuffer(data, np.uint8)
        at = 0
        for a in range(0, span, _BLOCK):  # a block at a time: each compress's result is small
            part = src[a:a + _BLOCK][keep[a:a + _BLOCK]]
            out[at:at + len(part)] = part
            at += len(part)
        del keep, out, src, part
        _unmask(buf)
        return memoryview(data).toreadonly()

    def sizes(self, first: int, n: int) -> list[int]:
        """The bytes each of entries ``first .. first + n`` takes in a data section (4 and its
        record)."""
        starts = self.starts
        spans = map(operator.sub, starts[first + 1:first + n + 1], starts[first:first + n])
        if self.skips is not None:
            return list(map(operator.sub, spans, self.skips[first:first + n].tolist()))
        return [d - self.skip for d in spans]

    def largest(self) -> int:
        """The size of the largest record."""
        if self._largest is None:
            self._largest = max(self.sizes(0, self.count)) - 4
        return self._largest

    def bodies(self, first: int, n: int) -> list[bytes]:
        """The records of entries ``first .. first + n``, one bytes each (the rarer paths)."""
        raw = self.raw
        if type(raw) is not bytes:  # (a bytearray's slices are bytearrays)
            return list(map(bytes, map(memoryview(raw).__getitem__, self._from(first, n, 4))))
        return list(map(raw.__getitem__, self._from(first, n, 4)))

    def __repr__(self) -> str:
        return f"EntrySpans({self.count} records, skip {self.skip})"


class PublishingIds:
    """Publishing ids as a PublishConfirm holds them (8 bytes each, big-endian), read as a
    sequence of ints in place: what a named publisher's turn hands ``append_deduplicated``.

    Why: the ids are compared once for the turn (by the caller, ``ascending``) and the writer
    reads only the last id of each chunk; a list would make an int per message."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        if len(raw) % 8:
            raise StorageError(f"publishing ids of 8 bytes each, not {len(raw)} bytes")
        self.raw = raw

    def __len__(self) -> int:
        return len(self.raw) >> 3

    def __getitem__(self, i: int) -> int:
        n = len(self.raw) >> 3
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("publishing id index out of range")
        return _ID.unpack_from(self.raw, i << 3)[0]

    def __iter__(self) -> Iterator[int]:
        return map(operator.itemgetter(0), _ID.iter_unpack(self.raw))

    def __repr__(self) -> str:
        return f"PublishingIds({len(self)} ids)"


_ID = struct.Struct(">Q")


class TextValues(list):
    """Filter values each a ``str`` or None, as whoever made the list vouches (the stream
    protocol's publisher: its decoder makes no other): ``Stream.append_batch`` then skips the
    check of each value's type, a pass over a turn's values (~5 % of the loop thread's time for
    the Spark sink's traffic). Put nothing else in one."""

    __slots__ = ()


def run_entries(items: Iterable[object]) -> list:
    """``items`` with every ``EntryRun`` / ``EntrySpans`` given as its records, one bytes
    each: the list of bodies the same entries are as plain items."""
    out: list = []
    for x in items:
        if type(x) is EntryRun or type(x) is EntrySpans:
            out += x.bodies(0, x.count)
        else:
            out.append(x)
    return out


def data_entries(data: bytes, entries: int) -> list[bytes]:
    """A data section's ``entries`` entries as a writer was given them: a simple entry's
    record, a sub-batch entry as a ``SubBatchEntry`` (what ``derived.encode_entry`` indexes:
    a replica builds its sidecar from the chunks it takes). ``StorageError`` when the
    section does not hold them."""
    out: list[bytes] = []
    pos, end = 0, len(data)
    for _ in range(entries):
        if pos + 4 > end:
            raise StorageError("data section shorter than its entries")
        if data[pos] & 0x80:
            flags, records, uncompressed, length = SUBBATCH_HEADER.unpack_from(data, pos)
            body = data[pos + SUBBATCH_HEADER_BYTES:pos + SUBBATCH_HEADER_BYTES + length]
            out.append(SubBatchEntry((flags >> 4) & 0x7, records, uncompressed, body))
            pos += SUBBATCH_HEADER_BYTES + length
        else:
            (size,) = _unpack_len(data, pos)
            out.append(data[pos + 4:pos + 4 + size])
            pos += 4 + size
    if pos != end:
        raise StorageError("data section's entries do not fill it")
    return out


def encode_mixed_entries(items: Sequence[bytes]) -> bytes:
    """``encode_entries`` for items of which some are ``SubBatchEntry``s (written as they are)."""
    parts: list[bytes] = []
    for item in items:
        if type(item) is not SubBatchEntry:
            parts.append(_pack_len(len(item)))
        parts.append(item)
    return b"".join(parts)


def encode_subbatch(bodies: Sequence[bytes], compression: int = COMPRESSION_NONE) -> bytes:
    """One sub-batch entry holding ``bodies`` (gzip/lz4/zstd via the installed libraries)."""
    raw = encode_entries(bodies)
    body = _compress(compression, raw)
    return SUBBATCH_HEADER.pack(0x80 | (compression << 4), len(bodies), len(raw), len(body)) + body


def encode_tracking(records: Iterable[TrackingRecord]) -> bytes:
    """A run of tracking records (a trailer, or a tracking chunk's entry body); a record with a
    ``chunk_id`` is a snapshot's type-0 record."""
    out = []
    for r in records:
        if r.type > TRACKING_TYPE_TIMESTAMP or len(r.id) > 255:
            raise StorageError(f"bad tracking record type {r.type} / id of {len(r.id)} bytes")
        out.append(TRACKING_PREFIX.pack(r.type, len(r.id)) + r.id)
        if r.type == TRACKING_TYPE_TIMESTAMP:
            out.append(TRACKING_TIMESTAMP.pack(r.value))
        elif r.chunk_id is not None:
            out.append(TRACKING_SNAP.pack(r.chunk_id, r.value))
        else:
            out.append(TRACKING_VALUE.pack(r.value))
    return b"".join(out)


def encode_chunk(
    chunk_id: int,
    timestamp: int,
    data: bytes | bytearray | memoryview | list[bytes | bytearray | memoryview],
    entries: int,
    records: int,
    *,
    chunk_type: int = CHUNK_USER,
    epoch: int = 1,
    filter_bits: bytes = b"",
    filter_scheme: int = 0,
    filter_param: int = 0,
    trailer: bytes = b"",
    flags: int = 0,
) -> list[bytes | bytearray | memoryview]:
    """The chunk as buffers to hand to ``os.writev``: header, filter, data, trailer.
    ``flags``: ``FLAG_SIMPLE_ENTRIES`` only when every entry of ``data`` is a simple one.
    ``data`` may be a list of the data section's parts, written one after the other (so
    that they need not be joined into a new buffer)."""
    if len(filter_bits) > bloom.MAX_SIZE:
        raise StorageError(f"filter larger than {bloom.MAX_SIZE} bytes")
    if type(data) is list:
        parts = data
        crc = 0
        for part in parts:
            crc = crc32(part, crc)
        size = sum(map(len, parts))
    else:
        parts = [data]  # type: ignore[list-item]
        crc, size = crc32(data), len(data)  # type: ignore[arg-type]
    header = CHUNK_HEADER.pack(
        CHUNK_MAGIC_VERSION, chunk_type, entries, records, timestamp, epoch, chunk_id,
        crc, size, len(trailer), len(filter_bits),
        filter_scheme if filter_bits else 0, filter_param if filter_bits else 0, flags,
    )
    out: list[bytes | bytearray | memoryview] = [header]
    if filter_bits:
        out.append(filter_bits)
    out += parts
    if trailer:
        out.append(trailer)
    return out


def encode_index_record(chunk_id: int, timestamp: int, epoch: int, position: int,
                        chunk_type: int = CHUNK_USER) -> bytes:
    return INDEX_RECORD.pack(chunk_id, timestamp, epoch, position, chunk_type)


# -- decoding ----------------------------------------------------------------------------------
def decode_header(buf: bytes | memoryview, offset: int = 0, *, path: str = "?",
                  position: int = 0) -> ChunkHeader:
    """Decode and sanity-check a chunk header; ``path``/``position`` name it in errors."""
    if len(buf) - offset < CHUNK_HEADER_BYTES:
        raise CorruptionError(path, position, "short chunk header")
    h = ChunkHeader._make(CHUNK_HEADER.unpack_from(buf, offset))
    if h.magic_version != CHUNK_MAGIC_VERSION:
        raise CorruptionError(path, position, f"bad chunk magic/version byte {h.magic_version:#04x}")
    if h.type > CHUNK_TRACKING_SNAPSHOT:
        raise CorruptionError(path, position, f"unknown chunk type {h.type}")
    if h.type != CHUNK_USER and (h.entries, h.records) != (1, 1):
        raise CorruptionError(path, position, f"tracking chunk with {h.entries} entries and "
                                              f"{h.records} records (osiris writes 1 and 1)")
    if h.entries == 0:
        raise CorruptionError(path, position, "chunk without entries")
    if h.filter_size and h.filter_size < bloom.MIN_SIZE:
        raise CorruptionError(path, position, f"filter size {h.filter_size} below {bloom.MIN_SIZE}")
    return h


def chunk_size(h: ChunkHeader) -> int:
    return h.size


def _compress(compression: int, raw: bytes) -> bytes:
    if compression == COMPRESSION_NONE:
        return raw
    if compression == COMPRESSION_GZIP:
        return gzip.compress(raw)
    if compression == COMPRESSION_LZ4:
        import lz4.frame  # type: ignore[import-untyped]  # lz4 ships no type information
        packed: bytes = lz4.frame.compress(raw)
        return packed
    if compression == COMPRESSION_ZSTD:
        import zstandard
        return zstandard.ZstdCompressor().compress(raw)
    raise StorageError(f"cannot compress with sub-batch compression {compression}")


def _decompress(compression: int, body: bytes | memoryview, size: int) -> bytes:
    if compression == COMPRESSION_NONE:
        return bytes(body)
    if compression == COMPRESSION_GZIP:
        return zlib.decompress(body, 47)  # gzip or zlib wrapper, auto-detected
    if compression == COMPRESSION_LZ4:
        import lz4.frame
        raw: bytes = lz4.frame.decompress(body)
        return raw
    if compression == COMPRESSION_ZSTD:
        import zstandard
        return zstandard.ZstdDecompressor().decompress(body, max_output_size=size)
    if compression in (COMPRESSION_SNAPPY, COMPRESSION_USER):
        raise StorageError(f"sub-batch compression {compression} is not supported")
    raise CorruptionError("?", 0, f"undefined sub-batch compression {compression}")


def _simple_run(data: bytes, start: int, end: int, out: list[bytes], path: str,
                position: int) -> None:
    """Append the bodies of the simple entries in ``data[start:end]`` to ``out``."""
    pos = start
    ap = out.append
    while pos < end:
        (h,) = _unpack_len(data, pos)
        pos += 4
        if h & 0x80000000:
            raise CorruptionError(path, position, "sub-batch entry inside a sub-batch")
        ap(data[pos:pos + h])
        pos += h
    if pos != end:
        raise CorruptionError(path, position, "entry runs past the end of its section")


def first_stride(data: bytes | memoryview, entries: int) -> int:
    """The size of every entry (header included) if the data section is ``entries`` simple
    entries as long as its first one, else 0: from the first header and the length alone,
    the others' headers unchecked (``entry_stride`` checks them; a caller that checks them
    in a pass of its own, as ``amqp_stream.columns`` does, takes this)."""
    if entries < 2 or len(data) < 4:
        return 0
    (length,) = _unpack_len(data, 0)
    stride = length + 4
    return stride if not length & 0x80000000 and len(data) == entries * stride else 0


def entry_stride(data: bytes, entries: int) -> int:
    """The size of every entry (header included) when the data section is ``entries`` simple
    entries of one length, else 0: four strided byte comparisons (the 4-byte headers, checked
    column by column) instead of a header decode per entry."""
    stride = first_stride(data, entries)
    if not stride:
        return 0
    for k in range(4):
        if data[k::stride] != data[k:k + 1] * entries:
            return 0
    return stride


def _uniform(data: bytes, entries: int) -> list[bytes] | None:
    """Bodies of a data section made of ``entries`` simple entries of one length, else None:
    the common case of same-sized records costs one slice per record (``entry_stride``)."""
    stride = entry_stride(data, entries)
    if not stride:
        return None
    return [data[i:i + stride - 4] for i in range(4, 4 + entries * stride, stride)]


def _any_of(strings: list[bytes]) -> bytes:
    """A pattern for "any of ``strings``", the longest first at a position, with their common
    prefix written once: ``re``'s parser takes a shared prefix out of an alternation a byte at a
    time, deleting it from every branch each time, which is quadratic in its length (the 32
    number encodings behind one 25,000-character application-property key took 4-12 s to
    compile, holding the event loop)."""
    prefix = _common_prefix(strings)
    rest = sorted((s[len(prefix):] for s in strings), key=len, reverse=True)
    return re.escape(prefix) + b"(?:" + b"|".join(re.escape(r) for r in rest) + b")"


def _common_prefix(strings: Sequence[bytes]) -> bytes:
    low, high = min(strings), max(strings)  # the shared prefix of all is theirs
    return low[:next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))]


def _common_suffix(strings: Sequence[bytes]) -> bytes:
    return _common_prefix([s[::-1] for s in strings])[::-1]


def _clusters(group: tuple[bytes, ...]) -> list[list[bytes]]:
    """``group``'s strings a cluster per first byte (a regular expression each: its shared
    prefix is what the engine looks for at the speed of ``find``)."""
    clusters: dict[bytes, list[bytes]] = {}
    for needle in group:
        clusters.setdefault(needle[:1], []).append(needle)
    return list(clusters.values())


@functools.lru_cache(maxsize=256)
def _finder(group: tuple[bytes, ...]) -> Callable[[bytes, int], list[int] | None]:
    """``positions(data, limit)``: in order, a position inside every occurrence of one of
    ``group``'s strings in ``data`` (overlaps included), and maybe others; None past
    ``limit`` of them. A caller checks the record at each position (``records_holding``'s
    ``holds``), so a position need not be an occurrence: that lets clusters (a regular
    expression per first byte, ``_clusters``) that differ only in a prefix with a common end
    be searched as one, from that end: the 32 encodings of a number behind the two encodings
    of a one-letter key (``\\x01k``, ``s\\0\\0\\0k``: ``sqlfilter.required.needles``) are one
    search for ``k`` and the encodings, not two passes over the data (214 against 100 ns a
    158-byte record, in-process). A search per string costs ten times more; one expression
    over clusters without a common prefix, as much."""
    by_rest: dict[frozenset[bytes], list[bytes]] = {}  # what follows a cluster's prefix: its prefixes
    for cluster in _clusters(group):
        prefix = _common_prefix(cluster)
        by_rest.setdefault(frozenset(s[len(prefix):] for s in cluster), []).append(prefix)
    patterns: list[bytes] = []
    for rest, prefixes in by_rest.items():
        end = _common_suffix(prefixes) if len(prefixes) > 1 else b""
        heads = [end] if end else prefixes
        patterns.extend(_any_of([head + r for r in rest]) for head in heads)
    searches = [re.compile(p).search for p in patterns]

    def positions(data: bytes, limit: int) -> list[int] | None:
        hits: list[int] = []
        for search in searches:
            m = search(data)
            while m is not None:
                hits.append(m.start())
                if len(hits) > limit:
                    return None
                m = search(data, m.start() + 1)
        if len(searches) > 1:
            hits.sort()
        return hits

    return positions


@functools.lru_cache(maxsize=256)
def _holder(groups: tuple[tuple[bytes, ...], ...]) -> Callable[[bytes], bool]:
    """``holds(body)``: whether ``body`` holds one string of every group, exactly; a regular
    expression per cluster (``_clusters``) instead of an ``in`` per string (32 for a number:
    ~3 µs a candidate)."""
    def one_of(searches: list[Callable[[bytes], object]]) -> Callable[[bytes], bool]:
        return lambda body: any(f(body) is not None for f in searches)

    def holding(needle: bytes) -> Callable[[bytes], bool]:
        return lambda body: needle in body

    tests = [holding(group[0]) if len(group) == 1
             else one_of([re.compile(_any_of(c)).search for c in _clusters(group)])
             for group in groups]
    if len(tests) == 1:
        return tests[0]
    return lambda body: all(t(body) for t in tests)


def records_holding(data: bytes, chunk_id: int, groups: Sequence[Sequence[bytes]],
                    entries: int = 0, simple: bool = False) -> list[tuple[int, bytes]] | None:
    """The records of the data section ``data`` that hold one byte string of every group, as
    ``decode_records`` gives them (offsets from ``chunk_id``, gaps where records are left
    out); None when that cannot be told from the section's bytes: an entry is a sub-batch
    (compression hides its records' bytes), the entries do not add up, or the first group's
    strings (or the places ``_finder`` names for them) turn up in more than a quarter of the
    ``entries`` (then splitting the section costs less). ``simple``: the header says every
    entry is simple (``FLAG_SIMPLE_ENTRIES``), so a section without the first group's strings
    needs no walk to prove it.

    Why: a consumer whose filter requires bytes (``sqlfilter.required.needles``) then finds
    its candidates with a search at C speed and one walk over the entry headers (none when the
    entries are all of one size), instead of testing every record; a chunk without the bytes
    costs no record at all. A simple entry's body lies contiguously in the section, so a string
    in no body is in no record."""
    if not groups:
        return None
    hits = _finder(tuple(groups[0]))(data, max(16, entries // 4))  # (and maybe other places)
    if hits is None:
        return None

    holds = _holder(tuple(map(tuple, groups)))  # a candidate, checked whole
    if hits:
        stride = entry_stride(data, entries)
        if stride:  # same-sized entries: a hit's record is its position over the stride
            bodies = ((index, data[index * stride + 4:(index + 1) * stride])
                      for index in sorted({i // stride for i in hits}))
            return [(chunk_id + index, body) for index, body in bodies if holds(body)]
    end = len(data)
    unpack = _unpack_len
    pos = 0
    try:
        if not hits:  # no record can hold them if every entry is simple: the walk alone
            if simple:
                return []
            while pos < end:  # (a sub-batch's top bit makes its length overshoot the end)
                pos += 4 + unpack(data, pos)[0]
            return [] if pos == end else None
        hits.append(end)  # a sentinel: no record ends past the section (hits come in order)
        out: list[tuple[int, bytes]] = []
        k, offset = 0, chunk_id
        nxt_hit = hits[0]
        while pos < end:
            nxt = pos + 4 + unpack(data, pos)[0]
            if nxt > end:  # a sub-batch (its top bit) or entries that do not add up
                return None
            if nxt_hit < nxt:  # a hit starts in this entry: a candidate
                body = data[pos + 4:nxt]
                if holds(body):
                    out.append((offset, body))
                while hits[k] < nxt:
                    k += 1
                nxt_hit = hits[k]
            pos = nxt
            offset += 1
    except struct.error:
        return None
    return out if pos == end else None


def record_starts(data: bytes, start: int, end: int) -> list[int] | None:
    """Where each record begins (after its 4-byte size) of the simple entries that fill
    ``data[start:end]``, without a bytes object a record; None when a sub-batch entry is among
    them or the sizes do not add up (``decode_records`` then decides)."""
    starts: list[int] = []
    add = starts.append
    pos = start
    try:
        while pos < end:
            (size,) = _unpack_len(data, pos)
            if size & 0x80000000:
                return None
            pos += 4
            add(pos)
            pos += size
    except struct.error:
        return None
    return starts if pos == end and starts else None


def chained(found: np.ndarray, ends: np.ndarray, leads: np.ndarray,
            count: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Of candidate records ``found`` (ascending, the first one known to be a record), where
    each ``ends`` and where the entry after it would put the next record (``leads``), those a
    walk of the sizes from the first meets: (the records, their ends); None when they do not
    chain (or are not ``count``). The walk's answer without a Python step a record, for
    ``record_starts``' entries found by their first bytes (a chunk's, a Publish frame's).

    Why: sizes chain, so a walk cannot skip a record; a writer's records begin alike, so every
    place where the first record's first bytes recur is a candidate. Candidates inside a record
    (those bytes in a value) are dropped where no candidate leads to them; whatever is left
    must chain, one candidate leading to the next, or the caller walks."""
    if (count is None or len(found) == count) and (leads[:-1] == found[1:]).all():
        return found, ends
    keep = np.isin(found, leads)
    keep[0] = True
    found, ends, leads = found[keep], ends[keep], leads[keep]
    if (count is not None and len(found) != count) or not (leads[:-1] == found[1:]).all():
        return None
    return found, ends


def decode_records(data: bytes, chunk_id: int, *, path: str = "?", position: int = 0,
                   entries: int = 0) -> list[tuple[int, bytes]]:
    """``[(offset, body), ...]`` for a user chunk's data section; sub-batches are expanded
    (decompressed) and their records numbered in order. ``entries`` (from the header) enables
    the fast path for same-sized simple entries. Raises CorruptionError when entries do not fit
    the section."""
    uniform = _uniform(data, entries) if entries else None
    if uniform is not None:
        return list(zip(range(chunk_id, chunk_id + entries), uniform, strict=False))
    end = len(data)
    # simple entries only (the usual case): a sub-batch header's top bit makes its "length"
    # exceed the section, which ends this loop past ``end`` and falls back to the full parser
    bodies: list[bytes] = []
    ap = bodies.append
    pos = 0
    try:
        while pos < end:
            pos += 4
            nxt = pos + _unpack_len(data, pos - 4)[0]
            ap(data[pos:nxt])
            pos = nxt
    except struct.error:
        pos = -1
    if pos == end:
        return list(zip(range(chunk_id, chunk_id + len(bodies)), bodies, strict=True))
    bodies.clear()
    pos = 0
    try:
        while pos < end:
            (h,) = _unpack_len(data, pos)
            if not h & 0x80000000:
                pos += 4
                ap(data[pos:pos + h])
                pos += h
                continue
            flags, count, raw_len, length = SUBBATCH_HEADER.unpack_from(data, pos)
            pos += SUBBATCH_HEADER_BYTES
            if pos + length > end:
                raise CorruptionError(path, position, "sub-batch runs past the data section")
            compression = (flags >> 4) & 0x7
            try:
                raw = _decompress(compression, data[pos:pos + length], raw_len)
            except CorruptionError as exc:
                raise CorruptionError(path, position, exc.reason) from None
            except StorageError:
                raise
            except Exception as exc:  # each library has its own error types
                raise CorruptionError(path, position, f"sub-batch does not decompress: {exc}") from None
            # RabbitMQ checks the uncompressed length only where it decompresses, and serves
            # uncompressed sub-batches whose field differs (the CRC covers the bytes): so do we
            if len(raw) != raw_len and compression != COMPRESSION_NONE:
                raise CorruptionError(path, position, f"sub-batch is {len(raw)} bytes uncompressed, "
                                                      f"header says {raw_len}")
            pos += length
            before = len(bodies)
            _simple_run(raw, 0, len(raw), bodies, path, position)
            if len(bodies) - before != count:
                raise CorruptionError(path, position,
                                      f"sub-batch says {count} records, holds {len(bodies) - before}")
    except struct.error as exc:
        raise CorruptionError(path, position, f"truncated entry header: {exc}") from None
    if pos != end:
        raise CorruptionError(path, position, "entry runs past the end of the data section")
    return list(zip(range(chunk_id, chunk_id + len(bodies)), bodies, strict=True))


def decode_tracking(buf: bytes | memoryview, snapshot: bool = False, *, path: str = "?",
                    position: int = 0) -> list[TrackingRecord]:
    """Tracking records of a trailer or of a tracking chunk's entry body (``snapshot``: a
    snapshot's, whose type-0 records carry a chunk id). Raises CorruptionError on an unknown
    type or a record that runs past the end."""
    out = []
    pos = 0
    end = len(buf)
    try:
        while pos < end:
            ttype, id_len = TRACKING_PREFIX.unpack_from(buf, pos)
            pos += 2
            tid = bytes(buf[pos:pos + id_len])
            pos += id_len
            if ttype == TRACKING_TYPE_TIMESTAMP:
                (value,) = TRACKING_TIMESTAMP.unpack_from(buf, pos)
                pos += 8
                out.append(TrackingRecord(ttype, tid, value))
            elif ttype > TRACKING_TYPE_TIMESTAMP:
                raise CorruptionError(path, position + pos - 2 - id_len,
                                      f"unknown tracking record type {ttype}")
            elif snapshot and ttype == TRACKING_SEQUENCE:
                chid, seq = TRACKING_SNAP.unpack_from(buf, pos)
                pos += 16
                out.append(TrackingRecord(ttype, tid, seq, chid))
            else:
                (value,) = TRACKING_VALUE.unpack_from(buf, pos)
                pos += 8
                out.append(TrackingRecord(ttype, tid, value))
    except struct.error:
        raise CorruptionError(path, position + pos, "tracking record runs past its section") from None
    return out
