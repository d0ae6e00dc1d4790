"""The skip table: per segment, one fixed-size row per block of the derived-key sidecar
(``storage.derived``), so that a reader finds the chunks that may hold a wanted token with a
few strided byte slices at C speed instead of decoding every sidecar entry in Python.

Why: the sidecar sizes each block's Bloom filter to its tokens, so entries vary in size and a
reader must walk them one by one (~3-4 µs a chunk in Python). A stream written by many small
appends (an AMQP publisher: chunks of ~100 records) has ~10,000 chunks per million records, and
that walk, not the data read, was what a high-cardinality filter cost. Here every row has the
same size: a token's ``k`` bits are ``k`` byte columns (``rows[at::row]``), each turned into
0/1 bytes by ``bytes.translate`` and combined as integers; the rows left are the stops. A row
also holds, per key, the least and greatest number the block's records hold there, so that a
filter bounding a key (``amount > 1000``, ``p.creation_time >= ...``: ``sqlfilter.required``'s
bounds) stops only at blocks whose interval meets its own: free for a key whose values grow
with the log (times, sequence numbers), where a Bloom filter cannot help at all.

File ``NNNNNNNNNNNNNNNNNNNN.skip`` (N = the segment's first offset)::

    SKIP_HEADER  >4sIIIIII  "ASST", version 3, CRC-32 of the sidecar's key list (as its header
                            holds it), rows, CRC-32 of those rows, sidecar bytes they cover,
                            keys (``n``)
    then ``rows`` rows of ``row_bytes(n)``, in index order, each:
    SKIP_ROW     >IIQII     index record number of the chunk (in the segment's index), file
                            position of its sidecar entry (0: none), chunk id, position of the
                            block's bytes in the segment and their length (0, 0: none); then
                            ``ROW_BLOOM_BYTES`` of Bloom filter (``derived._filters``: k = 4);
                            then per key, in the key list's order:
    ROW_BOUND    >dd        the least and greatest number among the block's values of the key
                            (rounded outwards to doubles); none: +inf, -inf (nothing is
                            inside); not known: -inf, +inf (everything is)

A user chunk has a row per sidecar block (a block not indexed: every bit set and every bound
unknown, so always a stop); a tracking chunk one row with no bit set and no number (never
delivered). The rows cover index
records ``first .. last`` of the segment without a gap, each chunk's rows all or none: the
writer appends the rows of every chunk it writes while the stream has derived keys, a group's
in one write after its sidecar entries and before its index records, then rewrites the header
(rows, CRC). A reader trusts the rows only when that CRC holds over them and the key list's
CRC is the sidecar's; where the table ends, or where a row's chunk id disagrees with the index,
it walks the sidecar as before. ``TableWriter.open`` (the writer, at open, rollover and after a
write error) cuts the rows of chunks recovery removed and keeps the rest only when they reach
the index's last record, else starts the table again (empty: covering from the next chunk).

The block's place (version 3) is what the reader reads at a stop, known before it gets there:
when the first stop of a window finds the segment's pages out of the page cache, the reader
asks the kernel for the next stops' blocks and sidecar entries at once (``Table.ahead``), so
that their reads overlap instead of waiting one after another.

Reading: rows verified once are kept in memory (``_verified``, up to ``CACHE_BYTES`` with
their record-number and chunk-id columns, made once per table change rather than per reader):
rows are only appended, so the next reader of the segment reads the rows added since and
carries the CRC on over them. When a quarter of the rows or more may match (a key of few values in random
order) the table is not used: stopping that often costs more than the walk.
"""

from __future__ import annotations

import math
import os
import re
import struct
import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from typing import Collection, Mapping, Sequence

from storage.crc import crc32
from storage.derived import BlockRow, Bound, token_probes

__all__ = ["SKIP_HEADER", "SKIP_ROW", "ROW_BOUND", "ROW_BLOOM_BYTES", "row_bytes", "skip_path",
           "rows_of", "NO_NUMBER", "ANY_NUMBER",
           "TableWriter", "Table", "MAX_TOKENS", "remove_orphans", "describe"]

