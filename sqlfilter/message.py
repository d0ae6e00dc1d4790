"""Lazy access to the sections of an AMQP 1.0 message, and the byte edits the broker needs.

Why: the broker stores the bytes a publisher sent and sends them back; building a
``proton.Message`` costs ~75 µs, so its hot paths (strip delivery annotations, read the filter
value, add ``x-stream-offset``, evaluate a stage-2 filter) work on the encoded bytes instead.

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

Sections are found by jumping over each value with its size fields (``codec.skip``); only the
sections asked for are decoded.

A ``MessageView`` exposes each section as a dict, decoded on first access and cached:
- ``header``: keys durable, priority, ttl, first_acquirer, delivery_count (present fields only);
- ``properties``: keys message_id, user_id, to, subject, reply_to, correlation_id, content_type,
  content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence,
  reply_to_group_id (present, non-null fields only);
- ``application_properties``, ``message_annotations``, ``footer``: the section's map.
An absent section is an empty dict. Values use the representation of ``sqlfilter.codec``.
"""

from __future__ import annotations

import struct
from typing import Any

import proton

from sqlfilter import codec
from sqlfilter.codec import I64, SIZE_COUNT8, SIZE_COUNT32, _Bad, _decode, _format_error, _skip
from sqlfilter.errors import MessageFormatError

__all__ = [
    "MessageView", "as_view", "split_sections", "strip_delivery_annotations", "filter_value",
    "with_stream_offset", "HEADER_FIELDS", "PROPERTY_FIELDS",
]

# --- section descriptors --------------------------------------------------------------------------
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

