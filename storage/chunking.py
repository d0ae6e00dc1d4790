"""Where the writer cuts its queue into chunks, and what a chunk's filter holds.

Strategy (the writer, ``storage.writer``, calls these on its thread; nothing here does I/O):
- A chunk takes up to the entries the writer's sizing allows (osiris's gen_batch_server sizes,
  ``Writer._size_next``) and about ``max_chunk_bytes`` bytes (``Entries.fit``, or the list's
  ``fit`` from ``list_cutters``); a client frame of at least ``min_chunk_entries`` messages
  shares no chunk with another unless the writer takes more than ``FRAMES_APART_MAX`` entries at
  once; the end of a run of at least ``RUN_CUT_MIN`` entries with one filter value ends a chunk
  (``run_cut``, ``trailing_run``), so values that come in bursts get chunks of their own.
- A chunk's data section is cut from the queue as it came: a list of bodies is encoded
  (``encode_entries``), ``EntryRun``/``EntrySpans`` items are sliced from their bytes
  (``Entries.span``), never turned into one object per record on the common path.
- A chunk's filter (``chunk_filter``) is built from its entries' values, deduplicated first.

Why a module of its own: these rules decide chunk boundaries alone (what stage 1 can skip,
how large a read is); the writer's thread, files, durability and tracking are ``storage.writer``'s.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from typing import Callable, Iterable, Sequence, Union

import bloom

from storage.format import SIMPLE_ENTRY, EntryRun, EntrySpans, SubBatchEntry

__all__ = ["FilterValue", "ChunkData", "PARTS_MAX", "FRAMES_APART_MAX", "RUN_CUT_MIN", "Entries",
           "nbytes", "joined", "list_cutters", "run_cut", "trailing_run", "chunk_filter"]

# one record's stage-1 value(s): one, a tuple of several (each goes into the Bloom), None: none
FilterValue = Union[str, bytes, bytearray, tuple, None]

#: parts of a chunk's data section written apart at most (``Entries.span``): a chunk the writer
#: cuts across client frames when it is behind holds up to ``max_chunk_bytes`` (8 MiB), ~35 of
#: the Spark sink's frames; joined, each such chunk was 8 MiB of fresh memory (page faults:
#: ~0.1 µs of the broker's CPU a row, ``bench/RESULTS.md``)
PARTS_MAX = 64
#: a chunk's data section: one buffer, or a few parts of it (``Entries.span``)
ChunkData = Union[bytes, bytearray, memoryview, list]

_pack_len = SIMPLE_ENTRY.pack


def nbytes(data: ChunkData) -> int:
    return sum(map(len, data)) if type(data) is list else len(data)


def joined(data: ChunkData) -> bytes:
    if type(data) is list:
        return b"".join(data)
    return data if type(data) is bytes else bytes(data)


_RUNS = (EntryRun, EntrySpans)


class Entries:
    """The queue as the writer took it when it held ``EntryRun``s or ``EntrySpans``: a
    sequence of entries (a run counts as its ``count``) whose data sections are cut from the runs' bytes.

    Why: the run's records never become objects on the common path (``span``: one copy per
    chunk part, ids dropped by strided deletes; ``fit``: arithmetic per run), and the chunking
    loop stays the one loop, counting entries as it does over a list of bodies. A slice gives
    the records one by one (``EntryRun.bodies``), for the rarer paths that need them (derived
    keys, sub-batch entries)."""

    __slots__ = ("items", "starts")

    def __init__(self, items: list) -> None:
        self.items = items
        self.starts = list(itertools.accumulate(
            (x.count if type(x) in _RUNS else 1 for x in items), initial=0))

    def __len__(self) -> int:
        return self.starts[-1]

    def _parts(self, i: int, n: int) -> Iterable[tuple[bytes | EntryRun | EntrySpans, int, int]]:
        """``(item, first, count)``: the items covering entries ``i .. i + n``, a run's part
        from its entry ``first``."""
        items, starts = self.items, self.starts
        j = bisect_right(starts, i) - 1
        end = i + n
        while i < end:
            item = items[j]
            if isinstance(item, (EntryRun, EntrySpans)):
                k = min(end, starts[j + 1]) - i
                yield item, i - starts[j], k
                i += k
            else:
                yield item, 0, 1
                i += 1
            j += 1

    def span(self, i: int, n: int) -> ChunkData:
        """The data section of entries ``i .. i + n``: as ``encode_entries`` (or, with
        sub-batch entries, ``encode_mixed_entries``) gives it for their bodies (a buffer of
        those bytes, see ``EntrySpans.entries``, or a few such parts in a list: a chunk cut
        across client frames is not joined, as a join copies the whole chunk into fresh
        memory, a page fault per 4 KiB on this VM, ``bench.page_cost``)."""
        parts: list[bytes | bytearray | memoryview] = []
        for item, a, k in self._parts(i, n):
            if isinstance(item, (EntryRun, EntrySpans)):
                parts.append(item.entries(a, k))  # type: ignore[arg-type]
            elif type(item) is SubBatchEntry:
                parts.append(item)
            else:
                parts.append(_pack_len(len(item)))
                parts.append(item)
        if len(parts) == 1:
            return parts[0]
        if len(parts) <= PARTS_MAX:  # written as they are (``encode_chunk``), not joined
            return parts
        return b"".join(parts)

    def fit(self, i: int, n: int, limit: int) -> int:
        """How many of the entries from ``i`` (at most ``n``, at least 1) fit ``limit`` bytes,
        counting 4 per entry beside its record, as a list of bodies is cut."""
        total = taken = 0
        for item, a, k in self._parts(i, n):
            if isinstance(item, EntrySpans):
                for each in item.sizes(a, k):
                    if total + each > limit:
                        return max(1, taken)
                    total += each
                    taken += 1
                continue
            each = item.size + 4 if isinstance(item, EntryRun) else len(item) + 4
            if total + each * k > limit:
                taken += (limit - total) // each
                break
            total += each * k
            taken += k
        return max(1, taken)

    def __getitem__(self, span: slice) -> list[bytes]:
        i, end, _ = span.indices(len(self))
        out: list[bytes] = []
        for item, a, k in self._parts(i, max(0, end - i)):
            if isinstance(item, (EntryRun, EntrySpans)):
                out += item.bodies(a, k)
            else:
                out.append(item)
        return out


def list_cutters(listed: Sequence[bytes], encode: Callable[[Sequence[bytes]], bytes]
                 ) -> tuple[Callable[[int, int], bytes], Callable[[int, int, int], int]]:
    """``span`` and ``fit`` (as ``Entries`` has them) for a queue taken as a list of bodies,
    ``encode``: ``encode_entries``, or ``encode_mixed_entries`` with sub-batch entries."""

    def span(i: int, n: int) -> bytes:
        return encode(listed[i:i + n])

    def fit(i: int, n: int, limit: int) -> int:
        acc = list(itertools.accumulate(len(b) + 4 for b in listed[i:i + n]))
        return max(1, bisect_right(acc, limit))
    return span, fit


#: client frames get chunks of their own only when the writer takes at most this many entries
#: at once; more: it is behind, and cuts by the limits alone across frames (as osiris's writer
#: with a full mailbox), so that a heavy load of frames of ~100 keeps large chunks
FRAMES_APART_MAX = 1024

#: a run of at least this many entries with one filter value ends its chunk (``run_cut``)
RUN_CUT_MIN = 256


def run_cut(values: list[FilterValue], i: int, n: int,
            before: tuple[FilterValue, int] = (None, 0)) -> int:
    """How many of the ``n`` entries from ``i`` one chunk takes: all, unless a run of at least
    ``RUN_CUT_MIN`` entries with one filter value (None counts as one) ends before the last;
    then up to the end of the first such run. ``before``: the value of the entries written
    just before ``i`` and their run's length, so that a run going on from earlier chunks
    counts whole: the first entry after a long run (a burst's end) always starts a chunk, if
    the run ends in this chunk, however few of it the chunk holds.

    Why: values that come in bursts then get chunks of their own (a burst's chunk holds at
    most a short tail of the burst before it), so stage 1 sends little beyond the matches,
    where a chunk cut by size alone holds parts of several bursts. Interleaved or random values
    (runs shorter than ``RUN_CUT_MIN``) keep chunks of full size; only the tail of a run begun
    before ``i`` makes a chunk shorter than ``RUN_CUT_MIN``."""
    end = i + n
    v = values[i]
    if values[i:end].count(v) == n:  # one value (or none) throughout: nothing to cut
        return n
    if before[1] and before[0] == v:  # the run before goes on here: where it stops
        stop = i + 1
        while stop + 64 <= end and values[stop:stop + 64].count(v) == 64:
            stop += 64
        while values[stop] == v:  # it stops before ``end`` (not one value throughout)
            stop += 1
        if before[1] + stop - i >= RUN_CUT_MIN:
            return stop - i
    # a run of RUN_CUT_MIN entries holds a whole window of half as many aligned from ``i``, so
    # only windows are tested (their ends, then a count in C), and a uniform one is widened
    half = RUN_CUT_MIN // 2
    a = i
    while a + half <= end:
        v = values[a]
        if values[a + half - 1] != v or values[a:a + half].count(v) != half:
            a += half
            continue
        start, stop = a, a + half
        while start > i and values[start - 1] == v:
            start -= 1
        while stop < end and values[stop] == v:
            stop += 1
        if stop == end:  # the run goes on to the last entry: nothing after it to cut off
            return n
        if stop - start >= RUN_CUT_MIN:
            return stop - i
        a = stop + (i - stop) % half  # the first window at or after the run (aligned from i)
    return n


def trailing_run(values: list[FilterValue], i: int, end: int,
                 before: tuple[FilterValue, int]) -> tuple[FilterValue, int]:
    """The value of ``values[end - 1]`` and the length of its run up to ``end`` (counting the
    run ``before`` ``i`` when it goes on), up to ``RUN_CUT_MIN``: what ``run_cut`` needs of the
    entries before the next chunk."""
    v = values[end - 1]
    low = max(i, end - RUN_CUT_MIN)
    if values[low:end].count(v) == end - low:  # the common case, in C
        k = low
    else:
        k = end - 1
        while k > low and values[k - 1] == v:
            k -= 1
    run = end - k
    if k == i and before[0] == v:
        run += before[1]
    return v, min(run, RUN_CUT_MIN)


def chunk_filter(values: list[FilterValue], size: int, scheme: int) -> bloom.ChunkFilter | None:
    """The chunk filter of records with ``values``, deduplicated in C first (``bloom.build``
    works per value; a set's filter is cached: ``bloom.build_distinct``); unhashable ones (a
    ``bytearray``) are passed as they are."""
    try:
        distinct = set(values)
    except TypeError:
        return bloom.build(values, size, scheme)
    return bloom.build_distinct(distinct, size, scheme)
