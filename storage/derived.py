"""Broker-derived filter keys: a per-segment sidecar index of the values some fields hold, by
record range, so that a consumer whose filter requires values reads only what may match.

Why a sidecar (docs/storage.md, "Broker-derived filter keys"): the chunk format and its Bloom
filter stay exactly RabbitMQ's (bit 0 keeps meaning "a record without a *publisher* value"),
the index is sized to the key's cardinality, and a scan reads it sequentially (one small file
per segment) instead of one header per chunk. Whole chunks are too coarse for a
high-cardinality key (10,000 customers in random order: every third chunk of ~3,000 records
holds ``c42``), so the sidecar describes *blocks* of ``BLOCK_RECORDS`` entries inside each
chunk: where the block's entries lie in the chunk's data section, their CRC (a block read
alone is checked against it) and a small Bloom filter of their tokens.

Storage knows nothing of messages: the stream's ``StreamConfig.derive`` (given by the broker)
is called once per chunk with its data section and the spans of its simple entries' records,
and gives runs of ``(positions, tokens)``, two lists each, positions ascending within a run
(``sqlfilter.required.index_token``): each token goes to the block holding its position (a run
is cut at block starts by bisection, and each block's part added to its set in C); a None token
makes that block unknown (never skipped), as do sub-batch entries. Tokens are opaque bytes
here. One call per chunk lets the broker search the whole section at once (C speed) instead of
calling Python per record. The same blocks' tokens also go, as fixed-size rows, to the segment's
skip table (``storage.skiptable``), which lets a reader find the chunks worth an entry's decode
without walking the others.

File ``NNNNNNNNNNNNNNNNNNNN.derived`` (N = the segment's first offset)::

    DERIVED_HEADER  >4sIH   "ASDK", version 1, length of the key list; then the indexed keys
                            (UTF-8, one per line), as ``StreamConfig.derived_keys`` names them
    then one entry per user chunk, in chunk order (tracking chunks have none):
    DERIVED_CHUNK   >IIQIIIH  entry length (bytes after this field), CRC-32 of the bytes after
                              the CRC, chunk id, chunk position in the segment, records, data
                              start (from the chunk position: 48 + filter size), blocks
    DERIVED_BLOCK   >HIIIBH  entries, records, data length, CRC-32 of the block's bytes, k (0:
                             not indexed, may hold anything), Bloom bytes; then the Bloom bits
                             (a little-endian integer). Blocks follow each other: a block's
                             data offset and first record are the sums of those before it.

Bloom: ``m`` = 8 x its bytes bits, positions ``(h1 + i*h2) mod m`` for i < k from the MMH3
digest ``bloom`` uses for chunk filters; at least 10 bits per distinct token, in size classes
1.5x apart (``_SIZES``) so that the writer reuses a token's mask per class once it meets the
token again (``_filters``); k = 4 (false positives 0.3-1.2 % per block and wanted value).

Written by the writer after a chunk group's segment bytes and before its index records, so a
reader that sees an index record finds the entry (a reader in another process may find it
torn: then the chunk is read whole). Derived data, never trusted beyond the log: an entry
counts only for the chunk id *and* position of an index record and when its CRC holds (a
bad one is as good as none); ``repair`` (at open, after
recovery) cuts the last segment's sidecar at the first entry without its chunk and removes
sidecars without a segment; a chunk without an entry (written before the key was configured,
or lost in a crash) is read whole; a block whose bytes fail its CRC makes the reader read the
chunk whole (checked by the chunk's own CRC). Retention deletes the sidecar with its segment.
"""

from __future__ import annotations

import math
import os
import struct
from bisect import bisect_left
from functools import reduce
from itertools import accumulate
from operator import or_
from typing import Callable, Collection, Iterable, Mapping, NamedTuple, Sequence, cast

from bloom.schemes import mmh3_pair

from storage.crc import crc32
from storage.errors import StorageError
from storage.files import advise, index_path, read_index_tuples
from storage.format import CHUNK_HEADER_BYTES, SubBatchEntry

