"""Stage 2 for the commonest filters in one pass over the stored bytes, the general matcher behind.

Why: a consumer's filter is most often one application property against literals
(``region = 'r42'``, ``region IN ('a', 'b')``, ``k = 7``, ``k < 10``). The general matcher
(``Filter.bytes_matcher``: the needles, a ``MessageView``, the generated ``_evaluate``, the
pick) costs ~2 µs a record in six Python calls, more than proton's engine needs to send the
record (``bench.proton_floor``); a delivered record pays it once more than it pays proton.
Here one function walks the sections to the application properties, finds the key's last
value (a map keeps the last of a repeated key, as the decoded dict does) and compares its
bytes, or its integer, with the literals.

Exactness: the fast path answers only where the answer is plain. A value of a string
(str8/str32; a symbol when the literal is ASCII) or integer constructor (not char, not
timestamp: the runtime turns those into numbers its own way) is compared; a message without
the application properties or without the key gives False (NULL compares unknown, and only
TRUE matches); anything else (a float, a described value, a key in another encoding, framing
this walk does not take) goes to the general matcher, which decides. ``test_fast_match``
checks the two agree on random messages and filters.
"""

from __future__ import annotations

import operator
import struct
from typing import Any, Callable

from amqp_stream.wire._codec import WIDTH
from sqlfilter import ast
from sqlfilter.required import prefiltered

__all__ = ["bytes_matcher", "fast_matcher", "sql_shape"]

#: a section's value, by constructor: bytes in front of its size (0: fixed width ``_FIXED``)
_U32 = struct.Struct(">I").unpack_from
_MAP32 = struct.Struct(">II").unpack_from
#: integer constructors (value width, struct format; None: the value is 0)
_INTS: dict[int, tuple[int, Any]] = {
    0x43: (0, None), 0x44: (0, None),
    0x50: (1, struct.Struct(">B").unpack_from), 0x52: (1, struct.Struct(">B").unpack_from),
    0x53: (1, struct.Struct(">B").unpack_from), 0x51: (1, struct.Struct(">b").unpack_from),
    0x54: (1, struct.Struct(">b").unpack_from), 0x55: (1, struct.Struct(">b").unpack_from),
    0x60: (2, struct.Struct(">H").unpack_from), 0x61: (2, struct.Struct(">h").unpack_from),
    0x70: (4, struct.Struct(">I").unpack_from), 0x71: (4, struct.Struct(">i").unpack_from),
    0x80: (8, struct.Struct(">Q").unpack_from), 0x81: (8, struct.Struct(">q").unpack_from)}
_OPS = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


#: per constructor, the bytes after it of a fixed-width item (>= 0), -1 (a u8 size follows),
#: -4 (a u32 size follows) or -9 (described, or no such constructor: not walked here)
_STEP = tuple(-9 if w is None else w for w in WIDTH)
#: the value's kind by constructor: 1 string, 2 symbol, 3 integer, 0 another
_KIND = bytes(1 if c in (0xA1, 0xB1) else 2 if c in (0xA3, 0xB3) else 3 if c in _INTS else 0
              for c in range(256))
_UNSURE = object()


def _value_of(name: bytes, sym_ok: bool) -> Callable[[bytes], tuple[Any, int]]:
    """A function of a stored message: (the position of the constructor of application
    property ``name``'s last value, None when the message has no such key (or no application
    properties), ``_UNSURE`` when this walk cannot tell; the length of the message's head, the
    bytes up to the end of its application properties, from which alone the first answer
    came, or 0 when that is not known)."""
    size = len(name)
    step = _STEP
    u32 = _U32
    map32 = _MAP32

    def value(buf: bytes) -> Any:
        pos = 0
        n = len(buf)
        while pos < n:
            if buf[pos] != 0 or buf[pos + 1] != 0x53:
                return _UNSURE, 0
            code = buf[pos + 2]
            c = buf[pos + 3]
            if code == 0x74:
                if c == 0xC1:
                    end = pos + 5 + buf[pos + 4]
                    count = buf[pos + 5]
                    q = pos + 6
                elif c == 0xD1:
                    length, count = map32(buf, pos + 4)
                    end = pos + 8 + length
                    q = pos + 12
                elif c == 0x40:
                    return None, pos + 4
                else:
                    return _UNSURE, 0
                if end > n or count & 1:
                    return _UNSURE, 0
                found = None
                for _ in range(count >> 1):
                    k = buf[q]
                    if k != 0xA1 and k != 0xA3:
                        return _UNSURE, 0  # a key in another encoding could still be ``name``
                    m = buf[q + 1]
                    q += 2 + m
                    if m == size and buf.startswith(name, q - m) and (k == 0xA1 or sym_ok):
                        if found is not None:
                            return _UNSURE, 0  # a repeated key: which value counts is the
                        found = q           # general matcher's business
                    s = step[buf[q]]
                    if s >= 0:
                        q += 1 + s
                    elif s == -1:
                        q += 2 + buf[q + 1]
                    elif s == -4:
                        q += 5 + u32(buf, q + 1)[0]
                    else:
                        return _UNSURE, 0
                return (found, end) if q == end else (_UNSURE, 0)
            if code < 0x70 or code > 0x78:
                return _UNSURE, 0
            s = step[c]  # another section: jump over its value
            if s >= 0:
                pos += 4 + s
            elif s == -1:
                pos += 5 + buf[pos + 4]
            elif s == -4:
                pos += 8 + u32(buf, pos + 4)[0]
            else:
                return _UNSURE, 0
        return None, 0

    return value


