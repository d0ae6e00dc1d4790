"""Readers: chunks from an offset spec onwards, skipping chunks the stage-1 filter rules out.

Strategy:
- The index says what is complete: a reader walks the current segment's index records (read in
  bulk with ``os.pread``) and reads each chunk at the position a record gives. A stream in this
  process also bounds readers by its committed end, so they never see a chunk before it counts
  as written under the fsync policy; a reader in another process works from the files alone
  (the writer appends an index record only after the chunk is in the segment).
- With stage-1 values a reader first reads only the header and filter (one ``pread`` of
  ``CHUNK_HEADER_BYTES`` + filter size bytes). A chunk the filter rules out costs nothing more; a matching one costs
  one more ``pread`` of its data section. Without values, a chunk is one ``pread`` of exactly its
  size when the next index record gives it.
- Every data section read is CRC-checked; a mismatch raises ``CorruptionError`` (never served).
  It is read into the thread's scratch buffer (``files.pread_scratch``): the records given out
  are copies, never views of it.
- At the end of a segment's index the reader looks for a newer segment; since the writer
  creates a segment only after finishing the previous one, seeing a newer segment means the
  current one is final (it re-reads the current index once more before moving on).
- Tracking chunks (types 1, 2) consume offsets but are never returned.
- ``read_location`` is ``read_chunk`` for a caller that sends chunks straight from the file
  (``os.sendfile``): it reads only the header (and filter) and says where the data section
  lies (``ChunkLocation``). Its data is not CRC-checked here (the receiver checks the CRC the
  header carries), but its header is checked against the index (``_check_extent``), and
  records below the start offset are left in it.
- Broker-derived filter keys (``derived=``, ``storage.derived``): the segment's sidecar is
  read forward in step with the index; a chunk whose entry says no block may match is passed
  over without reading it, and a chunk where at most half of the bytes may match is read block
  by block (each block checked against its own CRC; on a mismatch the chunk is read whole), its
  ``ReadChunk`` holding only those blocks' records. A chunk without an entry is read whole.
- A scan can be sliced: ``read_chunk(max_skips=N)`` passes over at most N chunks (ruled out by
  stage 1, tracking, or wholly below the start offset) and then returns ``SCAN_PAUSED``,
  keeping its place. A caller on an event loop (the broker) yields between slices, so a filter
  that matches almost nothing in a long stream cannot hold the loop for the whole scan.
"""

from __future__ import annotations

import bisect
import functools
import operator
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol, Sequence, TypeVar, cast, overload

import bloom
import numpy as np

from storage.crc import crc32
from storage.derived import Block, Bounds, ChunkEntry, Cursor, Wanted
from storage.skiptable import Table
from storage.errors import CorruptionError
from storage.files import (
    IndexTuple,
    advise,
    in_page_cache,
    index_count,
    index_path,
    list_segments,
    pread_exact,
    pread_scratch,
    read_index_record,
    read_index_tuples,
    scratch,
    segment_path,
)
from storage.format import (
    CHUNK_HEADER,
    CHUNK_HEADER_BYTES,
    INDEX_RECORD_BYTES,
    CHUNK_MAGIC_VERSION,
    CHUNK_USER,
    FLAG_SIMPLE_ENTRIES,
    ChunkHeader,
    IndexRecord,
    decode_header,
    decode_records,
    first_stride,
    records_holding,
)
from storage.offsets import OffsetSpec

__all__ = ["LogSource", "DirectorySource", "Reader", "ReadChunk", "ChunkLocation", "ReaderStats",
           "ScanPaused", "SCAN_PAUSED", "open_reader", "Matches", "Columns", "Span"]

_INDEX_BATCH = 4096
#: where a skip table covers the index, a fill reads up to a stop this near; one further away
#: is leapt to (``Reader._index_from``)
_NEAR_STOP = 32
#: stops whose blocks a reader asks for at once when it finds them out of the page cache
#: (``Reader._advise``): ~1 MB of blocks of 64 records, ~1.5 ms of advice calls
_ADVISE_STOPS = 128
_CHUNK_HEAD_MAX = CHUNK_HEADER_BYTES + bloom.MAX_SIZE  # a chunk's bytes before its data section
#: ``Reader.read_span``: chunks and bytes at most (three buffers a chunk within ``IOV_MAX``)
SPAN_CHUNKS = 256
SPAN_BYTES = 4 << 20


def _most(part: int, whole: int) -> bool:
    """Whether a chunk's blocks that may match (``part`` bytes) are most of its data section
    (``whole``): then the chunk is read whole rather than block by block."""
    return 2 * part > whole


T = TypeVar("T")


def _runs(items: Iterable[T], place: Callable[[T], tuple[int, int]]) -> list[list[T]]:
    """``items`` (in order) as runs of those whose ``place`` (position, length) follow each
    other with nothing between: blocks read with one ``pread`` a run, places advised as one."""
    runs: list[list[T]] = []
    end = -1
    for item in items:
        at, n = place(item)
        if at == end:
            runs[-1].append(item)
        else:
            runs.append([item])
        end = at + n
    return runs


_block_place = operator.attrgetter("offset", "length")


def _same(place: tuple[int, int]) -> tuple[int, int]:
    return place


@functools.lru_cache(maxsize=64)
def _entry_type(stride: int) -> np.dtype:
    """An entry of ``stride`` bytes as numpy sees it: a 4-byte header and a body."""
    return np.dtype([("head", "V4"), ("body", f"V{stride - 4}")])


def _bodies_at(data: bytes | memoryview, first: int, stride: int, entries: int,
               hits: list[int]) -> list[tuple[int, bytes]]:
    """``(first + i, body of entry i)`` for each ``i`` of ``hits`` (in order), ``data``
    being ``entries`` simple entries of ``stride`` bytes. Each body a ``bytes`` of its own
    (never a view of ``data``: it may be a scratch buffer). Why numpy: for more than a few
    hits one fancy-index copy and ``tolist`` (void items come out as ``bytes``, trailing NULs
    kept) cost ~147 ns a record of 106 bytes, against ~185 for a slice each of ``bytes`` and
    ~250 for a slice and a copy each of a view, plus ~3 µs a call (in process: it pays from
    ~48 hits on ``bytes``, ~16 on a view)."""
    if type(data) is memoryview:
        if len(hits) < 16 or stride <= 4:
            return [(first + i, data[i * stride + 4:(i + 1) * stride].tobytes()) for i in hits]
    elif len(hits) < 48 or stride <= 4:
        return [(first + i, data[i * stride + 4:(i + 1) * stride]) for i in hits]
    bodies = np.frombuffer(data, _entry_type(stride), count=entries)["body"][hits].tolist()
    return list(zip(map(first.__add__, hits), bodies, strict=True))  # (offsets: Python ints)


_HB = CHUNK_HEADER_BYTES  # short name for the hot paths below
_MIN_FILTER = bloom.MIN_SIZE
_unpack_header = CHUNK_HEADER.unpack_from
_ID = operator.itemgetter(0)  # of an index tuple: the chunk id
_TYPE = operator.itemgetter(4)  # and its type


class LogSource(Protocol):
    """What a reader needs from the log it reads (a ``Stream``, or a directory alone)."""

    directory: str

    def segment_starts(self) -> Sequence[int]: ...

    def committed_end(self) -> int | None: ...

    def appended_end(self) -> int | None: ...

    def wait_beyond(self, offset: int, timeout: float | None) -> bool: ...


