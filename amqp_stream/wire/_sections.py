"""The sections of an encoded AMQP 1.0 message: their codes and how to find them in the bytes.

An encoded message is a sequence of sections, each a described value::

    0x00 | descriptor | value
           descriptor: smallulong 0x53 <code>, ulong 0x80 <8 bytes>, or the symbol name
    code  name                            value
    0x70  amqp:header:list                list: durable, priority, ttl, first-acquirer,
                                                delivery-count
    0x71  amqp:delivery-annotations:map   map
    0x72  amqp:message-annotations:map    map
    0x73  amqp:properties:list            list: the 13 fields of PROPERTY_FIELDS
    0x74  amqp:application-properties:map map
    0x75  amqp:data:binary                binary (one or more)
    0x76  amqp:amqp-sequence:list         list (one or more)
    0x77  amqp:amqp-value:*               any value
    0x78  amqp:footer:map                 map

Sections are found by jumping over each value with its size fields (``_codec.raw_skip``), never
by decoding them. The hot paths read the head of a section with the usual descriptor in one go
(``SECTION_HEAD``; a list8/map8 uses the first two bytes of ``size`` as its size:u8 and
count:u8, a fixed-width value none of it)::

    0x00 0x53 | code | constructor | size:u32 | count:u32

The order rule (AMQP 1.0 §3.2, "the bare message"), the one every stored message follows:
header, delivery-annotations, message-annotations, properties, application-properties, the body
sections (data..., amqp-sequence... or amqp-value, in the order sent), footer; each non-body
section at most once, nothing after the footer. ``SECTION_RANK`` gives each section's place (the
body kinds share one) and ``RANK_AFTER`` the lowest place the next section may have;
``stored_form`` (``_stored``) checks a published message against them in its one walk and, at
the first section out of place, hands the message to ``in_canonical_order``, which refuses a
duplicate or a section after the footer and writes the sections in order. So every later reader
(the filter value, ``MessageView`` and the key picks, ``with_stream_offset``) takes the first
section of each kind, found where the order puts it.

``_stored`` (the broker's byte edits), ``_view`` (the lazy view) and ``_pick`` (a filter's keys)
all walk sections with what is here.
"""

from __future__ import annotations

import struct
from typing import Any

from amqp_stream.wire._codec import FAILURES, U32, U64, WIDTH, Bad, format_error, raw_skip

__all__ = [
    "HEADER", "DELIVERY_ANNOTATIONS", "MESSAGE_ANNOTATIONS", "PROPERTIES", "APPLICATION_PROPERTIES",
    "DATA", "AMQP_SEQUENCE", "AMQP_VALUE", "FOOTER", "SECTION_NAMES", "HEADER_FIELDS",
    "PROPERTY_FIELDS", "SECTION_HEAD", "SECTION_STEP", "SECTION_RANK", "RANK_AFTER",
    "split_sections", "section_at", "first_sections", "descriptor_at", "in_canonical_order",
]

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

SECTION_NAMES = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}
_SECTION_NAME_BYTES = {name.encode("ascii"): code for name, code in SECTION_NAMES.items()}

HEADER_FIELDS = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTY_FIELDS = (
    "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id",
)

#: the first 12 bytes of a section with the smallulong descriptor (module docstring): the
#: descriptor's 0x0053 as one u16, code, the value's constructor, size:u32, count:u32
SECTION_HEAD = struct.Struct(">HBBII")
_head = SECTION_HEAD.unpack_from
#: per constructor, how the value of a section is sized: 4 + its fixed width (the section's
#: whole length), 1 (size:u8 at byte 4), 2 (size:u32 at byte 4), 0 (not by its constructor)
SECTION_STEP = tuple(0 if w is None else 4 + w if w >= 0 else 1 if w == -1 else 2
                     for w in WIDTH)

#: per section code (an index 0..255; only HEADER..FOOTER occur), its place in the order rule
#: (module docstring): the code itself, the three body kinds sharing DATA's
SECTION_RANK = tuple(DATA if DATA <= code <= AMQP_VALUE else code for code in range(256))
#: per section code, the lowest place of a section that may follow it: the next place after a
#: non-body section (each comes once), DATA's after a body section (more body, or the footer)
RANK_AFTER = tuple(DATA if DATA <= code <= AMQP_VALUE else code + 1 for code in range(256))
_LABELS = {code: name.split(":")[1] for name, code in SECTION_NAMES.items()}  # for errors