__all__ = ["DERIVED_HEADER", "DERIVED_CHUNK", "DERIVED_BLOCK", "DERIVED_MAGIC", "BLOCK_RECORDS",
           "Derive", "Block", "BlockRow", "ChunkEntry", "derived_name", "derived_path", "derived_header",
           "encode_entry", "decode_entries", "read_keys", "Cursor", "Wanted", "repair",
           "create_sidecar", "load", "token_probes", "Number", "Bound", "Bounds"]

DERIVED_HEADER = struct.Struct(">4sIH")
DERIVED_CHUNK = struct.Struct(">IIQIIIH")
DERIVED_BLOCK = struct.Struct(">HIIIBH")
DERIVED_MAGIC = b"ASDK"
DERIVED_VERSION = 1
SUFFIX = ".derived"
#: entries per block: ~1 % of the blocks hold a value seen once in 10,000 records
BLOCK_RECORDS = 64
_BITS_PER_TOKEN = 10
_K = 4
_SIZES = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
          4096, 6144, 8192)
_READ = 256 * 1024
_SEEK_READ = 1024  # after a seek: an entry or a few (a chunk of 3,000 records: ~1-6 KB)
_LEN = struct.Struct(">I")
#: the tokens the writer's cache keeps before it starts again: with their masks ~600 bytes a
#: token, so ~10 MB at most per stream writer (a key of up to ~16,000 values in rotation keeps
#: its masks; one of more values makes them anew, as for a value met the first time)
_SEEN_MAX = 16_384

#: (a chunk's data section, (start, end) of each simple entry's record in it) -> runs of
#: (positions ascending, tokens); a None token: the block holding its position is unknown
Derive = Callable[[bytes, Sequence[tuple[int, int]]], "list[tuple[list[int], list[bytes | None]]]"]
#: per indexed key, the tokens one of which a matching record holds (an empty set: none can)
Wanted = Mapping[str, Collection[bytes]]
#: a token -> (the place of its key in the key list, the number it holds); None: no number
Number = Callable[[bytes], "tuple[int, float] | None"]
#: (low, high, low included, high included): a match holds a number of a key inside it
Bound = tuple[float, float, bool, bool]
#: per indexed key, its bound (``sqlfilter.required.required_bounds``; the skip table's rows
#: keep each block's least and greatest number per key)
Bounds = Mapping[str, Bound]


def derived_name(first_offset: int) -> str:
    return f"{first_offset:020d}{SUFFIX}"


def derived_path(directory: str, start: int) -> str:
    return os.path.join(directory, derived_name(start))


def derived_header(keys: Sequence[str]) -> bytes:
    raw = "\n".join(keys).encode("utf-8")
    return DERIVED_HEADER.pack(DERIVED_MAGIC, DERIVED_VERSION, len(raw)) + raw


class Block(NamedTuple):
    """One block of a chunk entry (a tuple: a scan decodes thousands)."""

    offset: int
    length: int
    first: int  # first record, from the chunk id
    entries: int
    records: int
    crc: int
    k: int  # 0: not indexed (also: a sub-batch in the block); else its entries are all simple
    bits: int
    m: int


class BlockRow(NamedTuple):
    """What the skip table keeps of one block (``storage.skiptable.rows_of``), made with its
    sidecar entry (``encode_entry``)."""

    place: tuple[int, int]  # its bytes' (position in the segment, length)
    bloom: bytes | None  # its tokens' Bloom filter of the row's size; None: not indexed
    #: per key, (least, greatest) of the numbers it holds there (None: none); None: not known
    bounds: list[tuple[float, float] | None] | None


