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
sections asked for are decoded. The filters' one-pass walk reads the head of a section with the
usual descriptor in one go (``SECTION_HEAD``; a list8/map8 uses the first two bytes of ``size``
as its size:u8 and count:u8, a fixed-width value none of it)::

    0x00 0x53 | code | constructor | size:u32 | count:u32

A ``MessageView`` exposes each section as a dict, decoded on first access and cached:
- ``header``: keys durable, priority, ttl, first_acquirer, delivery_count (present fields only);
- ``properties``: keys message_id, user_id, to, subject, reply_to, correlation_id, content_type,
  content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence,
  reply_to_group_id (present, non-null fields only);
- ``application_properties``, ``message_annotations``, ``footer``: the section's map.
An absent section is an empty dict. Values use the representation of ``sqlfilter.codec``.

Filters know at compile time which keys they read, so they need not decode whole sections: a
``KeyPicker`` holds a filter's keys (and their raw str8/sym8 encodings) and
``view.pick(properties_picker, application_properties_picker)`` (or ``pick_properties`` /
``pick_application_properties`` for one section) returns dicts with just those keys. On a fresh
view one loop (``_fast_pick``) finds the sections and walks the wanted ones once, comparing raw
key bytes (the map) or counting fields (the properties list, up to the last one wanted),
decoding only the values asked for and jumping over the rest by their size fields (one table
lookup per item, ``_STEP``), and stops once both sections are read: decoding whole maps in pure
Python (~0.4 µs an entry) was most of the cost of filtering a stored message. Any encoding the
one-pass walk does not take (other descriptors, described values to jump over, non-string keys,
...) goes the exact, general way (``_scan``, ``_pick_map``, ``_pick_list``). Both check the
framing of everything they walk (sizes, counts, constructors, section ends) and decode what they
return as the whole section would be decoded; the contents of entries not returned (e.g. another
string's UTF-8) are not looked at. For a view whose section is already decoded, or one built
from dicts, a pick is the whole section dict (a superset: callers only ``get`` their keys).
"""

from __future__ import annotations

import struct
from typing import Any, Iterable

import proton

from sqlfilter import codec
from sqlfilter.codec import (
    I64, SIZE_COUNT8, SIZE_COUNT32, _Bad, _decode, _format_error, _skip,
)
from sqlfilter.errors import MessageFormatError

__all__ = [
    "MessageView", "KeyPicker", "as_view", "split_sections", "strip_delivery_annotations",
    "filter_value", "stored_form", "BadFilterValue", "with_stream_offset", "HEADER_FIELDS",
    "PROPERTY_FIELDS",
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

#: the first 12 bytes of a section with the smallulong descriptor (module docstring): the
#: descriptor's 0x0053 as one u16, code, the value's constructor, size:u32, count:u32
SECTION_HEAD = struct.Struct(">HBBII")
_head = SECTION_HEAD.unpack_from
_PAD = bytes(SECTION_HEAD.size)
#: per constructor, how the value of a section is sized: 4 + its fixed width (the section's
#: whole length), 1 (size:u8 at byte 4), 2 (size:u32 at byte 4), 0 (not by its constructor)
_SECTION_STEP = tuple(0 if w is None else 4 + w if w >= 0 else 1 if w == -1 else 2
                      for w in codec._WIDTH)

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


class BadFilterValue(MessageFormatError):
    """``x-stream-filter-value`` is present but not a string (the message itself is sound)."""


def _filter_value_at(data: bytes, vstart: int, end: int) -> Any:
    """The decoded ``x-stream-filter-value`` in the annotations map at ``vstart..end`` (None if
    absent). Raises the codec's internal failures for a malformed map."""
    if data.find(_FILTER_VALUE_BYTES, vstart, end) < 0:
        return None
    first, mend, count = _map_header(data, vstart)
    entry = _find_key(data, first, mend, count, FILTER_VALUE_KEY)
    if entry is None:
        return None
    if data[entry[1]] == 0xA1:  # str8, the usual encoding: decoded as the codec would
        return data[entry[1] + 2:entry[2]].decode()
    return _decode(data, entry[1])[0]


def _checked_filter_value(value: Any) -> str | None:
    if value is None or type(value) is str:
        return value
    raise BadFilterValue(f"{FILTER_VALUE_NAME} must be a string, not {type(value).__name__}")


def filter_value(data: Any) -> str | None:
    """The ``x-stream-filter-value`` message annotation (an AMQP string), or None if absent/null.

    Raises ``MessageFormatError`` when the bytes are bad, ``BadFilterValue`` (a subclass) when
    the value is present with another type.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    try:
        _, found = _first_sections(data, MESSAGE_ANNOTATIONS)
        value = None if found is None else _filter_value_at(data, found[1], found[2])
    except codec._FAILURES as exc:
        raise _format_error(exc, 0) from None
    return _checked_filter_value(value)


def stored_form(data: Any) -> tuple[bytes, str | None]:
    """What the broker stores for a published message, in one walk over its sections: the bytes
    without delivery annotations, and the ``x-stream-filter-value``.

    The publish path's one check (``split_sections`` + ``strip_delivery_annotations`` +
    ``filter_value`` in a single pass). Raises ``MessageFormatError`` when the framing of any
    section or the annotations map is wrong, ``BadFilterValue`` for a filter value that is not a
    string.
    """
    if type(data) is not bytes:
        data = bytes(data)
    if not data:
        raise MessageFormatError("empty message")
    da = ma = None
    highest = -1  # annotations count only in their place (before any later section), as above
    pos = 0
    n = len(data)
    head = _head
    sstep = _SECTION_STEP
    try:
        while pos < n:
            # the usual smallulong descriptor with a value sized by its constructor is read
            # with one struct unpack (as ``_fast_pick``); anything else goes ``_section_at``
            k = 0
            if n - pos >= 12:
                z, code, c, size, _ = head(data, pos)
                k = sstep[c] if z == 0x53 and HEADER <= code <= FOOTER else 0
            if k:
                vstart = pos + 3
                end = pos + 8 + size if k == 2 else pos + 5 + (size >> 24) if k == 1 else pos + k
                if end > n:
                    raise _Bad("value runs past the end", vstart)
            else:
                code, vstart, end = _section_at(data, pos)
            if code == DELIVERY_ANNOTATIONS and highest <= DELIVERY_ANNOTATIONS:
                da = (pos, end)
            elif code == MESSAGE_ANNOTATIONS and highest <= MESSAGE_ANNOTATIONS:
                ma = (vstart, end)
            if code > highest:
                highest = code
            pos = end
        value = None if ma is None else _filter_value_at(data, ma[0], ma[1])
    except codec._FAILURES as exc:
        raise _format_error(exc, 0) from None
    if da is not None:
        data = b"".join((data[:da[0]], data[da[1]:]))
    return data, _checked_filter_value(value)


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
        self._spans: dict[int, tuple[int, int]] | None = None
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
        view = _new(cls)  # no __init__ call: this runs once per stored message
        view._data = data if type(data) is bytes else bytes(data)
        view._spans = None  # made on the first exact read
        view._scanned = 0
        view._header = view._properties = view._application_properties = None
        view._message_annotations = view._footer = None
        return view

    @classmethod
    def from_message(cls, message: proton.Message) -> "MessageView":
        """A view of a ``proton.Message`` with exactly the dicts ``from_bytes`` gives.

        (It goes through ``message.encode()``: one representation, one decoder.)
        """
        return cls.from_bytes(bytes(message.encode()))

    def pick(self, properties: "KeyPicker | None",
             application_properties: "KeyPicker | None") -> tuple[dict | None, dict | None]:
        """(properties, application properties) with (at least) the keys of each picker present.

        A section whose picker is None is not read (None in its place). From bytes, only the
        picked values are decoded (see the module docstring); once a section has been decoded
        in full, or for a view built from dicts, that section's dict itself.
        """
        data = self._data
        if data is None:  # built from dicts
            return (None if properties is None else (self._properties or {}),
                    None if application_properties is None
                    else (self._application_properties or {}))
        if (not self._scanned and self._properties is None
                and self._application_properties is None):  # a fresh view: one pass
            try:
                found = _fast_pick(data, properties, application_properties)
            except codec._FAILURES:
                found = None
            if found is not None:
                return found
        return (None if properties is None else self._exact_properties(properties),
                None if application_properties is None
                else self._exact_application_properties(application_properties))

    def pick_application_properties(self, picker: "KeyPicker") -> dict:
        """The application properties with (at least) the keys of ``picker`` that are present.

        (``pick(None, picker)[1]``, with the decoded-dict case first: one call for it.)
        """
        value = self._application_properties
        if value is not None:
            return value
        return self.pick(None, picker)[1]

    def pick_properties(self, picker: "KeyPicker") -> dict:
        """The properties with (at least) the fields of ``picker`` that are present."""
        value = self._properties
        if value is not None:
            return value
        return self.pick(picker, None)[0]

    def _exact_application_properties(self, picker: "KeyPicker") -> dict:
        value = self._application_properties
        if value is not None:
            return value
        data = self._data
        if data is None:
            return {}
        span = self._span(APPLICATION_PROPERTIES)
        if span is None:
            return {}
        vstart = span[0]
        try:
            return _pick_map(data, vstart, span[1], picker)
        except codec._FAILURES as exc:
            raise _format_error(exc, vstart) from None

    def _exact_properties(self, picker: "KeyPicker") -> dict:
        value = self._properties
        if value is not None:
            return value
        data = self._data
        if data is None:
            return {}
        span = self._span(PROPERTIES)
        if span is None:
            return {}
        vstart = span[0]
        try:
            return _pick_list(data, vstart, span[1], picker)
        except codec._FAILURES as exc:
            raise _format_error(exc, vstart) from None

    def _span(self, code: int) -> tuple[int, int] | None:
        """(value start, end) of the first section with ``code``, scanning on as far as needed."""
        spans = self._spans
        if spans is None:
            spans = self._spans = {}
        span = spans.get(code)
        if span is None and self._scanned < len(self._data):  # read on up to the section asked for
            try:
                self._scanned = _scan(self._data, self._scanned, spans, code)
            except codec._FAILURES as exc:
                raise _format_error(exc, self._scanned) from None
            span = spans.get(code)
        return span

    def _load(self, code: int) -> dict:
        data = self._data
        if data is None:  # a view built without bytes: a missing section is empty
            return {}
        span = self._span(code)
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


# --- picking a few keys out of a section ----------------------------------------------------------
class KeyPicker:
    """The keys one filter reads from the application properties or properties, compiled once.

    ``raw`` maps the str8 and sym8 encodings of each key (constructor, length, bytes) to the key,
    ``lengths[n]`` is 1 when some key is n bytes long (most keys are rejected on their length
    byte alone), ``fields`` has the property field name at its index in the properties list
    (None elsewhere).
    """

    __slots__ = ("names", "raw", "lengths", "fields", "first_field", "last_field")

    def __init__(self, names: Iterable[str]):
        self.names = frozenset(str(n) for n in names)
        raw: dict[bytes, str] = {}
        lengths = bytearray(256)
        for name in self.names:
            try:
                encoded = name.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no decoded key can equal it
                continue
            if len(encoded) < 256:
                raw[bytes((0xA1, len(encoded))) + encoded] = name
                if encoded.isascii():
                    raw[bytes((0xA3, len(encoded))) + encoded] = name
                lengths[len(encoded)] = 1
        self.raw = raw
        self.lengths = bytes(lengths)
        self.fields = tuple(f if f in self.names else None for f in PROPERTY_FIELDS)
        #: the properties list is walked up to this index (-1: no field wanted) ...
        self.last_field = max((i for i, f in enumerate(self.fields) if f), default=-1)
        #: ... and its fields before this one are only skipped
        self.first_field = min((i for i, f in enumerate(self.fields) if f), default=0)

    def __repr__(self) -> str:
        return f"KeyPicker({sorted(self.names)!r})"


_new = object.__new__
_WIDTH = codec._WIDTH
_u32 = codec._u32
_sc32 = SIZE_COUNT32.unpack_from
#: per constructor, how to jump over an item: 1 + its fixed width (> 0), 0 (size:u8 follows),
#: -4 (size:u32 follows), -9 (not sized by the constructor: described, or no such constructor)
_STEP = tuple(-9 if w is None else 1 + w if w >= 0 else 0 if w == -1 else -4 for w in _WIDTH)


def _fast_pick(buf: bytes, properties: KeyPicker | None, application_properties: KeyPicker | None
               ) -> tuple[dict | None, dict | None] | None:
    """``MessageView.pick`` of a fresh view in one pass over the sections, or None when unsure.

    Every section up to the last one wanted must have the usual smallulong descriptor and a
    value sized by its constructor, within the message. The properties section must be a
    list8/list32 (or list0/null: nothing in it), the application properties a map8/map32 (or
    null) of str8/sym8 keys; the items jumped over must be sized by their constructors (wanted
    values are decoded as the exact walk decodes them). Anything else (None) goes the exact way
    (``_scan``, ``_pick_map``, ``_pick_list``), which also reports the errors; an exception
    raised here (truncated bytes, bad UTF-8 in a wanted string) means the same.

    One loop does it all (each Python line costs ~30 ns at this level): a section's head is one
    ``struct`` read, an item is jumped over with one table lookup (``_STEP``), a map key not
    wanted is rejected on its length byte (``KeyPicker.lengths``), the properties list is read up
    to its last wanted field only, and the walk ends once both sections are read.
    """
    p = ap = None
    left = (properties is not None) + (application_properties is not None)
    pos = 0
    n = len(buf)
    head = _head
    sstep = _SECTION_STEP
    step = _STEP
    u32 = _u32
    while pos < n:
        try:
            z, code, c, size, count = head(buf, pos)
        except struct.error:  # under 12 bytes left: the zeros after them are never used
            z, code, c, size, count = head(buf[pos:] + _PAD, 0)
        k = sstep[c]
        if k == 2:
            end = pos + 8 + size
        elif k == 1:
            end = pos + 5 + (size >> 24)
        elif k:
            end = pos + k
        else:
            return None
        if z != 0x53 or end > n:
            return None
        if code == 0x74:  # APPLICATION_PROPERTIES (only the first one counts)
            if ap is None and application_properties is not None:
                if c == 0xD1:
                    q = pos + 12
                elif c == 0xC1:
                    q = pos + 6
                    count = (size >> 16) & 0xFF
                elif c == 0x40:
                    q = end
                    count = 0
                else:
                    return None
                if count & 1 or count > end - q:
                    return None
                raw = application_properties.raw
                lengths = application_properties.lengths
                ap = {}
                for _ in range(count >> 1):
                    if buf[q] | 2 != 0xA3:  # neither str8 (0xa1) nor sym8 (0xa3)
                        return None
                    m = buf[q + 1]
                    if lengths[m] and (name := raw.get(buf[q:q + 2 + m])) is not None:
                        q += 2 + m
                        c = buf[q]
                        if c == 0xA1:
                            start = q + 2
                            q = start + buf[q + 1]
                            ap[name] = buf[start:q].decode()
                        elif c == 0x55 or c == 0x54 or c == 0x51:
                            v = buf[q + 1]
                            ap[name] = v - 256 if v > 127 else v
                            q += 2
                        else:
                            ap[name], q = _decode(buf, q)
                    else:  # not wanted: jump over the value
                        q += 2 + m
                        s = step[buf[q]]
                        if s > 0:
                            q += s
                        elif s == 0:
                            q += 2 + buf[q + 1]
                        elif s == -4:
                            q += 5 + u32(buf, q + 1)[0]
                        else:
                            return None
                if q != end:  # (q only grows: an item past the end is caught here)
                    return None
                left -= 1
                if not left:
                    return p, ap
        elif code == 0x73:  # PROPERTIES (only the first one counts)
            if p is None and properties is not None:
                if c == 0xD0:
                    q = pos + 12
                elif c == 0xC0:
                    q = pos + 6
                    count = (size >> 16) & 0xFF
                elif c == 0x45 or c == 0x40:
                    q = end
                    count = 0
                else:
                    return None
                if count > end - q:
                    return None
                fields = properties.fields
                first = properties.first_field
                stop = properties.last_field + 1
                if stop > count:
                    stop = count
                p = {}
                i = 0
                while i < stop:
                    c = buf[q]
                    if i < first or c == 0x40 or (name := fields[i]) is None:
                        s = step[c]
                        if s > 0:
                            q += s
                        elif s == 0:
                            q += 2 + buf[q + 1]
                        elif s == -4:
                            q += 5 + u32(buf, q + 1)[0]
                        else:
                            return None
                    elif c == 0xA1:
                        start = q + 2
                        q = start + buf[q + 1]
                        p[name] = buf[start:q].decode()
                    else:
                        p[name], q = _decode(buf, q)
                    i += 1
                # every item walked: they must fill the list; else nothing further is wanted
                if q != end if stop == count else q > end:
                    return None
                left -= 1
                if not left:
                    return p, ap
        elif code < 0x70 or code > 0x78:  # not HEADER .. FOOTER
            return None
        pos = end
    return ({} if p is None and properties is not None else p,
            {} if ap is None and application_properties is not None else ap)


def _pick_map(buf: bytes, vstart: int, end: int, picker: KeyPicker) -> dict:
    """The entries of the map section at ``vstart`` whose keys ``picker`` holds.

    Keys in str8/sym8 form are compared as raw bytes; other keys are decoded (a char or str32 key
    can equal a wanted string). A key seen twice keeps its last value, as in a decoded dict.
    """
    c = buf[vstart]
    if c == 0xD1:
        size, count = _sc32(buf, vstart + 1)
        pos = vstart + 9
        mend = vstart + 5 + size
    elif c == 0xC1:
        pos = vstart + 3
        mend = vstart + 2 + buf[vstart + 1]
        count = buf[vstart + 2]
    elif c == 0x40 and end == vstart + 1:
        return {}
    else:
        raise MessageFormatError(f"section value at byte {vstart} is not a map")
    if mend != end:
        raise _Bad("map size does not match the section", vstart)
    if count & 1:
        raise _Bad("map with an odd number of items", pos)
    if count > end - pos:
        raise _Bad(f"count {count} cannot fit in {end - pos} bytes", pos)
    out = {}
    raw = picker.raw
    lengths = picker.lengths
    names = picker.names
    width = _WIDTH
    for _ in range(count >> 1):
        c = buf[pos]
        if c == 0xA1 or c == 0xA3:  # str8 / sym8 key: compare its bytes
            n = buf[pos + 1]
            kend = pos + 2 + n
            name = raw.get(buf[pos:kend]) if lengths[n] else None
            pos = kend
        else:
            key, pos = _decode(buf, pos)
            try:
                name = key if key in names else None
            except TypeError:
                raise _Bad("map key is not hashable", pos) from None
        c = buf[pos]
        if name is None:  # not wanted: jump over it by its size
            w = width[c]
            if w == -1:
                pos += 2 + buf[pos + 1]
            elif w == -4:
                pos += 5 + _u32(buf, pos + 1)[0]
            elif w is None:
                pos = _skip(buf, pos)
            else:
                pos += 1 + w
        elif c == 0xA1:
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise _Bad("map entry runs past the map", pos)
            out[name] = buf[start:pos].decode()
        else:
            out[name], pos = _decode(buf, pos)
    if pos != end:
        raise _Bad(f"map ends at {pos}, its size says {end}", pos)
    return out


def _pick_list(buf: bytes, vstart: int, end: int, picker: KeyPicker) -> dict:
    """The non-null items of the properties list at ``vstart`` at the positions named in
    ``picker.fields``, keyed by those names; the walk ends after the last of them."""
    c = buf[vstart]
    if c == 0xD0:
        size, count = _sc32(buf, vstart + 1)
        pos = vstart + 9
        lend = vstart + 5 + size
    elif c == 0xC0:
        pos = vstart + 3
        lend = vstart + 2 + buf[vstart + 1]
        count = buf[vstart + 2]
    elif (c == 0x45 or c == 0x40) and end == vstart + 1:
        return {}
    else:
        raise MessageFormatError(f"section 0x73 at byte {vstart} is not a list")
    if lend != end:
        raise _Bad("list size does not match the section", vstart)
    if count > end - pos:
        raise _Bad(f"count {count} cannot fit in {end - pos} bytes", pos)
    out = {}
    width = _WIDTH
    fields = picker.fields
    last = picker.last_field
    for i in range(count):
        c = buf[pos]
        name = fields[i] if i <= last else None
        if name is None or c == 0x40:
            w = width[c]
            if w == -1:
                pos += 2 + buf[pos + 1]
            elif w == -4:
                pos += 5 + _u32(buf, pos + 1)[0]
            elif w is None:
                pos = _skip(buf, pos)
            else:
                pos += 1 + w
        elif c == 0xA1:
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise _Bad("list item runs past the list", pos)
            out[name] = buf[start:pos].decode()
        else:
            value, pos = _decode(buf, pos)
            if value is not None:
                out[name] = value
        if i == last:  # fields are positional: nothing further is wanted
            if pos > end:
                raise _Bad("list item runs past the list", pos)
            return out
    if pos != end:
        raise _Bad(f"list ends at {pos}, its size says {end}", pos)
    return out


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