class DirectorySource:
    """A stream directory read from its files alone (another process may be writing it)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def segment_starts(self) -> Sequence[int]:
        return list_segments(self.directory)

    def committed_end(self) -> int | None:
        return None

    def appended_end(self) -> int | None:
        return None

    def wait_beyond(self, offset: int, timeout: float | None) -> bool:  # polled by the reader
        raise NotImplementedError


@dataclass
class ReaderStats:
    chunks_read: int = 0
    chunks_skipped: int = 0  # by stage 1 or by derived keys
    bytes_read: int = 0
    derived_chunks_skipped: int = 0  # whole chunks the derived index ruled out
    derived_blocks_skipped: int = 0  # blocks of chunks read in part
    derived_entries_read: int = 0  # sidecar entries decoded (where a skip table covers the
    # segment: those of the chunks it could not rule out, else one per chunk looked at)
    prefilter_chunks_skipped: int = 0  # read (and counted in chunks_read), but holding none of
    # the bytes the caller's filter requires (``needles``): no record given
    prefilter_records_dropped: int = 0  # records (at or past the start) of chunks and blocks
    # read that the needles left out: the filter's answer for them, without decoding them


@dataclass(slots=True)
class ReadChunk:
    """A user chunk as delivered: its records as ``(offset, stored bytes)``."""

    chunk_id: int
    timestamp: int
    records: list[tuple[int, bytes]]
    next_offset: int = 0


#: a caller's filter over a run of same-sized entries (see ``Reader``'s ``columns``)
Columns = Callable[[bytes | memoryview, int, int], "list[int] | None"]


class Matches(list):
    """Records (``(offset, body)``) that the reader's ``columns`` chose: every one is wanted,
    so the caller's stage 2 need not look at them again."""

    __slots__ = ()


@dataclass(slots=True)
class ChunkLocation:
    """A user chunk as it lies in its segment: ``header`` (the 48 bytes as on disk) and the
    data section's ``length`` bytes at ``position`` of ``fd``. ``fd`` belongs to the reader:
    it stays open until the reader's next call (or ``close``); ``os.dup`` it to keep it."""

    chunk_id: int
    timestamp: int
    entries: int
    records: int
    crc: int
    header: bytes
    fd: int
    position: int
    length: int
    next_offset: int
    #: broker-derived keys: only these blocks of the data section may hold a match (each a
    #: ``storage.derived.Block``: offset in the section, length, first record from the chunk
    #: id, entries, records, CRC); None: the whole section
    blocks: list[Block] | None = None


@dataclass(slots=True)
class RawChunk:
    """A chunk of any type as it lies in its segment, whole (header, filter, data, trailer):
    ``size`` bytes at ``position`` of ``fd`` (the reader's: valid until its next call), for
    a caller that copies logs (cluster replication sends it with ``os.sendfile``).
    ``first``: the chunk opens its segment (the copy splits its segments there too)."""

    chunk_id: int
    epoch: int
    type: int
    fd: int
    position: int
    size: int
    next_offset: int
    first: bool


@dataclass(slots=True)
class Span:
    """Consecutive user chunks read at once (``Reader.read_span``), each checked as
    ``read_location`` checks a chunk and against its CRC: ``headers``, each unpacked
    (``CHUNK_HEADER``'s fields), and their data sections side by side in ``data``, chunk
    ``j``'s from ``starts[j]`` to ``starts[j + 1]``: a view of the thread's scratch buffer,
    valid until its next use (copy out what is kept). ``records``: of them all; the offsets
    follow on from the first chunk's id to the last one's next offset."""

    headers: list[tuple[int, ...]]
    data: memoryview
    starts: list[int]
    records: int

    def section(self, j: int) -> memoryview:
        """Chunk ``j``'s data section (a view of the scratch buffer)."""
        return self.data[self.starts[j]:self.starts[j + 1]]


