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
#: a time; its mask, expected bytes and scratch are a few times this, per subscription (fewer,
#: larger blocks are a little faster: a numpy call costs ~1 µs)
_BLOCK_BYTES = 1 << 18


class _Determinants:
    """Every byte of a layout's determinants (and each entry's 4-byte header) in a chunk of
    ``stride``-byte entries, checked at once: the data as 8-byte words, ANDed with a mask
    that keeps those bytes, equal to what they must be (numpy: a few ns a record, against
    ~1.3 ns a record for each of ~40 strided byte columns).

    When the determinants all lie in the first half of an entry (a message's sections before
    its body, the body's constructor and length: the common case), only that part is read:
    the first ``width`` bytes of every entry (the last determinant's, rounded up to a word)
    are copied side by side first (one strided numpy copy), and the words checked are those:
    the check then reads ~``width`` bytes a record instead of ``stride`` (it is bound by
    memory: ~18 -> ~14 ns a 158-byte record whose determinants end at byte 56)."""

    __slots__ = ("stride", "width", "row_mask", "row_expect", "mask", "expect", "scratch",
                 "equal", "tail", "head")

    def __init__(self, stride: int, marks: tuple[tuple[int, int], ...]) -> None:
        row_mask = np.zeros(stride, np.uint8)
        row_expect = np.zeros(stride, np.uint8)
        row_mask[:4] = 0xFF
        row_expect[:4] = np.frombuffer(_U32P(stride - 4), np.uint8)  # a simple entry's size
        for p, b in marks:
            row_mask[4 + p] = 0xFF
            row_expect[4 + p] = b
        self.stride = stride
        # position in an entry: byte, for the last few bytes of a chunk past its last word
        self.tail = {p: int(row_expect[p]) for p in range(stride) if row_mask[p]}
        width = -(-(4 + max((p for p, _ in marks), default=-1) + 1) // 8) * 8
        self.width = width if 2 * width <= stride else 0  # 0: whole entries, as they lie
        # an entry's first ``width`` bytes as one item: copied side by side item by item (a
        # strided copy of ``(n, width)`` bytes goes a byte at a time: twice as long)
        self.head = np.dtype(f"V{self.width or stride}")
        if self.width:
            row_mask, row_expect = row_mask[:width], row_expect[:width]
        self.row_mask, self.row_expect = row_mask, row_expect
        self.mask = self.expect = self.scratch = np.empty(0, np.uint64)
        self.equal = np.empty(0, bool)

    def _grow(self, n: int) -> None:
        """Masks for ``n`` entries (whole words: a multiple of 8 entries unless compacted, so
        that every block lines up with them), within ``_BLOCK_BYTES``."""
        row = len(self.row_mask)
        n = min(n, max(1, _BLOCK_BYTES // row))
        if not self.width:
            n = max(8, -(-n // 8) * 8)
        self.mask = np.tile(self.row_mask, n).view(np.uint64)
        self.expect = np.tile(self.row_expect, n).view(np.uint64)
        self.scratch = np.empty_like(self.mask)
        self.equal = np.empty(len(self.mask), bool)

    def _same(self, words: np.ndarray) -> bool:
        """Whether ``words`` (at most a block) ANDed with the mask are the expected words."""
        k = len(words)
        if k == len(self.mask):  # (a whole block: no slices to make)
            scratch, equal, mask, expect = self.scratch, self.equal, self.mask, self.expect
        else:
            scratch, equal = self.scratch[:k], self.equal[:k]
            mask, expect = self.mask[:k], self.expect[:k]
        np.bitwise_and(words, mask, out=scratch)
        np.equal(scratch, expect, out=equal)
        return bool(np.count_nonzero(equal) == k)

    def hold(self, data: bytes | memoryview, n: int) -> bool:
        """Whether each of the ``n`` entries of ``data`` holds them."""
        stride, width = self.stride, self.width
        if width:
            if len(self.mask) * 8 < min(n * width, _BLOCK_BYTES - width):
                self._grow(n)
            rows = len(self.mask) * 8 // width  # entries a block
            entries = np.ndarray((n,), self.head, data, 0, (stride,))
            packed = self.scratch.view(self.head)  # (``rows`` items)
            if n == rows:  # (one whole block: the commonest, as chunks of one size follow)
                np.copyto(packed, entries)
                return self._same(self.scratch)
            for at in range(0, n, rows):
                part = entries[at:at + rows]
                k = len(part)
                np.copyto(packed[:k], part)
                if not self._same(packed[:k].view(np.uint64)):
                    return False
            return True
        size = n * stride
        words = np.frombuffer(data, np.uint64, count=size >> 3)
        if len(self.mask) < len(words) and len(self.mask) * 8 < _BLOCK_BYTES - 8 * stride:
            self._grow(n)
        step = len(self.mask)
        for at in range(0, len(words), step):
            if not self._same(words[at:at + step]):
                return False
        tail = self.tail
        return all(tail.get(at % stride, data[at]) == data[at] for at in range(size & ~7, size))


def _int_kind(c: int, op: str, literals: tuple[Any, ...]) -> tuple[np.dtype | None, tuple[int, ...]]:
    """For integer constructor ``c``: the dtype its values are read as in place (None: the
    constructor of the value 0, which holds no bytes) and the literals that can match one:
    for ``=`` and ``IN`` those in its range (a literal outside it matches no record); for an
    order, the literal if it is an int in range (else each value is compared as a Python
    number: numpy would wrap it); for the value 0, whether it matches."""
    width, _ = _INTS[c]
    if width == 0:
        keep = 0 in literals if op == "IN" else _OPS[op](0, literals[0])
        return None, (0,) if keep else ()
    signed = c in _SIGNED
    bits = 8 * width
    lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
    dtype = np.dtype(f">{'i' if signed else 'u'}{width}")
    if op in ("=", "IN"):
        return dtype, tuple(v for v in dict.fromkeys(literals)
                            if isinstance(v, int) and lo <= v <= hi)
    literal = literals[0]
    return dtype, (literal,) if type(literal) is int and lo <= literal <= hi else ()


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
    # the last layout and its check: the walk decides on the determinants' bytes and the size
    # alone, so when every entry of a chunk holds the last layout's (its check passes), the
    # first record has that layout too: no walk (10-30 µs) nor look at the first record
    # while chunks of one layout follow one another
    last: list[tuple[int, Layout, _Determinants]] = []
    # per value constructor: (the values' dtype, the literals it can hold), per string size
    # its dtype: made once (numpy parses a dtype's name in ~1 µs)
    kinds: dict[int, tuple[np.dtype | None, tuple[int, ...]]] = {}
    strings: dict[int, np.dtype] = {}

    def match(data: bytes | memoryview, stride: int, n: int) -> list[int] | None:
        first = bytes(data[4:stride])  # (data may be a view: a scratch buffer's)
        found: Layout | None = None
        if last and last[0][0] == stride and last[0][2].hold(data, n):
            found = last[0][1]
        if found is None:
            found = _layout(first, name)
            if found is None:
                return None
            check = _Determinants(stride, found[0])
            if not check.hold(data, n):  # every entry has the first's header and determinants
                return None
            last[:] = [(stride, found, check)]
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
            fixed = strings.get(size) or strings.setdefault(size, np.dtype(f"S{size}"))
            values = np.ndarray((n,), fixed, data, 4 + start, (stride,))
            hit = values == wanted[0]
            for t in wanted[1:]:
                hit |= values == t
            return hit.nonzero()[0].tolist()  # (np.flatnonzero: ~1 µs more of wrappers)
        kind = kinds.get(c)
        if kind is None:
            if c not in _INTS:
                return None
            kind = kinds[c] = _int_kind(c, op, literals)
        dtype, wanted_ints = kind
        if dtype is None:  # the value 0 in every record
            return list(range(n)) if wanted_ints else []
        values = np.ndarray((n,), dtype, data, 4 + at + 1, (stride,))
        if op in ("=", "IN"):  # (a literal outside the constructor's range: no record)
            if not wanted_ints:
                return []
            hit = values == wanted_ints[0]
            for v in wanted_ints[1:]:
                hit |= values == v
            return hit.nonzero()[0].tolist()
        compare, literal = _OPS[op], literals[0]
        if wanted_ints:  # (the literal, an int in the constructor's range)
            return compare(values, literal).nonzero()[0].tolist()
        # a literal outside the constructor's range (numpy would wrap it): each value as a
        # Python number
        return [i for i, v in enumerate(values.tolist()) if compare(v, literal)]

    return match