class ChunkEntry(NamedTuple):
    """One chunk's entry; its blocks stay encoded (``raw``) until asked for: a scan looks at
    thousands and keeps a few (a tuple, made without ``__init__``)."""

    chunk_id: int
    position: int
    records: int
    data_start: int
    nblocks: int
    raw: bytes  # the blocks as stored
    size: int  # bytes of the entry in the file

    @property
    def blocks(self) -> tuple[Block, ...]:
        return tuple(self._walk(None, {})[0])

    def select(self, masks: Sequence[Sequence[tuple[int, int]]] | None,
               cache: dict, allowed: int | None = None) -> tuple[list[Block], int]:
        """(the blocks that may hold a match, the chunk's data length): for every wanted key,
        some token's bits are set. ``masks``: per key, its tokens' digests (``Cursor.masks``);
        ``cache``: per (m, k), the tokens' masks per key (kept across one segment's chunks);
        ``allowed``: bit ``i`` set for each block ``i`` that may match by other means (the
        skip table's rows), None: all."""
        return self._walk(masks, cache, allowed)

    def _walk(self, masks: Sequence[Sequence[tuple[int, int]]] | None,
              cache: dict, allowed: int | None = None) -> tuple[list[Block], int]:
        raw = self.raw
        unpack = DERIVED_BLOCK.unpack_from
        frombytes = int.from_bytes
        new = _new_tuple
        out: list[Block] = []
        p = off = first = 0
        for index in range(self.nblocks):
            entries, recs, length, crc, k, nbytes = unpack(raw, p)
            p += _BLOCK_SIZE
            keep = allowed is None or bool(allowed >> index & 1)
            m = 0
            if k and keep:
                m = nbytes * 8
                if masks is not None:
                    per_key = cache.get((m, k))
                    if per_key is None:
                        per_key = cache[(m, k)] = [[_probes(d, m, k) for d in key] for key in masks]
                    for key_probes in per_key:
                        for probes in key_probes:  # a token: are its k bits set? (byte lookups,
                            for i, bit in probes:  # no integer made of the whole filter)
                                if not raw[p + i] & bit:
                                    break
                            else:
                                break
                        else:
                            keep = False  # this key holds none of its tokens
                            break
            if keep:
                bits = frombytes(raw[p:p + nbytes], "little") if k else 0
                out.append(new(Block, (off, length, first, entries, recs, crc, k, bits, m)))
            p += nbytes
            off += length
            first += recs
        return out, off


def _digest(token: bytes) -> tuple[int, int]:
    h1, h2 = mmh3_pair(token)  # (bloom's MMH3 digest, without its cache: ``_filters`` keeps one)
    return h1, h2 | 1


def _bit_positions(dig: tuple[int, int], m: int, k: int) -> list[int]:
    """A token's ``k`` bits in a filter of ``m`` bits: ``(h1 + i * h2) mod m``."""
    h1, h2 = dig
    return [(h1 + i * h2) % m for i in range(k)]


def _mask(dig: tuple[int, int], m: int) -> int:
    """``_bit_positions(dig, m, _K)`` as one integer, written out for k = 4 (every filter here:
    a new token's cost, 0.4 µs against 1 µs through the list)."""
    h1, h2 = dig
    return 1 << h1 % m | 1 << (h1 + h2) % m | 1 << (h1 + 2 * h2) % m | 1 << (h1 + 3 * h2) % m


assert _K == 4


def _probes(dig: tuple[int, int], m: int, k: int) -> tuple[tuple[int, int], ...]:
    """``_mask``'s bits as (byte index, bit in that byte) of the little-endian filter."""
    return tuple((b >> 3, 1 << (b & 7)) for b in _bit_positions(dig, m, k))


def _size_class(tokens: int) -> int:
    """The bytes of a block filter for ``tokens`` distinct tokens (``_SIZES``)."""
    want = tokens * _BITS_PER_TOKEN
    for size in _SIZES:
        if size * 8 >= want:
            return size
    return _SIZES[-1]


