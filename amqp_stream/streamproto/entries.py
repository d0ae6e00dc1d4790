"""A Publish frame's entries taken whole, and the plain walk they are tested against.

Why: a Publish frame holds thousands of messages, and a tuple, a ``str`` and a view per message
was most of the broker's time publishing. A frame of one message size becomes
``PackedEntries`` (checked and taken apart by C loops: strided slices, one ``struct`` call);
one of varying sizes (v1 without sub-entry batches, v2) ``SpannedEntries``: where each entry
starts is found by numpy from the messages' first bytes (``_chained``), else by a walk of
their sizes, and ids and filter fields are gathered from those places at once. Storage takes
either whole (``EntryRun``, ``EntrySpans``). Anything else (sub-entry batches, a bad layout) is
walked per message (``walk_messages``), which also names what is wrong.

Entry layouts (big-endian): see ``traffic``.
"""

from __future__ import annotations

import itertools
import operator
import struct
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np

from amqp_stream.streamproto._types import U16, U32, _bad
from storage.format import EntryRun, EntrySpans, chained

__all__ = ["PublishedMessage", "PackedEntries", "SpannedEntries", "walk_messages"]

SIMPLE_ENTRY = struct.Struct(">QI")         # publishing id, 0:1 size:31
FILTERED_ENTRY = struct.Struct(">QH")       # publishing id, filter value length (0xFFFF = none)
_NO_FILTER = 0xFFFF                         # -1 as RabbitMQ matches it
BATCH_ENTRY = struct.Struct(">BHII")        # 1:1 compression:3 reserved:4, records, uncompressed, size
ENTRY_SIZE = U32                            # 0:1 size:31 of a simple entry
_BATCH_BIT = 0x80


def _whole(buf: memoryview) -> bytes | bytearray:
    """The bytes ``buf`` views, when it views them whole (strided slices of bytes are C loops;
    of a memoryview, a much slower generic copy): ``bytes``, or the ``bytearray`` a large frame
    was gathered into (``ServerConnection``: nothing writes to it after); else a copy."""
    obj = buf.obj
    if (type(obj) is bytes or type(obj) is bytearray) and len(obj) == len(buf):
        return obj
    return bytes(buf)


PublishedMessage = tuple  # (publishing_id, filter_value | None, data, batch | None)
"""A published entry: ``data`` is a ``memoryview`` of the frame. ``batch`` is ``None`` for a
simple message, ``(compression, records, uncompressed_size)`` for a sub-entry batch, whose
``data`` is then the (possibly compressed) run of simple entries, stored as it came."""


PACKED_MAX = 4096  # messages a frame may hold for ``PackedEntries`` (bounds ``_columns``' cache)


@lru_cache(maxsize=32)
def _columns(count: int, size: int, bodies: bool) -> struct.Struct:
    """A struct that takes, in one C call, the publishing ids (``bodies`` False) or the
    messages of ``count`` simple entries of ``size`` bytes each."""
    one = f"12x{size}s" if bodies else f"Q{4 + size}x"
    return struct.Struct(">" + one * count)