# the section that opens a new message-annotations section: 0x00 smallulong 0x72
MESSAGE_ANNOTATIONS_PREFIX = b"\x00\x53\x72"
STREAM_OFFSET_KEY = b"\xa3\x0fx-stream-offset"  # sym8 "x-stream-offset"
FILTER_VALUE_NAME = "x-stream-filter-value"
FILTER_VALUE_KEY = b"\xa3\x15x-stream-filter-value"  # sym8 "x-stream-filter-value"
_FILTER_VALUE_BYTES = FILTER_VALUE_NAME.encode("ascii")
_STREAM_OFFSET_BYTES = b"x-stream-offset"
_LONG = b"\x81"  # x-stream-offset is always written as a full 8-byte long


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

    (``_scan`` below is the same walk inlined, for the filters' hot path.)
    """
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


# --- byte edits for the broker --------------------------------------------------------------------
def strip_delivery_annotations(data: bytes) -> bytes:
    """The message without its delivery-annotations section (``data`` itself if it has none)."""
    try:
        _, found = _first_sections(data, DELIVERY_ANNOTATIONS)
    except codec._FAILURES as exc:
        raise _format_error(exc, 0) from None
    if found is None:
        return data
    return b"".join((data[:found[0]], data[found[2]:]))


def _map_header(buf: Any, vstart: int) -> tuple[int, int, int]:
    """(first entry position, end, count) of the map at ``vstart`` (null = empty map)."""
    c = buf[vstart]
    if c == 0xC1:
        size, count = SIZE_COUNT8.unpack_from(buf, vstart + 1)
        return vstart + 3, vstart + 2 + size, count
    if c == 0xD1:
        size, count = SIZE_COUNT32.unpack_from(buf, vstart + 1)
        return vstart + 9, vstart + 5 + size, count
    if c == 0x40:
        return vstart + 1, vstart + 1, 0
    raise _Bad("message annotations are not a map", vstart)


def _find_key(buf: bytes, first: int, end: int, count: int, key: bytes
              ) -> tuple[int, int, int] | None:
    """(key start, value start, value end) of the entry whose key is the symbol ``key``.

    ``key`` is the sym8 encoding of the name; a sym32 key is decoded and compared.
    """
    pos = first
    for _ in range(count // 2):
        c = buf[pos]
        if c == 0xA3:
            vpos = pos + 2 + buf[pos + 1]
            hit = buf.startswith(key, pos) and vpos == pos + len(key)
        elif c == 0xB3:
            found, vpos = _decode(buf, pos)
            hit = found == key[2:].decode("ascii")
        else:
            vpos = _skip(buf, pos)
            hit = False
        vend = _skip(buf, vpos)
        if vend > end:
            raise _Bad("annotation runs past its map", pos)
        if hit:
            return pos, vpos, vend
        pos = vend
    if pos != end:
        raise _Bad("message annotations map size does not match its entries", pos)
    return None


def filter_value(data: Any) -> str | None:
    """The ``x-stream-filter-value`` message annotation (an AMQP string), or None if absent/null.

    Raises ``MessageFormatError`` when it is present with another type, or the bytes are bad.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    try:
        _, found = _first_sections(data, MESSAGE_ANNOTATIONS)
        if found is None:
            return None
        _, vstart, end = found
        if data.find(_FILTER_VALUE_BYTES, vstart, end) < 0:
            return None
        first, mend, count = _map_header(data, vstart)
        entry = _find_key(data, first, mend, count, FILTER_VALUE_KEY)
        if entry is None:
            return None
        value, _ = _decode(data, entry[1])
    except codec._FAILURES as exc:
        raise _format_error(exc, 0) from None
    if value is None:
        return None
    if type(value) is not str:
        raise MessageFormatError(
            f"{FILTER_VALUE_NAME} must be a string, not {type(value).__name__}")
    return value


def with_stream_offset(data: Any, offset: int) -> bytes:
    """The message with message annotation ``x-stream-offset`` = ``offset`` (an AMQP long).

    The existing annotations map is extended in place (a map8 that outgrows 255 bytes becomes a
    map32; an existing ``x-stream-offset`` entry is replaced), or a new annotations section is
    inserted after the header and delivery annotations. Every other byte is unchanged.
    """
    if not -(1 << 63) <= offset < (1 << 63):
        raise ValueError(f"offset {offset} does not fit an AMQP long")
    if not isinstance(data, bytes):
        data = bytes(data)
    entry = STREAM_OFFSET_KEY + _LONG + I64.pack(offset)
    try:
        after, found = _first_sections(data, MESSAGE_ANNOTATIONS)
        if found is None:
            return b"".join((data[:after], MESSAGE_ANNOTATIONS_PREFIX, b"\xc1",
                             SIZE_COUNT8.pack(len(entry) + 1, 2), entry, data[after:]))
        start, vstart, end = found
        first, mend, count = _map_header(data, vstart)
        if mend != end:
            raise _Bad("message annotations map size does not match the section", vstart)
        old = None
        if data.find(_STREAM_OFFSET_BYTES, first, mend) >= 0:
            old = _find_key(data, first, mend, count, STREAM_OFFSET_KEY)
    except codec._FAILURES as exc:
        raise _format_error(exc, 0) from None
    if old is None:
        parts = [data[first:mend], entry]
        size = mend - first + len(entry)
        count += 2
    else:
        parts = [data[first:old[0]], data[old[2]:mend], entry]
        size = mend - first - (old[2] - old[0]) + len(entry)
    if size + 1 <= 255 and count <= 255:
        head = b"\xc1" + SIZE_COUNT8.pack(size + 1, count)
    else:
        head = b"\xd1" + SIZE_COUNT32.pack(size + 4, count)
    return b"".join((data[:vstart], head, *parts, data[end:]))


# --- the lazy view ----------------------------------------------------------------------------------
def _scan(buf: bytes, pos: int, spans: dict[int, tuple[int, int]], want: int) -> int:
    """Record sections from ``pos`` in ``spans`` until one with code ``want`` (or the end).

    Returns where scanning stopped. Only the first section of each code is recorded.
    """
    n = len(buf)
    width = codec._WIDTH
    u32 = codec._u32
    while pos < n:
        try:
            if buf[pos] == 0x00 and buf[pos + 1] == 0x53:
                code = buf[pos + 2]
                vstart = pos + 3
            elif buf[pos] == 0x00:
                code, vstart = _descriptor(buf, pos + 1)
            else:
                raise _Bad("expected a described section", pos)
            if not HEADER <= code <= FOOTER:
                raise _Bad(f"unknown section descriptor 0x{code:x}", pos)
            w = width[buf[vstart]]
            if w is None:
                end = _skip(buf, vstart)
            elif w == -4:
                end = vstart + 5 + u32(buf, vstart + 1)[0]
            elif w == -1:
                end = vstart + 2 + buf[vstart + 1]
            else:
                end = vstart + 1 + w
        except (IndexError, struct.error):
            raise _Bad("truncated section", pos) from None
        if end > n:
            raise _Bad("section runs past the end of the message", pos)
        pos = end
        if code not in spans:
            spans[code] = (vstart, end)
            if code == want:
                break
    return pos


class MessageView:
    """The filterable sections of one message; from bytes, each is decoded on first access."""

    __slots__ = ("_header", "_properties", "_application_properties", "_message_annotations",
                 "_footer", "_data", "_spans", "_scanned")

    @property
    def header(self) -> dict:
        """The header section as a dict (empty if absent), decoded on first access."""
        value = self._header
        if value is None:
            value = self._header = self._load(HEADER)
        return value

    @header.setter
    def header(self, value: dict) -> None:
        self._header = value

    @property
    def properties(self) -> dict:
        """The properties section as a dict (empty if absent), decoded on first access."""
        value = self._properties
        if value is None:
            value = self._properties = self._load(PROPERTIES)
        return value

    @properties.setter
    def properties(self, value: dict) -> None:
        self._properties = value

    @property
    def application_properties(self) -> dict:
        """The application_properties section as a dict (empty if absent), decoded on first access."""
        value = self._application_properties
        if value is None:
            value = self._application_properties = self._load(APPLICATION_PROPERTIES)
        return value

    @application_properties.setter
    def application_properties(self, value: dict) -> None:
        self._application_properties = value

    @property
    def message_annotations(self) -> dict:
        """The message_annotations section as a dict (empty if absent), decoded on first access."""
        value = self._message_annotations
        if value is None:
            value = self._message_annotations = self._load(MESSAGE_ANNOTATIONS)
        return value

    @message_annotations.setter
    def message_annotations(self, value: dict) -> None:
        self._message_annotations = value

    @property
    def footer(self) -> dict:
        """The footer section as a dict (empty if absent), decoded on first access."""
        value = self._footer
        if value is None:
            value = self._footer = self._load(FOOTER)
        return value

    @footer.setter
    def footer(self, value: dict) -> None:
        self._footer = value


    def __init__(self) -> None:
        self._data = None
        self._spans: dict[int, tuple[int, int]] = {}
        self._scanned = 0
        self._header = self._properties = self._application_properties = None
        self._message_annotations = self._footer = None

    @classmethod
    def from_sections(cls, header: dict | None = None, properties: dict | None = None,
                      application_properties: dict | None = None,
                      message_annotations: dict | None = None, footer: dict | None = None) -> "MessageView":
        """A view over already-decoded sections (tests, benchmarks, tools)."""
        view = cls()
        view._header = header or {}
        view._properties = properties or {}
        view._application_properties = application_properties or {}
        view._message_annotations = message_annotations or {}
        view._footer = footer or {}
        return view

    @classmethod
    def from_bytes(cls, data: Any) -> "MessageView":
        """A lazy view of an encoded message (bytes, bytearray or memoryview).

        Nothing is read until a section is asked for; a malformed message then raises
        ``MessageFormatError``.
        """
        view = cls()
        view._data = data if type(data) is bytes else bytes(data)
        return view

    @classmethod
    def from_message(cls, message: proton.Message) -> "MessageView":
        """A view of a ``proton.Message`` with exactly the dicts ``from_bytes`` gives.

        (It goes through ``message.encode()``: one representation, one decoder.)
        """
        return cls.from_bytes(bytes(message.encode()))

    def _load(self, code: int) -> dict:
        data = self._data
        if data is None:  # a view built without bytes: a missing section is empty
            return {}
        spans = self._spans
        span = spans.get(code)
        if span is None and self._scanned < len(data):  # read on up to the section asked for
            try:
                self._scanned = _scan(data, self._scanned, spans, code)
            except codec._FAILURES as exc:
                raise _format_error(exc, self._scanned) from None
            span = spans.get(code)
        return {} if span is None else _decode_section(data, code, span[0], span[1])

    def __repr__(self) -> str:
        return (f"MessageView(header={self.header!r}, properties={self.properties!r}, "
                f"application_properties={self.application_properties!r}, "
                f"message_annotations={self.message_annotations!r}, footer={self.footer!r})")


def _decode_section(data: bytes, code: int, vstart: int, end: int) -> dict:
    try:
        if data[vstart] == 0xD1 and code != HEADER and code != PROPERTIES:  # the usual map32
            size, count = SIZE_COUNT32.unpack_from(data, vstart + 1)
            if vstart + 5 + size != end:
                raise _Bad("map size does not match the section", vstart)
            return codec._entries(data, vstart + 9, end, count)
        value, pos = _decode(data, vstart)
    except codec._FAILURES as exc:
        raise _format_error(exc, vstart) from None
    if pos != end:
        raise MessageFormatError(f"section value at byte {vstart} is malformed")
    if value is None:
        return {}
    if code == HEADER or code == PROPERTIES:
        if type(value) is not list:
            raise MessageFormatError(f"section 0x{code:x} at byte {vstart} is not a list")
        out = {}
        for name, field in zip(HEADER_FIELDS if code == HEADER else PROPERTY_FIELDS, value):
            if field is not None:
                out[name] = field
        return out
    if type(value) is not dict:
        raise MessageFormatError(f"section 0x{code:x} at byte {vstart} is not a map")
    return value


def as_view(message: Any) -> MessageView:
    """A view of bytes, a ``proton.Message`` or a view (returned as is)."""
    if type(message) is bytes:  # the broker's hot path: stored message bytes
        return MessageView.from_bytes(message)
    if isinstance(message, MessageView):
        return message
    if isinstance(message, (bytes, bytearray, memoryview)):
        return MessageView.from_bytes(message)
    if isinstance(message, proton.Message):
        return MessageView.from_message(message)
    raise TypeError(f"cannot view {type(message).__name__} as an AMQP message")
