"""Stage 2 over a chunk whose records share one layout: a property's value read as a column.

Why: a filter on one application property (``fast_match``'s shapes: ``zone = 'z07'``,
``k IN (1, 2)``, ``k < 10``) over values in round robin has matches in every chunk, so no
chunk is skipped and every record is scanned. A walk per record costs ~1 µs, a regular
expression over the whole data section ~0.4-0.7 ns a byte (65-110 ns a 158-byte record).
But a producer sends messages of one shape: in a chunk of same-sized entries (a ``stride``)
the value then lies at the same place in every record, and a strided slice
(``data[p::stride]``: a C loop, ~1 ns a record) reads one byte of every record at once.

How: the first record is walked once (as ``fast_match`` walks every record) to find the
value's place and its *determinants*: every byte that decides where the value lies or what
it means (section descriptors and constructors, size and count fields, the constructor and
length of every key of the application properties, the filtered key's bytes, one byte where
another key of its length differs from it, every value's constructor and length; not
fixed-width payloads nor string contents: ~35 strided columns for a message with a header,
properties and three application properties, ~1 ns a record each). If every record of the
chunk holds the first record's determinants (one strided slice each, compared with a
repeated byte), every record has the first's layout,
and ``fast_match`` would read each at that place with that constructor: the value columns
alone then decide, with Python per match only. Anything else (records of different
layouts or sizes, a walk ``fast_match`` would leave to the general matcher, a symbol value)
answers None and the caller matches record by record as before: this is a shortcut to the
same answers, never a second opinion (``tests/stream/test_columns.py`` checks it against
the record-by-record matcher on random chunks).
"""

from __future__ import annotations

import operator
import struct
from typing import Any, Callable

import numpy as np

from amqp_stream.fast_match import _INTS, _OPS, _STEP, sql_shape

__all__ = ["column_matcher"]

_U32 = struct.Struct(">I").unpack_from
_U32P = struct.Struct(">I").pack
_MAP32 = struct.Struct(">II").unpack_from
_SIGNED = frozenset((0x51, 0x54, 0x55, 0x61, 0x71, 0x81))

#: a record's determinants as (position, byte), and where its value's constructor is (-1: the
#: record has no such value, and no record of its layout has)
Layout = tuple[tuple[tuple[int, int], ...], int]


def _layout(buf: bytes, name: bytes) -> Layout | None:
    """The first record's determinants and the place of ``name``'s value constructor; None
    when ``fast_match``'s walk would not be sure, or the key is a symbol (left to the
    caller)."""
    marks: list[tuple[int, int]] = []
    pos, n = 0, len(buf)
    step = _STEP

    def mark(a: int, b: int) -> None:
        marks.extend((p, buf[p]) for p in range(a, b))

    try:
        while pos < n:
            mark(pos, pos + 4)
            if buf[pos] != 0 or buf[pos + 1] != 0x53:
                return None
            code, c = buf[pos + 2], buf[pos + 3]
            if code == 0x74:
                if c == 0xC1:
                    mark(pos + 4, pos + 6)
                    end, count, q = pos + 5 + buf[pos + 4], buf[pos + 5], pos + 6
                elif c == 0xD1:
                    mark(pos + 4, pos + 12)
                    length, count = _MAP32(buf, pos + 4)
                    end, q = pos + 8 + length, pos + 12
                elif c == 0x40:
                    return tuple(marks), -1
                else:
                    return None
                if end > n or count & 1:
                    return None
                found = None
                for _ in range(count >> 1):
                    k, m = buf[q], buf[q + 1]
                    if k != 0xA1 and k != 0xA3:
                        return None
                    mark(q, q + 2)  # the key's constructor and length
                    q += 2 + m
                    if m == len(name) and buf.startswith(name, q - m):
                        if found is not None or k != 0xA1:
                            return None  # a repeated key; a symbol key (its rules differ)
                        found = q
                        mark(q - m, q)  # the key itself, whole
                    elif m == len(name):  # one byte where it differs from ``name`` tells
                        d = next(i for i in range(m) if buf[q - m + i] != name[i])  # it is not
                        mark(q - m + d, q - m + d + 1)  # (a key of another length is not)
                    s = step[buf[q]]
                    if s >= 0:
                        mark(q, q + 1)
                        q += 1 + s
                    elif s == -1:
                        mark(q, q + 2)
                        q += 2 + buf[q + 1]
                    elif s == -4:
                        mark(q, q + 5)
                        q += 5 + _U32(buf, q + 1)[0]
                    else:
                        return None
                if q != end:
                    return None
                return tuple(marks), -1 if found is None else found
            if code < 0x70 or code > 0x78:
                return None
            s = step[c]
            if s >= 0:
                pos += 4 + s
            elif s == -1:
                mark(pos + 4, pos + 5)
                pos += 5 + buf[pos + 4]
            elif s == -4:
                mark(pos + 4, pos + 8)
                pos += 8 + _U32(buf, pos + 4)[0]
            else:
                return None
    except (IndexError, struct.error):
        return None
    return (tuple(marks), -1) if pos == n else None


