"""Lazy access to the filterable sections of an AMQP 1.0 message.

A ``MessageView`` exposes each section as a dict, decoded on first access and cached:
- ``header``: keys durable, priority, ttl, first_acquirer, delivery_count (present fields only);
- ``properties``: keys message_id, user_id, to, subject, reply_to, correlation_id, content_type,
  content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence,
  reply_to_group_id (present, non-null fields only);
- ``application_properties``, ``message_annotations``, ``footer``: the section's map.
An absent section is an empty dict. Values use the representation of ``_codec``. The
first section of each kind counts (stored bytes have one: the order rule of ``_sections``).

Filters know at compile time which keys they read, so they need not decode whole sections:
``view.pick(properties_picker, application_properties_picker)`` (or ``pick_properties`` /
``pick_application_properties`` for one section) returns dicts with just those keys, found as
``_pick`` describes. For a view whose section is already decoded, or one built from
dicts, a pick is the whole section dict (a superset: callers only ``get`` their keys).
"""

from __future__ import annotations

import struct
from typing import Any, overload

import proton

from amqp_stream.wire._codec import (FAILURES, SIZE_COUNT32, U32, WIDTH, Bad, format_error,
                                     map_entries, raw_decode, raw_skip)
from amqp_stream.wire._errors import MessageFormatError
from amqp_stream.wire._pick import KeyPicker, fast_pick, pick_list, pick_map
from amqp_stream.wire._sections import (APPLICATION_PROPERTIES, FOOTER, HEADER, HEADER_FIELDS,
                                        MESSAGE_ANNOTATIONS, PROPERTIES, PROPERTY_FIELDS,
                                        descriptor_at)

__all__ = ["MessageView", "as_view"]

_new = object.__new__

def _scan(buf: bytes, pos: int, spans: dict[int, tuple[int, int]], want: int) -> int:
    """Record sections from ``pos`` in ``spans`` until one with code ``want`` (or the end).

    Returns where scanning stopped. Only the first section of each code is recorded.
    """
    n = len(buf)
    width = WIDTH
    u32 = U32.unpack_from
    while pos < n:
        try:
            if buf[pos] == 0x00 and buf[pos + 1] == 0x53:
                code = buf[pos + 2]
                vstart = pos + 3
            elif buf[pos] == 0x00:
                code, vstart = descriptor_at(buf, pos + 1)
            else:
                raise Bad("expected a described section", pos)
            if not HEADER <= code <= FOOTER:
                raise Bad(f"unknown section descriptor 0x{code:x}", pos)
            w = width[buf[vstart]]
            if w is None:
                end = raw_skip(buf, vstart)
            elif w == -4:
                end = vstart + 5 + u32(buf, vstart + 1)[0]
            elif w == -1:
                end = vstart + 2 + buf[vstart + 1]
            else:
                end = vstart + 1 + w
        except (IndexError, struct.error):
            raise Bad("truncated section", pos) from None
        if end > n:
            raise Bad("section runs past the end of the message", pos)
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
    _header: dict | None
    _properties: dict | None
    _application_properties: dict | None
    _message_annotations: dict | None
    _footer: dict | None
    _data: bytes | None  # None: a view built from dicts
    _spans: dict[int, tuple[int, int]] | None  # (value start, end) of the sections found so far
    _scanned: int  # where the section walk stopped

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
        self._spans = None
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

    # a section with a picker is always read: the overloads say so to the type checker
    @overload
    def pick(self, properties: KeyPicker, application_properties: KeyPicker) -> tuple[dict, dict]:
        ...

    @overload
    def pick(self, properties: None, application_properties: KeyPicker) -> tuple[None, dict]:
        ...

    @overload
    def pick(self, properties: KeyPicker, application_properties: None) -> tuple[dict, None]:
        ...

    @overload
    def pick(self, properties: KeyPicker | None, application_properties: KeyPicker | None
             ) -> tuple[dict | None, dict | None]:
        ...

    def pick(self, properties: KeyPicker | None,
             application_properties: KeyPicker | None) -> tuple[dict | None, dict | None]:
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
                found = fast_pick(data, properties, application_properties)
            except FAILURES:
                found = None
            if found is not None:
                return found
        return (None if properties is None else self._exact_properties(properties),
                None if application_properties is None
                else self._exact_application_properties(application_properties))

    def pick_application_properties(self, picker: KeyPicker) -> dict:
        """The application properties with (at least) the keys of ``picker`` that are present.

        (``pick(None, picker)[1]``, with the decoded-dict case first: one call for it.)
        """
        value = self._application_properties
        if value is not None:
            return value
        return self.pick(None, picker)[1]

    def pick_properties(self, picker: KeyPicker) -> dict:
        """The properties with (at least) the fields of ``picker`` that are present."""
        value = self._properties
        if value is not None:
            return value
        return self.pick(picker, None)[0]

    def _exact_application_properties(self, picker: KeyPicker) -> dict:
        value = self._application_properties
        if value is not None:
            return value
        data = self._data
        if data is None:
            return {}
        span = self._span(data, APPLICATION_PROPERTIES)
        if span is None:
            return {}
        vstart = span[0]
        try:
            return pick_map(data, vstart, span[1], picker)
        except FAILURES as exc:
            raise format_error(exc, vstart) from None

    def _exact_properties(self, picker: KeyPicker) -> dict:
        value = self._properties
        if value is not None:
            return value
        data = self._data
        if data is None:
            return {}
        span = self._span(data, PROPERTIES)
        if span is None:
            return {}
        vstart = span[0]
        try:
            return pick_list(data, vstart, span[1], picker)
        except FAILURES as exc:
            raise format_error(exc, vstart) from None

    def _span(self, data: bytes, code: int) -> tuple[int, int] | None:
        """(value start, end) of the first section with ``code`` in ``data`` (the view's bytes),
        scanning on as far as needed."""
        spans = self._spans
        if spans is None:
            spans = self._spans = {}
        span = spans.get(code)
        if span is None and self._scanned < len(data):  # read on up to the section asked for
            try:
                self._scanned = _scan(data, self._scanned, spans, code)
            except FAILURES as exc:
                raise format_error(exc, self._scanned) from None
            span = spans.get(code)
        return span

    def _load(self, code: int) -> dict:
        data = self._data
        if data is None:  # a view built without bytes: a missing section is empty
            return {}
        span = self._span(data, code)
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
                raise Bad("map size does not match the section", vstart)
            return map_entries(data, vstart + 9, end, count)
        value, pos = raw_decode(data, vstart)
    except FAILURES as exc:
        raise format_error(exc, vstart) from None
    if pos != end:
        raise MessageFormatError(f"section value at byte {vstart} is malformed")
    if value is None:
        return {}
    if code == HEADER or code == PROPERTIES:
        if type(value) is not list:
            raise MessageFormatError(f"section 0x{code:x} at byte {vstart} is not a list")
        out = {}
        for name, field in zip(HEADER_FIELDS if code == HEADER else PROPERTY_FIELDS, value, strict=False):
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