def descriptor_at(buf: Any, pos: int) -> tuple[int, int]:
    """The section code of the descriptor at ``pos`` (just after 0x00) and the value's start."""
    c = buf[pos]
    if c == 0x53:
        return buf[pos + 1], pos + 2
    if c == 0x80:
        return U64.unpack_from(buf, pos + 1)[0], pos + 9
    if c == 0xA3 or c == 0xB3:
        if c == 0xA3:
            start, n = pos + 2, buf[pos + 1]
        else:
            start, n = pos + 5, U32.unpack_from(buf, pos + 1)[0]
        code = _SECTION_NAME_BYTES.get(bytes(buf[start:start + n]))
        if code is None:
            raise Bad("unknown section descriptor", pos)
        return code, start + n
    if c == 0x44:
        return 0, pos + 1
    raise Bad(f"section descriptor with constructor 0x{c:02x}", pos)


def section_at(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(code, value start, end) of the section at ``pos``, its value skipped by size.

    The usual smallulong descriptor with a value sized by its constructor is read with one
    ``SECTION_HEAD`` unpack; anything else (or under 12 bytes left) goes the general way.
    (``_view._scan`` is the same walk inlined, for the filters' exact path.)
    """
    if len(buf) - pos >= 12:
        z, code, c, size, _ = _head(buf, pos)
        k = SECTION_STEP[c]
        if z == 0x53 and k and HEADER <= code <= FOOTER:
            end = pos + 8 + size if k == 2 else pos + 5 + (size >> 24) if k == 1 else pos + k
            if end > len(buf):
                raise Bad("value runs past the end", pos + 3)
            return code, pos + 3, end
    try:
        if buf[pos] == 0x00 and buf[pos + 1] == 0x53:  # the usual smallulong descriptor
            code = buf[pos + 2]
            vstart = pos + 3
        elif buf[pos] == 0x00:
            code, vstart = descriptor_at(buf, pos + 1)
        else:
            raise Bad("expected a described section", pos)
        if not HEADER <= code <= FOOTER:
            raise Bad(f"unknown section descriptor 0x{code:x}", pos)
        end = raw_skip(buf, vstart)
    except (IndexError, struct.error):
        raise Bad("truncated section", pos) from None
    return code, vstart, end


def _split(buf: bytes) -> list[tuple[int, int, int, int]]:
    out: list[tuple[int, int, int, int]] = []
    pos = 0
    n = len(buf)
    while pos < n:
        code, vstart, end = section_at(buf, pos)
        out.append((code, pos, vstart, end))
        pos = end
    return out


def split_sections(data: Any) -> list[tuple[int, int, int, int]]:
    """The sections of an encoded message: (descriptor code, section start, value start, end).

    Values are not decoded; raises ``MessageFormatError`` if the framing is wrong.
    """
    if type(data) is not bytes:
        data = bytes(data)
    try:
        return _split(data)
    except FAILURES as exc:
        raise format_error(exc, 0) from None


def first_sections(buf: Any, stop_after: int) -> tuple[int, tuple | None]:
    """Scan the leading sections whose code <= stop_after.

    Returns (position of the first section with a larger code, (section start, value start,
    end) of the one with code stop_after or None).
    """
    pos = 0
    n = len(buf)
    found = None
    while pos < n:
        code, vstart, end = section_at(buf, pos)
        if code > stop_after:
            break
        if code == stop_after:
            found = (pos, vstart, end)
        pos = end
    return pos, found


def in_canonical_order(buf: bytes, without: int) -> bytes:
    """The sections of ``buf`` in the order rule's order (body sections as they came), without
    the one with code ``without``.

    Raises ``Bad`` naming the section when a non-body section comes twice or anything follows
    the footer (and the codec's failures for bad framing, as ``split_sections``).
    """
    seen: set[int] = set()
    spans = []
    for code, start, _, end in _split(buf):
        if code in seen:
            raise Bad(f"second {_LABELS[code]} section", start)
        if FOOTER in seen:
            raise Bad(f"{_LABELS[code]} section after the footer", start)
        if SECTION_RANK[code] != DATA:
            seen.add(code)
        if code != without:
            spans.append((SECTION_RANK[code], start, end))
    spans.sort(key=lambda span: span[0])  # stable: body sections keep their order
    return b"".join([buf[start:end] for _, start, end in spans])