SKIP_HEADER = struct.Struct(">4sIIIIII")
SKIP_ROW = struct.Struct(">IIQII")
SKIP_MAGIC = b"ASST"
SKIP_VERSION = 3
ROW_BLOOM_BYTES = 128  # m = 1,024 bits: 0.24 % false positives for a block of 64 distinct tokens
ROW_BOUND = struct.Struct(">dd")
NO_NUMBER = ROW_BOUND.pack(math.inf, -math.inf)
ANY_NUMBER = ROW_BOUND.pack(-math.inf, math.inf)
SUFFIX = ".skip"
#: wanted tokens above which the table is not used (each costs k strided slices)
MAX_TOKENS = 64
_NONE = bytes(ROW_BLOOM_BYTES)
_ALL = b"\xff" * ROW_BLOOM_BYTES
_BIT = [bytes(1 if b & (1 << i) else 0 for b in range(256)) for i in range(8)]  # translate: bit i set?
_NONZERO = re.compile(b"[^\x00]")
_LITTLE = sys.byteorder == "little"
assert struct.calcsize("I") == 4


def skip_path(directory: str, start: int) -> str:
    return os.path.join(directory, f"{start:020d}{SUFFIX}")


def keys_crc(keys: Sequence[str]) -> int:
    return crc32("\n".join(keys).encode("utf-8"))


def row_bytes(keys: int) -> int:
    """The size of a row of a table for ``keys`` keys."""
    return SKIP_ROW.size + ROW_BLOOM_BYTES + keys * ROW_BOUND.size


def _parse_header(head: bytes) -> tuple[int, int, int, int, int] | None:
    """(keys CRC, rows, rows CRC, sidecar end, keys) of a table's header; None when it is
    none."""
    if len(head) < SKIP_HEADER.size:
        return None
    magic, version, *fields = SKIP_HEADER.unpack_from(head)
    if magic != SKIP_MAGIC or version != SKIP_VERSION:
        return None
    return fields[0], fields[1], fields[2], fields[3], fields[4]


def _down(v: int | float) -> float:
    f = float(v)
    return math.nextafter(f, -math.inf) if f > v else f


def _up(v: int | float) -> float:
    f = float(v)
    return math.nextafter(f, math.inf) if f < v else f


def _bounds_bytes(numbers: Sequence[tuple[float, float] | None] | None, keys: int) -> bytes:
    """A row's bounds: per key, (least, greatest) of the numbers its block holds there (None:
    it holds none), as doubles that contain them (an int past 2**53 rounds outwards); not
    known (``numbers`` None, or past a double's range): every number."""
    if numbers is None:
        return ANY_NUMBER * keys
    try:
        return b"".join(ROW_BOUND.pack(_down(b[0]), _up(b[1])) if b is not None else NO_NUMBER
                        for b in numbers)
    except OverflowError:
        return ANY_NUMBER * keys


def rows_of(number: int, entry_at: int, chunk_id: int, blocks: Sequence[BlockRow] | None,
            keys: int) -> bytes:
    """The rows of the chunk of index record ``number``, for a table of ``keys`` keys: a user
    chunk's, one per block of its sidecar entry at ``entry_at`` (``derived.encode_entry``'s
    ``BlockRow``s; a block not indexed is always a stop), or a tracking chunk's (``blocks``
    None: one row nothing matches)."""
    if blocks is None:
        return SKIP_ROW.pack(number, 0, chunk_id, 0, 0) + _NONE + NO_NUMBER * keys
    if not blocks:
        return SKIP_ROW.pack(number, entry_at, chunk_id, 0, 0) + _ALL + ANY_NUMBER * keys
    return b"".join(SKIP_ROW.pack(number, entry_at, chunk_id, *b.place)
                    + (b.bloom + _bounds_bytes(b.bounds, keys) if b.bloom is not None
                       else _ALL + ANY_NUMBER * keys) for b in blocks)