def _filters(tokens: set[bytes], sizes: Sequence[int], caches: dict) -> list[bytes]:
    """The Bloom filter (k = 4) of ``tokens`` in each of ``sizes`` bytes, each token hashed
    once. ``caches`` (the writer's, kept across blocks): ``"seen"``, token -> digest of the
    tokens met before, and per ``m``, token -> mask.

    Why: a key of unique values, a sequence or an id, never meets a token twice, so hashing
    it once per filter size and caching every mask was most of its write cost; a token's masks
    are kept from its second block on, and a key of few values then costs one lookup and one
    OR per token."""
    seen = caches.get("seen")
    if seen is None or len(seen) > _SEEN_MAX:  # (bounded: the masks go with the digests)
        caches.clear()
        seen = caches["seen"] = {}
    order = list(tokens)
    fresh: dict[bytes, tuple[int, int]] = {}
    out = []
    for n in sizes:
        m = 8 * n
        cache = caches.get(m)
        if cache is None:
            cache = caches[m] = {}
        got = list(map(cache.get, order))  # (the common case, every mask known: in C)
        if None not in got:
            out.append(reduce(or_, got, 0).to_bytes(n, "little"))
            continue
        bits = 0
        for t, mask in zip(order, got, strict=True):
            if mask is None:
                dig = seen.get(t)
                if dig is None:  # first met: its bits, no mask kept
                    dig = fresh.get(t)
                    if dig is None:
                        dig = fresh[t] = _digest(t)
                    bits |= _mask(dig, m)
                    continue
                mask = cache[t] = _mask(dig, m)
            bits |= mask
        out.append(bits.to_bytes(n, "little"))
    seen.update(fresh)
    return out


def token_probes(token: bytes, nbytes: int) -> tuple[tuple[int, int], ...]:
    """(byte index, bit) of ``token``'s bits in a Bloom filter of ``nbytes`` bytes made by
    ``_filters``: a filter holds the token when every one is set."""
    return _probes(_digest(token), nbytes * 8, _K)


def encode_entry(chunk_id: int, position: int, records: int, filter_size: int, data: bytes,
                 bodies: Sequence[bytes], derive: Derive, cache: dict,
                 rows: list[BlockRow] | None = None, bloom_bytes: int = 0,
                 number: Number | None = None, keys: int = 0) -> bytes:
    """The sidecar entry of one user chunk (``data``: its data section, of ``bodies``).
    For the skip table: ``rows`` gets a ``BlockRow`` per block, its Bloom filter of
    ``bloom_bytes`` bytes and the bounds of the ``keys`` keys that ``number`` finds in its
    tokens."""
    n = len(bodies)
    if SubBatchEntry not in set(map(type, bodies)):  # simple entries only: offsets in C
        cum = list(accumulate(map(_FOUR.__add__, map(len, bodies)), initial=0))
        spans: Sequence[tuple[int, int]] = _Spans(cum)
        starts = cum[0:n:BLOCK_RECORDS]
        block_records = [min(BLOCK_RECORDS, n - s) for s in range(0, n, BLOCK_RECORDS)]
        unknown = [False] * len(starts)
    else:
        starts, block_records, unknown, spans = [], [], [], []
        off = 0
        for s in range(0, n, BLOCK_RECORDS):
            starts.append(off)
            recs = 0
            sub = False
            for b in bodies[s:s + BLOCK_RECORDS]:
                if type(b) is SubBatchEntry:
                    off += len(b)
                    recs += b.records
                    sub = True
                else:
                    spans.append((off + 4, off + 4 + len(b)))
                    off += len(b) + 4
                    recs += 1
            block_records.append(recs)
            unknown.append(sub)
    tokens: list[set[bytes]] = [set() for _ in starts]
    for positions, found in derive(data, spans):  # runs in ascending position: sliced in C
        cuts = [bisect_left(positions, s) for s in starts[1:]] + [len(positions)]
        lo = 0
        for k, hi in enumerate(cuts):
            if hi > lo:
                part = found[lo:hi]
                if None in part:
                    unknown[k] = True
                else:
                    tokens[k].update(cast("list[bytes]", part))
            lo = hi
    parts: list[bytes] = []
    view = memoryview(data)
    ends = starts[1:] + [len(data)]
    data_at = position + CHUNK_HEADER_BYTES + filter_size
    for k, start in enumerate(starts):
        length = ends[k] - start
        entries = min(BLOCK_RECORDS, n - k * BLOCK_RECORDS)
        crc = crc32(view[start:start + length])
        if unknown[k]:
            parts.append(DERIVED_BLOCK.pack(entries, block_records[k], length, crc, 0, 0))
            if rows is not None:
                rows.append(BlockRow((data_at + start, length), None, None))
        else:
            size = _size_class(len(tokens[k]))
            # (one filter when there is no row, or when its size class is the row's)
            sizes = (size,) if rows is None or size == bloom_bytes else (size, bloom_bytes)
            got = _filters(tokens[k], sizes, cache)
            bits = got[0]
            if rows is not None:
                rows.append(BlockRow((data_at + start, length), got[-1],
                                     _bounds(tokens[k], number, keys) if number is not None else None))
            parts.append(DERIVED_BLOCK.pack(entries, block_records[k], length, crc, _K, len(bits)))
            parts.append(bits)
    body = _CHUNK_REST.pack(chunk_id, position, records, CHUNK_HEADER_BYTES + filter_size,
                            len(starts)) + b"".join(parts)
    return _LEN.pack(len(body) + 4) + _LEN.pack(crc32(body)) + body


