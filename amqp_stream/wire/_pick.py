"""Picking a filter's few keys out of the properties and application-properties sections.

Filters know at compile time which keys they read: a ``KeyPicker`` holds them (and their raw
str8/sym8 encodings). On a fresh view one loop (``fast_pick``) finds the sections and walks the
wanted ones once, comparing raw key bytes (the map) or counting fields (the properties list, up
to the last one wanted), decoding only the values asked for and jumping over the rest by their
size fields (one table lookup per item, ``_STEP``), and stops once both sections are read:
decoding whole maps in pure Python (~0.4 µs an entry) was most of the cost of filtering a
stored message. Any encoding the one-pass walk does not take (other descriptors, described
values to jump over, non-string keys, ...) goes the exact, general way (``pick_map``,
``pick_list``, over the section found by ``MessageView``). Both check the framing of
everything they walk (sizes, counts, constructors, section ends) and decode what they return as
the whole section would be decoded; the contents of entries not returned (e.g. another string's
UTF-8) are not looked at.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable

from amqp_stream.wire._codec import SIZE_COUNT32, U32, WIDTH, Bad, raw_decode, raw_skip
from amqp_stream.wire._errors import MessageFormatError
from amqp_stream.wire._sections import PROPERTY_FIELDS, SECTION_HEAD, SECTION_STEP

__all__ = ["KeyPicker", "fast_pick", "pick_map", "pick_list"]

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


_head = SECTION_HEAD.unpack_from
_PAD = bytes(SECTION_HEAD.size)  # the zeros after a short last section (never used)
_u32 = U32.unpack_from
_sc32 = SIZE_COUNT32.unpack_from
#: per constructor, how to jump over an item: 1 + its fixed width (> 0), 0 (size:u8 follows),
#: -4 (size:u32 follows), -9 (not sized by the constructor: described, or no such constructor)
_STEP = tuple(-9 if w is None else 1 + w if w >= 0 else 0 if w == -1 else -4 for w in WIDTH)


def fast_pick(buf: bytes, properties: KeyPicker | None, application_properties: KeyPicker | None
               ) -> tuple[dict | None, dict | None] | None:
    """``MessageView.pick`` of a fresh view in one pass over the sections, or None when unsure.

    Every section up to the last one wanted must have the usual smallulong descriptor and a
    value sized by its constructor, within the message. The properties section must be a
    list8/list32 (or list0/null: nothing in it), the application properties a map8/map32 (or
    null) of str8/sym8 keys; the items jumped over must be sized by their constructors (wanted
    values are decoded as the exact walk decodes them). Anything else (None) goes the exact way
    (``_scan``, ``pick_map``, ``pick_list``), which also reports the errors; an exception
    raised here (truncated bytes, bad UTF-8 in a wanted string) means the same.

    One loop does it all (each Python line costs ~30 ns at this level): a section's head is one
    ``struct`` read, an item is jumped over with one table lookup (``_STEP``), a map key not
    wanted is rejected on its length byte (``KeyPicker.lengths``), the properties list is read up
    to its last wanted field only, and the walk ends once both sections are read.
    """
    p: dict[str, Any] | None = None
    ap: dict[str, Any] | None = None
    left = (properties is not None) + (application_properties is not None)
    pos = 0
    n = len(buf)
    head = _head
    sstep = SECTION_STEP
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
                            ap[name], q = raw_decode(buf, q)
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
                        p[name], q = raw_decode(buf, q)
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


def pick_map(buf: bytes, vstart: int, end: int, picker: KeyPicker) -> dict:
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
        raise Bad("map size does not match the section", vstart)
    if count & 1:
        raise Bad("map with an odd number of items", pos)
    if count > end - pos:
        raise Bad(f"count {count} cannot fit in {end - pos} bytes", pos)
    out = {}
    raw = picker.raw
    lengths = picker.lengths
    names = picker.names
    width = WIDTH
    for _ in range(count >> 1):
        c = buf[pos]
        if c == 0xA1 or c == 0xA3:  # str8 / sym8 key: compare its bytes
            n = buf[pos + 1]
            kend = pos + 2 + n
            name = raw.get(buf[pos:kend]) if lengths[n] else None
            pos = kend
        else:
            key, pos = raw_decode(buf, pos)
            try:
                name = key if key in names else None
            except TypeError:
                raise Bad("map key is not hashable", pos) from None
        c = buf[pos]
        if name is None:  # not wanted: jump over it by its size
            w = width[c]
            if w == -1:
                pos += 2 + buf[pos + 1]
            elif w == -4:
                pos += 5 + _u32(buf, pos + 1)[0]
            elif w is None:
                pos = raw_skip(buf, pos)
            else:
                pos += 1 + w
        elif c == 0xA1:
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise Bad("map entry runs past the map", pos)
            out[name] = buf[start:pos].decode()
        else:
            out[name], pos = raw_decode(buf, pos)
    if pos != end:
        raise Bad(f"map ends at {pos}, its size says {end}", pos)
    return out


def pick_list(buf: bytes, vstart: int, end: int, picker: KeyPicker) -> dict:
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
        raise Bad("list size does not match the section", vstart)
    if count > end - pos:
        raise Bad(f"count {count} cannot fit in {end - pos} bytes", pos)
    out = {}
    width = WIDTH
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
                pos = raw_skip(buf, pos)
            else:
                pos += 1 + w
        elif c == 0xA1:
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise Bad("list item runs past the list", pos)
            out[name] = buf[start:pos].decode()
        else:
            value, pos = raw_decode(buf, pos)
            if value is not None:
                out[name] = value
        if i == last:  # fields are positional: nothing further is wanted
            if pos > end:
                raise Bad("list item runs past the list", pos)
            return out
    if pos != end:
        raise Bad(f"list ends at {pos}, its size says {end}", pos)
    return out