def describe(directory: str, start: int) -> dict | None:
    """For ``inspect``: segment ``start``'s table as ``rows``, ``bytes``, the index records it
    covers (``first``, ``last``) and whether its CRC holds (``ok``); None when there is none."""
    try:
        with open(skip_path(directory, start), "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    head = _parse_header(raw)
    if head is None:
        return {"rows": 0, "bytes": len(raw), "first": None, "last": None, "ok": False}
    _, rows, crc, _, keys = head
    row = row_bytes(keys)
    body = raw[SKIP_HEADER.size:SKIP_HEADER.size + rows * row]
    ok = len(body) == rows * row and crc32(body) == crc
    numbers = _numbers(body, rows, row) if ok and rows else None
    return {"rows": rows, "bytes": len(raw), "first": numbers[0] if numbers else None,
            "last": numbers[rows - 1] if numbers else None, "ok": ok}


def remove_orphans(directory: str, starts: Collection[int]) -> None:
    """Remove the tables of segments that are gone (retention deletes them with their
    segment; a crash between the two leaves one)."""
    live = set(starts)
    for name in os.listdir(directory):
        stem = name[:-len(SUFFIX)]
        if name.endswith(SUFFIX) and stem.isdigit() and int(stem) not in live:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


class TableWriter:
    """The writer's side of one segment's table: appends rows and keeps the header's count
    and CRC (the file is written at known positions, not ``O_APPEND``: the header is rewritten
    in place)."""

    def __init__(self, fd: int, keys_crc: int, nkeys: int, rows: int, crc: int,
                 sidecar_end: int) -> None:
        self.fd = fd
        self.keys_crc = keys_crc
        self.nkeys = nkeys
        self.row = row_bytes(nkeys)
        self.rows = rows
        self.crc = crc
        self.sidecar_end = sidecar_end

    @classmethod
    def open(cls, directory: str, start: int, keys: Sequence[str], index_records: int,
             last_chunk: int | None, sidecar_size: int) -> TableWriter:
        """The table of segment ``start`` whose index holds ``index_records`` records (the
        last one of chunk ``last_chunk``): its rows are kept when they are whole (their CRC
        holds), for these ``keys``, and, once cut to the index (recovery cut chunks the rows
        describe), reach its last record; else the table starts again, empty. The sidecar,
        repaired, is ``sidecar_size`` bytes: where the next chunk's entry goes."""
        fd = os.open(skip_path(directory, start), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            kcrc, row = keys_crc(keys), row_bytes(len(keys))
            head = _parse_header(os.pread(fd, SKIP_HEADER.size, 0))
            if head is not None:
                kc, rows, crc, _, nkeys = head
                if kc == kcrc and nkeys == len(keys) and rows:
                    raw = os.pread(fd, rows * row, SKIP_HEADER.size)
                    if len(raw) == rows * row and crc32(raw) == crc:
                        keep = bisect_left(_numbers(raw, rows, row), index_records)
                        if keep:
                            number, _, chunk_id, _, _ = SKIP_ROW.unpack_from(raw, (keep - 1) * row)
                            if number == index_records - 1 and chunk_id == last_chunk:
                                w = cls(fd, kcrc, len(keys), keep,
                                        crc32(memoryview(raw)[:keep * row]), sidecar_size)
                                os.ftruncate(fd, SKIP_HEADER.size + keep * row)
                                w._header()
                                return w
            os.ftruncate(fd, 0)
            w = cls(fd, kcrc, len(keys), 0, 0, sidecar_size)
            w._header()
            return w
        except BaseException:
            os.close(fd)
            raise

    def append(self, rows: Sequence[bytes], sidecar_end: int) -> None:
        """Rows, then the header that counts them (a reader never counts a row not written)."""
        raw = b"".join(rows)
        if not raw:
            return
        at = SKIP_HEADER.size + self.rows * self.row
        done = 0
        while done < len(raw):
            done += os.pwrite(self.fd, memoryview(raw)[done:], at + done)
        self.rows += len(raw) // self.row
        self.crc = crc32(raw, self.crc)
        self.sidecar_end = sidecar_end
        self._header()

    @property
    def state(self) -> tuple[int, int, int]:
        return self.rows, self.crc, self.sidecar_end

    def rollback(self, state: tuple[int, int, int]) -> None:
        """Back to a ``state`` taken before a group whose write failed."""
        self.rows, self.crc, self.sidecar_end = state
        os.ftruncate(self.fd, SKIP_HEADER.size + self.rows * self.row)
        self._header()

    def _header(self) -> None:
        os.pwrite(self.fd, SKIP_HEADER.pack(SKIP_MAGIC, SKIP_VERSION, self.keys_crc, self.rows,
                                            self.crc, self.sidecar_end, self.nkeys), 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _column(raw: bytes, rows: int, row: int, at: int, fmt: str) -> memoryview:
    """The big-endian field at byte ``at`` of every row as native values (``fmt``: "I" or
    "d"): one strided slice per byte of the field, assigned byte by byte (C speed), no tuple
    per row."""
    size = struct.calcsize(fmt)
    out = bytearray(size * rows)
    for k in range(size):
        out[(size - 1 - k if _LITTLE else k)::size] = raw[at + k::row]
    return memoryview(out).cast(fmt)  # type: ignore[call-overload]  # ("I" or "d")


def _numbers(raw: bytes, rows: int, row: int) -> memoryview:
    """Every row's index record number (its first field), for ``Table.row_of`` to bisect."""
    return _column(raw, rows, row, 0, "I")


def _chunk_ids(raw: bytes, rows: int, row: int) -> memoryview:
    """Every row's chunk id (its third field), for ``Table.blocks_of`` to bisect."""
    return _column(raw, rows, row, 8, "Q")


#: verified rows by file (device, inode): (rows, their CRC, the rows, their record numbers,
#: their chunk ids), least recently used first. Rows are only ever appended (a truncation rewrites the header's
#: CRC), so a new reader of a table read before reads only the rows added since, and checks
#: the CRC carried on over them against the header's: the same guarantee as reading it all.
_CACHE: OrderedDict[tuple[int, int], tuple[int, int, bytes, memoryview, memoryview]] = OrderedDict()
_CACHE_LOCK = threading.Lock()  # readers of one process may run on several threads
CACHE_BYTES = 64 << 20


def _verified(fd: int, rows: int, crc: int, row: int
              ) -> tuple[tuple[bytes, memoryview, memoryview] | None, int]:
    """(the first ``rows`` rows (of ``row`` bytes) of table ``fd``, their record numbers and
    chunk ids, when their CRC is ``crc`` and the numbers can be whole; bytes read for it)."""
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    cached = _CACHE.get(key)
    if cached is not None and cached[0] == rows and cached[1] == crc:
        return (cached[2], cached[3], cached[4]), 0
    base, prior, read = b"", 0, 0
    if cached is not None and cached[0] < rows:
        base, prior = cached[2], cached[1]
    new = os.pread(fd, rows * row - len(base), SKIP_HEADER.size + len(base))
    read = len(new)
    if len(base) + len(new) != rows * row or crc32(new, prior) != crc:
        if not base:
            return None, read
        with _CACHE_LOCK:
            _CACHE.pop(key, None)  # rewritten since: read it whole
        return _verified(fd, rows, crc, row)
    raw = base + new if base else new
    numbers = _numbers(raw, rows, row)
    if numbers[rows - 1] - numbers[0] >= rows:  # rows for every record between (the reader
        return None, read  # checks each place it stops at against the index)
    ids = _chunk_ids(raw, rows, row)
    if len(raw) <= CACHE_BYTES // 4:
        with _CACHE_LOCK:
            _CACHE.pop(key, None)
            _CACHE[key] = (rows, crc, raw, numbers, ids)
            total = sum(map(_cached_bytes, _CACHE.values()))
            while total > CACHE_BYTES:
                total -= _cached_bytes(_CACHE.popitem(last=False)[1])
    return (raw, numbers, ids), read


def _cached_bytes(entry: tuple[int, int, bytes, memoryview, memoryview]) -> int:
    return len(entry[2]) + entry[3].nbytes + entry[4].nbytes


class Table:
    """A reader's view of one segment's table for its wanted tokens: which index records
    (``stops``) may hold a match; the others, from ``first`` to ``last``, hold none."""

    def __init__(self, raw: bytes, row: int, numbers: memoryview, ids: memoryview,
                 hits: list[int], stops: list[int], sidecar_end: int) -> None:
        self.raw = raw
        self.row = row
        self.hits = hits  # the rows that may match, ascending
        self.ids = ids  # every row's chunk id
        self.numbers = numbers
        self.stops = stops
        self.first = numbers[0]
        self.last = numbers[len(numbers) - 1]
        self.sidecar_end = sidecar_end

    @classmethod
    def load(cls, directory: str, start: int, keys: Sequence[str],
             wanted: Sequence[Collection[bytes]], at: int = 0,
             bounds: Mapping[int, Bound] | None = None) -> tuple[Table | None, int]:
        """(the table of segment ``start`` for a sidecar of ``keys``, where a match holds one
        token of each of ``wanted`` and, for each key ``bounds`` names by its place in
        ``keys``, a number inside that bound; for a reader at index record ``at``; bytes
        read): None when there is none, it ends before ``at``, fails its CRC, is for other
        keys, nothing or too many tokens are wanted."""
        if sum(map(len, wanted)) > MAX_TOKENS or not (wanted or bounds):
            return None, 0
        try:
            fd = os.open(skip_path(directory, start), os.O_RDONLY)
        except FileNotFoundError:
            return None, 0
        try:
            head = os.pread(fd, SKIP_HEADER.size, 0)
            fields = _parse_header(head)
            if (fields is None or fields[0] != keys_crc(keys) or fields[4] != len(keys)
                    or not fields[1]):
                return None, len(head)
            _, rows, crc, sidecar_end, _ = fields
            row = row_bytes(len(keys))
            last = os.pread(fd, SKIP_ROW.size, SKIP_HEADER.size + (rows - 1) * row)
            if len(last) != SKIP_ROW.size or SKIP_ROW.unpack(last)[0] < at:
                return None, len(head) + len(last)  # a reader past what it covers
            got, read = _verified(fd, rows, crc, row)
        finally:
            os.close(fd)
        read += len(head) + len(last)
        if got is None:
            return None, read
        raw, numbers, ids = got
        found = None
        for tokens in wanted:  # a key: any of its tokens; every key
            key = 0
            for token in tokens:
                every = -1
                for byte, bit in token_probes(token, ROW_BLOOM_BYTES):
                    col = raw[SKIP_ROW.size + byte::row]
                    every &= int.from_bytes(col.translate(_BIT[bit.bit_length() - 1]), "little")
                key |= every
            found = key if found is None else found & key
        for i, bound in (bounds or {}).items():  # a key: a number inside the bound
            at_key = SKIP_ROW.size + ROW_BLOOM_BYTES + i * ROW_BOUND.size
            inside = _inside(_column(raw, rows, row, at_key, "d"),
                             _column(raw, rows, row, at_key + 8, "d"), bound)
            found = inside if found is None else found & inside
        hits = [m.start() for m in _NONZERO.finditer(found.to_bytes(rows, "little"))] if found else []
        if 4 * len(hits) > rows:  # many blocks may match (a key of few values in random
            return None, read     # order): walking the sidecar costs less than stopping
        stops = sorted({numbers[r] for r in hits})
        return cls(raw, row, numbers, ids, hits, stops, sidecar_end), read

    def next_stop(self, number: int) -> int:
        """The first index record at or after ``number`` that may hold a match, or the first
        one the table does not cover (``last + 1``)."""
        i = bisect_left(self.stops, number)
        return self.stops[i] if i < len(self.stops) else self.last + 1

    def row_of(self, number: int) -> tuple[int, int] | None:
        """(chunk id, sidecar entry position) of index record ``number`` (covered)."""
        r = bisect_left(self.numbers, number)
        if r == len(self.numbers) or self.numbers[r] != number:
            return None
        _, entry_at, chunk_id, _, _ = SKIP_ROW.unpack_from(self.raw, r * self.row)
        return chunk_id, entry_at

    def window_end(self, number: int, stops: int) -> int:
        """The index record after the ``stops``-th stop from record ``number`` on (or after
        the last stop, or after the table)."""
        i = bisect_left(self.stops, number)
        chosen = self.stops[i:i + stops]
        return chosen[-1] + 1 if chosen else self.last + 1

    def ahead(self, number: int, stops: int) -> list[tuple[int, int, int, list[tuple[int, int]]]]:
        """Per chunk of the next ``stops`` stops from index record ``number`` on: its sidecar
        entry's position, where its data section begins and ends, and the (position, length)
        of each of its blocks that may match. What a reader will read there, to ask for at
        once."""
        i = bisect_left(self.stops, number)
        chosen = self.stops[i:i + stops]
        if not chosen:
            return []
        numbers, hits = self.numbers, self.hits
        unpack, row, raw = SKIP_ROW.unpack_from, self.row, self.raw
        out = []
        h = bisect_left(hits, bisect_left(numbers, chosen[0]))
        for stop in chosen:
            r0, r1 = bisect_left(numbers, stop), bisect_left(numbers, stop + 1)
            entry_at, _, first, _ = unpack(raw, r0 * row)[1:]
            _, _, _, last, length = unpack(raw, (r1 - 1) * row)
            blocks = []
            while h < len(hits) and hits[h] < r1:
                blocks.append(unpack(raw, hits[h] * row)[3:])
                h += 1
            out.append((entry_at, first, last + length, blocks))
        return out

    def blocks_of(self, chunk_id: int, blocks: int) -> int | None:
        """Bit ``i`` set for each block ``i`` of chunk ``chunk_id`` whose row may match (the
        sidecar's own Bloom filters then test the blocks kept); None when the table has not
        exactly ``blocks`` rows for it (not covered, or not its entry)."""
        ids = self.ids
        r0 = bisect_left(ids, chunk_id)
        r1 = bisect_left(ids, chunk_id + 1, r0)
        if r1 - r0 != blocks:
            return None
        hits = self.hits
        mask = 0
        for h in hits[bisect_left(hits, r0):bisect_left(hits, r1)]:
            mask |= 1 << (h - r0)
        return mask


def _inside(least: Sequence[float], greatest: Sequence[float], bound: Bound) -> int:
    """The rows (bit ``r`` of the result) whose interval meets ``bound``."""
    lo, hi, lo_in, hi_in = bound
    return int.from_bytes(bytes([(most > lo or lo_in and most == lo) and (few < hi or hi_in and few == hi)
                                 for few, most in zip(least, greatest, strict=True)]), "little")