_FOUR = 4  # an entry's length prefix


def _bounds(tokens: set[bytes], number: Number, keys: int) -> list[tuple[float, float] | None]:
    """Per key, (least, greatest) of the numbers ``tokens`` hold for it, None without one."""
    least: list[float] = [math.inf] * keys
    most: list[float] = [-math.inf] * keys
    for got in map(number, tokens):
        if got is not None:
            i, v = got
            if v < least[i]:
                least[i] = v
            if v > most[i]:
                most[i] = v
    return [(lo, hi) if lo <= hi else None for lo, hi in zip(least, most, strict=True)]


class _Spans(Sequence[tuple[int, int]]):
    """(start, end) of each record of simple entries, from the cumulative offsets, made only
    when asked for (a deriver of application properties never asks)."""

    def __init__(self, cum: list[int]) -> None:
        self.cum = cum

    def __len__(self) -> int:
        return len(self.cum) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.cum[i] + 4, self.cum[i + 1]

    def __iter__(self):  # type: ignore[override]
        return zip(map(_FOUR.__add__, self.cum), self.cum[1:], strict=False)


_new_tuple = tuple.__new__
_unpack_chunk = DERIVED_CHUNK.unpack_from
_crc = crc32
_CHUNK_SIZE = DERIVED_CHUNK.size
_MAX_ENTRY = 16 << 20  # an entry of 65,535 entries' blocks stays far below
_BLOCK_SIZE = DERIVED_BLOCK.size
_CHUNK_REST = struct.Struct(">QIIIH")  # DERIVED_CHUNK after its length and CRC


def _decode_one(buf: bytes, at: int, end: int) -> ChunkEntry | None:
    """The entry at ``buf[at:end]`` (whole), None when its CRC fails."""
    size, crc, chunk_id, position, records, data_start, nblocks = _unpack_chunk(buf, at)
    if _crc(memoryview(buf)[at + 8:end]) != crc:
        return None
    return _new_tuple(ChunkEntry, (chunk_id, position, records, data_start, nblocks,
                                   buf[at + _CHUNK_SIZE:end], end - at))


def decode_entries(buf: bytes, at: int = 0) -> Iterable[ChunkEntry | None]:
    """The complete entries in ``buf`` from ``at`` (a torn last one is left out); None for an
    entry whose CRC fails (its chunk counts as not indexed)."""
    n = len(buf)
    while at + _CHUNK_SIZE <= n:
        end = at + 4 + _LEN.unpack_from(buf, at)[0]
        if end > n or end < at + _CHUNK_SIZE:
            return
        yield _decode_one(buf, at, end)
        at = end