class _Entries:
    """What a Publish frame's messages answer as a sequence of ``(publishing_id, filter_value,
    data, batch)`` (the frame decoder's tuple form), from the subclass's ``messages()``:
    built only when asked (tests, the per-message path)."""

    __slots__ = ()
    count: int

    def messages(self) -> tuple[PublishedMessage, ...]:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[PublishedMessage]:
        return iter(self.messages())

    def __getitem__(self, i: int) -> PublishedMessage:
        return self.messages()[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Entries, tuple)):
            return self.messages() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class PackedEntries(_Entries):
    """The simple entries of a Publish v1 frame whose messages all have one size, left as the
    frame holds them: what the decoder gives for such a frame instead of a tuple per message.

    Why: a publisher's frames usually carry messages of one size; then the frame's layout is
    checked with a few strided slices (C loops) and the ids and messages come out in one
    ``struct`` call each (``ids``, ``bodies``), with no Python code run per message. It is
    still a sequence of ``(publishing_id, None, data, None)`` tuples (built on first use), so
    code that walks a Publish's messages sees no difference."""

    __slots__ = ("view", "count", "size", "_messages", "_src", "_at")

    def __init__(self, view: memoryview, count: int, size: int,
                 src: bytes | bytearray | None = None,
                 at: int = 0):
        self.view = view  # the entries, exactly: count * (12 + size) bytes
        self.count = count
        self.size = size  # every message's size
        self._messages: tuple[PublishedMessage, ...] | None = None
        # the bytes ``view`` is part of, from ``at`` (strided slices of bytes are C loops)
        self._src, self._at = (bytes(view), 0) if src is None else (src, at)

    def run(self) -> EntryRun:
        """The entries as storage takes them whole (``storage.format.EntryRun``: the ids are
        dropped as each chunk's part is copied; no object per message)."""
        return EntryRun(self.view, self.count, self.size, 8)

    def id_bytes(self) -> bytes:
        """The publishing ids as a PublishConfirm holds them (8 bytes each, big-endian), in 8
        strided slices: no int per message."""
        src, at, stride, count = self._src, self._at, 12 + self.size, self.count
        out = bytearray(8 * count)
        for k in range(8):
            out[k::8] = src[at + k:at + count * stride:stride]
        return bytes(out)

    def ids(self) -> tuple[int, ...]:
        return _columns(self.count, self.size, False).unpack_from(self.view)

    def bodies(self) -> tuple[bytes, ...]:
        return _columns(self.count, self.size, True).unpack_from(self.view)

    def messages(self) -> tuple[PublishedMessage, ...]:
        if self._messages is None:
            view, stride = self.view, 12 + self.size
            self._messages = tuple((pid, None, view[p + 12:p + stride], None) for pid, p in zip(
                self.ids(), range(0, self.count * stride, stride), strict=True))
        return self._messages


    def __repr__(self) -> str:
        return f"PackedEntries({self.count} messages of {self.size} bytes)"


def _packed(buf: memoryview, pos: int, count: int) -> PackedEntries | None:
    """The frame's entries from ``pos`` as ``PackedEntries`` when they are ``count`` simple
    entries of one size filling the frame; None otherwise (the caller walks them)."""
    end = len(buf)
    if not 2 <= count <= PACKED_MAX:
        return None
    size = ENTRY_SIZE.unpack_from(buf, pos + 8)[0]
    stride = 12 + size
    if size & 0x8000_0000 or end - pos != count * stride:
        return None
    head = ENTRY_SIZE.pack(size)
    src = _whole(buf)
    for k in range(4):  # byte k of every entry's size field, in one strided slice each
        if src[pos + 8 + k:end:stride].count(head[k]) != count:
            return None
    return PackedEntries(buf[pos:end], count, size, src, pos)


