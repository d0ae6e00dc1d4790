"""Stored messages straight into ``batches.Columns``: one tight walk a message, no objects.

Why: the ``streamUrl`` read spent ~22 µs a message in Python (low load): ``stored_message``
decoded every section into dicts and lists with ``amqp_stream.wire``'s general decoder, built a
``_Message``, and ``Columns.add`` took it apart again. Here one walk over a message's bytes
reads the usual encodings inline (``0x00 0x53`` smallulong section descriptors, map8/map32 and
list8/list32/list0 sections, str8 and sym8 keys and values, the small and fixed-width numbers,
booleans, null, timestamps, a data section's vbin8/vbin32) and appends its fields to the
columns' lists, the application properties' values already as the map column's text. A writer
repeats its message-annotations sections and its properties after the message id: the walk
remembers what it read of those bytes (4,096 sections of each kind, then starts again) and
looks them up instead of reading them again (~20.4 -> ~9.3 µs a message for the bench's rows:
bench/RESULTS.md, Run 8). Any other
constructor is read by ``amqp_stream.wire.decode`` in place; anything the walk does not take as
it is (another descriptor form, a repeated section, a non-text key, a repeated key, an odd
count, bytes that do not add up) makes it give the message to ``stored_message`` and
``Columns.add``, today's path, which decides (and names what is wrong). Nothing is appended
before a message is read through, so a message read halfway leaves no trace.

Both ways give the same values (``tests/spark/test_stored_columns.py`` compares them over
random messages, usual encodings and others). A batch whose messages share one shape is read
as columns by ``stored_arrays`` instead; this walk reads the other batches.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable, Collection

import proton

from amqp_stream.client.names import FILTER_VALUE
from amqp_stream.spark.batches import Columns, _text
from amqp_stream.spark.encoding import PROPERTY_ORDER
from amqp_stream.wire import decode

__all__ = ["stored_adder"]

_FILTER_KEY = FILTER_VALUE.encode("ascii")
_EXPIRY, _CREATION = PROPERTY_ORDER.index("absolute_expiry_time"), PROPERTY_ORDER.index("creation_time")
_ZERO_IS_ABSENT = {PROPERTY_ORDER.index(k) for k in ("absolute_expiry_time", "creation_time", "group_sequence")}
_SMALL_TEXT = [str(i - 256 if i > 127 else i) for i in range(256)]  # byte, smallint, smalllong
_UNSIGNED_TEXT = [str(i) for i in range(256)]  # ubyte, smalluint, smallulong
_f64 = struct.Struct(">d").unpack_from
_i64 = struct.Struct(">q").unpack_from
_i32 = struct.Struct(">i").unpack_from
_u32 = struct.Struct(">I").unpack_from
_sc32 = struct.Struct(">II").unpack_from
_symbol = proton.symbol
_timestamp = proton.timestamp
_isfinite = math.isfinite


_SEEN = 4096  # sections remembered, of each kind
_MISS = object()


class _Unusual(Exception):
    """A message the walk leaves to ``stored_message``."""


def _property(index: int, v: Any) -> Any:
    """A properties field as ``stream_read._properties`` keeps it: absent when null, empty or
    a zero time / group sequence; times in seconds."""
    if v is None or v == "" or v == b"" or (v == 0 and index in _ZERO_IS_ABSENT):
        return None
    if index == _EXPIRY or index == _CREATION:
        return int(v) / 1000.0
    return v


def _compound(data: bytes, pos: int) -> tuple[int, int, int]:
    """(first item, end, count) of the list or map whose constructor is at ``pos``."""
    c = data[pos]
    if c == 0xC0 or c == 0xC1:  # list8, map8
        return pos + 3, pos + 2 + data[pos + 1], data[pos + 2]
    if c == 0xD0 or c == 0xD1:  # list32, map32
        size, count = _sc32(data, pos + 1)
        return pos + 9, pos + 5 + size, count
    if c == 0x45:  # list0
        return pos + 1, pos + 1, 0
    raise _Unusual


def _fields(data: bytes, pos: int, end: int, count: int) -> tuple:
    """The ``count`` values of a list filling ``data[pos:end]``."""
    out: list[Any] = []
    add = out.append
    for _ in range(count):
        c = data[pos]
        if c == 0x40:
            add(None)
            pos += 1
        elif c == 0xA1:
            s = pos + 2
            pos = s + data[pos + 1]
            add(data[s:pos].decode())
        elif c == 0xA3:
            s = pos + 2
            pos = s + data[pos + 1]
            add(_symbol(data[s:pos].decode("ascii")))
        elif c == 0x83:
            add(_timestamp(_i64(data, pos + 1)[0]))
            pos += 9
        else:
            v, pos = decode(data, pos)
            add(v)
    if pos != end:
        raise _Unusual
    return tuple(out)


def _read_properties(props: tuple, indexes: tuple[int, ...]) -> tuple[int | None, tuple]:
    """(the row's timestamp in ms, the values of the property columns at ``indexes``) of a
    properties section's fields, as ``stored_message`` and ``Columns.add`` make them."""
    count = len(props)
    ts_ms = None
    if count > _EXPIRY:
        expiry = props[_EXPIRY]
        if expiry is not None and type(expiry) is not _timestamp:
            raise _Unusual  # today's path decides (int() of it, for every message)
        if count > _CREATION:
            ct = props[_CREATION]
            if ct:
                ts_ms = int(int(ct) / 1000.0 * 1000)
    return ts_ms, tuple(_property(i, props[i]) if i < count else None for i in indexes)


def _filter_value(data: bytes, pos: int, end: int, count: int) -> Any:
    """The filter value (None if none) of the annotations map of ``count`` items filling
    ``data[pos:end]``; the other entries read to check them."""
    if count & 1:
        raise _Unusual
    fv = None
    for _ in range(count >> 1):
        c = data[pos]
        if c != 0xA3 and c != 0xA1:
            raise _Unusual
        s = pos + 2
        pos = s + data[pos + 1]
        key = data[s:pos]
        if not key.isascii():
            raise _Unusual
        if data[pos] == 0xA1:
            s = pos + 2
            pos = s + data[pos + 1]
            v: Any = data[s:pos].decode()
        else:
            v, pos = decode(data, pos)
        if key == _FILTER_KEY:
            fv = v
    if pos != end:
        raise _Unusual
    return None if fv is None else str(fv)


def stored_adder(columns: Columns, wanted: Collection[str] | None = None) -> Callable[[bytes, int], None]:
    """``add(data, offset)``: the stored message ``data`` at ``offset`` as a row of ``columns``
    when its filter value is in ``wanted`` (None: every message), as
    ``columns.add(stored_message(data, offset))`` would add it."""
    from amqp_stream.spark.stream_read import stored_message  # it reads with this module
    add_offset, add_time = columns.offsets.append, columns.times.append
    add_filter_value, add_body = columns.filter_values.append, columns.bodies.append
    map_keys, map_items, map_ends = columns.map_keys, columns.map_items, columns.map_ends
    app_columns: list[tuple[Callable[[Any], None], str]] = []
    property_columns: list[tuple[Callable[[Any], None], int]] = []
    for values, (name, _, is_property, _) in zip(columns.values, columns._declared, strict=True):
        if is_property:
            property_columns.append((values.append, PROPERTY_ORDER.index(name)))
        else:
            app_columns.append((values.append, name))
    no_app: dict[str, Any] = {}
    indexes = tuple(index for _, index in property_columns)
    no_properties = (None,) * len(indexes)
    id_slots = [j for j, index in enumerate(indexes) if index == 0]  # message_id columns
    # sections seen before (a writer's messages repeat their annotations, and their properties
    # after the message id): bytes -> what they hold, emptied when full
    seen_annotations: dict[bytes, Any] = {}
    seen_properties: dict[bytes, tuple] = {}

    add_message = columns.add

    def add(data: bytes, offset: int) -> None:
        try:
            n = len(data)
            pos = 0
            fv: Any = None
            annotations_seen = have_body = False
            props_seen = False
            ts_ms = None
            declared_props: Any = no_properties
            app: dict[str, Any] | None = None
            texts: list[str | None] = []
            body: Any = None
            key: Any
            v: Any
            t: str | None
            while pos < n:
                if data[pos] or data[pos + 1] != 0x53:
                    raise _Unusual
                code = data[pos + 2]
                pos += 3
                if code == 0x74:  # application-properties
                    if app is not None:
                        raise _Unusual
                    app = {}
                    if data[pos] == 0xC1:  # map8
                        end, count = pos + 2 + data[pos + 1], data[pos + 2]
                        pos += 3
                    else:
                        pos, end, count = _compound(data, pos)
                    if count & 1:
                        raise _Unusual
                    for _ in range(count >> 1):
                        c = data[pos]
                        if c == 0xA1:
                            s = pos + 2
                            pos = s + data[pos + 1]
                            key = data[s:pos].decode()
                        else:
                            key, pos = decode(data, pos)
                            if type(key) is not str:
                                raise _Unusual
                        c = data[pos]
                        if c == 0xA1:  # str8
                            s = pos + 2
                            pos = s + data[pos + 1]
                            v = t = data[s:pos].decode()
                        elif c == 0x54 or c == 0x55 or c == 0x51:  # smallint, smalllong, byte
                            v = data[pos + 1]
                            t = _SMALL_TEXT[v]
                            if v > 127:
                                v -= 256
                            pos += 2
                        elif c == 0x82:  # double
                            v = _f64(data, pos + 1)[0]
                            t = float.__repr__(v) if _isfinite(v) else None
                            pos += 9
                        elif c == 0x81:  # long
                            v = _i64(data, pos + 1)[0]
                            t = int.__repr__(v)
                            pos += 9
                        elif c == 0x71:  # int
                            v = _i32(data, pos + 1)[0]
                            t = int.__repr__(v)
                            pos += 5
                        elif c == 0x53 or c == 0x52 or c == 0x50:  # smallulong, smalluint, ubyte
                            v = data[pos + 1]
                            t = _UNSIGNED_TEXT[v]
                            pos += 2
                        elif c == 0x41 or c == 0x42:
                            v = c == 0x41
                            t = "true" if v else "false"
                            pos += 1
                        elif c == 0x40:
                            v = t = None
                            pos += 1
                        else:
                            v, pos = decode(data, pos)
                            t = _text(v)
                        app[key] = v
                        texts.append(t)
                    if pos != end or len(app) != count >> 1:  # a repeated key: today's path
                        raise _Unusual
                elif code == 0x73:  # properties
                    if props_seen:
                        raise _Unusual
                    props_seen = True
                    if data[pos] == 0xC0:  # list8
                        end, count = pos + 2 + data[pos + 1], data[pos + 2]
                        pos += 3
                    else:
                        pos, end, count = _compound(data, pos)
                    if end > n:  # only whole sections are remembered (a cut one fails today's path too)
                        raise _Unusual
                    if count and data[pos] == 0xA1:  # a str8 message id; the rest looked up
                        s = pos + 2
                        pos = s + data[pos + 1]
                        if pos > end:
                            raise _Unusual
                        key = data[pos:end]
                        seen = seen_properties.get(key)
                        if seen is None or seen[0] != count:
                            seen = (count, *_read_properties((None, *_fields(data, pos, end, count - 1)), indexes))
                            if len(seen_properties) >= _SEEN:
                                seen_properties.clear()
                            seen_properties[key] = seen
                        _, ts_ms, declared_props = seen
                        message_id = data[s:pos].decode()
                        if id_slots:
                            declared_props = list(declared_props)
                            for j in id_slots:
                                declared_props[j] = message_id if message_id else None
                    else:
                        ts_ms, declared_props = _read_properties(_fields(data, pos, end, count), indexes)
                    pos = end
                elif code == 0x72:  # message-annotations
                    if annotations_seen:
                        raise _Unusual
                    annotations_seen = True
                    start = pos
                    pos, end, count = _compound(data, pos)
                    if end > n:
                        raise _Unusual
                    key = data[start:end]
                    fv = seen_annotations.get(key, _MISS)
                    if fv is _MISS:
                        fv = _filter_value(data, pos, end, count)
                        if len(seen_annotations) >= _SEEN:
                            seen_annotations.clear()
                        seen_annotations[key] = fv
                    pos = end
                elif code == 0x75 and not have_body and data[pos] == 0xA0:  # data: vbin8
                    s = pos + 2
                    pos = s + data[pos + 1]
                    if pos > n:
                        raise _Unusual
                    body = data[s:pos]
                    have_body = True
                else:  # another body section, or one the columns do not read: read to check it
                    v, pos = decode(data, pos)
                    if not have_body and (code == 0x75 or code == 0x76 or code == 0x77):
                        body = bytes(v) if isinstance(v, (bytearray, memoryview)) else v
                        have_body = True
            if pos != n:
                raise _Unusual
            if wanted is not None and fv not in wanted:
                return
        except Exception:  # noqa: BLE001 - today's path decides, and names what is wrong
            m = stored_message(data, offset)
            if wanted is None or m.filter_value in wanted:
                add_message(m)
            return
        add_offset(offset)
        add_time(ts_ms)
        add_filter_value(fv)
        add_body(body)
        if app is None:
            app = no_app
        else:
            map_keys.extend(app)
            map_items.extend(texts)
        map_ends.append(len(map_keys))
        get = app.get
        for append, name in app_columns:
            append(get(name))
        for (append, _index), v in zip(property_columns, declared_props, strict=True):
            append(v)

    return add
