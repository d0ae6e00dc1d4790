"""The broker's byte edits of stored messages: what it stores for a published message, and the
``x-stream-offset`` it adds when it sends one.

Why: the broker stores the bytes a publisher sent and sends them back; building a
``proton.Message`` costs ~75 µs, so its hot paths (check the sections and their order, strip
delivery annotations, read the filter value, add ``x-stream-offset``) work on the encoded bytes
(``_sections`` finds them). ``stored_form`` is where the order rule of ``_sections`` is applied:
what it returns is in that order, which ``with_stream_offset`` (and every reader) relies on.
"""

from __future__ import annotations

import struct
from typing import Any

from amqp_stream.wire._codec import (FAILURES, I64, SIZE_COUNT8, SIZE_COUNT32, Bad, format_error,
                                     raw_decode, raw_skip)
from amqp_stream.wire._errors import BadFilterValue, MessageFormatError, WireError
from amqp_stream.wire._sections import (DELIVERY_ANNOTATIONS, FOOTER, HEADER,
                                        MESSAGE_ANNOTATIONS, RANK_AFTER, SECTION_RANK,
                                        first_sections, in_canonical_order, section_at)

__all__ = ["filter_value", "stored_form", "with_stream_offset", "FILTER_VALUE_NAME",
           "MAX_FILTER_VALUES", "FilterValues"]

# the section that opens a new message-annotations section: 0x00 smallulong 0x72
MESSAGE_ANNOTATIONS_PREFIX = b"\x00\x53\x72"
STREAM_OFFSET_KEY = b"\xa3\x0fx-stream-offset"  # sym8 "x-stream-offset"
FILTER_VALUE_NAME = "x-stream-filter-value"
FILTER_VALUE_KEY = b"\xa3\x15x-stream-filter-value"  # sym8 "x-stream-filter-value"
_FILTER_VALUE_BYTES = FILTER_VALUE_NAME.encode("ascii")
_STREAM_OFFSET_BYTES = b"x-stream-offset"
_LONG = b"\x81"  # x-stream-offset is always written as a full 8-byte long
_ENTRY_HEAD = STREAM_OFFSET_KEY + _LONG  # then the offset's 8 bytes
_ENTRY_SIZE = len(_ENTRY_HEAD) + 8
# a new annotations section holding only x-stream-offset, up to the offset's 8 bytes
_NEW_SECTION_HEAD = (MESSAGE_ANNOTATIONS_PREFIX + b"\xc1" + SIZE_COUNT8.pack(_ENTRY_SIZE + 1, 2)
                     + _ENTRY_HEAD)
_HEADER_PREFIX = b"\x00\x53\x70"
#: most values one message may carry in a list (an extension: each one sets bits in the chunk's
#: Bloom filter, and a filter of at most 255 bytes says little about more)
MAX_FILTER_VALUES = 64

FilterValues = str | tuple[str, ...] | None
"""A message's ``x-stream-filter-value``: one string (RabbitMQ), several (a list or array of
strings: our extension), or None."""


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
    raise Bad("message annotations are not a map", vstart)


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
            found, vpos = raw_decode(buf, pos)
            hit = found == key[2:].decode("ascii")
        else:
            vpos = raw_skip(buf, pos)
            hit = False
        vend = raw_skip(buf, vpos)
        if vend > end:
            raise Bad("annotation runs past its map", pos)
        if hit:
            return pos, vpos, vend
        pos = vend
    if pos != end:
        raise Bad("message annotations map size does not match its entries", pos)
    return None


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
    return raw_decode(data, entry[1])[0]


def _checked_filter_value(value: Any) -> FilterValues:
    if value is None or type(value) is str:
        return value
    if type(value) is list:  # a list or an array (the codec decodes both as a list)
        if not all(type(v) is str for v in value):
            raise BadFilterValue(f"{FILTER_VALUE_NAME} must be a string or a list of strings")
        if len(value) > MAX_FILTER_VALUES:
            raise BadFilterValue(f"{FILTER_VALUE_NAME} holds {len(value)} values, "
                                 f"at most {MAX_FILTER_VALUES} are allowed")
        return tuple(value) if value else None
    raise BadFilterValue(f"{FILTER_VALUE_NAME} must be a string or a list of strings, "
                         f"not {type(value).__name__}")