class SpannedEntries(_Entries):
    """The simple entries of a Publish frame of messages of varying sizes (v1 without sub-entry
    batches, or v2), found by one walk and left in the frame's bytes: what the decoder gives
    instead of a tuple per message.

    Why: the walk is the one Python step per message (one ``struct`` call for each entry's
    size: sizes chain, so it cannot be skipped) and records only where each entry starts; the
    ids (big-endian, as a PublishConfirm holds them) and the filter values' fields are then
    gathered from those places by numpy in one pass each, so no tuple is made per message.
    Storage takes the records as one ``EntrySpans``. It is still a sequence of
    ``(publishing_id, filter_value, data, None)`` tuples (built on first use), as
    ``PackedEntries`` is."""

    __slots__ = ("src", "starts", "places", "skip", "skips", "count", "values", "_id_bytes", "_ids",
                 "_largest", "_messages")

    def __init__(self, src: bytes | bytearray, starts: list[int], skip: int, id_bytes: bytes,
                 values: list[str | None] | None, places: np.ndarray | None = None,
                 skips: np.ndarray | None = None):
        self.src = src  # the frame's bytes; entry k lies at starts[k] .. starts[k + 1]
        self.starts = starts
        self.places = places  # ``starts`` as an array, when the decoder made one
        self.skip = skip  # bytes before each entry's size field
        self.skips = skips  # each entry's, when they differ (filter values of several lengths)
        self.count = len(starts) - 1
        self._id_bytes = id_bytes  # the publishing ids, 8 bytes each, big-endian
        self.values = values  # one per message, or None when no message has one
        self._ids: list[int] | None = None
        self._largest: int | None = None
        self._messages: tuple[PublishedMessage, ...] | None = None

    @property
    def ids(self) -> list[int]:
        """The publishing ids (made once, in C, when asked: a named publisher's)."""
        if self._ids is None:
            self._ids = np.frombuffer(self._id_bytes, _IDS).tolist()
        return self._ids

    def ascending(self) -> bool:
        """The publishing ids are strictly ascending (numpy: no int per message)."""
        ids = np.frombuffer(self._id_bytes, _IDS)
        return bool((ids[1:] > ids[:-1]).all())

    def fits(self, limit: int) -> bool:
        """No message is larger than ``limit`` bytes (a frame no larger says so at once)."""
        if self.run().records_bytes() <= limit:
            return True
        return self.largest() <= limit

    def largest(self) -> int:
        """The largest message's size."""
        if self._largest is None:
            self._largest = self.run().largest()
        return self._largest

    def run(self) -> EntrySpans:
        """The entries as storage takes them whole (no object per message)."""
        return EntrySpans(self.src, self.starts, self.skip, self._largest, self.places, self.skips)

    def id_bytes(self) -> bytes:
        """The publishing ids as a PublishConfirm holds them (8 bytes each, big-endian)."""
        return self._id_bytes

    def messages(self) -> tuple[PublishedMessage, ...]:
        if self._messages is None:
            view, starts = memoryview(self.src), self.starts
            at = itertools.repeat(self.skip + 4) if self.skips is None else (self.skips + 4).tolist()
            values = self.values if self.values is not None else itertools.repeat(None)
            self._messages = tuple((pid, value, view[a + h:b], None) for pid, value, a, h, b in zip(
                self.ids, values, starts, at, itertools.islice(starts, 1, None), strict=False))
        return self._messages


    def __repr__(self) -> str:
        return f"SpannedEntries({self.count} messages, skip {self.skip})"


_IDS = np.dtype(">u8")
_SIZE_AT = ENTRY_SIZE.unpack_from
_LENGTH_AT = U16.unpack_from

#: filter values decoded lately, by the width of a v2 entry's filter field (its length field
#: and value): each field as the rows of 8-byte words numpy makes of it (zero-padded), sorted
#: by a code per field (the words mixed), and the ``str`` of each; loop thread only. A
#: publisher's few values are decoded once, not once a frame, and found again by a binary
#: search per frame with no object made per message; emptied when it would hold more than
#: ``VALUES_KEPT``.
VALUES_KEPT = 4096
_TABLES: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5],
                np.uint64)