#: bytes per block of the determinant check at most: a chunk's entries are checked a block at
#: a time; its mask, expected bytes and scratch are three times this, per subscription (fewer,
#: larger blocks are a little faster: a numpy call costs ~1 µs)
_BLOCK_BYTES = 1 << 18


class _Determinants:
    """Every byte of a layout's determinants (and each entry's 4-byte header) in a chunk of
    ``stride``-byte entries, checked at once: the data as 8-byte words, ANDed with a mask
    that keeps those bytes, equal to what they must be (numpy: ~12-20 ns a 158-byte record,
    against ~1.3 ns a record for each of ~40 strided byte columns)."""

    __slots__ = ("stride", "row_mask", "row_expect", "mask", "expect", "scratch", "tail")

    def __init__(self, stride: int, marks: tuple[tuple[int, int], ...]) -> None:
        row_mask = np.zeros(stride, np.uint8)
        row_expect = np.zeros(stride, np.uint8)
        row_mask[:4] = 0xFF
        row_expect[:4] = np.frombuffer(_U32P(stride - 4), np.uint8)  # a simple entry's size
        for p, b in marks:
            row_mask[4 + p] = 0xFF
            row_expect[4 + p] = b
        self.stride = stride
        self.row_mask, self.row_expect = row_mask, row_expect
        self.mask = self.expect = self.scratch = np.empty(0, np.uint64)
        # position in an entry: byte, for the last few bytes of a chunk past its last word
        self.tail = {p: int(row_expect[p]) for p in range(stride) if row_mask[p]}

    def _grow(self, n: int) -> None:
        """Masks for ``n`` entries (a multiple of 8, so that they are whole words and every
        block lines up with them), within ``_BLOCK_BYTES``."""
        n = max(8, min(-(-n // 8), _BLOCK_BYTES // (8 * self.stride)) * 8)
        self.mask = np.tile(self.row_mask, n).view(np.uint64)
        self.expect = np.tile(self.row_expect, n).view(np.uint64)
        self.scratch = np.empty_like(self.mask)

    def hold(self, data: bytes | memoryview, n: int) -> bool:
        """Whether each of the ``n`` entries of ``data`` holds them."""
        size = n * self.stride
        words = np.frombuffer(data, np.uint64, count=size >> 3)
        if len(self.mask) < len(words) and len(self.mask) * 8 < _BLOCK_BYTES - 8 * self.stride:
            self._grow(n)
        mask, expect, scratch = self.mask, self.expect, self.scratch
        step = len(mask)
        for at in range(0, len(words), step):
            part = words[at:at + step]
            k = len(part)
            np.bitwise_and(part, mask[:k], out=scratch[:k])
            if not np.array_equal(scratch[:k], expect[:k]):
                return False
        stride, tail = self.stride, self.tail
        return all(tail.get(at % stride, data[at]) == data[at] for at in range(size & ~7, size))


def column_matcher(stage2: Any) -> Callable[[bytes, int, int], list[int] | None] | None:
    """For a filter of one of ``fast_match``'s shapes: ``match(data, stride, n)``, the
    indexes of the matching records of a data section of ``n`` simple entries of ``stride``
    bytes each (headers included), or None when the records do not share one layout (then
    match them one by one). None for any other filter. ``data`` need only be ``n * stride``
    bytes: the entries' headers are checked with the determinants (a simple entry of
    ``stride - 4`` bytes each), so the caller need not walk them first."""
    shape = sql_shape(stage2)
    if shape is None:
        return None
    _, name, op, literals = shape
    texts = tuple(v.encode("utf-8") for v in literals) if type(literals[0]) is str else None
    # the last layout: (record size, its determinants' places as an itemgetter, their bytes,
    # the layout, their check); the walk decides on those bytes and the size alone, so a
    # first record that holds them has that layout (~1 µs against the walk's 10-30)
    last: list[tuple[int, Callable[[bytes], Any], Any, Layout, _Determinants]] = []

    def match(data: bytes | memoryview, stride: int, n: int) -> list[int] | None:
        first = bytes(data[4:stride])  # (data may be a view: a scratch buffer's)
        found: Layout | None = None
        if last:
            size, get, known, layout, check = last[0]
            if size == stride and get(first) == known:
                found = layout
        if found is None:
            found = _layout(first, name)
            if found is None:
                return None
            check = _Determinants(stride, found[0])
            if len(found[0]) > 1:
                get = operator.itemgetter(*(p for p, _ in found[0]))
                last[:] = [(stride, get, get(first), found, check)]
        if not check.hold(data, n):  # every entry has the first's header and determinants
            return None
        marks, at = found
        if at < 0:
            return []
        c = first[at]
        if texts is not None:
            if c == 0xA1:
                size, start = first[at + 1], at + 2
            elif c == 0xB1:
                size, start = _U32(first, at + 1)[0], at + 5
            else:
                return None  # a symbol or another type: record by record
            wanted = [t for t in texts if len(t) == size]
            if not wanted:
                return []
            if size == 0:
                return list(range(n))
            # the values as fixed-width strings, one compare each (two of ``size`` bytes that
            # numpy finds equal, trailing NULs aside, are the same bytes)
            values = np.ndarray((n,), f"S{size}", data, 4 + start, (stride,))
            hit = values == wanted[0]
            for t in wanted[1:]:
                hit |= values == t
            return np.flatnonzero(hit).tolist()
        if c not in _INTS:
            return None
        width, _ = _INTS[c]
        if width == 0:  # the value 0 in every record
            v0 = 0
            keep = v0 in literals if op == "IN" else _OPS[op](v0, literals[0])
            return list(range(n)) if keep else []
        signed = c in _SIGNED
        # the values as big-endian integers in place, one compare a literal
        bits = 8 * width
        lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
        values = np.ndarray((n,), f">{'i' if signed else 'u'}{width}", data, 4 + at + 1, (stride,))
        if op in ("=", "IN"):  # (a literal outside the constructor's range: no record)
            hit = np.zeros(n, bool)
            for v in set(literals):
                if isinstance(v, int) and lo <= v <= hi:
                    hit |= values == v
            return np.flatnonzero(hit).tolist()
        compare, literal = _OPS[op], literals[0]
        if type(literal) is int and lo <= literal <= hi:
            return np.flatnonzero(compare(values, literal)).tolist()
        # a literal outside the constructor's range (numpy would wrap it): each value as a
        # Python number
        return [i for i, v in enumerate(values.tolist()) if compare(v, literal)]

    return match