def stored_form(data: Any) -> tuple[bytes, FilterValues]:
    """What the broker stores for a published message, in one walk over its sections: the bytes
    in the order rule's order (``_sections``) without delivery annotations, and the
    ``x-stream-filter-value``: a string, a tuple of strings (sent as a list or array of strings,
    an extension; an empty one is None), or None.

    A message already in order (every client we know but one) costs no copy beyond cutting out
    its delivery annotations; one sent in another order is rewritten in order. Raises
    ``MessageFormatError`` when the framing of any section or the annotations map is wrong, or a
    section is out of place (a second header, annotations, properties, application properties or
    footer; anything after the footer: the error names it), ``BadFilterValue`` for a filter value
    that is not a string or a list of at most ``MAX_FILTER_VALUES`` strings.
    """
    if type(data) is not bytes:
        data = bytes(data)
    if not data:
        raise MessageFormatError("empty message")
    da = ma = None
    floor = HEADER  # the lowest SECTION_RANK the next section may have
    pos = 0
    n = len(data)
    rank = SECTION_RANK
    after = RANK_AFTER
    try:
        while pos < n:
            code, vstart, end = section_at(data, pos)
            if rank[code] < floor:  # out of place: the rare way, from the start
                data = in_canonical_order(data, DELIVERY_ANNOTATIONS)
                da = None
                found = first_sections(data, MESSAGE_ANNOTATIONS)[1]
                ma = None if found is None else found[1:]
                break
            floor = after[code]
            if code == MESSAGE_ANNOTATIONS:
                ma = (vstart, end)
            elif code == DELIVERY_ANNOTATIONS:
                da = (pos, end)
            pos = end
        value = None if ma is None else _filter_value_at(data, ma[0], ma[1])
    except FAILURES as exc:
        raise format_error(exc, 0) from None
    if da is not None:
        data = b"".join((data[:da[0]], data[da[1]:]))
    return data, _checked_filter_value(value)


def filter_value(data: Any) -> FilterValues:
    """The ``x-stream-filter-value`` message annotation ``stored_form`` finds (a string or a
    tuple of strings), or None if absent/null/empty; it raises what ``stored_form`` raises."""
    return stored_form(data)[1]


def with_stream_offset(data: Any, offset: int) -> bytes:
    """The message with message annotation ``x-stream-offset`` = ``offset`` (an AMQP long).

    The existing annotations map is extended in place (re-headed as a map8 when it fits, else a
    map32; an existing ``x-stream-offset`` entry is replaced), or a new annotations section is
    inserted after the header and delivery annotations. Every other byte is unchanged.

    ``data`` is a stored form (``stored_form``): its sections in the order rule's order, so the
    annotations, if any, come before the first section ranked after them. Raises
    ``MessageFormatError`` for bad framing, ``WireError`` for an offset that is not a long.

    Every AMQP delivery comes through here, so the shapes nearly every message has (no header or
    one encoded as list0/list8, then no delivery annotations) are placed from a few bytes; the
    general walk (``first_sections``) cost ~1.2 µs a message, as much as proton's engine spends
    on the whole delivery. The sections after the annotations are not read again: they were
    checked when the message was stored.
    """
    try:
        packed = I64.pack(offset)
    except (struct.error, TypeError):
        raise WireError(f"offset {offset} does not fit an AMQP long") from None
    if type(data) is not bytes:
        data = bytes(data)
    pos = 0
    if data.startswith(_HEADER_PREFIX):
        c = data[3] if len(data) > 4 else 0
        pos = 4 if c == 0x45 else 5 + data[4] if c == 0xC0 else -1  # list0, list8, other
    code = data[pos + 2] if 0 <= pos and len(data) > pos + 3 and data.startswith(b"\x00\x53", pos) else 0
    if MESSAGE_ANNOTATIONS < code <= FOOTER:  # none: a new section in front of the next one
        return b"".join((data[:pos], _NEW_SECTION_HEAD, packed, data[pos:]))
    try:
        if code == MESSAGE_ANNOTATIONS:  # the section is its map: the map's header ends it
            vstart = pos + 3
            first, mend, count = _map_header(data, vstart)
            if mend > len(data):
                raise Bad("message annotations run past the end", vstart)
            end = mend
        else:
            after, found = first_sections(data, MESSAGE_ANNOTATIONS)
            if found is None:
                return b"".join((data[:after], _NEW_SECTION_HEAD, packed, data[after:]))
            _, vstart, end = found
            first, mend, count = _map_header(data, vstart)
            if mend != end:
                raise Bad("message annotations map size does not match the section", vstart)
        old = None
        if data.find(_STREAM_OFFSET_BYTES, first, mend) >= 0:
            old = _find_key(data, first, mend, count, STREAM_OFFSET_KEY)
    except FAILURES as exc:
        raise format_error(exc, 0) from None
    if old is None:
        parts = [data[first:mend], _ENTRY_HEAD, packed]
        size = mend - first + _ENTRY_SIZE
        count += 2
    else:
        parts = [data[first:old[0]], data[old[2]:mend], _ENTRY_HEAD, packed]
        size = mend - first - (old[2] - old[0]) + _ENTRY_SIZE
    if size + 1 <= 255 and count <= 255:
        head = b"\xc1" + SIZE_COUNT8.pack(size + 1, count)
    else:
        head = b"\xd1" + SIZE_COUNT32.pack(size + 4, count)
    return b"".join((data[:vstart], head, *parts, data[end:]))