def _words(fields: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Each filter field (a row of ``fields``) as 8-byte words, and a code per row."""
    words = -(-width // 8)
    padded = np.zeros((len(fields), 8 * words), np.uint8)
    padded[:, :width] = fields
    rows = padded.view(np.uint64)
    if words == 1:
        return rows, rows[:, 0]
    mix = _MIX[np.arange(words) % len(_MIX)] + np.arange(words, dtype=np.uint64)
    return rows, np.bitwise_xor.reduce(rows * mix, axis=1)


def _value(field: bytes) -> str | None:
    """The filter value of a v2 entry's filter field (``ValueError``: not UTF-8)."""
    if field == b"\xff\xff":
        return None
    return str(field[2:], "utf-8")


def _values(fields: np.ndarray, width: int) -> list[str | None] | None:
    """The filter values of a frame's entries, ``fields`` their filter fields (a row each, all
    of one length field); None when a value is not UTF-8."""
    rows, codes = _words(fields, width)
    table = _TABLES.get(width)
    if table is not None:
        known, known_rows, strs = table
        at = np.searchsorted(known, codes)
        np.minimum(at, len(known) - 1, out=at)
        if (known_rows[at] == rows).all():  # every field exactly one decoded before
            return strs[at].tolist()
        rows = np.concatenate((known_rows, rows))
        if len(known) + len(fields) > VALUES_KEPT:
            rows = rows[len(known):]
    distinct = np.unique(rows, axis=0)
    distinct_codes = distinct[:, 0] if distinct.shape[1] == 1 else _words(
        distinct.view(np.uint8)[:, :width], width)[1]
    order = np.argsort(distinct_codes, kind="stable")
    distinct, distinct_codes = distinct[order], distinct_codes[order]
    if len(distinct_codes) > 1 and not (distinct_codes[1:] != distinct_codes[:-1]).all():
        return None  # two fields of one code: the walk per message takes this frame
    try:
        strs = np.array([_value(row.tobytes()[:width]) for row in distinct] + [None],
                        object)[:-1]  # (the None: an array of objects even for tuples)
    except ValueError:  # UnicodeDecodeError
        return None
    if len(_TABLES) > 64:
        _TABLES.clear()
    _TABLES[width] = (distinct_codes, distinct, strs)
    return _values(fields, width)


#: entries from which a frame's heads are gathered by numpy (below, one slice each)
NUMPY_FROM = 256


def _few(src: bytes | bytearray, pos: int, count: int, version: int, length: int,
         skip: int) -> SpannedEntries | None:
    """``_spanned`` for a frame of a few entries (below ``NUMPY_FROM``), where numpy's cost a
    call is more than what it saves: one ``struct`` call an entry gives its id, its filter
    field and its size, and the fields are looked up in ``_FIELDS``."""
    end = len(src)
    head = skip + 4
    unpack = _walker(skip).unpack_from
    at = pos
    walked: list[tuple] = []
    append = walked.append
    try:
        for _ in range(count):
            t = unpack(src, at)
            append(t)
            at += head + t[-1]
    except struct.error:  # an entry's head runs past the frame
        return None
    if at != end:
        return None
    columns = tuple(zip(*walked, strict=True))
    values: list[str | None] | None = None
    if version != 1:
        fields = columns[1]
        field = fields[0][:2]
        if fields.count(field) != count and any(f[:2] != field for f in fields):
            return None  # length fields of several lengths
        if skip > 10 or length != _NO_FILTER:
            try:  # the values seen before: a lookup each
                values = list(map(_FIELDS.__getitem__, fields))
            except KeyError:
                if len(_FIELDS) > VALUES_KEPT:
                    _FIELDS.clear()
                try:
                    _FIELDS.update({f: _value(f) for f in set(fields)})
                except ValueError:  # UnicodeDecodeError
                    return None
                values = list(map(_FIELDS.__getitem__, fields))
    starts = list(itertools.accumulate(map(operator.add, columns[-1], itertools.repeat(head)),
                                       initial=pos))
    return SpannedEntries(src, starts, skip, struct.pack(f">{count}Q", *columns[0]), values)


@lru_cache(maxsize=64)
def _walker(skip: int) -> struct.Struct:
    """A simple entry's head of ``skip`` bytes and its size: the publishing id, then (Publish
    v2) the filter field (length field and value) as one field, then the size."""
    return struct.Struct(">QI" if skip == 8 else f">Q{skip - 8}sI")


#: ``_few``'s filter fields decoded lately (a v2 entry's length field and value, to its value)
_FIELDS: dict[bytes, str | None] = {}


def _spanned(buf: memoryview, pos: int, count: int, version: int) -> SpannedEntries | None:
    """The frame's entries from ``pos`` as ``SpannedEntries`` when they are ``count`` simple
    entries filling the frame (in v2 with filter values of one length, or none, else
    ``_varied``); None otherwise (the caller's walk then says what is wrong, or gives the
    tuples)."""
    end = len(buf)
    if count < 1:
        return None
    src = _whole(buf)
    width, length = 0, _NO_FILTER  # the filter field: its bytes (v2: length field, value)
    if version != 1:
        (length,) = U16.unpack_from(src, pos + 8)
        width = 2 + (0 if length == _NO_FILTER else length)
    skip = 8 + width
    head = skip + 4
    if count < NUMPY_FROM:
        return _few(src, pos, count, version, length, skip)
    chained = _chained(src, pos, count, version)
    if chained is not None:
        places, apart = chained
        if (apart != skip).any():  # filter fields of several lengths
            return _varied_values(src, places, apart)
        starts = places.tolist()
    else:
        starts = [pos] * (count + 1)
        at = pos
        size_at = _size_at(skip)
        # a size with its top bit set (a sub-entry batch, or a v2 error) takes ``at`` 2 GiB
        # on: the frame does not add up, and the caller's walk tells what it is
        try:
            for k in range(count):
                starts[k] = at
                at += head + size_at(src, at)[0]
        except struct.error:  # an entry's head runs past the frame
            return None if version == 1 else _varied(src, pos, count, False)
        if at != end:
            return None if version == 1 else _varied(src, pos, count, False)
        starts[count] = at
        places = np.fromiter(starts, np.intp, count + 1)
    firsts = places[:-1]
    # the frame as big-endian words, one starting at each byte (a view): a word an entry
    words = _words_of(src)
    id_bytes = words[firsts].tobytes()
    values: list[str | None] | None = None
    if version != 1:
        if width <= 8 and starts[count - 1] + 16 <= end:
            # each filter field as a number: its word less what follows it
            codes = words[firsts + 8] >> np.uint64(64 - 8 * width)
            if not (codes >> np.uint64(8 * width - 16) == length).all():
                return _varied(src, pos, count)  # length fields of several lengths
            if width > 2 or length != _NO_FILTER:
                values = _coded_values(codes, width)
                if values is None:
                    return None
        else:
            # each entry's first ``skip`` bytes, a row each: rows of a view of every ``skip``
            # bytes
            heads = _rows_at(src, firsts, skip)
            fields = heads[:, 8:]
            if not (fields[:, :2] == fields[0, :2]).all():  # length fields of several lengths
                return _varied(src, pos, count)
            if width > 2 or length != _NO_FILTER:
                values = _values(np.ascontiguousarray(fields), width)
                if values is None:
                    return None
    return SpannedEntries(src, starts, skip, id_bytes, values, places)


def _varied(src: bytes | bytearray, pos: int, count: int, chain: bool = True) -> SpannedEntries | None:
    """``_spanned`` for a Publish v2 frame whose filter values have several lengths (a
    writer's regions, tenants, ids): the entries found by numpy (``_chained``), else by a walk
    that reads each entry's filter length and size (one ``struct`` call an entry whose skip is
    the one before's, two otherwise); the values decoded a length at a time as ``_spanned``
    decodes one length (``_coded_values``, ``_values``); None when the entries do not fill the
    frame. (``chain``: False where ``_chained`` has been tried.)

    Why: the walk per message (``walk_messages``) makes a tuple, a ``str`` and a view a
    message; it was 28 % of the broker's time storing a Spark sink's rows whose filter
    values differ in length (bench/RESULTS.md)."""
    end = len(src)
    chained = _chained(src, pos, count, 2) if chain else None
    if chained is not None:
        return _varied_values(src, *chained)
    starts = [pos] * (count + 1)
    skips = [0] * count
    at = pos
    length_at, size_at, none = _LENGTH_AT, _SIZE_AT, _NO_FILTER
    skip = 10
    pair = _pair_at(skip)
    try:
        for k in range(count):
            starts[k] = at
            try:  # the length field and the size as if this entry's skip were the last one's
                length, size = pair(src, at)
            except struct.error:  # (read past the frame: not so)
                length, size = length_at(src, at + 8)[0], -1
            own = 10 if length == none else 10 + length
            if own != skip or size < 0:
                skip = own
                pair = _pair_at(skip)
                size = size_at(src, at + skip)[0]
            skips[k] = skip
            at += skip + 4 + size
    except struct.error:  # an entry's head runs past the frame
        return None
    if at != end:
        return None
    starts[count] = at
    return _varied_values(src, np.fromiter(starts, np.intp, count + 1), np.array(skips, np.intp))


def _varied_values(src: bytes | bytearray, places: np.ndarray, apart: np.ndarray) -> SpannedEntries | None:
    """``_varied``'s entries from where they start (``places``, and the frame's end) and their
    skips (``apart``): the ids, and the values a filter field length at a time."""
    end, count = len(src), len(apart)
    firsts = places[:-1]
    words = _words_of(src)
    id_bytes = words[firsts].tobytes()
    values = np.empty(count, object)
    for skip in np.unique(apart).tolist():
        which = np.flatnonzero(apart == skip)
        width = skip - 8  # the filter field: its length and value
        at = firsts[which] + 8  # (ascending: the last is the furthest)
        if width <= 8 and int(at[-1]) + 8 <= end:  # each field as a number, as ``_spanned``'s
            got = _coded_values(words[at] >> np.uint64(64 - 8 * width), width)
        else:
            got = _values(_rows_at(src, at, width), width)
        if got is None:
            return None
        values[which] = got
    return SpannedEntries(src, places.tolist(), 0, id_bytes, values.tolist(), places, apart)


def _chained(src: bytes | bytearray, pos: int, count: int,
             version: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(where each of the ``count`` entries from ``pos`` starts, and the frame's end; each
    entry's skip) of a Publish frame's simple entries, found by numpy: the walk of
    ``_spanned`` and ``_varied`` without a Python step an entry; None when not found this way
    (the walk then decides).

    Why: the walk was ~100 ns an entry, ~250 for a writer's values of 1 to 3 digits (the skip
    changes every few entries). A writer's messages begin alike, so every place where the
    first message's first three bytes recur is a candidate message; a candidate's size field
    (the 4 bytes before it) gives where its entry ends, and the next entry's publishing id
    and (v2) filter length field where the next message begins. The candidates that chain so
    from the first message, ``count`` of them, the last ending the frame, are the walk's
    messages (``storage.format.chained``); otherwise the walk decides (a message that begins
    otherwise, sizes that do not add up, a head past the frame)."""
    end = len(src)
    if count < 2 or pos + 10 > end:
        return None
    if version == 1:
        first = pos + 12  # the first message
    else:
        (length,) = U16.unpack_from(src, pos + 8)
        first = pos + 14 + (0 if length == _NO_FILTER else length)
    if first + 3 > end:
        return None
    buf = np.frombuffer(src, np.uint8)
    b0, b1, b2 = buf[first], buf[first + 1], buf[first + 2]
    near = buf[first + 1:end - 1] == b1  # a candidate's second byte, its third compared too
    near &= buf[first + 2:end] == b2
    # about one a message in a writer's frame; many more (bodies of those bytes over and
    # over, as a hostile client may send) would cost ~4 ns each from here on: the walk's
    found = int(np.count_nonzero(near))
    if found < count or found > 4 * count:
        return None
    q = np.flatnonzero(near) + first
    r = q[buf[q] == b0]  # candidate messages, ascending; the first is ``first``
    if len(r) < count:
        return None
    sizes = np.ndarray((end - 3,), ">u4", src, 0, (1,))[r - 4].astype(np.int64)
    ends = r + sizes  # where each candidate's entry ends: the next entry's start

    # where each candidate's chain leads: the message after its entry (-1: a head past the
    # frame, which no candidate is)
    if version == 1:
        leads = np.where(ends + 12 <= end, ends + 12, -1)
    else:
        inside = ends + 10 <= end
        fields = np.full(len(r), -1, np.int64)
        fields[inside] = np.ndarray((end - 1,), ">u2", src, 0, (1,))[ends[inside] + 8]
        leads = np.where(inside, ends + 14 + np.where(fields == _NO_FILTER, 0, fields), -1)
    walked = chained(r, ends, leads, count)
    if walked is None:
        return None
    r, ends = walked
    if r[0] != first or ends[-1] != end:
        return None
    places = np.empty(count + 1, np.intp)
    places[0], places[1:] = pos, ends
    return places, (r - 4 - places[:-1])


def _rows_at(src: bytes | bytearray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``at`` in ``src``, a row each: one gather of rows (a
    numpy ``void`` a row; a 2-D index of bytes copies each row byte by byte, ~5x slower)."""
    rows = np.ndarray((len(src) - width + 1,), np.dtype((np.void, width)), src, 0, (1,))
    return rows[at].view(np.uint8).reshape(len(at), width)


def _words_of(src: bytes | bytearray) -> np.ndarray:
    """``src`` as big-endian 8-byte words, one starting at each byte (a view, no copy)."""
    return np.ndarray((len(src) - 7,), _IDS, src, 0, (1,))


@lru_cache(maxsize=64)
def _pair_at(skip: int) -> Callable[..., tuple[int, int]]:
    """Reads the filter length field and the size of the v2 entry at a place, when ``skip``
    bytes lie before its size field (one ``struct`` call where entries run alike)."""
    return struct.Struct(f">8xH{skip - 10}xI").unpack_from


@lru_cache(maxsize=64)
def _size_at(skip: int) -> Callable[..., tuple[int]]:
    """Reads the size field of the simple entry at a place, after ``skip`` bytes."""
    return struct.Struct(f">{skip}xI").unpack_from


#: ``_coded_values``' filter fields decoded lately, by width: the fields as numbers (sorted)
#: and the ``str`` of each; loop thread only
_CODES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _coded_values(codes: np.ndarray, width: int) -> list[str | None] | None:
    """``_values`` for filter fields of at most 8 bytes given as numbers (``codes``: each
    field's bytes read as a big-endian integer, one to one): a binary search per frame in the
    fields decoded before, no object made per message; None when a value is not UTF-8."""
    table = _CODES.get(width)
    seen = codes
    if table is not None:
        known, strs = table
        at = np.searchsorted(known, codes)
        np.minimum(at, len(known) - 1, out=at)
        if (known[at] == codes).all():  # every field exactly one decoded before
            return strs[at].tolist()
        if len(known) + len(codes) <= VALUES_KEPT:
            seen = np.concatenate((known, codes))
    distinct = np.unique(seen)
    try:
        strs = np.array([_value(c.to_bytes(width, "big")) for c in distinct.tolist()] + [None],
                        object)[:-1]  # (the None: an array of objects even for tuples)
    except ValueError:  # UnicodeDecodeError
        return None
    _CODES[width] = (distinct, strs)  # (a key a width: at most 8)
    return _coded_values(codes, width)


def walk_messages(buf: memoryview, pos: int, count: int, version: int) -> tuple[PublishedMessage, ...]:
    """A Publish frame's ``count`` entries from ``pos`` to the end of ``buf``, one tuple each,
    by a walk per message that checks each as it goes: the plain path, taken for what the
    frame-at-once ones (``_packed``, ``_spanned``) leave, and what their tests compare them
    with. Raises ``FrameError``."""
    end = len(buf)
    messages: list[PublishedMessage] = []
    append = messages.append
    if version == 1:
        unpack = SIMPLE_ENTRY.unpack_from
        for _ in range(count):
            publishing_id, size = unpack(buf, pos)
            if size & 0x8000_0000:
                head, records, uncompressed, size = BATCH_ENTRY.unpack_from(buf, pos + 8)
                pos += 8 + BATCH_ENTRY.size
                if pos + size > end:
                    raise _bad("sub-entry batch runs past the frame")
                append((publishing_id, None, buf[pos:pos + size],
                        ((head >> 4) & 0x7, records, uncompressed)))
            else:
                pos += SIMPLE_ENTRY.size
                if pos + size > end:
                    raise _bad("message runs past the frame")
                append((publishing_id, None, buf[pos:pos + size], None))
            pos += size
    else:
        unpack = FILTERED_ENTRY.unpack_from
        for _ in range(count):
            publishing_id, n = unpack(buf, pos)
            pos += FILTERED_ENTRY.size
            if n == _NO_FILTER:
                filter_value: str | None = None
            else:
                filter_value = str(buf[pos:pos + n], "utf-8")
                pos += n
            (size,) = ENTRY_SIZE.unpack_from(buf, pos)
            pos += 4
            if size & 0x8000_0000:
                raise _bad("Publish v2 has no sub-entry batches")
            if pos + size > end:
                raise _bad("message runs past the frame")
            append((publishing_id, filter_value, buf[pos:pos + size], None))
            pos += size
    if pos != end:
        raise _bad(f"{end - pos} bytes after the {count} messages of Publish")
    return tuple(messages)