class ScanPaused:
    """The type of ``SCAN_PAUSED``: "the scan budget is used, nothing found yet, call again"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SCAN_PAUSED"


SCAN_PAUSED = ScanPaused()


@dataclass
class _Open:
    start: int
    spath: str
    sfd: int
    ifd: int
    recs: list[IndexTuple] = field(default_factory=list)  # raw INDEX_RECORD tuples
    ri: int = 0
    idx_next: int = 0  # index record number after the last one in ``recs``
    expect: int | None = None  # the chunk id that must come next in this segment
    derived: Cursor | None = None  # the segment's derived-key sidecar, when it helps
    table: Table | None = None  # its skip table (``storage.skiptable``), while it covers
    advised: int = 0  # stops below this index record were in a window ``Reader._advise`` saw
    size: int = 0  # the segment file's size when last looked at (``_inside``)
    cold: bool = False  # a window of its stops was found out of the page cache
    #: the last ``Reader._select``: (entry, table, its answer)
    selected: tuple[ChunkEntry, Table | None, tuple[list[Block], int]] | None = None


def _inside(seg: _Open, end: int) -> bool:
    """Whether byte ``end`` is within the segment file (its size looked up again only when
    ``end`` is past the size last seen: once a segment, then once per growth)."""
    if end > seg.size:
        seg.size = os.fstat(seg.sfd).st_size
    return end <= seg.size


class Reader:
    """Reads chunks from ``spec`` onwards. Not thread-safe: one reader per consumer.

    Args:
        source: the log (a ``Stream`` or a ``DirectorySource``).
        spec: where to start.
        filter_values: stage-1 values; empty = every chunk.
        match_unfiltered: also deliver chunks holding records without a filter value.
        derived: per derived key, the tokens one of which a record the caller wants holds
            (``storage.derived``): chunks and blocks whose index holds none are not read, and
            a chunk read in part holds only the records of the blocks that may match.
        bounds: per derived key, the interval a number of it must lie in for a record the
            caller wants (``storage.derived.Bounds``): the chunks whose skip-table rows hold
            no number inside it are not read (without a table, nothing is skipped by them).
        needles: groups of byte strings; a record the caller wants holds one string of every
            group (``sqlfilter.required.needles``): a chunk read gives only the records that
            hold them, when its bytes can tell (``candidates``); one that holds none, nothing.
        columns: the caller's filter over a run of same-sized entries at once
            (``columns(data, stride, entries)``: the indexes of the records it wants, or None
            when it cannot tell, given ``entries * stride`` bytes whose first entry is a
            simple one of ``stride`` bytes: it checks the others' headers;
            ``amqp_stream.columns``); where it tells, a chunk read gives
            exactly those records, as ``Matches``: the caller's stage 2 is done for them.
    """

    def __init__(self, source: LogSource, spec: OffsetSpec, filter_values: Iterable[str | bytes] = (),
                 match_unfiltered: bool = False, *, filter_size_hint: int = bloom.MIN_SIZE,
                 derived: Wanted | None = None, needles: Sequence[Sequence[bytes]] = (),
                 bounds: Bounds | None = None, queued_end: int | None = None,
                 columns: Columns | None = None) -> None:
        self.source = source
        self.columns = columns
        self.stats = ReaderStats()
        self._wanted = derived or None
        self._bounds = bounds or None
        self.needles = tuple(tuple(g) for g in needles)
        values = list(filter_values)
        self._matcher = bloom.Matcher(values, match_unfiltered) if values else None
        self._matches = self._matcher.matches if self._matcher is not None else None
        self._verdicts: dict[tuple[bytes, int, int], bool] = {}
        self._hint = filter_size_hint if filter_size_hint else bloom.MIN_SIZE
        self._shape = (0, 0)  # ``read_span``: the filter and trailer sizes last seen
        self._seg: _Open | None = None
        self._next_id = 0
        self._min = 0
        self._closed = False
        # ``last`` while appends are queued: resolved once they are committed (see ``_next``);
        # ``next`` given the ``queued_end`` of appends queued when it was asked for (where the
        # writer ends a chunk: ``Writer.break_chunk``): the chunk there, once they are
        # committed, so that what came before the subscription is not delivered
        self._last_at: int | None = None
        self._pending = spec
        nxt = spec.kind == "next" and queued_end is not None
        if spec.kind == "last" or nxt:
            appended, committed = source.appended_end(), source.committed_end()
            if nxt:
                appended, self._pending = queued_end, OffsetSpec.offset(cast(int, queued_end))
            if appended is not None and committed is not None and committed < appended:
                self._last_at = appended
                self._next_id = committed
                return
        self._seek_retrying(self._pending)

    def _seek_retrying(self, spec: OffsetSpec) -> None:
        for attempt in range(3):
            try:
                self._seek(spec)
                break
            except FileNotFoundError:  # retention removed a segment while we looked
                self._close_segment()
                if attempt == 2:
                    raise

    # -- public --------------------------------------------------------------------------------
    @property
    def position(self) -> int:
        """The offset this reader continues from (after the last chunk it read or skipped)."""
        return self._next_id

    # without a budget the scan is never paused: callers need not test for ``SCAN_PAUSED``
    @overload
    def read_chunk(self, max_skips: None = None) -> ReadChunk | None: ...
    @overload
    def read_chunk(self, max_skips: int | None) -> ReadChunk | ScanPaused | None: ...

    def read_chunk(self, max_skips: int | None = None) -> ReadChunk | ScanPaused | None:
        """The next matching user chunk, or None when nothing more is committed yet.

        With ``max_skips`` the call passes over at most that many chunks without returning one
        and then returns ``SCAN_PAUSED`` (its place is kept: the next call goes on from there).
        Records, stats and bytes read are the same as without a budget.
        """
        return cast("ReadChunk | ScanPaused | None", self._next(max_skips, self._read))

    def read_location(self, max_skips: int | None = None) -> ChunkLocation | ScanPaused | None:
        """``read_chunk`` without reading the data section: where the next matching user chunk
        lies (see ``ChunkLocation``), ``SCAN_PAUSED`` or None. The chunk is whole even when the
        start offset lies inside it."""
        return cast("ChunkLocation | ScanPaused | None", self._next(max_skips, self._locate))

    def read_raw(self) -> RawChunk | None:
        """The next chunk of any type (tracking ones too), whole and unfiltered, as it lies on
        disk (see ``RawChunk``), or None at the end. Its data is not CRC-checked here: whoever
        receives it checks the CRC its header carries; its header must agree with the index
        (else ``CorruptionError``), which that CRC does not cover."""
        return cast("RawChunk | None", self._next(None, self._raw))

    def read_span(self, max_records: int, end: int | None = None) -> Span | None:
        """``read_location`` for consecutive user chunks at once, their data sections read
        too, with one ``preadv`` (their headers, filters and trailers into a buffer of their
        own, the data sections side by side into the scratch buffer): chunks while the records
        before them are under ``max_records``, each below ``end`` (an offset), at most
        ``SPAN_CHUNKS`` and ``SPAN_BYTES``. None when there is no run of two or more to read so
        (the next chunk is of another type, below the start offset, the last of the buffered
        index records, at the committed end; a stage-1 or derived-key filter, which pass
        chunks over; a header or CRC that does not hold): then ``read_location`` reads the next
        one, with the checks and the errors it has. The run stops before a chunk whose header
        disagrees with the index or with its neighbours (``_locate``'s checks) or whose data
        fails its CRC, so that chunk, damaged, comes to ``read_location`` next.

        Why: a chunk's fixed costs (two ``pread``s, a header decoded into a tuple, the
        caller's numpy calls) are ~20 µs, 0.02 µs a record for the ~1,000-record chunks a
        publisher's frames make; a span of them shares those, and its data sections side by
        side are one run of entries for the caller's columns (``span_matches``)."""
        seg = self._seg
        if (seg is None or self._last_at is not None or self._matches is not None
                or seg.derived is not None):
            return None
        recs, i = seg.recs, seg.ri
        lim = self.source.committed_end()
        if end is not None:
            lim = end if lim is None else min(lim, end)
        fs, tl = self._shape
        least = _HB + fs + tl  # a chunk's bytes but its data section, as the last one's were
        stop = min(len(recs) - 1, i + SPAN_CHUNKS)  # (each chunk's end: the next record's place)
        j, total, records, low = i, 0, 0, self._min
        while j < stop and records < max_records:
            rec, nxt = recs[j], recs[j + 1]
            size = nxt[3] - rec[3]
            if (rec[4] != CHUNK_USER or (lim is not None and rec[0] >= lim) or rec[0] < low
                    or size <= least or size > SPAN_BYTES - total):
                break
            records += nxt[0] - rec[0]
            total += size
            j += 1
        k = j - i
        if k < 2:
            return None
        heads = bytearray(least * k)
        hv = memoryview(heads)
        data = scratch(total - least * k)
        iov: list[memoryview] = []
        at = d = 0
        for rec, nxt in zip(recs[i:j], recs[i + 1:j + 1], strict=True):
            n = nxt[3] - rec[3] - least
            iov.append(hv[at:at + _HB + fs])
            iov.append(data[d:d + n])
            if tl:
                iov.append(hv[at + _HB + fs:at + least])
            at += least
            d += n
        got = os.preadv(seg.sfd, iov, recs[i][3])
        headers: list[tuple[int, ...]] = []
        starts = [0]
        expect = seg.expect
        after = 0  # the last chunk's next offset
        at = d = done = 0
        for rec, nxt in zip(recs[i:j], recs[i + 1:j + 1], strict=True):
            t = _unpack_header(heads, at)
            n = nxt[3] - rec[3] - least
            done += n + least
            if (done > got or t[0] != CHUNK_MAGIC_VERSION or t[1] != CHUNK_USER or not t[2]
                    or t[6] != rec[0] or (expect is not None and t[6] != expect)
                    or t[6] + t[3] != nxt[0] or t[8] != n or t[9] != tl or t[10] != fs):
                if t[0] == CHUNK_MAGIC_VERSION and _HB + t[8] + t[9] + t[10] == n + least and (
                        not t[10] or t[10] >= _MIN_FILTER):
                    self._shape = (t[10], t[9])  # (chunks of another filter or trailer size)
                break
            if crc32(data[d:d + n]) != t[7]:
                break
            expect = after = t[6] + t[3]
            headers.append(t)
            at += least
            d += n
            starts.append(d)
        if not headers:
            return None
        k = len(headers)
        seg.ri = i + k
        seg.expect = self._next_id = after
        stats = self.stats
        stats.chunks_read += k
        stats.bytes_read += _HB * k + d
        return Span(headers, data[:d], starts, after - headers[0][6])

    def span_matches(self, span: Span) -> Matches | None:
        """The records the ``columns`` choose in a whole span at once (side by side, its data
        sections are one run of entries whose offsets follow on), counted as ``candidates``
        counts them chunk by chunk; None when they cannot tell for every chunk (records of
        other layouts or sizes, a chunk of fewer than two entries, which ``candidates`` leaves
        to the needles): then the caller asks ``candidates`` chunk by chunk."""
        columns = self.columns
        if columns is None or any(t[2] < 2 or t[2] != t[3] for t in span.headers):
            return None
        data, n = span.data, span.records
        stride = first_stride(data, n)
        hits = columns(data, stride, n) if stride else None
        if hits is None:
            return None
        first = span.headers[0][6]
        stats = self.stats
        stats.prefilter_records_dropped += n - len(hits)
        before = 0  # the hits before the chunk's end, for each chunk in turn: none in it, skipped
        for t in span.headers:
            upto = bisect.bisect_left(hits, t[6] + t[3] - first, before)
            stats.prefilter_chunks_skipped += upto == before
            before = upto
        return Matches(_bodies_at(data, first, stride, n, hits))

    def span_records(self, span: Span) -> list[tuple[int, bytes]]:
        """Every record of ``span``'s chunks, in order, each body a ``bytes`` of its own
        (``span.data`` is the scratch buffer): for a caller whose columns could not tell."""
        out: list[tuple[int, bytes]] = []
        for j, t in enumerate(span.headers):
            out += decode_records(bytes(span.section(j)), t[6], entries=t[2])
        return out

    def _next(self, max_skips: int | None, read: Callable) -> object:
        if max_skips is not None and max_skips < 1:
            raise ValueError("max_skips must be at least 1")
        left = max_skips
        stats = self.stats
        source = self.source
        if self._last_at is not None:
            lim, appended = source.committed_end(), source.appended_end()
            if lim is not None and lim < min(self._last_at, appended or 0):
                return None  # (a write error drops the queue: then it resolves at once)
            self._last_at = None
            self._seek_retrying(self._pending)
        while True:
            lim = source.committed_end()
            if lim is not None and self._next_id >= lim:
                return None
            seg = self._seg
            if seg is None:
                if not self._open_first():
                    return None
                continue
            if seg.ri >= len(seg.recs):
                if not self._fill(seg):
                    if not self._advance():
                        return None
                    continue
            if seg.derived is not None:
                done, cost = self._derived_run(seg, lim, left)
                if left is not None:
                    left -= cost
                    if left <= 0:
                        return SCAN_PAUSED
                if done:
                    continue
            if self._matches is not None:
                before = stats.chunks_skipped
                done = self._skip_run(seg, lim, self._matches, left)
                if left is not None:
                    left -= stats.chunks_skipped - before
                    if left <= 0:
                        return SCAN_PAUSED
                if done:
                    continue  # skipped to the end of the buffered index records
            rec = seg.recs[seg.ri]
            if lim is not None and rec[0] >= lim:
                return None
            nxt = seg.recs[seg.ri + 1][3] if seg.ri + 1 < len(seg.recs) else 0
            seg.ri += 1
            chunk = read(seg, rec, nxt)
            if chunk is not None:
                return chunk
            if left is not None:
                left -= 1
                if left <= 0:
                    return SCAN_PAUSED

    def candidates(self, data: bytes | memoryview, chunk_id: int, entries: int,
                   flags: int = 0) -> list[tuple[int, bytes]] | None:
        """The records of a chunk this reader read (its data section ``data``; ``flags`` from
        its header) that hold the ``needles`` (``format.records_holding``; a chunk with none
        is counted), or None: split the whole chunk."""
        records = self.holding(data, chunk_id, entries, bool(flags & FLAG_SIMPLE_ENTRIES))
        if records is not None and not records:
            self.stats.prefilter_chunks_skipped += 1
        return records

    def holding(self, data: bytes | memoryview, first: int, entries: int,
                simple: bool = False) -> list[tuple[int, bytes]] | None:
        """``candidates`` for any run of entries (a chunk's data section, or a block of it
        that a derived key selected; ``first``: the offset of its first record; ``simple``:
        known to hold simple entries only, as a block the sidecar indexes does), uncounted."""
        found: list[tuple[int, bytes]] | None = None
        stride = first_stride(data, entries) if self.columns is not None else 0
        hits = self.columns(data, stride, entries) if stride and self.columns else None
        if hits is not None:
            found = Matches(_bodies_at(data, first, stride, entries, hits))
        elif self.needles:
            found = records_holding(bytes(data), first, self.needles, entries, simple)
        if found is not None:  # (all simple: an entry is a record)
            lo = max(first, self._min)
            kept = len(found) if lo == first else sum(1 for o, _ in found if o >= lo)
            self.stats.prefilter_records_dropped += max(0, first + entries - lo) - kept
        return found

    def block_records(self, data: bytes | memoryview, chunk_id: int, b: Block, *, path: str = "?",
                      position: int = 0, checked: bool = False) -> list[tuple[int, bytes]] | None:
        """The records of block ``b`` of chunk ``chunk_id`` (``data``: the block's bytes as
        read; ``checked``: already against its CRC) that hold the ``needles``, else all of
        them; None when its bytes fail its CRC or disagree with the sidecar on its records:
        then the chunk is read whole, under its own CRC. For ``read_chunk`` and for a caller
        that reads ``ChunkLocation.blocks``."""
        if not checked and (len(data) != b.length or crc32(data) != b.crc):
            return None
        first = chunk_id + b.first
        part = self.holding(data, first, b.entries, simple=b.k > 0)  # (k: indexed, all simple)
        if part is None:
            part = decode_records(bytes(data), first, path=path, position=position,
                                  entries=b.entries)
            return part if len(part) == b.records else None
        return part if b.entries == b.records else None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until more may be readable (True) or ``timeout`` seconds pass (False)."""
        if self.source.committed_end() is not None:
            return self.source.wait_beyond(self._next_id, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._more_on_disk():
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(0.02 if left is None else min(0.02, left))

    def close(self) -> None:
        self._close_segment()
        self._closed = True

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[ReadChunk]:
        """Chunks until nothing more is committed (does not wait)."""
        while isinstance(chunk := self.read_chunk(), ReadChunk):  # no budget: never paused
            yield chunk

    # -- reading -------------------------------------------------------------------------------
    def _read(self, seg: _Open, rec: IndexTuple, nxt: int) -> ReadChunk | None:
        pos = rec[3]
        fd = seg.sfd
        stats = self.stats
        if rec[4] != CHUNK_USER:
            head = os.pread(fd, _HB, pos)
            stats.bytes_read += len(head)
            h = decode_header(head, path=seg.spath, position=pos)
            self._check_id(h, rec, seg)
            self._next_id = h.next_offset
            return None
        matches = self._matches
        if matches is None and seg.derived is not None:
            part = self._read_blocks(seg, rec)
            if part is not None:
                return part if part.records else None
        # the data section is read into the thread's scratch buffer (``pread_scratch``): a
        # view, valid until the next read; the records given out are copies (``_records``)
        if matches is None:
            if nxt > pos:
                buf = pread_scratch(fd, nxt - pos, pos)
            else:
                h = decode_header(pread_exact(fd, _HB, pos), path=seg.spath, position=pos)
                stats.bytes_read += _HB
                buf = pread_scratch(fd, h.size, pos)
            stats.bytes_read += len(buf)
            h = decode_header(buf, path=seg.spath, position=pos)
            start = _HB + h.filter_size
            data = buf[start:start + h.data_length]
        else:
            head = os.pread(fd, _HB + self._hint, pos)
            if len(head) < _HB:
                decode_header(head, path=seg.spath, position=pos)  # raises
            t = _unpack_header(head)
            fs = t[10]
            if t[0] != CHUNK_MAGIC_VERSION or t[1] or not t[2] or 0 < fs < _MIN_FILTER:
                decode_header(head, path=seg.spath, position=pos)  # raises with the reason
                raise CorruptionError(seg.spath, pos, "user chunk expected")
            if fs > len(head) - _HB:
                head += pread_exact(fd, fs - (len(head) - _HB), pos + len(head))
                self._hint = fs
            stats.bytes_read += len(head)
            if not matches(head[_HB:_HB + fs], t[11], t[12]):
                chunk_id = t[6]
                if chunk_id != rec[0] or (seg.expect is not None and chunk_id != seg.expect):
                    self._check_id(ChunkHeader._make(t), rec, seg)  # raises
                # skipped unread: its sizes must agree with the index (a damaged filter size
                # would make a filter of other bytes, and pass the chunk over in silence)
                self._check_extent(seg, pos, ChunkHeader._make(t))
                seg.expect = self._next_id = chunk_id + t[3]
                stats.chunks_skipped += 1
                return None
            h = ChunkHeader._make(t)
            data = pread_scratch(fd, h.data_length, pos + _HB + fs)
            stats.bytes_read += len(data)
        self._check_id(h, rec, seg)
        if len(data) != h.data_length:
            raise CorruptionError(seg.spath, pos, "chunk runs past the end of the segment")
        if crc32(data) != h.crc:
            raise CorruptionError(seg.spath, pos, "CRC mismatch in the data section")
        records = self.candidates(data, h.chunk_id, h.entries, h.flags)
        if records is None:
            records = decode_records(bytes(data), h.chunk_id, path=seg.spath, position=pos,
                                      entries=h.entries)
            if len(records) != h.records:
                raise CorruptionError(seg.spath, pos, f"header says {h.records} records, "
                                                      f"data holds {len(records)}")
        elif h.entries != h.records:  # the walk counts entries: every one a simple record
            raise CorruptionError(seg.spath, pos, f"header says {h.records} records in "
                                                  f"{h.entries} simple entries")
        self._next_id = h.next_offset
        stats.chunks_read += 1
        if not records:
            return None
        if records[0][0] < self._min:
            records = type(records)(r for r in records if r[0] >= self._min)  # (Matches stay)
            if not records:
                return None
        return ReadChunk(h.chunk_id, h.timestamp, records, h.next_offset)

    def _derived_run(self, seg: _Open, lim: int | None, budget: int | None) -> tuple[bool, int]:
        """Skip consecutive user chunks whose sidecar entry has no block that may match,
        without reading them (``_skip_run`` for derived keys). Where the segment's skip table
        covers the index, runs of chunks without a stop are passed over at once, and the
        cursor is sent to a stop's entry; elsewhere the sidecar is walked entry by entry.
        (True when it consumed every buffered index record, its cost against ``budget``: an
        entry walked or a run passed over at once counts one.)"""
        cur = seg.derived
        assert cur is not None
        recs = seg.recs
        i, n = seg.ri, len(recs)
        expect = seg.expect
        skipped = cost = 0
        before = self._mark(cur)
        table = seg.table
        base = seg.idx_next - n  # the index record number of recs[0]
        while i < n and (budget is None or cost < budget):
            rec = recs[i]
            if rec[4] or (lim is not None and rec[0] >= lim):
                break
            if expect is not None and rec[0] != expect:
                break
            if table is not None and base + i >= table.first:
                far = self._table_leap(seg, table, base + i, base + n, lim)
                if far is not None:  # past the buffered records: the index is read from there
                    self._count_cursor(cur, before)
                    self._derived_skipped(skipped + far - (base + i))
                    return True, cost + 1
                j = self._table_jump(table, recs, i, n - 1, base, lim)
                if j is None:  # the table and the index disagree: walk the sidecar
                    table = seg.table = None
                elif j > i:
                    skipped += list(map(_TYPE, recs[i:j])).count(CHUNK_USER)
                    expect = recs[j][0]
                    i = j
                    cost += 1
                    continue
                elif base + i > table.last:  # past the table: walk on from its end
                    if table.sidecar_end:
                        cur.seek(table.sidecar_end)
                    table = seg.table = None
                else:  # a stop (or the last record buffered): its entry, where the table says
                    row = table.row_of(base + i)
                    if row is None or row[0] != rec[0]:
                        table = seg.table = None
                    else:
                        if base + i >= seg.advised:
                            self._advise(seg, table, base + i)
                        if row[1] and (cur.entry is None or cur.entry.chunk_id != rec[0]):
                            cur.seek(row[1])  # (within what it read already: no pread)
            e = cur.entry_for(rec[0])
            if e is None or e.position != rec[3]:
                break
            if i + 1 < n and recs[i + 1][0] != rec[0] + e.records:
                break  # the index says otherwise: the entry is not to be trusted
            if self._select(seg, e)[0]:
                break
            expect = rec[0] + e.records
            skipped += 1
            cost += 1
            i += 1
        self._count_cursor(cur, before)
        if i > seg.ri and expect is not None:
            seg.ri = i
            seg.expect = self._next_id = expect
            self._derived_skipped(skipped)
        return i >= n, cost

    @staticmethod
    def _select(seg: _Open, e: ChunkEntry) -> tuple[list[Block], int]:
        """The blocks of ``e`` that may match: by the sidecar's Bloom filters, of those the
        skip table's rows (Bloom and number bounds) leave, where it covers the chunk. (The
        last answer is kept: a scan asks twice for a chunk it stops at.)"""
        assert seg.derived is not None
        table = seg.table
        last = seg.selected
        if last is not None and last[0] is e and last[1] is table:
            return last[2]
        got = seg.derived.select(e, table.blocks_of(e.chunk_id, e.nblocks) if table is not None else None)
        seg.selected = (e, table, got)
        return got

    def _advise(self, seg: _Open, table: Table, number: int) -> None:
        """At the first stop of a window of ``_ADVISE_STOPS``: when its bytes are not in the
        page cache, ask for what the window's stops will read at once, so that those reads
        overlap on the disk (cold, they waited ~80 µs a stop one after another; warm, this
        costs one probe a window). What a stop reads is its sidecar entry and either its
        blocks that may match or, when they are most of it, the whole chunk
        (``_read_blocks``). Only a hint: a row that disagrees with the log costs a needless
        read, never an answer (the reader checks each stop against the index as before)."""
        cur = seg.derived
        assert cur is not None
        first = table.ahead(number, 1)
        if not first or not first[0][2]:  # a chunk without blocks: again at the next stop
            seg.advised = table.window_end(number, 1)
            return
        seg.advised = table.window_end(number, _ADVISE_STOPS)
        if not seg.cold and in_page_cache(seg.sfd, first[0][1]) is not False:
            return
        # once cold, the next windows are asked for without a probe: their first stop may lie
        # in a page read ahead for this one while the rest of them is not
        seg.cold = True
        for entry, begin, end, blocks in table.ahead(number, _ADVISE_STOPS):  # in the order
            if entry:                                # they will be read: the disk serves the
                cur.advise((entry,))                 # first stop's first
            if _most(sum(length for _, length in blocks), end - begin):  # with its header
                advise(seg.sfd, ((max(begin - _CHUNK_HEAD_MAX, 0), end - begin + _CHUNK_HEAD_MAX),))
            else:  # (adjacent blocks as one place: they are read at once, ``_runs``)
                advise(seg.sfd, [(run[0][0], sum(n for _, n in run))
                                 for run in _runs(blocks, _same)])

    def _derived_skipped(self, chunks: int) -> None:
        self.stats.chunks_skipped += chunks
        self.stats.derived_chunks_skipped += chunks

    @staticmethod
    def _mark(cur: Cursor) -> tuple[int, int]:
        return cur.bytes_read, cur.entries_read

    def _count_cursor(self, cur: Cursor, mark: tuple[int, int]) -> None:
        """Count what the sidecar cursor read since ``mark``."""
        self.stats.bytes_read += cur.bytes_read - mark[0]
        self.stats.derived_entries_read += cur.entries_read - mark[1]

    def _table_leap(self, seg: _Open, table: Table, number: int, end: int,
                    lim: int | None) -> int | None:
        """When the table's next stop lies past the buffered index records (``end``, their
        number after the last), pass over to it without decoding the records between: the
        segment's index is read on from the stop (or the table's last record), whose chunk
        id the index must confirm. Its record number, or None (nothing passed over)."""
        target = min(table.next_stop(number), table.last)
        if target < end:
            return None
        row = table.row_of(target)
        if row is None or (lim is not None and row[0] >= lim):
            return None
        recs = self._index_from(seg, target)
        if not recs or recs[0][0] != row[0]:
            return None
        seg.recs, seg.ri, seg.idx_next = recs, 0, target + len(recs)
        seg.expect = self._next_id = row[0]
        return target

    @staticmethod
    def _table_jump(table: Table, recs: list[IndexTuple], i: int, hi: int, base: int,
                    lim: int | None) -> int | None:
        """Where a run of chunks the table rules out, from ``recs[i]`` (covered), ends: the
        next stop, the first record past the table, ``hi`` or the committed end; None when
        the table's row there names another chunk than the index."""
        j = min(table.next_stop(base + i) - base, hi)
        if lim is not None and j > i and recs[j - 1][0] >= lim:  # the committed end is inside
            j = bisect.bisect_left(recs, lim, i, j, key=_ID)
        if j <= i:
            return i
        if base + j <= table.last:  # the record it lands on: the same chunk in both
            row = table.row_of(base + j)
            return j if row is not None and row[0] == recs[j][0] else None
        row = table.row_of(table.last)  # the last one it passes over
        return j if row is not None and row[0] == recs[j - 1][0] else None

    def _read_blocks(self, seg: _Open, rec: IndexTuple) -> ReadChunk | None:
        """A user chunk read in part: only the blocks its sidecar entry says may match, when
        they are at most half of it. None: read it whole (no entry, most blocks may match, or
        a block's bytes fail its CRC: the whole chunk's CRC then decides)."""
        cur = seg.derived
        assert cur is not None
        before = self._mark(cur)
        e = cur.entry_for(rec[0])
        self._count_cursor(cur, before)
        if e is None or e.position != rec[3] or (seg.expect is not None and rec[0] != seg.expect):
            return None
        if seg.ri < len(seg.recs) and seg.recs[seg.ri][0] != rec[0] + e.records:
            return None  # the index says otherwise: the entry is not to be trusted
        sel, total = self._select(seg, e)
        if _most(sum(b.length for b in sel), total):
            return None
        records: list[tuple[int, bytes]] = []
        base = rec[3] + e.data_start
        got = 0
        chosen = True  # every block's records chosen by ``columns``: the chunk's are too
        for run in _runs((b for b in sel if rec[0] + b.first + b.records > self._min),
                        _block_place):
            first = run[0]
            view = pread_scratch(seg.sfd, run[-1].offset + run[-1].length - first.offset,
                                 base + first.offset)
            got += len(view)
            part = self._run_records(view, rec[0], run, path=seg.spath, position=rec[3])
            if part is None:
                self.stats.bytes_read += got
                return None
            records.extend(part)
            chosen = chosen and type(part) is Matches
        return self._took_blocks(seg, rec, e, sel, Matches(records) if chosen else records, got)

    def _run_records(self, view: memoryview, chunk_id: int, run: list[Block], *,
                     path: str, position: int) -> list[tuple[int, bytes]] | None:
        """``block_records`` for a run of adjacent blocks read at once (``view``: their bytes,
        in this thread's scratch buffer): each block's CRC checked on its own, then, when
        every block holds simple entries only, the run's records chosen in one step (one
        ``columns`` or needle search for the run, not one a block: a run of matches is
        often 16 blocks); else block by block. None as ``block_records``."""
        at = run[0].offset
        for b in run:
            piece = view[b.offset - at:b.offset - at + b.length]
            if len(piece) != b.length or crc32(piece) != b.crc:
                return None
        if len(run) > 1 and all(b.k > 0 and b.entries == b.records for b in run):
            found = self.holding(view, chunk_id + run[0].first, sum(b.entries for b in run), True)
            if found is not None:
                return found
        out: list[tuple[int, bytes]] = []
        chosen = True
        for b in run:
            part = self.block_records(view[b.offset - at:b.offset - at + b.length], chunk_id, b,
                                      path=path, position=position, checked=True)
            if part is None:
                return None
            out.extend(part)
            chosen = chosen and type(part) is Matches
        return Matches(out) if chosen else out

    def _took_blocks(self, seg: _Open, rec: IndexTuple, e: ChunkEntry, sel: list[Block],
                     records: list[tuple[int, bytes]], got: int) -> ReadChunk:
        stats = self.stats
        stats.bytes_read += got
        nxt = rec[0] + e.records
        seg.expect = self._next_id = nxt
        if sel:
            stats.chunks_read += 1
            stats.derived_blocks_skipped += e.nblocks - len(sel)
        else:  # reached here only past ``_derived_run``'s budget or stage-1 run
            self._derived_skipped(1)
        if records and records[0][0] < self._min:
            records = type(records)(r for r in records if r[0] >= self._min)  # (Matches stay)
        return ReadChunk(rec[0], rec[1], records, nxt)

    def _locate(self, seg: _Open, rec: IndexTuple, nxt: int) -> ChunkLocation | None:
        """``_read`` for ``read_location``: the header (and filter) only."""
        if rec[4] != CHUNK_USER:
            self._read(seg, rec, nxt)  # tracking: consumed, never returned
            return None
        pos = rec[3]
        fd = seg.sfd
        matches = self._matches
        head = os.pread(fd, _HB + self._hint if matches is not None else _HB, pos)
        h = decode_header(head, path=seg.spath, position=pos)
        if h.type != CHUNK_USER:
            raise CorruptionError(seg.spath, pos, "user chunk expected")
        fs = h.filter_size
        if matches is not None and fs > len(head) - _HB:
            head += pread_exact(fd, fs - (len(head) - _HB), pos + len(head))
            self._hint = fs
        self.stats.bytes_read += len(head)
        self._check_id(h, rec, seg)
        self._check_extent(seg, pos, h)
        self._next_id = h.next_offset
        if matches is not None and not matches(head[_HB:_HB + fs], h.filter_scheme,
                                               h.filter_param):
            self.stats.chunks_skipped += 1
            return None
        if h.next_offset <= self._min:  # wholly below the start offset
            return None
        self.stats.chunks_read += 1
        blocks = self._blocks_of(seg, rec, h) if seg.derived is not None and matches is None else None
        if blocks is not None:
            self.stats.bytes_read += sum(b.length for b in blocks)
        else:
            self.stats.bytes_read += h.data_length  # read from the file by whoever sends it
        return ChunkLocation(h.chunk_id, h.timestamp, h.entries, h.records, h.crc,
                             bytes(head[:_HB]), fd, pos + _HB + fs, h.data_length,
                             h.next_offset, blocks)

    @staticmethod
    def _check_extent(seg: _Open, pos: int, h: ChunkHeader) -> None:
        """For ``read_location``, whose caller sends the data section without reading it, for
        ``read_raw`` (whole chunks sent unread), and for a chunk a filter passes over unread:
        the chunk at ``pos`` must end where the index's next record puts the next chunk, whose
        id must be this one's next offset, and inside the segment file (a file cut inside the
        chunk: ``sendfile`` would come short, a leader resend it for ever). Why: the data CRC
        covers neither the header's sizes nor its record count, so a header damaged on disk would
        otherwise go out as good: a wrong count gives a client wrong offsets under a CRC that
        holds, a wrong length sends the bytes at the wrong place (a data length near 2 GiB,
        the rest of the segment), a wrong filter size makes other bytes the filter and passes
        the chunk over in silence. A chunk ``_read`` gives out needs no such check: it is
        decoded and CRC-checked."""
        end = pos + h.size
        if seg.ri < len(seg.recs):  # (``_next`` has moved ``ri`` past this chunk's record)
            nxt: IndexTuple | IndexRecord | None = seg.recs[seg.ri]
        else:  # the last record of a batch: the index's next one, when it is written (a
            # record follows its chunk into the segment: its place holds, committed or not)
            nxt = read_index_record(seg.ifd, seg.idx_next)
        if nxt is not None:
            if nxt[3] != end or nxt[0] != h.next_offset:
                raise CorruptionError(seg.spath, pos, f"header says chunk {h.chunk_id} ends at "
                                      f"byte {end} before offset {h.next_offset}; the index "
                                      f"puts chunk {nxt[0]} at byte {nxt[3]}")
        if not _inside(seg, end):  # (index and header may agree on a segment cut inside it)
            raise CorruptionError(seg.spath, pos, f"chunk {h.chunk_id} runs past the end of "
                                  f"the segment ({end} > {seg.size} bytes)")

    def _raw(self, seg: _Open, rec: IndexTuple, nxt: int) -> RawChunk:
        """``_read`` for ``read_raw``: the header only, its extent checked against the index
        (``_check_extent``). Why: the chunk goes to a follower byte for byte, its size from the
        header; a damaged size or record count the follower's CRC check does not see would
        send the wrong bytes (a data length near 2 GiB: a frame head the follower waits on
        for good, the leader's ``sendfile`` short) or give the chunks after it wrong offsets."""
        pos = rec[3]
        h = decode_header(os.pread(seg.sfd, _HB, pos), path=seg.spath, position=pos)
        self._check_id(h, rec, seg)
        self._check_extent(seg, pos, h)
        self._next_id = h.next_offset
        self.stats.chunks_read += 1
        self.stats.bytes_read += h.size
        first = seg.idx_next - len(seg.recs) + seg.ri - 1 == 0
        return RawChunk(h.chunk_id, h.epoch, h.type, seg.sfd, pos, h.size, h.next_offset, first)

    def _blocks_of(self, seg: _Open, rec: IndexTuple, h: ChunkHeader) -> list[Block] | None:
        """For ``read_location``: the blocks of the chunk whose index may hold a match when
        they are at most half of it (None: the whole chunk)."""
        cur = seg.derived
        assert cur is not None
        before = self._mark(cur)
        e = cur.entry_for(rec[0])
        self._count_cursor(cur, before)
        if (e is None or e.position != rec[3] or e.records != h.records
                or e.data_start != _HB + h.filter_size):
            return None
        sel, total = self._select(seg, e)
        if _most(sum(b.length for b in sel), total) or total != h.data_length:
            return None
        self.stats.derived_blocks_skipped += e.nblocks - len(sel)
        return sel

    def _skip_run(self, seg: _Open, lim: int | None, matches: Callable[[bytes, int, int], bool],
                  budget: int | None = None) -> bool:
        """The stage-1 hot loop: skip consecutive user chunks the filter rules out, reading
        only header and filter of each. Stops (leaving ``seg.ri`` on it) at a chunk to read,
        at anything unusual (left to ``_read``, which checks and reports it), at the
        committed end, or after ``budget`` skips (before reading the next header). True when
        it consumed every buffered index record."""
        recs = seg.recs
        i, n = seg.ri, len(recs)
        fd, want = seg.sfd, _HB + self._hint
        pread, unpack = os.pread, _unpack_header
        expect = seg.expect
        next_id = self._next_id
        verdicts = self._verdicts  # filters repeat (bursts of a value): decide each once
        skipped = looked = 0
        stop = n if budget is None else min(n, i + budget)
        while i < stop:
            rec = recs[i]
            if rec[4] or (lim is not None and rec[0] >= lim):
                break
            head = pread(fd, want, rec[3])
            looked += len(head)
            if len(head) != want:
                break
            t = unpack(head)
            fs = t[10]
            if (t[0] != CHUNK_MAGIC_VERSION or t[1] or not t[2] or t[6] != rec[0]
                    or _HB + fs > want or 0 < fs < _MIN_FILTER or (expect is not None and t[6] != expect)):
                break
            # it must end where the next chunk starts (else its filter size is damaged, and
            # its filter is not one), the last buffered one inside the file (as
            # ``_check_extent``); else ``_read`` reads it and names the damage
            end = rec[3] + _HB + fs + t[8] + t[9]
            if i + 1 < n:
                if recs[i + 1][3] != end:
                    break
            elif not _inside(seg, end):
                break
            key = (head[_HB:_HB + fs], t[11], t[12])
            verdict = verdicts.get(key)
            if verdict is None:
                if len(verdicts) > 4096:
                    verdicts.clear()
                verdict = verdicts[key] = matches(*key)
            if verdict:
                break  # _read reads this header again: one extra small pread per match
            expect = next_id = t[6] + t[3]
            skipped += 1
            i += 1
        self.stats.bytes_read += looked
        if skipped:
            seg.ri = i
            seg.expect = self._next_id = next_id
            self.stats.chunks_skipped += skipped
        return i >= n

    @staticmethod
    def _check_id(h: ChunkHeader, rec: IndexTuple, seg: _Open) -> None:
        """The header must agree with its index record (a raw ``INDEX_RECORD`` tuple) and
        follow the previous chunk."""
        if h.chunk_id != rec[0] or h.type != rec[4]:
            raise CorruptionError(seg.spath, rec[3],
                                  f"index says chunk {rec[0]} type {rec[4]}, segment holds "
                                  f"chunk {h.chunk_id} type {h.type}")
        if seg.expect is not None and h.chunk_id != seg.expect:
            raise CorruptionError(seg.spath, rec[3], f"chunk {h.chunk_id} where chunk "
                                                           f"{seg.expect} should follow")
        seg.expect = h.next_offset

    def _index_from(self, seg: _Open, at: int) -> list[IndexTuple]:
        """Index records from record ``at`` (counted as read): where a skip table covers the
        index, up to the record after the next stop when it is near, else two records, from
        which ``_derived_run`` leaps to it rather than decoding the records between (batches
        of 4,096 cost a selective read most of its fixed part and ~10 µs a stop)."""
        limit = _INDEX_BATCH
        table = seg.table
        if table is not None and table.first <= at <= table.last:
            ahead = table.next_stop(at) - at
            limit = ahead + 2 if ahead <= _NEAR_STOP else 2
        recs = read_index_tuples(seg.ifd, at, limit)
        self.stats.bytes_read += INDEX_RECORD_BYTES * len(recs)
        return recs

    def _fill(self, seg: _Open) -> bool:
        recs = self._index_from(seg, seg.idx_next)
        seg.recs = recs
        seg.ri = 0
        seg.idx_next += len(recs)
        return bool(recs)

    def _advance(self) -> bool:
        """Move to the next segment if there is one (the current one is final then)."""
        seg = self._seg
        assert seg is not None
        starts = self.source.segment_starts()
        later = [s for s in starts if s > seg.start]
        if not later:
            if starts and seg.start not in starts:
                # the newest segment is gone, so no retention did it: the writer's recovery
                # after a write error removed it (empty, never committed). Go on from our
                # position in the segment that holds it now.
                self._close_segment()
                low = self._min
                self._seek(OffsetSpec.offset(self._next_id))
                self._min = max(low, self._min)
                return self._seg is not None
            return False
        if self._fill(seg):  # written just before the rollover
            return True
        for start in later:
            try:
                self._open_segment(start, 0)
                return True
            except FileNotFoundError:  # removed by retention meanwhile
                continue
        return False

    def _more_on_disk(self) -> bool:
        seg = self._seg
        if seg is None:
            return bool(self.source.segment_starts())
        if seg.ri < len(seg.recs) or read_index_record(seg.ifd, seg.idx_next) is not None:
            return True
        return any(s > seg.start for s in self.source.segment_starts())

    # -- positioning ---------------------------------------------------------------------------
    def _close_segment(self) -> None:
        if self._seg is not None:
            os.close(self._seg.sfd)
            os.close(self._seg.ifd)
            if self._seg.derived is not None:
                self._seg.derived.close()
            self._seg = None

    def _open_segment(self, start: int, idx_next: int) -> None:
        d = self.source.directory
        spath = segment_path(d, start)
        ifd = os.open(index_path(d, start), os.O_RDONLY)
        try:
            sfd = os.open(spath, os.O_RDONLY)
        except BaseException:
            os.close(ifd)
            raise
        self._close_segment()
        self._seg = _Open(start, spath, sfd, ifd, idx_next=idx_next)
        if self._wanted is not None or self._bounds is not None:
            cur = self._seg.derived = Cursor.open(d, start, self._wanted or {}, self._bounds or {})
            if cur is not None:
                self._seg.table, read = Table.load(d, start, cur.keys, cur.wanted, idx_next,
                                                   cur.bounds)
                self.stats.bytes_read += read
                if self._seg.table is None and not cur.masks:  # bounds alone: only a table
                    cur.close()                                # tells them
                    self._seg.derived = None

    def _open_first(self) -> bool:
        for start in self.source.segment_starts():
            try:
                self._open_segment(start, 0)
                return True
            except FileNotFoundError:
                continue
        return False

    def _count(self, ifd: int, lim: int | None) -> int:
        """Index records that are complete, non-zero and (in process) committed."""
        n = index_count(ifd)
        while n:
            rec = read_index_record(ifd, n - 1)
            if rec is not None and (lim is None or rec.chunk_id < lim):
                break
            n -= 1
        return n

    @staticmethod
    def _bisect(ifd: int, n: int, pred: Callable[[IndexRecord], bool]) -> int:
        """The first record number in ``[0, n)`` for which ``pred`` holds (monotone), else n."""
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            rec = read_index_record(ifd, mid)
            if rec is not None and pred(rec):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _segment_end(self, start: int, ifd: int, sfd: int, n: int) -> int:
        if n == 0:
            return start
        rec = read_index_record(ifd, n - 1)
        assert rec is not None
        head = os.pread(sfd, _HB, rec.position)  # (a damaged one is named as any read names it)
        return decode_header(head, path=segment_path(self.source.directory, start),
                             position=rec.position).next_offset

    def _seek(self, spec: OffsetSpec) -> None:
        src = self.source
        lim = src.committed_end()
        starts = list(src.segment_starts())
        if not starts:
            self._next_id = 0
            return
        opened = {}

        def idx(start: int) -> tuple[int, int, int]:
            if start not in opened:
                d = src.directory
                ifd = os.open(index_path(d, start), os.O_RDONLY)
                sfd = os.open(segment_path(d, start), os.O_RDONLY)
                opened[start] = (ifd, sfd, self._count(ifd, lim))
            return opened[start]

        try:
            last = starts[-1]
            ifd, sfd, n = idx(last)
            end = self._segment_end(last, ifd, sfd, n) if lim is None else lim
            target: tuple[int, int] | None = None  # (segment start, record number)
            if spec.kind == "first":
                target = (starts[0], 0)
            elif spec.kind == "last":
                for start in reversed(starts):
                    ifd, _, n = idx(start)
                    for i in range(n - 1, -1, -1):
                        rec = read_index_record(ifd, i)
                        if rec is not None and rec.type == CHUNK_USER:
                            target = (start, i)
                            break
                    if target:
                        break
            elif spec.kind == "offset":
                n_off = spec.value
                if n_off < end:
                    k = max(0, bisect.bisect_right(starts, n_off) - 1)
                    ifd, _, n = idx(starts[k])
                    i = self._bisect(ifd, n, lambda r: r.chunk_id > n_off) - 1
                    target = (starts[k], max(i, 0))
                    self._min = n_off
            elif spec.kind == "timestamp":
                t = spec.value
                for start in starts:
                    ifd, _, n = idx(start)
                    if n == 0:
                        continue
                    rec = read_index_record(ifd, n - 1)
                    if rec is not None and rec.timestamp >= t:
                        target = (start, self._bisect(ifd, n, lambda r: r.timestamp >= t))
                        break
            if target is None:  # next, or beyond the end
                self._open_segment(last, opened[last][2])
                self._next_id = end
                self._min = max(self._min, end)
                return
            start, i = target
            ifd, _, n = idx(start)
            rec = read_index_record(ifd, i) if i < n else None
            self._open_segment(start, i)
            self._next_id = rec.chunk_id if rec is not None else start
        finally:
            for ifd, sfd, _ in opened.values():
                os.close(ifd)
                os.close(sfd)


def open_reader(directory: str, spec: OffsetSpec, filter_values: Iterable[str | bytes] = (),
                match_unfiltered: bool = False) -> Reader:
    """A reader over a stream directory's files alone (no recovery, nothing written)."""
    return Reader(DirectorySource(directory), spec, filter_values, match_unfiltered)
