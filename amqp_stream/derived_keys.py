"""Broker-derived filter keys: the stream argument, the tokens a record gives the index, and the
tokens a consumer's filter requires.

Why here: storage indexes opaque tokens (``storage.derived``) and must not read messages; the
broker knows both sides of the one encoding, ``sqlfilter.required.index_token``. The writer
gets ``deriver(keys)`` (the key values read from the stored bytes with the same ``KeyPicker``
walk stage 2 uses, so the indexed value is the value the filter compares); a consumer gets
``wanted(keys, stage2)`` (the tokens of the values its filter requires, found from the
compiled tree by ``sqlfilter.required``) and ``bounds(keys, stage2)`` (the intervals it
requires of numbers, which the skip table's rows answer with each block's least and greatest
number per key, read from the same tokens by ``numberer(keys)``). A record the walk cannot read gives None: its block
is never skipped. Stage 2 still decides every record read, so a skip can only save work.

Reading application properties at write time costs one byte search per key (``bytes.find``,
in C) instead of a section walk: every place the key's name appears right after a string or
symbol header (str8/sym8/str32/sym32 of its length) is taken as a map key and the value after
it decoded. That finds the application property (a map key with that name always looks like
this) and maybe more (the same key in another map, or bytes that happen to look like it): more
tokens only cost false positives, never a missed match. An occurrence whose value does not
decode makes the record unknown (None). Properties fields (``p.``) are positional: they are
read with the ``MessageView`` walk stage 2 uses.

The argument ``x-stream-derived-filter-keys`` (an extension in RabbitMQ's ``x-stream-``
family): a list of key names, or one string of names separated by commas (the stream
protocol's Create sends strings). A name is an application property, or ``p.`` and an AMQP
properties field (``p.subject``, ``p.group_id``, ...); an application property whose own name
starts with ``p.`` cannot be indexed.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Callable, Collection, Sequence

from amqp_stream import filtering
from amqp_stream.errors import BadRequest
from amqp_stream.wire import KeyPicker, MessageView, decode
from amqp_stream.wire._codec import F32, F64, I8, I16, I32, I64, U8, U16, U32, U64
from amqp_stream.wire._sections import PROPERTY_FIELDS
from sqlfilter.required import (Bound, bounds_of, canonical, index_token, number_head,
                                parse_number, requirement_of, wanted_tokens)

filtering.install()  # canonical values here are what the broker's filters see

__all__ = ["ARGUMENT", "MAX_KEYS", "parse_keys", "field_of", "deriver", "numberer",
           "storage_settings", "wanted", "bounds"]

ARGUMENT = "x-stream-derived-filter-keys"
MAX_KEYS = 16
_PROPERTIES = "properties"
_APP = "application_properties"
#: the AMQP constructors of fixed width that hold a number (``runtime.norm`` makes each an int
#: or a float): their value read straight from the bytes, not through the codec (a key of
#: numbers, a sequence or a time, is otherwise ~5 µs a record to index); None: zero
_NUMBER_CODES: dict[int, struct.Struct | None] = {
    0x43: None, 0x44: None, 0x50: U8, 0x51: I8, 0x52: U8, 0x53: U8, 0x54: I8, 0x55: I8,
    0x60: U16, 0x61: I16, 0x70: U32, 0x71: I32, 0x80: U64, 0x81: I64, 0x83: I64, 0x72: F32,
    0x82: F64}


def field_of(key: str) -> tuple[str, str]:
    """(section, field name) of a key name as the argument gives it."""
    if key.startswith("p."):
        return _PROPERTIES, key[2:]
    return _APP, key


def parse_keys(value: Any) -> list[str]:
    """The argument's key names, checked (``BadRequest`` otherwise), in the order given, without
    repeats."""
    if isinstance(value, str):
        items: list[Any] = [v.strip() for v in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise BadRequest(f"{ARGUMENT} must be a list of property names, not {value!r}")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item or "\n" in item:
            raise BadRequest(f"{ARGUMENT}: {item!r} is not a property name")
        section, name = field_of(item)
        if section == _PROPERTIES and name not in PROPERTY_FIELDS:
            raise BadRequest(f"{ARGUMENT}: {item!r} is not a properties field "
                             f"(p. and one of {', '.join(PROPERTY_FIELDS)})")
        if str(item) not in out:
            out.append(str(item))
    if not out or len(out) > MAX_KEYS:
        raise BadRequest(f"{ARGUMENT} must name 1..{MAX_KEYS} keys, not {len(out)}")
    return out


def deriver(keys: Collection[str]
            ) -> Callable[[bytes, Sequence[tuple[int, int]]], list[tuple[list[int], list[bytes | None]]]]:
    """``StreamConfig.derive`` for ``keys``: (a chunk's data section, its records' spans) ->
    runs of (positions ascending, tokens), one per key (a None token: the record there is
    unreadable)."""
    fields = [field_of(k) for k in keys]
    props = [n for s, n in fields if s == _PROPERTIES]
    prop_picker = KeyPicker(props) if props else None
    view = MessageView.from_bytes
    # per application property: its UTF-8 name, the str8/sym8 and str32/sym32 length bytes
    # that precede it as a map key, the token prefix of a string value (the token of a str8
    # value is this prefix and its raw bytes: checked here against ``index_token``), and a
    # pattern for the usual case (a str8/sym8 key, a str8 value) found by the regex engine
    apps = []
    for section, name in fields:
        if section != _APP:
            continue
        raw = name.encode("utf-8", "surrogatepass")
        prefix = index_token(_APP, name, "")
        assert prefix is not None and index_token(_APP, name, "ab") == prefix + b"ab"
        usual = re.compile(re.escape(raw) + b"\xa1")  # a literal: the engine's fast search
        apps.append((name, raw, len(raw), len(raw).to_bytes(4, "big"), prefix, usual,
                     number_head(_APP, name)))

    def derive(data: bytes, spans: Sequence[tuple[int, int]]
               ) -> list[tuple[list[int], list[bytes | None]]]:
        runs: list[tuple[list[int], list[bytes | None]]] = []
        size = len(data)
        for name, raw, n, n32, prefix, usual, head in apps:
            found = [m.start() for m in usual.finditer(data)]
            if found and (found[0] < 2 or found[-1] + n + 1 >= size):
                found = []  # an edge: the exact walk below decides
            if (len(found) == data.count(raw)
                    and data.count(bytes((0xA1, n)) + raw) + data.count(bytes((0xA3, n)) + raw) == len(found)):
                # every occurrence is a str8/sym8 key with a str8 value (counted in C)
                runs.append((found, [prefix + data[q + 2:q + 2 + data[q + 1]]
                                     for q in [i + n for i in found]]))
                continue
            positions: list[int] = []
            tokens: list[bytes | None] = []
            i = data.find(raw)  # anything else: each occurrence in turn
            while i >= 0:
                if (i >= 2 and data[i - 1] == n and data[i - 2] | 2 == 0xA3) or (
                        i >= 5 and data[i - 5] | 2 == 0xB3 and data[i - 4:i] == n32):
                    q = i + n
                    code = data[q] if q < size else -1
                    if head is not None and code in _NUMBER_CODES:
                        t = _number_token(head, code, data, q + 1)
                        if t is not None:
                            positions.append(i)
                            tokens.append(t if t else None)  # (b"": unknown)
                        i = data.find(raw, i + 1)
                        continue
                    try:
                        t = index_token(_APP, name, decode(data, q)[0])
                    except Exception:  # noqa: BLE001 - unknown: the block is never skipped
                        positions.append(i)
                        tokens.append(None)
                    else:
                        if t is not None:
                            positions.append(i)
                            tokens.append(t)
                i = data.find(raw, i + 1)
            runs.append((positions, tokens))
        if prop_picker is not None:
            positions, tokens = [], []
            for start, end in spans:
                try:
                    p = view(data[start:end]).pick(prop_picker, None)[0]
                except Exception:  # noqa: BLE001 - unknown: the block is never skipped
                    positions.append(start)
                    tokens.append(None)
                    continue
                for name in props:
                    if p and name in p:
                        t = index_token(_PROPERTIES, name, p[name])
                        if t is not None:
                            positions.append(start)
                            tokens.append(t)
            runs.append((positions, tokens))
        return runs

    return derive


def _number_token(head: bytes, code: int, data: bytes, at: int) -> bytes | None:
    """``index_token`` of the number of constructor ``code`` whose bytes start at ``at``
    (``head``: the key's ``number_head``): None for a float that equals nothing (NaN,
    infinities), ``b""`` when the bytes end before the value (unknown)."""
    fmt = _NUMBER_CODES[code]
    if fmt is None:
        return head + b"0"
    if at + fmt.size > len(data):
        return b""
    v = fmt.unpack_from(data, at)[0]
    if type(v) is float:  # what equality makes of it: an int, or nothing (NaN, infinities)
        c = canonical(v)
        if c is None:
            return None
        v = c[1]
    return head + repr(v).encode("ascii")


def wanted(keys: Collection[str], stage2: Any) -> dict[str, frozenset[bytes]] | None:
    """Per indexed key, the tokens one of which a record must hold for ``stage2`` (a compiled
    SQL filter, selector or property filter) to match; None when it requires none of them."""
    if stage2 is None or not keys:
        return None
    by_field = {field_of(k): k for k in keys}
    out = {by_field[f]: tokens for f, tokens in wanted_tokens(requirement_of(stage2)).items()
           if f in by_field}
    return out or None


def numberer(keys: Sequence[str]) -> Callable[[bytes], tuple[int, float] | None]:
    """``StreamConfig.derive_number`` for ``keys``: a token -> (its key's place in ``keys``,
    the number it holds), None for a token of another value."""
    heads = {head: i for i, k in enumerate(keys) if (head := number_head(*field_of(k))) is not None}
    starts = tuple(heads)

    def number(token: bytes) -> tuple[int, float] | None:
        # a number's token is its key's head (``number_head``) and then the number's digits
        # (no NUL): the head is what lies up to the last NUL (a string's token is turned
        # away by one ``startswith`` first: most tokens of most keys)
        if not token.startswith(starts):
            return None
        cut = token.rfind(b"\x00") + 1
        i = heads.get(token[:cut])
        return None if i is None else (i, parse_number(token[cut:]))

    return number


def storage_settings(keys: Sequence[str]) -> dict[str, Any]:
    """The ``StreamConfig`` fields of a stream indexing ``keys`` (``derived_keys``, ``derive``,
    ``derive_number``), none without keys: the three always go together."""
    if not keys:
        return {}
    return {"derived_keys": tuple(keys), "derive": deriver(keys), "derive_number": numberer(keys)}


def bounds(keys: Collection[str], stage2: Any) -> dict[str, Bound] | None:
    """Per indexed key, the interval a number of it must lie in for ``stage2`` to match; None
    when it bounds none of them."""
    if stage2 is None or not keys:
        return None
    by_field = {field_of(k): k for k in keys}
    out = {by_field[f]: b for f, b in bounds_of(stage2).items() if f in by_field}
    return out or None