def _shape(tree: Any) -> tuple[str, str, tuple] | None:
    """(key, operator, literals) of ``key OP literal`` / ``key IN (literals)`` on one
    application property, the literals all str or all int (not bool); else None."""
    field: Any
    if isinstance(tree, ast.Compare) and tree.op in _OPS:
        field, lit, op = tree.left, tree.right, tree.op
        if isinstance(field, ast.Literal):
            field, lit, op = lit, field, _FLIP[op]
        if not isinstance(lit, ast.Literal):
            return None
        literals: tuple = (lit.value,)
    elif isinstance(tree, ast.In) and tree.items:
        field, op = tree.subject, "IN"
        literals = tuple(i.value if isinstance(i, ast.Literal) else _UNSURE for i in tree.items)
    else:
        return None
    if not (isinstance(field, ast.Field) and field.section == "application_properties"):
        return None
    if all(type(v) is str for v in literals):
        return (field.name, op, literals) if op in ("=", "IN") else None
    if all(type(v) is int for v in literals):
        return field.name, op, literals
    return None


def sql_shape(stage2: Any) -> tuple[str, bytes, str, tuple] | None:
    """(key, its UTF-8 bytes, operator, literals) of a compiled SQL filter of a shape
    ``_shape`` takes, the key short enough for a str8/sym8; None for anything else (a JMS
    selector's rules differ; a lone surrogate or a longer key is the general matcher's)."""
    from sqlfilter.sql import SqlFilter

    if type(stage2) is not SqlFilter:
        return None
    shape = _shape(stage2.tree)
    if shape is None:
        return None
    key, op, literals = shape
    try:
        name = key.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return (key, name, op, literals) if len(name) <= 255 else None


def _decider(stage2: Any, general: Callable[[bytes], bool]
             ) -> Callable[[bytes], tuple[bool, int]] | None:
    """For ``stage2`` (a compiled SQL filter of a shape ``_shape`` takes): a function of a
    stored record giving (its verdict, the length of the head it was decided from: the bytes
    up to the end of its application properties, 0 when ``general`` decided or the walk needed
    more); ``general`` answers what the walk cannot tell. None for any other filter."""
    shape = sql_shape(stage2)
    if shape is None:
        return None
    key, name, op, literals = shape
    value = _value_of(name, key.isascii())
    kind = _KIND
    unsure = _UNSURE
    if type(literals[0]) is str:
        texts = frozenset(v.encode("utf-8") for v in literals)
        symbols = frozenset(t for t in texts if t.isascii())

        def decide_text(data: bytes) -> tuple[bool, int]:
            if type(data) is not bytes:  # (stored records are bytes; anything else the
                return general(data), 0  # general way, which copies it)
            at, head = value(data)
            if at is None:
                return False, head
            if at is unsure:
                return general(data), 0
            k = kind[data[at]]
            if k != 1 and k != 2:
                return general(data), 0  # not a string: the runtime decides
            if data[at] & 0x10:  # str32 / sym32
                start = at + 5
                end = start + _U32(data, at + 1)[0]
            else:
                start = at + 2
                end = start + data[at + 1]
            raw = data[start:end]
            if raw in (texts if k == 1 else symbols):
                return True, head
            if k == 2 and not raw.isascii():
                return general(data), 0
            return False, head

        return decide_text
    ints = _INTS
    compare = _OPS.get(op)
    wanted = frozenset(literals)
    literal = literals[0]

    def decide_int(data: bytes) -> tuple[bool, int]:
        if type(data) is not bytes:
            return general(data), 0
        at, head = value(data)
        if at is None:
            return False, head
        if at is unsure:
            return general(data), 0
        c = data[at]
        if kind[c] != 3:
            return general(data), 0
        _, read = ints[c]
        v = read(data, at + 1)[0] if read is not None else 0
        return (v in wanted if compare is None else compare(v, literal)), head

    return decide_int


