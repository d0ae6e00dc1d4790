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

Sections are found by jumping over each value with its size fields (``codec.skip``), never by
decoding them. The hot paths read the head of a section with the usual descriptor in one go
(``SECTION_HEAD``; a list8/map8 uses the first two bytes of ``size`` as its size:u8 and
count:u8, a fixed-width value none of it)::

    0x00 0x53 | code | constructor | size:u32 | count:u32

``sqlfilter.stored`` (the broker's byte edits), ``sqlfilter.message`` (the lazy view) and
``sqlfilter.pick`` (a filter's keys) all walk sections with what is here.
"""

from __future__ import annotations

import struct
from typing import Any

from sqlfilter import codec
from sqlfilter.codec import _Bad, _format_error, _skip

__all__ = [
    "HEADER", "DELIVERY_ANNOTATIONS", "MESSAGE_ANNOTATIONS", "PROPERTIES", "APPLICATION_PROPERTIES",
    "DATA", "AMQP_SEQUENCE", "AMQP_VALUE", "FOOTER", "SECTION_NAMES", "HEADER_FIELDS",
    "PROPERTY_FIELDS", "SECTION_HEAD", "split_sections",
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
_PAD = bytes(SECTION_HEAD.size)
#: per constructor, how the value of a section is sized: 4 + its fixed width (the section's
#: whole length), 1 (size:u8 at byte 4), 2 (size:u32 at byte 4), 0 (not by its constructor)
_SECTION_STEP = tuple(0 if w is None else 4 + w if w >= 0 else 1 if w == -1 else 2
                      for w in codec._WIDTH)



def _descriptor(buf: Any, pos: int) -> tuple[int, int]:
    """The section code of the descriptor at ``pos`` (just after 0x00) and the value's start."""
    c = buf[pos]
    if c == 0x53:
        return buf[pos + 1], pos + 2
    if c == 0x80:
        return codec._u64(buf, pos + 1)[0], pos + 9
    if c == 0xA3 or c == 0xB3:
        if c == 0xA3:
            start, n = pos + 2, buf[pos + 1]
        else:
            start, n = pos + 5, codec._u32(buf, pos + 1)[0]
        code = _SECTION_NAME_BYTES.get(bytes(buf[start:start + n]))
        if code is None:
            raise _Bad("unknown section descriptor", pos)
        return code, start + n
    if c == 0x44:
        return 0, pos + 1
    raise _Bad(f"section descriptor with constructor 0x{c:02x}", pos)


def _section_at(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(code, value start, end) of the section at ``pos``, its value skipped by size.

    The usual smallulong descriptor with a value sized by its constructor is read with one
    ``SECTION_HEAD`` unpack; anything else (or under 12 bytes left) goes the general way.
    (``sqlfilter.message._scan`` is the same walk inlined, for the filters' exact path.)
    """
    if len(buf) - pos >= 12:
        z, code, c, size, _ = _head(buf, pos)
        k = _SECTION_STEP[c]
        if z == 0x53 and k and HEADER <= code <= FOOTER:
            end = pos + 8 + size if k == 2 else pos + 5 + (size >> 24) if k == 1 else pos + k
            if end > len(buf):
                raise _Bad("value runs past the end", pos + 3)
            return code, pos + 3, end
    try:
        if buf[pos] == 0x00 and buf[pos + 1] == 0x53:  # the usual smallulong descriptor
            code = buf[pos + 2]
            vstart = pos + 3
        elif buf[pos] == 0x00:
            code, vstart = _descriptor(buf, pos + 1)
        else:
            raise _Bad("expected a described section", pos)
        if not HEADER <= code <= FOOTER:
            raise _Bad(f"unknown section descriptor 0x{code:x}", pos)
        end = _skip(buf, vstart)
    except (IndexError, struct.error):
        raise _Bad("truncated section", pos) from None
    return code, vstart, end


def _split(buf: bytes) -> list[tuple[int, int, int, int]]:
    out = []
    pos = 0
    n = len(buf)
    while pos < n:
        code, vstart, end = _section_at(buf, pos)
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
    except codec._FAILURES as exc:
        raise _format_error(exc, 0) from None


def _first_sections(buf: Any, stop_after: int) -> tuple[int, tuple | None]:
    """Scan the leading sections whose code <= stop_after.

    Returns (position of the first section with a larger code, (section start, value start,
    end) of the one with code stop_after or None).
    """
    pos = 0
    n = len(buf)
    found = None
    while pos < n:
        code, vstart, end = _section_at(buf, pos)
        if code > stop_after:
            break
        if code == stop_after:
            found = (pos, vstart, end)
        pos = end
    return pos, found