def read_keys(fd: int) -> tuple[list[str], int] | None:
    """The keys a sidecar indexes and where its entries start (None: not a sidecar)."""
    head = os.pread(fd, DERIVED_HEADER.size, 0)
    if len(head) < DERIVED_HEADER.size:
        return None
    magic, version, n = DERIVED_HEADER.unpack(head)
    if magic != DERIVED_MAGIC or version != DERIVED_VERSION:
        return None
    raw = os.pread(fd, n, DERIVED_HEADER.size)
    if len(raw) != n:
        return None
    keys = raw.decode("utf-8").split("\n") if n else []
    return keys, DERIVED_HEADER.size + n


_BAD = object()  # an entry whose CRC fails


class Cursor:
    """A reader's walk through one segment's sidecar, in step with its chunks (read forward in
    large ``pread``s, so a scan reads the sidecar once, sequentially)."""

    def __init__(self, fd: int, start: int, masks: list[list[tuple[int, int]]],
                 keys: Sequence[str] = (), wanted: Sequence[Collection[bytes]] = (),
                 bounds: Mapping[int, Bound] | None = None) -> None:
        self.fd = fd
        self.masks = masks
        self.keys = list(keys)  # the keys the sidecar indexes, as its header lists them
        self.wanted = list(wanted)  # per key of ``masks``, its wanted tokens
        self.bounds = dict(bounds or {})  # per place in ``keys``, its bound (the skip table's)
        self.read_size = _READ  # the next pread's size (small after a ``seek``, then doubling)
        self.pos = start  # file position of ``buf[0]``
        self.buf = b""
        self.at = 0
        self.entry: ChunkEntry | None = None
        self.bytes_read = 0
        self.entries_read = 0  # entries decoded (a skip table spares most of them)
        self.cache: dict = {}  # ChunkEntry.select's masks per Bloom size (this segment's keys)

    @classmethod
    def open(cls, directory: str, start: int, wanted: Wanted,
             bounds: Bounds | None = None) -> Cursor | None:
        """The cursor of segment ``start`` for ``wanted`` and ``bounds`` (None: no sidecar,
        or it indexes none of their keys: nothing to skip by)."""
        try:
            fd = os.open(derived_path(directory, start), os.O_RDONLY)
        except FileNotFoundError:
            return None
        found = read_keys(fd)
        listed = found[0] if found else []
        keys = [k for k in listed if k in wanted]
        bounded = {i: bounds[k] for i, k in enumerate(listed) if bounds and k in bounds}
        if found is None or not (keys or bounded):
            os.close(fd)
            return None
        return cls(fd, found[1], [[_digest(t) for t in wanted[k]] for k in keys], found[0],
                   [wanted[k] for k in keys], bounded)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def select(self, e: ChunkEntry, allowed: int | None = None) -> tuple[list[Block], int]:
        """``e.select`` for this cursor's wanted tokens, of the blocks ``allowed``."""
        return e.select(self.masks, self.cache, allowed)

    def advise(self, positions: Iterable[int]) -> None:
        """Ask the kernel for the entries at these file positions now (what ``seek`` will
        read there: ``files.advise``)."""
        advise(self.fd, ((p, _SEEK_READ) for p in positions))

    def seek(self, position: int) -> None:
        """Go on from the entry at file ``position`` (``storage.skiptable`` says where a
        chunk's entry lies): the entries before it are not read. A wrong position costs
        nothing but the index: what is found there fails its CRC or its chunk id."""
        self.entry = None
        if self.pos <= position <= self.pos + len(self.buf):  # read already: no pread
            self.at = position - self.pos
            return
        self.pos = position
        self.buf = b""
        self.at = 0
        self.read_size = _SEEK_READ

    def entry_for(self, chunk_id: int) -> ChunkEntry | None:
        """The entry of ``chunk_id``, or None when the sidecar has none (yet)."""
        e = self.entry
        while e is None or e.chunk_id < chunk_id:
            got = self._next()
            if got is None:
                return None
            if not isinstance(got, ChunkEntry):  # a bad entry: its chunk is not indexed
                continue
            e = self.entry = got
        return e if e.chunk_id == chunk_id else None

    def _next(self) -> ChunkEntry | object | None:
        while True:
            buf, at = self.buf, self.at
            need = _CHUNK_SIZE
            if at + 4 <= len(buf):
                need = 4 + _LEN.unpack_from(buf, at)[0]
                if not _CHUNK_SIZE <= need <= _MAX_ENTRY:  # a damaged length: stop here, the
                    return None                           # chunks after it are read whole
                if at + need <= len(buf):
                    self.at = at + need
                    self.entries_read += 1
                    e = _decode_one(buf, at, at + need)
                    return _BAD if e is None else e
            more = os.pread(self.fd, max(self.read_size, need), self.pos + len(buf))
            self.read_size = min(2 * self.read_size, _READ)
            if not more:
                return None  # the entry is not (wholly) written yet
            self.bytes_read += len(more)
            self.pos += at
            self.buf = buf[at:] + more
            self.at = 0