def fast_matcher(stage2: Any, general: Callable[[bytes], bool]) -> Callable[[bytes], bool] | None:
    """The one-pass matcher for ``stage2`` (a compiled SQL filter of a shape ``_shape`` takes),
    ``general`` answering what it cannot tell; None for any other filter."""
    decide = _decider(stage2, general)
    if decide is None:
        return None
    return lambda data: decide(data)[0]


#: ``memoized``: heads it keeps (then it starts again), the longest it keeps, how many head
#: lengths it tries per record, and the walks after which it gives up when fewer than one
#: record in ten was a hit (messages with a message id or a time stamp each: then the memo
#: would only cost, ~0.2 µs a record)
MEMO_HEADS = 1024
MEMO_HEAD_BYTES = 256
MEMO_LENGTHS = 3
MEMO_TRIAL = 256


def memoized(decide: Callable[[bytes], tuple[bool, int]],
             holds: Callable[[bytes], bool] | None = None) -> Callable[[bytes], bool]:
    """A matcher of stored records that remembers ``decide``'s verdicts by head (the bytes up
    to the end of the application properties: ``decide``'s second answer): a record that
    opens with a head seen before gets that head's verdict from one slice and one dictionary
    look-up instead of the walk (~0.2 µs against ~2-3 µs here). Exact: ``decide`` read nothing
    past the head, so a record with the same head bytes gets the same verdict. ``holds``: the
    filter's needle test (``sqlfilter.required.prefiltered``), asked before ``decide`` on a
    miss (a record without the needles is no match, and needs no head).

    Why: the messages of a stream mostly come from few producers, each writing the same
    header, properties and application properties layout, and a filtered key takes few values
    (that is what makes it worth filtering on), so runs of records share their head: a
    consumer's stage 2 then costs about a look-up per record, not a walk. Where every message
    carries its own message id the heads never repeat: after ``MEMO_TRIAL`` walks with fewer
    than one hit in ten records walked or remembered it stops looking (records the needles
    reject count neither way: they cost no walk, and their heads are not kept)."""
    heads: dict[bytes, bool] = {}
    lengths: list[int] = []
    hits = walks = 0
    on = True

    def match(data: bytes) -> bool:
        nonlocal hits, walks, on
        if on and type(data) is bytes:
            for n in lengths:
                hit = heads.get(data[:n])
                if hit is not None:
                    hits += 1
                    return hit
        if holds is not None and not holds(data):
            return False  # (not a miss: a record without the needles is never walked)
        if on:
            walks += 1
            if walks >= MEMO_TRIAL and walks * 10 > (walks + hits) * 9:
                on = False
                heads.clear()
                lengths.clear()
        verdict, n = decide(data)
        if n and on and n <= MEMO_HEAD_BYTES and type(data) is bytes:  # (bytes: hashable)
            if n not in lengths:
                if len(lengths) >= MEMO_LENGTHS:
                    return verdict
                lengths.append(n)
            if len(heads) >= MEMO_HEADS:
                heads.clear()
            heads[data[:n]] = verdict
        return verdict

    return match


def _always(data: bytes) -> bool:
    return True


def bytes_matcher(stage2: Any) -> Callable[[bytes], bool] | None:
    """What a consumer calls per stored record: the one-pass walk where the filter allows it
    (behind the filter's needles and a memo of verdicts by head, ``memoized``), else the
    filter's own ``bytes_matcher``; None without a filter."""
    if stage2 is None:
        return None
    general = stage2.bytes_matcher()
    decide = _decider(stage2, general)
    if decide is None:
        return general
    holds = prefiltered(stage2, _always)  # the needle test alone (itself: no needles)
    return memoized(decide, None if holds is _always else holds)
