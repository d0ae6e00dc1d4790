"""The protocol's types (integers, string, bytes, arrays, maps, offset specs) and the Frame base.

Strategy: each type of PROTOCOL.adoc is a small codec object with ``read(buf, pos) -> (value,
pos)`` and ``write(out, value)``; a frame class lists one per field and ``Frame`` walks them,
so ``frames`` declares a layout once for both directions. Every read is bounds-checked
(``struct.error`` and ``UnicodeDecodeError`` are turned into ``FrameError`` by
``frames.decode``); an array's count is checked against the bytes left before anything is
allocated.

Layout (big-endian)::

    string    length:u16 | UTF-8   (PROTOCOL.adoc: i16, -1 = null; RabbitMQ reads it unsigned)
    bytes     length:i32 (-1 = null) | bytes
    [T]       count:i32 | T * count
    map       [string value]
    offset    type:u16 | value     value: u64 for type 4 (offset), i64 for 5 (timestamp), else none
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar, dataclass_transform

from amqp_stream.streamproto.constants import OffsetType, ResponseCode
from amqp_stream.streamproto.errors import FrameError

U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")

_MAX_STRING = 0xFFFF


def _bad(message: str) -> FrameError:
    return FrameError(message, ResponseCode.UNKNOWN_FRAME)


# ---- field codecs -------------------------------------------------------------------------
class _Int:
    __slots__ = ("s",)

    def __init__(self, s: struct.Struct):
        self.s = s

    def read(self, buf: memoryview, pos: int) -> tuple[int, int]:
        return self.s.unpack_from(buf, pos)[0], pos + self.s.size

    def write(self, out: bytearray, value: int) -> None:
        out += self.s.pack(value)


class _String:
    """string: RabbitMQ reads the length as unsigned (``?STRING`` in rabbit_stream_core), so a
    string may hold up to 65535 bytes and there is no null (-1 is a length of 65535)."""

    __slots__ = ()

    def read(self, buf: memoryview, pos: int) -> tuple[str, int]:
        (n,) = U16.unpack_from(buf, pos)
        pos += 2
        if pos + n > len(buf):
            raise _bad("string runs past the frame")
        return str(buf[pos:pos + n], "utf-8"), pos + n

    def write(self, out: bytearray, value: str) -> None:
        data = value.encode("utf-8")
        if len(data) > _MAX_STRING:
            raise ValueError(f"string of {len(data)} bytes is longer than {_MAX_STRING}")
        out += U16.pack(len(data))
        out += data


class _Bytes:
    """bytes with an i32 length, -1 read as ``b""`` (``short``: a u16 length, as RabbitMQ
    writes a SASL challenge)."""

    __slots__ = ("head",)

    def __init__(self, short: bool = False):
        self.head = U16 if short else I32

    def read(self, buf: memoryview, pos: int) -> tuple[bytes, int]:
        (n,) = self.head.unpack_from(buf, pos)
        pos += self.head.size
        if n == -1:
            return b"", pos
        if n < 0 or pos + n > len(buf):
            raise _bad(f"bytes length {n}")
        return bytes(buf[pos:pos + n]), pos + n

    def write(self, out: bytearray, value: bytes) -> None:
        out += self.head.pack(len(value))
        out += value


class _Array:
    """[T]; a tuple of items. The count is checked against the bytes left (bounded memory)."""

    __slots__ = ("item", "min_size")

    def __init__(self, item: Any, min_size: int):
        self.item, self.min_size = item, min_size

    def read(self, buf: memoryview, pos: int) -> tuple[tuple, int]:
        (n,) = I32.unpack_from(buf, pos)
        pos += 4
        if n < 0 or n * self.min_size > len(buf) - pos:
            raise _bad(f"array of {n} items cannot fit in the frame")
        items = []
        read = self.item.read
        for _ in range(n):
            value, pos = read(buf, pos)
            items.append(value)
        return tuple(items), pos

    def write(self, out: bytearray, values: Sequence) -> None:
        out += I32.pack(len(values))
        write = self.item.write
        for value in values:
            write(out, value)


class _Record:
    """Several fields one after the other, as a tuple (or as ``make(*fields)``)."""

    __slots__ = ("fields", "make")

    def __init__(self, *fields: Any, make: Any = None):
        self.fields, self.make = fields, make

    def read(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        values = []
        for f in self.fields:
            value, pos = f.read(buf, pos)
            values.append(value)
        return (self.make(*values) if self.make else tuple(values)), pos

    def write(self, out: bytearray, value: Sequence) -> None:
        if len(value) != len(self.fields):
            raise ValueError(f"expected {len(self.fields)} fields, got {value!r}")
        for f, v in zip(self.fields, value, strict=True):
            f.write(out, v)


class _Map:
    """[key value] as a dict (a later duplicate key wins, as in RabbitMQ's parse_map)."""

    __slots__ = ("pair",)

    def __init__(self, value: Any, min_size: int):
        self.pair = _Array(_Record(_String(), value), min_size)

    def read(self, buf: memoryview, pos: int) -> tuple[dict, int]:
        pairs, pos = self.pair.read(buf, pos)
        return dict(pairs), pos

    def write(self, out: bytearray, value: Mapping) -> None:
        self.pair.write(out, list(value.items()))


class _Optional:
    """A field RabbitMQ leaves out when empty: absent at the end of the frame = ``empty``."""

    __slots__ = ("field", "empty")

    def __init__(self, field: Any, empty: Any):
        self.field, self.empty = field, empty

    def read(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        if pos == len(buf):
            return self.empty, pos
        return self.field.read(buf, pos)

    def write(self, out: bytearray, value: Any) -> None:
        if value != self.empty:
            self.field.write(out, value)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a subscription starts: ``OffsetSpec.first()``, ``.offset(n)``, ``.timestamp(ms)``..."""

    type: int
    value: int = 0

    @classmethod
    def first(cls) -> OffsetSpec:
        return cls(OffsetType.FIRST)

    @classmethod
    def last(cls) -> OffsetSpec:
        return cls(OffsetType.LAST)

    @classmethod
    def next(cls) -> OffsetSpec:
        return cls(OffsetType.NEXT)

    @classmethod
    def offset(cls, offset: int) -> OffsetSpec:
        return cls(OffsetType.OFFSET, offset)

    @classmethod
    def timestamp(cls, ms: int) -> OffsetSpec:
        return cls(OffsetType.TIMESTAMP, ms)


class _Offset:
    """offset spec; ``allow_none``: type 0 (ConsumerUpdate's answer) is valid, and there a
    type without a value may still be followed by 8 bytes, which are ignored (RabbitMQ reads
    the answer's value as the rest of the frame; rstream always writes a 64-bit one)."""

    __slots__ = ("allow_none",)

    def __init__(self, allow_none: bool = False):
        self.allow_none = allow_none

    def read(self, buf: memoryview, pos: int) -> tuple[OffsetSpec, int]:
        (kind,) = U16.unpack_from(buf, pos)
        pos += 2
        if kind == OffsetType.OFFSET:
            return OffsetSpec(OffsetType.OFFSET, U64.unpack_from(buf, pos)[0]), pos + 8
        if kind == OffsetType.TIMESTAMP:
            return OffsetSpec(OffsetType.TIMESTAMP, I64.unpack_from(buf, pos)[0]), pos + 8
        if OffsetType.FIRST <= kind <= OffsetType.NEXT or (kind == 0 and self.allow_none):
            if self.allow_none and len(buf) - pos == 8:
                pos += 8
            return OffsetSpec(OffsetType(kind)), pos
        raise _bad(f"offset type {kind}")

    def write(self, out: bytearray, spec: OffsetSpec) -> None:
        out += U16.pack(spec.type)
        if spec.type == OffsetType.OFFSET:
            out += U64.pack(spec.value)
        elif spec.type == OffsetType.TIMESTAMP:
            out += I64.pack(spec.value)


_u8, _u16, _u32, _u64, _i64 = _Int(U8), _Int(U16), _Int(U32), _Int(U64), _Int(I64)
_string = _String()
_properties = _Map(_string, 4)
_strings = _Array(_string, 2)


class _Bool:
    def read(self, buf: memoryview, pos: int) -> tuple[bool, int]:
        (v,) = U8.unpack_from(buf, pos)
        if v > 1:
            raise _bad(f"boolean {v}")
        return bool(v), pos + 1

    def write(self, out: bytearray, value: bool) -> None:
        out += U8.pack(1 if value else 0)


_REGISTRY: dict[tuple[int, int], type[Frame]] = {}


class Frame:
    """A decoded frame. ``KEY`` includes the response flag; ``VERSION`` is the command version."""

    __slots__ = ()
    KEY: ClassVar[int]
    VERSION: ClassVar[int] = 1
    FIELDS: ClassVar[tuple[Any, ...]] = ()

    @property
    def key(self) -> int:
        return self.KEY

    @property
    def version(self) -> int:
        return self.VERSION

    NAMES: ClassVar[tuple[str, ...]] = ()

    def encode_content(self, out: bytearray) -> None:
        for f, name in zip(self.FIELDS, self.NAMES, strict=True):
            f.write(out, getattr(self, name))

    @classmethod
    def decode_content(cls, buf: memoryview, pos: int, key: int, version: int) -> Frame:
        values = []
        for f in cls.FIELDS:
            value, pos = f.read(buf, pos)
            values.append(value)
        if pos != len(buf):
            raise _bad(f"{len(buf) - pos} bytes after {cls.__name__}")
        return cls(*values)


_F = TypeVar("_F", bound=type)


@dataclass_transform(frozen_default=True)
def _frame(key: int, *fields: Any, version: int = 1,
           also: tuple[int, ...] = ()) -> Callable[[_F], _F]:
    """Class decorator: a frozen dataclass whose fields are coded by ``fields``, registered."""

    def wrap(cls: Any) -> Any:
        cls.KEY, cls.VERSION, cls.FIELDS = key, version, fields
        cls = dataclass(frozen=True, slots=True)(cls)
        cls.NAMES = tuple(f.name for f in dataclasses.fields(cls))
        assert len(cls.NAMES) == len(fields), cls
        for k in (key, *also):
            _REGISTRY[(k, version)] = cls
        return cls

    return wrap
