"""A batch of stored messages of one shape decoded as columns: numpy gathers, no Python a message.

Why: ``stored_columns.stored_adder`` reads a message in one Python walk, ~7-8 µs for the bench's
190-byte message (bench/RESULTS.md, Run 8): the read stays at a tenth of Spark's Parquet read.
A writer's messages share one shape (the same sections in the same order, the same annotation
and application property keys in the same order, the same property count); only the values
and their encodings differ (a smallint here, an int there, ids of several lengths). So a
batch's messages are joined into one buffer and read together, one field at a time over every
message at once: ``pos`` holds one position a message; each field's constructor byte is
gathered at ``pos``, its size found from the constructor (a table, a length byte, or a 4-byte
big-endian length), and ``pos`` moves on. Strings and binaries come out as Arrow arrays over
the buffer itself (offsets ``[s0, e0, s1, e1, ...]``, then the even elements taken), numbers
from their gathered big-endian bytes.

Most batches are simpler still: every message laid out as the first, byte for byte but for
the values and the lengths of some texts (``_laid_out``). Then each field lies at the same
distance from its message's start, or from the end of the last text before it whose length
differs between messages: the messages are cut there into segments (``_segments``). The first
message is walked once in Python, each segment's bytes are copied out of every message once as
a row, and the first's structure bytes (with the texts the walk checks, a content type: mostly
the same in every message) are compared with every row's, a word at a time, instead of the
step-by-step walk (``_walk``) over all of them; the fields, and the texts of several
lengths, are then read from the rows in order (``_Batch.keep``). The rows are copied from the
buffers the messages came in (a delivered chunk each): the buffers are joined only when a
field is read from anywhere else (a body, a text past the rows, the walk), as that join copies
every byte.

What is read this way: ``0x00 0x53`` descriptors of the message-annotations, properties,
application-properties sections and a binary body (a data section, or the amqp-value proton
writes), each at most once, and header, delivery-annotations and footer sections read past; map8/map32 and list8/list32/list0
headers; str8/str32 and sym8/sym32 keys and texts; null, booleans, the 1-byte, int and long
integers, doubles, timestamps; the other fields' values of the usual fixed widths skipped
(strings and symbols among them still checked as UTF-8 / ASCII, as the walk decodes them).
Anything else in any message of the batch (another section or encoding, a shape that differs
between messages, a key repeated, a value of a kind the declared column would convert, a time
past what a ``datetime`` holds) makes ``stored_batch`` return None, and the caller reads the
batch message by message with ``stored_adder`` (``StoredBatches`` does), which decides and
names what is wrong. ``tests/spark/test_stored_arrays.py`` compares the two over random
batches, of one shape and of mixed ones.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any, Callable, Collection, Iterator, Sequence

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.types import BooleanType, DoubleType, StringType

from amqp_stream.client.names import FILTER_VALUE
from amqp_stream.spark.batches import _BITS, _MAX_MS, _MIN_MS, Columns
from amqp_stream.spark.encoding import PROPERTY_ORDER
from amqp_stream.spark.mapping import to_spark
from amqp_stream.spark.stored_columns import stored_adder

__all__ = ["stored_batch", "StoredBatches"]

_ANNOTATIONS, _PROPERTIES, _APPLICATION, _DATA, _VALUE = 0x72, 0x73, 0x74, 0x75, 0x77
# the header (a list), delivery annotations and footer (maps): read past, their values checked
_SKIPPED = {0x70: 0xC0, 0x71: 0xC1, 0x78: 0xC1}
_FILTER_KEY = FILTER_VALUE.encode("ascii")
_EXPIRY, _CREATION = PROPERTY_ORDER.index("absolute_expiry_time"), PROPERTY_ORDER.index("creation_time")
# a word's first n bytes, whatever the machine's byte order
_FIRST = [np.frombuffer(b"\xff" * n + bytes(8 - n), "=u8")[0] for n in range(8)]
# the integer encodings read as they lie: (their numpy type, the bits a signed type needs for
# every value of it): a column of one of them into a type that wide needs no bounds check
_AS_IS = {0x71: (">i4", 32), 0x81: (">i8", 64), 0x51: ("i1", 8), 0x54: ("i1", 8), 0x55: ("i1", 8),
          0x50: ("u1", 9), 0x52: ("u1", 9), 0x53: ("u1", 9)}
_ROWS = 2048  # rows a comparison of messages' words takes at once (_alike)
_PAD = 16  # zero bytes after the last message: a gather a few bytes past it stays in the buffer
_PADDING = bytes(_PAD)

# sizes of the fixed-width values read or skipped (0: not one); variable ones by their length
_SIZE = np.zeros(256, np.int64)
for _c in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
    _SIZE[_c] = 1
for _c in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55):
    _SIZE[_c] = 2
for _c, _n in ((0x60, 3), (0x61, 3), (0x70, 5), (0x71, 5), (0x72, 5), (0x80, 9), (0x81, 9), (0x82, 9),
               (0x83, 9), (0x98, 17)):
    _SIZE[_c] = _n
_VAR8 = np.zeros(256, bool)
_VAR8[[0xA0, 0xA1, 0xA3]] = True
_VAR32 = np.zeros(256, bool)
_VAR32[[0xB0, 0xB1, 0xB3]] = True
_UTF8, _ASCII = (0xA1, 0xB1), (0xA3, 0xB3)

# application property values by kind (what the walk makes of them: int, str, float, bool, None)
_SIGNED8, _UNSIGNED8 = (0x51, 0x54, 0x55), (0x50, 0x52, 0x53)
_INTS = (*_SIGNED8, *_UNSIGNED8, 0x71, 0x81)
_INT_KIND, _STR_KIND, _DOUBLE_KIND, _BOOL_KIND = "int", "str", "double", "bool"
_KIND = {**{c: _INT_KIND for c in _INTS}, 0xA1: _STR_KIND, 0xB1: _STR_KIND, 0x82: _DOUBLE_KIND,
         0x41: _BOOL_KIND, 0x42: _BOOL_KIND, 0x40: None}
_WIDTH = {t: np.dtype(f"int{bits}").type for t, bits in _BITS.items()}  # the integer types' numpy types
# the declared types a column of one kind goes to Arrow as it is (batches._column)
_TAKES = {_STR_KIND: (StringType,), _DOUBLE_KIND: (DoubleType,), _BOOL_KIND: (BooleanType,),
          _INT_KIND: tuple(_BITS)}


def _table(*constructors: int) -> Any:
    """A lookup table: ``table[c]`` is whether constructor ``c`` is one of ``constructors``."""
    t = np.zeros(256, bool)
    t[list(constructors)] = True
    return t


_IS_UTF8, _IS_ASCII, _IS_TEXT = _table(*_UTF8), _table(*_ASCII), _table(*_UTF8, *_ASCII)
_IS_FILTER_VALUE, _IS_TIME = _table(0x40, *_UTF8, *_ASCII), _table(0x40, 0x83)
_IS_SIGNED8, _IS_INT, _IS_TEXT_FIELD = _table(*_SIGNED8), _table(*_INTS), _table(0x40, *_UTF8)


class _Shape(Exception):
    """The batch is not of one shape this module reads: ``stored_adder`` reads it."""


def _all(mask: Any) -> None:
    if not mask.all():
        raise _Shape


def _one(values: Any) -> int:
    """The value every message has (else not one shape)."""
    first = int(values[0])
    _all(values == first)
    return first


class _Batch:
    """The messages ``[starts[i], ends[i])`` of ``pieces`` joined, and gathers over them."""

    def __init__(self, pieces: Sequence[bytes], starts: Any, ends: Any):
        self.n = len(starts)
        self.starts, self.ends = starts, ends
        self._pieces = pieces
        self.size = sum(map(len, pieces))
        # the first piece: the first message at the same positions as in ``raw`` (what the
        # first message's walk and its texts read), without joining the pieces for it
        self.lead = pieces[0] if pieces else b""
        self._views: dict[str, Any] = {}
        # what is made of one field's values once, for the map column and a declared column
        # alike: by what it is made of (``once``), that object kept with it
        self.made: dict[tuple[str, int] | tuple[str, int, int], tuple[Any, Any]] = {}
        # a laid-out batch's segments (``_laid_out``): where each begins in every message, and
        # its bytes there, a row a message (``keep``); the positions known to lie at one
        # distance into a segment of every message (``place``'s): id -> (segment, distance)
        self.bases: list[Any] = []
        self.heads: list[Any] = []
        self._into: dict[int, tuple[int, int]] = {}

    @functools.cached_property
    def raw(self) -> bytes:
        """The pieces joined, the pad after them: made when a field is read from anywhere but
        the laid-out rows (``heads``) or the first message.

        Why not always: the join is a copy of every byte, 7 % of a Spark read's task; the
        rows of a laid-out batch are copied from the pieces themselves (``_rows``)."""
        return b"".join([*self._pieces, _PADDING])

    @functools.cached_property
    def buf(self) -> Any:
        return np.frombuffer(self.raw, np.uint8)

    @classmethod
    def of(cls, datas: Sequence[bytes]) -> _Batch:
        """The messages ``datas``, one after the other in one piece (``_joined``)."""
        return cls(*_joined(datas))

    def byte(self, pos: Any) -> Any:
        return self.fixed(pos, "u1").astype(np.int64)

    def u32(self, pos: Any) -> Any:
        return self.fixed(pos, ">u4").astype(np.int64)

    def fixed(self, pos: Any, dtype: str) -> Any:
        """The big-endian ``dtype`` values at ``pos``: a view of a segment's rows where ``pos``
        lies in them (read only), else one gather from a view of the buffer with a value
        starting at every byte."""
        width = np.dtype(dtype).itemsize
        hit = self.in_head(pos, width)
        if hit is not None:
            rows, d = hit
            return np.ndarray((self.n,), dtype, rows, d, (rows.shape[1],))
        view = self._views.get(dtype)
        if view is None:
            view = self._views[dtype] = np.ndarray((len(self.raw) - width + 1,), dtype, self.raw, 0, (1,))
        return view[pos]

    def place(self, k: int, d: int) -> Any:
        """``bases[k] + d``: one array for each segment ``k`` and distance ``d``, known to lie
        ``d`` bytes into segment ``k`` of every message (``in_head``)."""
        key = ("at", k, d)
        if key not in self.made:
            pos = _read_only(self.bases[k] + d)
            self.made[key] = (d, pos)  # kept with the batch: its id stays its own
            self._into[id(pos)] = (k, d)
        return self.made[key][1]

    def in_head(self, pos: Any, width: int) -> tuple[Any, int] | None:
        """(the rows, how far into them) where ``pos`` is one of ``place``'s and its ``width``
        bytes lie in its segment's rows; else None."""
        hit = self._into.get(id(pos))
        if hit is None:
            return None
        rows, d = self.heads[hit[0]], hit[1]
        return (rows, d) if d + width <= rows.shape[1] else None

    def rows_at(self, at: Any, width: int) -> Any | None:
        """``_rows(at, width)``; None when a row would run past the pad after the last piece."""
        if int(at.max()) + width > self.size + _PAD:
            return None
        return self._rows(at, width)

    def keep(self, bases: list[Any], heads: list[Any]) -> None:
        """Keep the segments (``_laid_out``): their fields are then read from ``heads``.

        Why: every field of a segment is read from its rows in order (``fixed``: a strided
        view) instead of being gathered from every message again. Each gather over a batch
        larger than the cache costs a cache miss a message (~15-30 ns; the rows' copy ~15 ns
        a message for all)."""
        self.bases, self.heads = bases, [_read_only(h) for h in heads]

    def _rows(self, at: Any, width: int) -> Any:
        """The ``width`` bytes at each of ``at`` (one place in each message), a row each: one
        index a message (~3x a gather of each word by its own index), from ``raw`` when it is
        made, else from each piece (zeros past a piece's end, where ``raw`` has the next
        piece or the pad: bytes past the message, which no structure byte compared lies in)."""
        row = np.dtype((np.void, width))
        if "raw" in self.__dict__:
            rows_of = np.ndarray((len(self.raw) - width + 1,), row, self.raw, 0, (1,))
            return rows_of[at].view(np.uint8).reshape(len(at), width)
        parts = []
        for piece, lo, hi, offset in self._spread:
            local = at[lo:hi] - offset
            fits = len(piece) - width  # the last place a whole row starts in the piece
            k = int(np.searchsorted(local, fits, side="right")) if fits >= 0 else 0
            if k:
                parts.append(np.ndarray((fits + 1,), row, piece, 0, (1,))[local[:k]])
            if k < len(local):  # rows that run past the piece's end
                tails = [bytes(piece[p:p + width]).ljust(width, b"\0") for p in local[k:].tolist()]
                parts.append(np.frombuffer(b"".join(tails), row))
        if not parts:
            return np.zeros((0, width), np.uint8)
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return rows.view(np.uint8).reshape(len(at), width)

    @functools.cached_property
    def _spread(self) -> list[tuple[bytes, int, int, int]]:
        """(piece, its first message, the message after its last, where it begins in ``raw``)
        of each piece: its messages are those that start in it."""
        lengths = np.fromiter(map(len, self._pieces), np.int64, len(self._pieces))
        begins = np.cumsum(lengths) - lengths
        bounds = np.searchsorted(self.starts, begins).tolist() + [self.n]
        return [(p, bounds[i], bounds[i + 1], int(begins[i])) for i, p in enumerate(self._pieces)]

    def skip(self, pos: Any, check: bool = True) -> tuple[Any, Any, Any, Any]:
        """(constructors, data starts, data lengths, next positions) of the values at ``pos``;
        strings and symbols checked as the walk decodes them (``check``; else the caller does)."""
        c = self.buf[pos]
        c0 = int(c[0])
        if (c == c0).all():  # the usual case: one encoding in every message
            if _SIZE[c0]:
                return c, pos + 1, self.full(_SIZE[c0] - 1), pos + _SIZE[c0]
            if _VAR8[c0]:
                start, length = pos + 2, self.byte(pos + 1)
            elif _VAR32[c0]:
                start, length = pos + 5, self.u32(pos + 1)
            else:
                raise _Shape
            if check and _IS_TEXT[c0]:
                self.check_texts(c, start, length)
            return c, start, length, start + length
        size = _SIZE[c]
        var8, var32 = _VAR8[c], _VAR32[c]
        _all((size > 0) | var8 | var32)
        start, length = pos + 1, size - 1
        if var8.any():
            start = np.where(var8, pos + 2, start)
            length = np.where(var8, self.byte(pos + 1), length)
        if var32.any():
            start = np.where(var32, pos + 5, start)
            length = np.where(var32, self.u32(pos + 1), length)
        texts = _IS_TEXT[c] if check else None
        if texts is not None and texts.any():
            self.texts(start, length, texts, ascii_only=_IS_ASCII[c])
        return c, start, length, start + length

    @functools.cached_property
    def null(self) -> Any:
        """0x40 (null) in every message (read only)."""
        return _read_only(np.full(self.n, 0x40, np.uint8))

    def nulls(self, pos: Any, most: int) -> int:
        """How many nulls (0x40) follow at ``pos`` in every message, up to ``most``: those of the
        first message, when every message has them (else none)."""
        first = int(pos[0])
        head = self.raw[first:first + most]
        run = len(head) - len(head.lstrip(b"\x40"))
        return run if run > 1 and self.same(pos, run) else 0

    def once(self, kind: str, of: Any, make: Callable[[], Any]) -> Any:
        """``make()``, made once a batch for each ``kind`` and object ``of``. The object is kept
        with what was made of it, so that its ``id`` is not another object's meanwhile."""
        key = (kind, id(of))
        hit = self.made.get(key)
        if hit is None:
            hit = self.made[key] = (of, make())
        return hit[1]

    def full(self, size: int) -> Any:
        """``size`` in every message (a fixed width's length: one array a batch, read only)."""
        return self._every("full", int(size), np.int64)

    def code(self, c: int) -> Any:
        """Constructor ``c`` in every message (one array a batch, read only)."""
        return self._every("code", int(c), np.uint8)

    def _every(self, kind: str, value: int, dtype: Any) -> Any:
        key = (kind, value)  # by value: each size read is a new numpy scalar
        if key not in self.made:
            self.made[key] = (value, _read_only(np.full(self.n, value, dtype)))
        return self.made[key][1]

    def _rows_alike(self, at: Any, masks: Any) -> bool:
        """Whether the ``len(masks)`` words at ``at`` (one place a message), masked, are the
        first message's in every message: a segment's columns where they lie in it, else rows
        copied out (``_rows``)."""
        width = 8 * len(masks)
        hit = self.in_head(at, width)
        if hit is not None:
            rows, d = hit
            words = np.ndarray((self.n, len(masks)), "=u8", rows, d, (rows.shape[1], 8))
        else:
            words = self._rows(at, width).view("=u8")
        return _alike(words, masks)

    def check_texts(self, c: Any, start: Any, length: Any) -> None:
        """Raise ``_Shape`` unless the texts of constructor ``c`` (one in every message) at
        ``start`` are UTF-8 (ASCII: symbols); one text in every message (a content type, a
        symbol) is checked once."""
        size = int(length[0])
        if (length == size).all() and self.same(start, size):
            first = int(start[0])
            if not _decodes(self.lead[first:first + size], int(c[0])):
                raise _Shape
        else:
            self.texts(start, length, np.ones(self.n, bool), ascii_only=_IS_ASCII[c])

    def same(self, pos: Any, size: int) -> bool:
        """Whether the ``size`` bytes at ``pos`` are the first message's in every message (the
        last word's bytes past them masked out: the pad keeps a word in the buffer)."""
        if size <= 0:
            return True
        masks = np.full((size + 7) // 8, ~np.uint64(0), "=u8")
        if size % 8:
            masks[-1] = _FIRST[size % 8]
        return self._rows_alike(pos, masks)

    def spans(self, start: Any, length: Any, valid: Any, kind: Any = None) -> Any:
        """The binary (or ``kind``) array of the bytes ``[start, start + length)`` of each message,
        null where not ``valid``."""
        n = self.n
        longest = int(length.max()) if n else 0
        hit = self.in_head(start, longest) if longest else None
        if hit is None:
            buffer, first = self.raw, start
        else:
            rows, d = hit
            if valid.all() and (length == longest).all():  # one size: a segment's columns, copied
                # as one item of ``longest`` bytes a row: a 2-D copy's inner loop of a few
                # bytes took ~6.5 ns a row, this ~1.4 (8 bytes)
                data = np.ndarray((n,), np.dtype((np.void, longest)), rows, d, (rows.shape[1],)).copy()
                return pa.Array.from_buffers(kind or pa.binary(), n, [None, pa.py_buffer(_steps(n, longest)),
                                                                      pa.py_buffer(data)])
            # sizes that differ, all within the rows: taken from them, not from the joined
            # pieces (no join of the batch for texts of several lengths)
            buffer, first = rows, np.arange(d, n * rows.shape[1], rows.shape[1], dtype=np.int64)
        bounds = np.empty(2 * n + 1, np.int32)
        bounds[0:2 * n:2] = first
        bounds[1:2 * n:2] = first + length
        bounds[2 * n] = bounds[2 * n - 1]
        arr = pa.Array.from_buffers(kind or pa.binary(), 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(buffer)])
        if valid.all():
            return arr.take(_evens(n))
        return arr.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32), mask=~valid))

    def texts(self, start: Any, length: Any, valid: Any, ascii_only: Any = None) -> Any:
        """``spans`` as strings, checked UTF-8 (ASCII where ``ascii_only``)."""
        arr = self.spans(start, length, valid, pa.string())
        if _is_ascii(arr):  # UTF-8, and ASCII for symbols: ids and keys mostly are (~10 ns a row)
            return arr
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            raise _Shape from None
        if ascii_only is not None and ascii_only.any():
            if not pc.all(pc.or_kleene(pc.invert(pa.array(ascii_only)), pc.string_is_ascii(arr))).as_py():
                raise _Shape
        return arr

    def compound(self, pos: Any, c8: int, c32: int, empty: int = -1) -> tuple[Any, Any, int]:
        """(first items, ends, the count every message has) of the lists or maps at ``pos``."""
        c = self.buf[pos]
        if self.raw[int(pos[0])] == c8 and (c == c8).all():  # the usual case: list8 / map8 in every message
            end = pos + 2 + self.byte(pos + 1)
            _all(end <= self.ends)
            return pos + 3, end, _one(self.buf[pos + 2])
        is8, is32, is0 = c == c8, c == c32, c == empty
        _all(is8 | is32 | is0)
        first = np.where(is8, pos + 3, np.where(is32, pos + 9, pos + 1))
        end = np.where(is8, pos + 2 + self.byte(pos + 1), pos + 1)
        count = np.where(is8, self.byte(pos + 2), 0)
        if is32.any():
            end = np.where(is32, pos + 5 + self.u32(pos + 1), end)
            count = np.where(is32, self.u32(pos + 5), count)
        _all(end <= self.ends)
        return first, end, _one(count)

    def key(self, pos: Any, constructors: tuple[int, ...]) -> tuple[bytes, Any]:
        """(the key's bytes, next positions) of a str8/sym8 key every message has, alike: its
        constructor, size and bytes the first message's in every message."""
        first = int(pos[0])
        c, size = self.raw[first], self.raw[first + 1]
        if c not in constructors or not self.same(pos, 2 + size):
            raise _Shape
        return self.raw[first + 2:first + 2 + size], pos + 2 + size

    def codes(self, c: Any) -> list[int]:
        """The constructors among ``c`` (``np.unique``'s, by a table of 256; once a field): one
        for ``code``'s arrays (a laid-out batch's), without looking."""
        c0 = int(c[0])
        if self.made.get(("code", c0), (None, None))[1] is c:
            return [c0]
        return self.once("codes", c, lambda: _codes(c))