def load(directory: str, start: int) -> tuple[list[str], list[ChunkEntry], int, int] | None:
    """For ``inspect``: a segment's sidecar as (keys, its whole entries, entries whose CRC
    fails, file size); None when there is none or it is not a sidecar."""
    try:
        fd = os.open(derived_path(directory, start), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        found = read_keys(fd)
        if found is None:
            return None
        size = os.fstat(fd).st_size
        buf = os.pread(fd, size - found[1], found[1])
    finally:
        os.close(fd)
    entries: list[ChunkEntry] = []
    bad = 0
    try:
        for e in decode_entries(buf):
            if e is None:
                bad += 1
            else:
                entries.append(e)
    except (StorageError, struct.error):
        bad += 1
    return found[0], entries, bad, size


def create_sidecar(directory: str, start: int, keys: Sequence[str]) -> int:
    """Open (creating it with its header when missing or for other keys) the sidecar of
    segment ``start`` for appending; returns the fd."""
    path = derived_path(directory, start)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    found = read_keys(fd)
    if found is None or found[0] != list(keys):
        os.ftruncate(fd, 0)
        os.pwrite(fd, derived_header(keys), 0)
    os.close(fd)
    return os.open(path, os.O_WRONLY | os.O_APPEND)


def repair(directory: str, starts: Sequence[int]) -> None:
    """After recovery: remove sidecars without a segment; cut the last segment's sidecar at
    its first entry whose chunk (id and position) its index does not hold, or a torn one."""
    live = set(starts)
    for name in os.listdir(directory):
        if name.endswith(SUFFIX) and name[:-len(SUFFIX)].isdigit() and int(name[:-len(SUFFIX)]) not in live:
            os.unlink(os.path.join(directory, name))
    if not starts:
        return
    last = starts[-1]
    path = derived_path(directory, last)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        found = read_keys(fd)
        if found is None:
            os.ftruncate(fd, 0)  # rewritten with its header by the writer
            return
        ifd = os.open(index_path(directory, last), os.O_RDONLY)
        try:
            chunks = {(r[0], r[3]) for r in read_index_tuples(ifd)}
        finally:
            os.close(ifd)
        size = os.fstat(fd).st_size
        buf = os.pread(fd, size - found[1], found[1])
        keep = found[1]
        try:
            at = 0
            for e in decode_entries(buf):
                size = 4 + _LEN.unpack_from(buf, at)[0]
                if e is not None and (e.chunk_id, e.position) not in chunks:
                    break
                at += size
                keep += size
        except (StorageError, struct.error):
            pass
        if keep != size:
            os.ftruncate(fd, keep)
    finally:
        os.close(fd)