def _joined(datas: Sequence[bytes]) -> tuple[list[bytes], Any, Any]:
    """(one piece of the messages ``datas`` joined, their starts, their ends): rows are then read
    from the piece with one index, not a Python step a message as from a piece each."""
    lengths = np.fromiter(map(len, datas), np.int64, len(datas))
    ends = np.cumsum(lengths)
    return [b"".join(datas)], ends - lengths, ends


def _codes(c: Any) -> list[int]:
    c0 = int(c[0])
    if (c == c0).all():
        return [c0]
    seen = np.zeros(256, bool)
    seen[c] = True
    return np.flatnonzero(seen).tolist()


def _alike(words: Any, masks: Any) -> bool:
    """Whether every row of ``words``, masked by ``masks``, is the first's.

    The last row is compared first: a field that differs mostly shows it there. Then the rows,
    copied one after the other when they are not (a column of the laid-out rows), are compared
    as one flat run of words against the masks and the first row repeated, ``_ROWS`` rows at a
    time (the temporaries stay small): numpy's loops over rows of a few words, broadcast
    against the masks, took twice as long (~23 against ~12 ns a row of 18 words)."""
    if not len(masks):
        return True
    first = words[0] & masks
    if not ((words[-1] & masks) == first).all():
        return False
    flat = np.ascontiguousarray(words).reshape(-1)
    step = min(_ROWS, len(words)) * len(masks)
    tiled_masks, tiled_first = np.tile(masks, step // len(masks)), np.tile(first, step // len(masks))
    kept, same = np.empty(step, np.uint64), np.empty(step, bool)
    for lo in range(0, len(flat), step):
        m = min(step, len(flat) - lo)
        np.bitwise_and(flat[lo:lo + m], tiled_masks[:m], out=kept[:m])
        np.equal(kept[:m], tiled_first[:m], out=same[:m])
        if not same[:m].all():
            return False
    return True


def _decodes(text: bytes, c: int) -> bool:
    """Whether a text of constructor ``c`` decodes as the walk decodes it (a symbol: ASCII)."""
    try:
        text.decode("ascii" if _IS_ASCII[c] else "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _is_ascii(arr: Any) -> bool:
    """Whether every byte of a binary or string array's data buffer (its values', or more) is
    below 0x80: one numpy pass instead of Arrow's full UTF-8 validation."""
    data = arr.buffers()[2]
    return data is None or not len(data) or int(np.frombuffer(data, np.uint8).max()) < 0x80


def _read_only(a: Any) -> Any:
    a.flags.writeable = False
    return a


def _declared_plan(columns: Columns) -> list[tuple[str, bool, Any, Any]] | None:
    """(name, is a property, its Spark type class, its Arrow type) of each declared column; None
    when a column of a type this module does not make has a value that is not null."""
    plan = []
    for i, (name, dtype, is_property, conv) in enumerate(columns._declared):
        arrow_type = columns.full.field(len(columns.full) - len(columns._declared) + i).type
        plan.append((name, is_property, type(dtype), arrow_type))
        if to_spark(None, dtype) is not None or (conv is not None and conv(None) is not None):
            return None
    return plan


def stored_batch(columns: Columns, datas: Sequence[bytes], offsets: Any,
                 wanted: Collection[str] | None = None) -> Any:
    """The messages ``datas`` at ``offsets`` (those whose filter value is in ``wanted``; None:
    all) as one ``RecordBatch`` of ``columns.schema``, the batch ``stored_adder`` +
    ``columns.batch()`` gives; None when they are not of one shape read here."""
    return _read(columns, _Batch.of(datas), offsets, wanted) if datas else None


def _read(columns: Columns, b: _Batch, offsets: Any, wanted: Collection[str] | None) -> Any:
    """``stored_batch`` of the messages of ``b``."""
    if b.size + _PAD >= 1 << 31:
        return None  # past Arrow's 32-bit offsets
    try:
        return _decode(columns, b, offsets, wanted)
    except (_Shape, IndexError):  # a length past the buffer: not read here either
        return None


Field = tuple[Any, Any, Any]  # a field of every message: (constructors, data starts, data lengths)


@dataclasses.dataclass
class _Fields:
    """Where the fields the columns are made of lie in every message of a batch."""
    fv: Field | None = None  # the filter value annotation
    props: list[Field] | None = None  # the properties list's fields
    app_keys: list[str] = dataclasses.field(default_factory=list)
    app_values: list[Field] = dataclasses.field(default_factory=list)
    body: Field | None = None


def _decode(columns: Columns, b: _Batch, offsets: Any, wanted: Collection[str] | None) -> Any:
    checked = _checked_when_made(columns)
    try:
        fields = _laid_out(b, checked)
    except IndexError:  # the first message's sizes point past the buffer: _walk decides
        fields = None
    return _columns(columns, b, offsets, wanted, fields if fields is not None else _walk(b, checked))


def _checked_when_made(columns: Columns) -> set[int]:
    """The properties fields whose texts are checked as their column is made (declared text
    properties), not when the fields are found."""
    return {PROPERTY_ORDER.index(name) for name, dtype, is_property, _ in columns._declared
            if is_property and type(dtype) is StringType}


def _walk(b: _Batch, checked: set[int]) -> _Fields:
    """The fields of a batch of one shape, found one step at a time over every message."""
    pos = b.starts.copy()
    f = _Fields()
    seen: set[int] = set()
    while True:
        done = pos == b.ends
        if done.all():
            break
        _all(~done)
        first = int(pos[0])  # a section descriptor, the same in every message
        code = b.raw[first + 2]
        if b.raw[first] != 0 or b.raw[first + 1] != 0x53 or not b.same(pos, 3):
            raise _Shape
        if code in seen:
            raise _Shape
        seen.add(code)
        pos = pos + 3
        if code == _ANNOTATIONS:
            pos, end, count = b.compound(pos, 0xC1, 0xD1)
            if count & 1:
                raise _Shape
            for _ in range(count >> 1):
                key, pos = b.key(pos, (0xA3, 0xA1))
                if not key.isascii():
                    raise _Shape
                c, start, length, pos = b.skip(pos, check=key != _FILTER_KEY)
                if key == _FILTER_KEY:  # its texts checked as they are made
                    if f.fv is not None:
                        raise _Shape
                    f.fv = (c, start, length)
            _all(pos == end)
        elif code == _PROPERTIES:
            pos, end, count = b.compound(pos, 0xC0, 0xD0, 0x45)
            props: list[Field] = []
            while len(props) < count:
                nulls = b.nulls(pos, count - len(props))
                for k in range(nulls):  # null fields, a run of them at once
                    props.append((b.null, pos + k + 1, b.full(0)))
                pos = pos + nulls if nulls else pos
                if len(props) < count:
                    c, start, length, pos = b.skip(pos, check=len(props) not in checked)
                    props.append((c, start, length))
            f.props = props
            _all(pos == end)
        elif code == _APPLICATION:
            pos, end, count = b.compound(pos, 0xC1, 0xD1)
            if count & 1:
                raise _Shape
            for _ in range(count >> 1):
                key, pos = b.key(pos, (0xA1,))
                try:
                    f.app_keys.append(key.decode())
                except UnicodeDecodeError:
                    raise _Shape from None
                c, start, length, pos = b.skip(pos, check=False)  # _text_of checks them
                f.app_values.append((c, start, length))
            _all(pos == end)
            if len(set(f.app_keys)) != len(f.app_keys):
                raise _Shape
        elif code == _DATA or code == _VALUE:  # the body, a binary (proton writes an amqp-value)
            if f.body is not None:
                raise _Shape
            c, start, length, pos = b.skip(pos)
            _all((c == 0xA0) | (c == 0xB0))
            f.body = (c, start, length)
        elif code in _SKIPPED:  # read to check it, as the walk does
            kind = _SKIPPED[code]
            pos, end, count = b.compound(pos, kind, kind | 0x10, 0x45 if kind == 0xC0 else -1)
            for _ in range(count):
                _, _, _, pos = b.skip(pos)
            _all(pos == end)
        else:
            raise _Shape
        _all(pos <= b.ends)
    return f


def _laid_out(b: _Batch, checked: set[int]) -> _Fields | None:
    """The fields of ``b`` when every message is laid out as its first, byte for byte but for
    the values' own bytes and the lengths of some texts (or of a body that ends the message);
    else None, and ``_walk`` finds them.

    Why: ``_walk`` takes a numpy step over every message for each constructor, size and key
    (~0.3 µs a message for the bench's rows, bench/RESULTS.md). A writer's messages usually
    share more than a shape: the same encodings everywhere, numbers of fixed widths, so every
    field lies at the same distance from its message's start, or from the end of the last
    text before it whose length differs between messages (an id of 7 digits here, 8 there).
    The first message is walked here in Python, once; the messages are cut into segments at
    those texts (``_segments``), and every byte of the first message that is not a value's own
    (descriptors, constructors, sizes, counts, keys) is compared with the same byte of every
    message's segment, a word at a time. Where they all match, each message reads as the first
    does, step for step, so its fields lie where the first's do in each segment (``place``).
    What this walk does not take (a section ``_walk`` only reads past, a 32-bit list or map, a
    value that is not one scalar) it leaves to ``_walk``, which decides."""
    raw, s0, e0 = b.lead, int(b.starts[0]), int(b.ends[0])
    structure: list[tuple[int, int]] = []  # (where, how many bytes) in the first message
    # a field placed once the segments are known: (constructor, where it is, its head, size)
    Placed = tuple[int, int, int, int]
    texts: list[Placed] = []  # checked as the walk checks them
    sized: list[Placed] = []  # texts and binaries: their lengths may differ between messages
    fv: Placed | None = None
    props: list[Placed] | None = None
    app_keys: list[str] = []
    app_values: list[Placed] = []
    body: Placed | None = None
    # lists and maps: (where, where their items end) in the first message; their sizes are
    # checked once the segments are known (a size counts the texts in them)
    compounds: list[tuple[int, int]] = []
    seen: set[int] = set()
    ends_body = False  # a body ending the message: its length is each message's own

    def scalar(p: int, check: bool) -> tuple[Placed, int] | None:
        c = raw[p]
        if _SIZE[c]:
            head, size = 1, int(_SIZE[c]) - 1
        elif _VAR8[c]:
            head, size = 2, raw[p + 1]
        elif _VAR32[c]:
            head, size = 5, int.from_bytes(raw[p + 1:p + 5], "big")
        else:
            return None
        structure.append((p - s0, head))
        field = (c, p - s0, head, size)
        if head > 1:
            sized.append(field)
        if check and _IS_TEXT[c]:
            texts.append(field)
        return field, p + head + size

    def map8(p: int) -> tuple[int, int, int] | None:
        """(first item, end, count) of the map8 at ``p``."""
        if raw[p] != 0xC1:
            return None
        return compound(p)

    def compound(p: int) -> tuple[int, int, int]:
        """(first item, end, count) of the list8 or map8 at ``p``: its constructor and count
        are structure, its size is checked apart."""
        structure.extend(((p - s0, 1), (p + 2 - s0, 1)))
        compounds.append((p - s0, p + 2 + raw[p + 1] - s0))
        return p + 3, p + 2 + raw[p + 1], raw[p + 2]

    p = s0
    while p < e0:
        if p + 3 > e0 or raw[p] != 0 or raw[p + 1] != 0x53 or raw[p + 2] in seen:
            return None
        code = raw[p + 2]
        seen.add(code)
        structure.append((p - s0, 3))
        p += 3
        if code == _ANNOTATIONS or code == _APPLICATION:
            m = map8(p)
            if m is None or m[2] & 1:
                return None
            p, end, count = m
            keys = (0xA3, 0xA1) if code == _ANNOTATIONS else (0xA1,)
            for _ in range(count >> 1):
                if raw[p] not in keys:
                    return None
                size = raw[p + 1]
                key = raw[p + 2:p + 2 + size]
                structure.append((p - s0, 2 + size))
                p += 2 + size
                if code == _ANNOTATIONS:
                    if not key.isascii():
                        return None
                    got = scalar(p, check=key != _FILTER_KEY)
                    if got is None:
                        return None
                    if key == _FILTER_KEY:
                        if fv is not None:  # twice: as _walk, not read here
                            return None
                        fv = got[0]
                else:
                    try:
                        app_keys.append(key.decode())
                    except UnicodeDecodeError:
                        return None
                    got = scalar(p, check=False)
                    if got is None:
                        return None
                    app_values.append(got[0])
                p = got[1]
            if p != end or len(set(app_keys)) != len(app_keys):
                return None
        elif code == _PROPERTIES:
            if raw[p] == 0x45:
                structure.append((p - s0, 1))
                p, end, count = p + 1, p + 1, 0
            elif raw[p] == 0xC0:
                p, end, count = compound(p)
            else:
                return None
            props = []
            for i in range(count):
                got = scalar(p, check=i not in checked)
                if got is None:
                    return None
                props.append(got[0])
                p = got[1]
            if p != end:
                return None
        elif code == _DATA or code == _VALUE:
            if raw[p] not in (0xA0, 0xB0) or body is not None:
                return None
            got = scalar(p, check=False)
            assert got is not None
            body, p = got
            if p == e0:  # the body ends the message: only its constructor is structure
                ends_body = True
                structure[-1] = (body[1], 1)
                sized.pop()
        else:
            return None
    if p != e0:
        return None
    # the bytes compared: every byte up to the body's length when it ends the message, else all
    end = body[1] + body[2] if ends_body and body is not None else e0 - s0
    need = bytearray(-(-end // 8) * 8)
    for where, size in structure:
        need[where:where + size] = b"\xff" * size
    values = bytearray(len(need))  # the checked texts' own bytes, compared where they can be
    for _, where, head, size in texts:
        values[where + head:where + head + size] = b"\xff" * size
    cut = _segments(b, need, end, sized, compounds, values)
    if cut is None:
        return None
    tops, bases, heads, lengths, alike = cut
    b.keep(bases, heads)

    def placed(where: int, into: int = 0) -> Any:
        """Every message's place of the first's byte ``where + into``, in the segment of ``where``."""
        k = bisect.bisect_right(tops, where) - 1
        return b.place(k, where + into - tops[k])

    def place(field: Placed) -> Field:
        c, where, head, size = field
        length = lengths.get(where)
        return b.code(c), placed(where, head), b.full(size) if length is None else length

    if not ends_body:
        if not (placed(end) == b.ends).all():
            return None
        f = _Fields(body=None if body is None else place(body))
    else:
        assert body is not None
        c, where, head, _ = body
        length = b.byte(placed(where, 1)) if head == 2 else b.u32(placed(where, 1))
        value = placed(where, head)
        if not (value + length == b.ends).all():
            return None
        f = _Fields(body=(b.code(c), value, length))
    for where, items_end in compounds:  # a size a cut lies in: each leads to where its items end
        if any(where < at < items_end for at in lengths) and \
                not (placed(where, 2) + b.byte(placed(where, 1)) == placed(items_end)).all():
            return None
    f.fv = None if fv is None else place(fv)
    f.props = None if props is None else [place(x) for x in props]
    f.app_keys, f.app_values = app_keys, [place(x) for x in app_values]
    for field in texts:  # as _walk checks them: a text that is not is not read here
        c, where, head, size = field
        if alike and where not in lengths:  # the first's bytes in every message: its check is theirs
            if not _decodes(raw[s0 + where + head:s0 + where + head + size], c):
                return None
        else:
            b.check_texts(*place(field))
    return f


def _segments(b: _Batch, need: bytearray, end: int, sized: list[tuple[int, int, int, int]],
              compounds: list[tuple[int, int]], values: bytearray,
              ) -> tuple[list[int], list[Any], list[Any], dict[int, Any], bool] | None:
    """(where each segment begins in the first message, where in every message, its rows, the
    lengths of the values that end segments by where their constructors are, whether the bytes
    ``values`` are alike too) of ``b``'s messages laid out as the first, bytes ``need`` compared
    up to ``end``; None when not.

    ``values`` (texts the walk checks) are compared with ``need`` in one pass where they lie in
    a segment: a content type, a key-like annotation is mostly the same in every message, and
    then only the first's is checked (``check_texts`` compared them apart, ~15 ns a message).
    When they are not alike, ``need`` alone is compared again.

    A segment ends at the first of the ``sized`` values (texts, binaries) whose length differs
    between messages, and the next begins after that value in each message. Each segment's
    rows are copied out once, wide enough for the rest of the first message: most batches are
    one segment, so one copy and one comparison, the first message's lengths being everyone's.
    The sizes of the lists and maps (``compounds``) are compared with the structure unless a
    cut lies in them (their sizes then differ: ``_laid_out`` checks where each leads)."""
    top, base = 0, b.starts
    tops: list[int] = []
    bases: list[Any] = []
    heads: list[Any] = []
    lengths: dict[int, Any] = {}
    waiting = iter(sized)
    alike = True
    while True:
        width = max(8, -(-(end - top) // 8) * 8)
        rows = b.rows_at(base, width)
        if rows is None:
            return None
        stop, cut = width, None
        for _, where, head, size in waiting:
            at = where + 1 - top  # its length, 1 or 4 bytes
            length = rows[:, at] if head == 2 else np.ascontiguousarray(rows[:, at:at + 4]).view(">u4")[:, 0]
            if (length != size).any():
                stop, cut = at, (where, head, size, length.astype(np.int64))
                break
        compared = bytearray(need[top:top + stop]).ljust(width, b"\0")
        for where, items_end in compounds:  # the sizes of lists and maps no cut lies in
            if top <= where + 1 < top + stop and not (cut is not None and where < cut[0] < items_end):
                compared[where + 1 - top] = 0xFF
        masks = np.frombuffer(compared, "=u8")
        words = rows.view("=u8")
        more = np.frombuffer(bytes(values[top:top + stop]).ljust(width, b"\0"), "=u8")
        if alike and more.any():  # the checked texts' bytes in the same pass: mostly alike
            alike = bool(_alike(words, masks | more))
            if not alike and not _alike(words, masks):
                return None
        elif not _alike(words, masks):
            return None
        tops.append(top)
        bases.append(base)
        heads.append(rows)
        if cut is None:
            return tops, bases, heads, lengths, alike
        where, head, size, length = cut
        lengths[where] = length
        base = base + (where + head - top) + length
        top = where + head + size


def _columns(columns: Columns, b: _Batch, offsets: Any, wanted: Collection[str] | None, f: _Fields) -> Any:
    """The batch of ``columns.schema`` made of the fields ``f`` of ``b``'s messages."""
    n, gives = b.n, columns.gives
    times = _times(b, f.props, gives("timestamp"))
    fv = pa.nulls(n, pa.string())
    if f.fv is not None:
        c, start, length = f.fv
        _all(_IS_FILTER_VALUE[c])
        if gives("filter_value") or wanted is not None:  # else not made (nor its texts checked)
            fv = b.texts(start, length, c != 0x40, ascii_only=_IS_ASCII[c])
    body = None
    if gives("body"):
        body = pa.nulls(n, pa.binary()) if f.body is None else b.spans(f.body[1], f.body[2], np.ones(n, bool))
    out: list[Any] = [pa.array(offsets, pa.int64()), times, fv, body,
                      _map(b, columns, f.app_keys, f.app_values) if gives("application_properties") else None]
    if columns.stream is not None:
        out.append(pa.array([columns.stream] * n, pa.string()))
    plan = _declared_plan(columns)
    if plan is None:
        raise _Shape
    app = dict(zip(f.app_keys, f.app_values, strict=True))
    for name, is_property, dtype, arrow_type in plan:
        if is_property:
            out.append(_property_column(b, f.props, PROPERTY_ORDER.index(name), dtype, arrow_type))
        else:
            out.append(_app_column(b, app.get(name), dtype, arrow_type))
    batch = columns.record_batch(out)
    if wanted is not None:
        keep = pc.fill_null(pc.is_in(fv, value_set=pa.array(list(wanted), pa.string())), False)
        if not pc.all(keep).as_py():
            batch = batch.filter(keep)
    return batch


def _times(b: _Batch, props: list | None, given: bool = True) -> Any:
    """The timestamp column: the creation time (ms, as the walk's float arithmetic makes it).
    Not ``given``: only the check that the walk would read these times alike (None)."""
    kind = pa.timestamp("us", tz="UTC")
    if props is None or len(props) <= _EXPIRY:
        return pa.nulls(b.n, kind) if given else None
    _all(_IS_TIME[props[_EXPIRY][0]])  # anything else: the walk leaves it to today's path
    if len(props) <= _CREATION:
        return pa.nulls(b.n, kind) if given else None
    c, start, _ = props[_CREATION]
    _all(_IS_TIME[c])
    if not given:
        return None
    ct = np.where(c == 0x83, b.fixed(start, ">i8").astype(np.int64), 0)
    present = ct != 0
    ms = ct.astype(np.float64) / 1000.0 * 1000  # int(int(ct) / 1000.0 * 1000)
    _all(~present | ((ms >= _MIN_MS) & (ms <= _MAX_MS)))
    us = np.where(present, ms, 0).astype(np.int64) * 1000
    return pa.array(us, kind, mask=~present)


def _text_of(b: _Batch, values: tuple[Any, Any, Any]) -> Any:
    """An application property's values as the map column's text (``batches._text``)."""
    return b.once("text", values, lambda: _make_text(b, values))


def _make_text(b: _Batch, values: tuple[Any, Any, Any]) -> Any:
    c, start, length = values
    kinds = {_KIND.get(k, "other") for k in b.codes(c)}
    if "other" in kinds:
        raise _Shape
    parts = []
    if _STR_KIND in kinds:
        parts.append(b.texts(start, length, _IS_UTF8[c]))
    if _INT_KIND in kinds:
        ints, valid = _ints(b, c, start)
        parts.append(pc.cast(pa.array(ints, mask=~valid), pa.string()))
    if _DOUBLE_KIND in kinds:
        d = np.where(c == 0x82, b.fixed(start, ">f8").astype(np.float64), 0.0)
        text = list(map(float.__repr__, d.tolist()))  # Python's repr: Arrow's cast writes other text
        parts.append(pa.array(text, pa.string(), mask=~((c == 0x82) & np.isfinite(d))))
    if _BOOL_KIND in kinds:
        isbool = (c == 0x41) | (c == 0x42)
        parts.append(pa.array(np.where(c == 0x41, "true", "false"), pa.string(), mask=~isbool))
    if not parts:
        return pa.nulls(b.n, pa.string())
    return parts[0] if len(parts) == 1 else pc.coalesce(*parts)


def _ints(b: _Batch, c: Any, start: Any) -> tuple[Any, Any]:
    """(values, which are integers) of the integers among the values at ``start``."""
    return b.once("ints", start, lambda: _make_ints(b, c, start))


def _make_ints(b: _Batch, c: Any, start: Any) -> tuple[Any, Any]:
    codes = b.codes(c)
    if len(codes) == 1 and codes[0] in _AS_IS:  # one integer encoding in every message: its gather alone
        return b.fixed(start, _AS_IS[codes[0]][0]).astype(np.int64), _IS_INT[c]
    one = b.fixed(start, "u1") if b.in_head(start, 1) is not None else b.buf[np.minimum(start, len(b.buf) - 1)]
    v = np.where(_IS_SIGNED8[c], one.view(np.int8).astype(np.int64), one.astype(np.int64))
    for wide in (0x71, 0x81):  # int and long
        if (c == wide).any():
            v = np.where(c == wide, b.fixed(start, _AS_IS[wide][0]).astype(np.int64), v)
    return v, _IS_INT[c]


def _map(b: _Batch, columns: Columns, keys: list[str], values: list[tuple[Any, Any, Any]]) -> Any:
    """The application_properties map column: the same keys in every message."""
    ends, key_column, order = _map_layout(tuple(keys), b.n)
    if not keys:
        return pa.MapArray.from_arrays(ends, key_column, pa.array([], pa.string()), type=columns._map_type)
    texts = pa.concat_arrays([_text_of(b, v) for v in values])
    return pa.MapArray.from_arrays(ends, key_column, texts.take(order), type=columns._map_type)


@functools.lru_cache(maxsize=8)
def _steps(n: int, size: int) -> Any:
    """0, size, ..., n * size: the offsets of ``n`` values of one size (shared: read only)."""
    return _read_only(np.arange(0, (n + 1) * size, size, dtype=np.int32))


@functools.lru_cache(maxsize=4)
def _evens(n: int) -> Any:
    """0, 2, ..., 2n - 2: the spans of a ``_Batch.spans`` array that hold the values."""
    return pa.array(np.arange(0, 2 * n, 2, dtype=np.int32))


@functools.lru_cache(maxsize=16)
def _map_layout(keys: tuple[str, ...], n: int) -> tuple[Any, Any, Any]:
    """(offsets, keys, the order of the items) of a map column of ``n`` rows of ``keys``, whose
    texts come key after key: the same for every batch of a writer's messages."""
    k = len(keys)
    ends = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32) if k else np.zeros(n + 1, np.int32))
    key_column = pa.array(keys, pa.string()).take(np.tile(np.arange(k), n))
    order = pa.array((np.arange(n)[:, None] + np.arange(k)[None, :] * n).ravel())
    return ends, key_column, order


def _app_column(b: _Batch, values: tuple[Any, Any, Any] | None, dtype: Any, arrow_type: Any) -> Any:
    """A declared application property column, where the values' kind is what its type takes
    as it is (``batches._column``); all null when absent."""
    if values is None:
        return pa.nulls(b.n, arrow_type)
    c, start, length = values
    kinds: set[str | None] = {_KIND.get(k, "other") for k in b.codes(c)} - {None}
    if not kinds:
        return pa.nulls(b.n, arrow_type)
    if len(kinds) != 1:
        raise _Shape
    kind = kinds.pop()
    if dtype is DoubleType and kind in (_STR_KIND, _BOOL_KIND):  # mapping._to_float: no reading as one
        return pa.nulls(b.n, arrow_type)
    if dtype is DoubleType and kind == _INT_KIND:  # float(int(v)), the nearest double
        ints, valid = _ints(b, c, start)
        return pa.array(ints.astype(np.float64), arrow_type, mask=~valid)
    if kind is None or dtype not in _TAKES.get(kind, ()):
        raise _Shape
    if kind == _STR_KIND:  # the map column's texts: only strings and nulls here
        return _text_of(b, values)
    if kind == _INT_KIND:
        codes = b.codes(c)
        as_is = _AS_IS.get(codes[0]) if len(codes) == 1 else None
        if as_is is not None and as_is[1] <= _BITS[dtype]:
            # one encoding that every value of fits: read as it lies, no mask, no bounds
            return pa.array(b.fixed(start, as_is[0]).astype(_WIDTH[dtype]), arrow_type)
        ints, valid = _ints(b, c, start)
        bound = 1 << (_BITS[dtype] - 1)
        _all(~valid | ((ints >= -bound) & (ints < bound)))
        # narrowed by numpy (the bounds hold), no mask when every value is one: ~4 % of a
        # batch's decoding went to pyarrow's cast and the validity bits of a mask of all False
        return pa.array(ints.astype(_WIDTH[dtype], copy=False), arrow_type,
                        mask=None if valid.all() else ~valid)
    if kind == _DOUBLE_KIND:
        return pa.array(b.fixed(start, ">f8").astype(np.float64), arrow_type,
                        mask=None if b.codes(c) == [0x82] else c != 0x82)
    return pa.array(c == 0x41, arrow_type, mask=c == 0x40)


def _property_column(b: _Batch, props: list | None, index: int, dtype: Any, arrow_type: Any) -> Any:
    """A declared properties column: text fields as text (an empty one absent), or all null."""
    if props is None or len(props) <= index:
        return pa.nulls(b.n, arrow_type)
    c, start, length = props[index]
    if (c == 0x40).all():
        return pa.nulls(b.n, arrow_type)
    _all(_IS_TEXT_FIELD[c])
    if dtype is not StringType:
        raise _Shape
    return b.texts(start, length, (c != 0x40) & (length > 0))


class StoredBatches:
    """A task's stored messages, gathered and read a batch at a time: as columns
    (``stored_batch``) when they are of one shape, else one by one (``stored_adder``)."""

    def __init__(self, columns: Columns, wanted: Collection[str] | None = None):
        self.columns, self.wanted = columns, wanted
        self._add = stored_adder(columns, wanted)
        self._clear()

    def _clear(self) -> None:
        self._pieces: list[bytes] = []  # buffers holding the messages
        self._starts: list[Any] = []  # where each message starts and ends in the pieces joined
        self._ends: list[Any] = []
        self._offsets: list[Any] = []
        self._size = self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """The bytes of the pieces held (their messages, and the chunks' headers with them)."""
        return self._size

    def extend(self, first: int, datas: Sequence[bytes]) -> None:
        """Messages at ``first``, ``first + 1``, ..."""
        if datas:
            pieces, starts, ends = _joined(datas)
            self.extend_spans(first, pieces[0], starts, ends)

    def extend_spans(self, first: int, piece: bytes, starts: Any, ends: Any) -> None:
        """Messages at ``first``, ``first + 1``, ..., the bytes ``piece[starts[i]:ends[i]]``
        (a delivered chunk's records, with no copy of each)."""
        if len(starts):
            self._pieces.append(piece)
            self._starts.append(starts + self._size)
            self._ends.append(ends + self._size)
            self._offsets.append(np.arange(first, first + len(starts), dtype=np.int64))
            self._size += len(piece)
            self._count += len(starts)

    def batch(self) -> Any:
        """The gathered messages as a ``RecordBatch`` (None when the filter kept none)."""
        if not self._count:
            return None
        b = _Batch(self._pieces, np.concatenate(self._starts), np.concatenate(self._ends))
        offsets = np.concatenate(self._offsets)
        self._clear()
        batch = _read(self.columns, b, offsets, self.wanted)
        if batch is None:
            add, raw = self._add, b.raw
            for offset, start, end in zip(offsets.tolist(), b.starts.tolist(), b.ends.tolist(), strict=True):
                add(raw[start:end], offset)
            if not len(self.columns):
                return None
            batch = self.columns.batch()
        return batch if batch.num_rows else None

    def drain(self) -> Iterator[Any]:
        """``batch()`` when it gives one (what a reader yields), else nothing."""
        batch = self.batch()
        if batch is not None:
            yield batch
