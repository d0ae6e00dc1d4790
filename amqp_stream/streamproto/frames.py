"""Every frame of RabbitMQ's stream protocol, as bytes and as frozen dataclasses.

Strategy: this module owns the byte layout (PROTOCOL.adoc of rabbitmq-server, checked against
what ``rabbit_stream_core.erl`` really writes and reads). Control commands are declared as data:
each dataclass lists one field codec per field, and one generic walker encodes and decodes
them all, so a layout is written once for both directions. Publish, PublishConfirm and Deliver
carry the traffic and are coded by hand: Publish bodies stay ``memoryview`` slices of the
frame (one tuple per message, nothing decoded), and a Deliver's chunk is never looked into
(``deliver_head`` gives the bytes that precede a chunk sent with ``os.sendfile``).

Layout (all integers big-endian)::

    frame     size:u32 | key:u16 | version:u16 | content     size counts key..end
    key       response:1 | command:15                          0x8007 answers 0x0007
    request   key | version | correlation_id:u32 | ...
    response  key | version | correlation_id:u32 | code:u16 | ...
    string    length:i16 (-1 = null) | UTF-8
    bytes     length:i32 (-1 = null) | bytes
    [T]       count:i32 | T * count
    map       [string string]   (StreamStats: [string i64])
    offset    type:u16 | value  value: u64 for type 4 (offset), i64 for 5 (timestamp), else none

    Publish v1  publisher:u8 | count:i32 | entry * count
      simple    publishing_id:u64 | 0:1 size:31 | message
      batch     publishing_id:u64 | 1:1 compression:3 reserved:4 | records:u16
                | uncompressed_size:u32 | size:u32 | batch
    Publish v2  publisher:u8 | count:i32 | (publishing_id:u64 | filter:string | 0:1 size:31
                | message) * count
    Deliver v1  subscription:u8 | chunk
    Deliver v2  subscription:u8 | committed_chunk_id:u64 | chunk
    chunk       magic_version:u8 | type:u8 | entries:u16 | records:u32 | timestamp:i64
                | epoch:u64 | chunk_id:u64 | crc:u32 | data_length:u32 | trailer_length:u32
                | bloom_size:u8 | reserved:3 | data (entries as in Publish v1)

Quirks kept as RabbitMQ has them: Tune is sent by the server with the request key and answered
with either key; CreditResponse has no correlation id; OpenResponse leaves out an empty
property map and SaslAuthenticateResponse an empty challenge (which it writes with a 16-bit
length); Subscribe may leave out its properties entirely. Decoding is strict otherwise: a
truncated field, trailing bytes, an array count that the bytes cannot hold, an unknown key or
version all raise ``FrameError`` with ``ResponseCode.UNKNOWN_FRAME``.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

from amqp_stream.streamproto.constants import RESPONSE_FLAG, Key, OffsetType, ResponseCode
from amqp_stream.streamproto.errors import FrameError

# ---- layouts ------------------------------------------------------------------------------
FRAME_SIZE = struct.Struct(">I")            # size of what follows
FRAME_HEAD = struct.Struct(">IHH")          # size, key, version
COMMAND_HEAD = struct.Struct(">HH")         # key, version
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
I16 = struct.Struct(">h")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
I64 = struct.Struct(">q")
PUBLISH_HEAD = struct.Struct(">Bi")         # publisher id, message count
SIMPLE_ENTRY = struct.Struct(">QI")         # publishing id, 0:1 size:31
FILTERED_ENTRY = struct.Struct(">Qh")       # publishing id, filter value length (-1 = none)
BATCH_ENTRY = struct.Struct(">BHII")        # 1:1 compression:3 reserved:4, records, uncompressed, size
ENTRY_SIZE = U32                            # 0:1 size:31 of a simple entry
CONFIRM_HEAD = struct.Struct(">IHHBi")      # size, key, version, publisher id, count
PUBLISHING_ERROR = struct.Struct(">QH")     # publishing id, code
DELIVER_HEAD_V1 = struct.Struct(">IHHB")    # size, key, version, subscription id
DELIVER_HEAD_V2 = struct.Struct(">IHHBQ")   # ... committed chunk id
CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB3x")  # 48 bytes, see ChunkHeader
COMMAND_VERSION = struct.Struct(">HHH")     # key, min version, max version

_BATCH_BIT = 0x80
_SIZE_MASK = 0x7FFF_FFFF
_MAX_STRING = 0x7FFF

__all__ = [
    "Frame", "Response", "Publish", "PublishConfirm", "PublishError", "Deliver", "OffsetSpec",
    "ChunkHeader", "chunk_header", "deliver_head", "encode", "decode", "error_response",
    "DeclarePublisher", "QueryPublisherSequence", "DeletePublisher", "Subscribe", "Credit",
    "StoreOffset", "QueryOffset", "Unsubscribe", "Create", "Delete", "Metadata",
    "PeerProperties", "SaslHandshake", "SaslAuthenticate", "Tune", "Open", "Close", "Heartbeat",
    "Route", "Partitions", "ExchangeCommandVersions", "StreamStats", "CreateSuperStream",
    "DeleteSuperStream", "ResolveOffsetSpec", "ConsumerUpdateResponse",
    "QueryPublisherSequenceResponse", "CreditResponse", "QueryOffsetResponse",
    "MetadataResponse", "MetadataUpdate", "PeerPropertiesResponse", "SaslHandshakeResponse",
    "SaslAuthenticateResponse", "OpenResponse", "RouteResponse", "PartitionsResponse",
    "ConsumerUpdate", "ExchangeCommandVersionsResponse", "StreamStatsResponse",
    "ResolveOffsetSpecResponse", "Broker", "StreamMetadata",
]


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
    """string; ``nullable``: -1 is ``None`` (else refused)."""

    __slots__ = ("nullable",)

    def __init__(self, nullable: bool = False):
        self.nullable = nullable

    def read(self, buf: memoryview, pos: int) -> tuple[str | None, int]:
        (n,) = I16.unpack_from(buf, pos)
        pos += 2
        if n < 0:
            if n == -1 and self.nullable:
                return None, pos
            raise _bad(f"string length {n}")
        if pos + n > len(buf):
            raise _bad("string runs past the frame")
        return str(buf[pos:pos + n], "utf-8"), pos + n

    def write(self, out: bytearray, value: str | None) -> None:
        if value is None:
            out += I16.pack(-1)
            return
        data = value.encode("utf-8")
        if len(data) > _MAX_STRING:
            raise ValueError(f"string of {len(data)} bytes is longer than 32767")
        out += I16.pack(len(data))
        out += data


class _Bytes:
    """bytes with an i32 length (``short``: an i16 length); -1 reads as ``b""``."""

    __slots__ = ("head",)

    def __init__(self, short: bool = False):
        self.head = I16 if short else I32

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
        for f, v in zip(self.fields, value):
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
    """offset spec; ``allow_none``: type 0 (ConsumerUpdate's answer) is valid."""

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
            return OffsetSpec(OffsetType(kind)), pos
        raise _bad(f"offset type {kind}")

    def write(self, out: bytearray, spec: OffsetSpec) -> None:
        out += U16.pack(spec.type)
        if spec.type == OffsetType.OFFSET:
            out += U64.pack(spec.value)
        elif spec.type == OffsetType.TIMESTAMP:
            out += I64.pack(spec.value)


_u8, _u16, _u32, _u64, _i64 = _Int(U8), _Int(U16), _Int(U32), _Int(U64), _Int(I64)
_string, _nstring = _String(), _String(nullable=True)
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


class Broker(NamedTuple):
    reference: int
    host: str
    port: int


class StreamMetadata(NamedTuple):
    stream: str
    code: int
    leader: int            # a Broker.reference; 0xFFFF when the stream has none (code != OK)
    replicas: tuple[int, ...]


# ---- frames as data -----------------------------------------------------------------------
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
        for f, name in zip(self.FIELDS, self.NAMES):
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


def _frame(key: int, *fields: Any, version: int = 1, also: tuple[int, ...] = ()):
    """Class decorator: a frozen dataclass whose fields are coded by ``fields``, registered."""

    def wrap(cls):
        cls.KEY, cls.VERSION, cls.FIELDS = key, version, fields
        cls = dataclass(frozen=True, slots=True)(cls)
        cls.NAMES = tuple(f.name for f in dataclasses.fields(cls))
        assert len(cls.NAMES) == len(fields), cls
        for k in (key, *also):
            _REGISTRY[(k, version)] = cls
        return cls

    return wrap


R = RESPONSE_FLAG


# Client -> server.
@_frame(Key.DECLARE_PUBLISHER, _u32, _u8, _nstring, _string)
class DeclarePublisher(Frame):
    correlation_id: int
    publisher_id: int
    reference: str | None
    stream: str


@_frame(Key.QUERY_PUBLISHER_SEQUENCE, _u32, _nstring, _string)
class QueryPublisherSequence(Frame):
    correlation_id: int
    reference: str | None
    stream: str


@_frame(Key.DELETE_PUBLISHER, _u32, _u8)
class DeletePublisher(Frame):
    correlation_id: int
    publisher_id: int


@_frame(Key.SUBSCRIBE, _u32, _u8, _string, _Offset(), _u16, _Optional(_properties, {}))
class Subscribe(Frame):
    correlation_id: int
    subscription_id: int
    stream: str
    offset_spec: OffsetSpec
    credit: int
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(Key.CREDIT, _u8, _u16)
class Credit(Frame):
    subscription_id: int
    credit: int


@_frame(Key.STORE_OFFSET, _nstring, _string, _u64)
class StoreOffset(Frame):
    reference: str | None
    stream: str
    offset: int


@_frame(Key.QUERY_OFFSET, _u32, _nstring, _string)
class QueryOffset(Frame):
    correlation_id: int
    reference: str | None
    stream: str


@_frame(Key.UNSUBSCRIBE, _u32, _u8)
class Unsubscribe(Frame):
    correlation_id: int
    subscription_id: int


@_frame(Key.CREATE_STREAM, _u32, _string, _properties)
class Create(Frame):
    correlation_id: int
    stream: str
    arguments: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(Key.DELETE_STREAM, _u32, _string)
class Delete(Frame):
    correlation_id: int
    stream: str


@_frame(Key.METADATA, _u32, _strings)
class Metadata(Frame):
    correlation_id: int
    streams: tuple[str, ...]


@_frame(Key.PEER_PROPERTIES, _u32, _properties)
class PeerProperties(Frame):
    correlation_id: int
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(Key.SASL_HANDSHAKE, _u32)
class SaslHandshake(Frame):
    correlation_id: int


@_frame(Key.SASL_AUTHENTICATE, _u32, _string, _Bytes())
class SaslAuthenticate(Frame):
    correlation_id: int
    mechanism: str
    data: bytes


@_frame(Key.TUNE, _u32, _u32, also=(R | Key.TUNE,))
class Tune(Frame):
    """Both ways: the server proposes, the client answers (with key 0x0014 or 0x8014)."""

    frame_max: int
    heartbeat: int


@_frame(Key.OPEN, _u32, _string)
class Open(Frame):
    correlation_id: int
    virtual_host: str


@_frame(Key.CLOSE, _u32, _u16, _string)
class Close(Frame):
    """Both ways."""

    correlation_id: int
    code: int
    reason: str


@_frame(Key.HEARTBEAT)
class Heartbeat(Frame):
    """Both ways."""


@_frame(Key.ROUTE, _u32, _string, _string)
class Route(Frame):
    correlation_id: int
    routing_key: str
    super_stream: str


@_frame(Key.PARTITIONS, _u32, _string)
class Partitions(Frame):
    correlation_id: int
    super_stream: str


_versions = _Array(_Record(_u16, _u16, _u16), COMMAND_VERSION.size)


@_frame(Key.EXCHANGE_COMMAND_VERSIONS, _u32, _versions)
class ExchangeCommandVersions(Frame):
    correlation_id: int
    versions: tuple[tuple[int, int, int], ...]


@_frame(Key.STREAM_STATS, _u32, _string)
class StreamStats(Frame):
    correlation_id: int
    stream: str


@_frame(Key.CREATE_SUPER_STREAM, _u32, _string, _strings, _strings, _properties)
class CreateSuperStream(Frame):
    correlation_id: int
    name: str
    partitions: tuple[str, ...]
    binding_keys: tuple[str, ...]
    arguments: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(Key.DELETE_SUPER_STREAM, _u32, _string)
class DeleteSuperStream(Frame):
    correlation_id: int
    name: str


@_frame(Key.RESOLVE_OFFSET_SPEC, _u32, _string, _Offset(), _Optional(_properties, {}))
class ResolveOffsetSpec(Frame):
    correlation_id: int
    stream: str
    offset_spec: OffsetSpec
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(R | Key.CONSUMER_UPDATE, _u32, _u16, _Offset(allow_none=True))
class ConsumerUpdateResponse(Frame):
    """The client's answer to ConsumerUpdate (single active consumer)."""

    correlation_id: int
    code: int
    offset_spec: OffsetSpec


# Server -> client.
_PLAIN_RESPONSES = (Key.DECLARE_PUBLISHER, Key.DELETE_PUBLISHER, Key.SUBSCRIBE, Key.UNSUBSCRIBE,
                    Key.CREATE_STREAM, Key.DELETE_STREAM, Key.CLOSE, Key.CREATE_SUPER_STREAM,
                    Key.DELETE_SUPER_STREAM)


@dataclass(frozen=True, slots=True)
class Response(Frame):
    """A response with nothing but a code: ``Response(Key.CREATE_STREAM, corr, code)``."""

    command: int
    correlation_id: int
    code: int

    @property
    def key(self) -> int:
        return R | self.command

    def encode_content(self, out: bytearray) -> None:
        out += U32.pack(self.correlation_id)
        out += U16.pack(self.code)

    @classmethod
    def decode_content(cls, buf: memoryview, pos: int, key: int, version: int) -> Frame:
        if len(buf) - pos != 6:
            raise _bad("response of the wrong length")
        corr, code = struct.unpack_from(">IH", buf, pos)
        return cls(key & ~R, corr, code)


for _k in _PLAIN_RESPONSES:
    _REGISTRY[(R | _k, 1)] = Response


@_frame(R | Key.QUERY_PUBLISHER_SEQUENCE, _u32, _u16, _u64)
class QueryPublisherSequenceResponse(Frame):
    correlation_id: int
    code: int
    sequence: int


@_frame(R | Key.CREDIT, _u16, _u8)
class CreditResponse(Frame):
    """Sent only when a Credit fails; it has no correlation id."""

    code: int
    subscription_id: int


@_frame(R | Key.QUERY_OFFSET, _u32, _u16, _u64)
class QueryOffsetResponse(Frame):
    correlation_id: int
    code: int
    offset: int


_brokers = _Array(_Record(_u16, _string, _u32, make=Broker), 8)
_stream_metadata = _Array(
    _Record(_string, _u16, _u16, _Array(_u16, 2), make=StreamMetadata), 10)


@_frame(R | Key.METADATA, _u32, _brokers, _stream_metadata)
class MetadataResponse(Frame):
    """No response code of its own: one per stream in ``streams``."""

    correlation_id: int
    brokers: tuple[Broker, ...]
    streams: tuple[StreamMetadata, ...]


@_frame(Key.METADATA_UPDATE, _u16, _string)
class MetadataUpdate(Frame):
    """The server tells a client a stream changed (RabbitMQ: code 6 when it is deleted)."""

    code: int
    stream: str


@_frame(R | Key.PEER_PROPERTIES, _u32, _u16, _properties)
class PeerPropertiesResponse(Frame):
    correlation_id: int
    code: int
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(R | Key.SASL_HANDSHAKE, _u32, _u16, _strings)
class SaslHandshakeResponse(Frame):
    correlation_id: int
    code: int
    mechanisms: tuple[str, ...]


@_frame(R | Key.SASL_AUTHENTICATE, _u32, _u16, _Optional(_Bytes(short=True), b""))
class SaslAuthenticateResponse(Frame):
    correlation_id: int
    code: int
    challenge: bytes = b""


@_frame(R | Key.OPEN, _u32, _u16, _Optional(_properties, {}))
class OpenResponse(Frame):
    correlation_id: int
    code: int
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)


@_frame(R | Key.ROUTE, _u32, _u16, _strings)
class RouteResponse(Frame):
    correlation_id: int
    code: int
    streams: tuple[str, ...] = ()


@_frame(R | Key.PARTITIONS, _u32, _u16, _strings)
class PartitionsResponse(Frame):
    correlation_id: int
    code: int
    streams: tuple[str, ...] = ()


@_frame(Key.CONSUMER_UPDATE, _u32, _u8, _Bool())
class ConsumerUpdate(Frame):
    """Server request (single active consumer): is this subscription active now?"""

    correlation_id: int
    subscription_id: int
    active: bool


@_frame(R | Key.EXCHANGE_COMMAND_VERSIONS, _u32, _u16, _versions)
class ExchangeCommandVersionsResponse(Frame):
    correlation_id: int
    code: int
    versions: tuple[tuple[int, int, int], ...]


@_frame(R | Key.STREAM_STATS, _u32, _u16, _Map(_i64, 10))
class StreamStatsResponse(Frame):
    correlation_id: int
    code: int
    stats: Mapping[str, int] = dataclasses.field(default_factory=dict)


@_frame(R | Key.RESOLVE_OFFSET_SPEC, _u32, _u16, _u16, _u64)
class ResolveOffsetSpecResponse(Frame):
    correlation_id: int
    code: int
    offset_type: int
    offset: int


@_frame(Key.PUBLISH_ERROR, _u8, _Array(_Record(_u64, _u16), PUBLISHING_ERROR.size))
class PublishError(Frame):
    publisher_id: int
    errors: tuple[tuple[int, int], ...]  # (publishing id, code)


# ---- the traffic, by hand -----------------------------------------------------------------
PublishedMessage = tuple  # (publishing_id, filter_value | None, data, batch | None)
"""A published entry: ``data`` is a ``memoryview`` of the frame. ``batch`` is ``None`` for a
simple message, ``(compression, records, uncompressed_size)`` for a sub-entry batch, whose
``data`` is then the (possibly compressed) run of simple entries, stored as it came."""


@dataclass(frozen=True, slots=True)
class Publish(Frame):
    """Publish v1 (no filter values, sub-entry batches allowed) or v2 (a filter value each)."""

    publisher_id: int
    messages: tuple[PublishedMessage, ...]
    publish_version: int = 1

    KEY: ClassVar[int] = Key.PUBLISH

    @property
    def version(self) -> int:
        return self.publish_version

    def encode_content(self, out: bytearray) -> None:
        out += PUBLISH_HEAD.pack(self.publisher_id, len(self.messages))
        v2 = self.publish_version == 2
        for publishing_id, filter_value, data, batch in self.messages:
            if batch is not None:
                if v2:
                    raise ValueError("Publish v2 has no sub-entry batches")
                compression, records, uncompressed = batch
                out += U64.pack(publishing_id)
                out += BATCH_ENTRY.pack(_BATCH_BIT | (compression << 4), records, uncompressed,
                                        len(data))
            elif v2:
                if filter_value is None:
                    out += FILTERED_ENTRY.pack(publishing_id, -1)
                else:
                    fv = filter_value.encode("utf-8")
                    out += FILTERED_ENTRY.pack(publishing_id, len(fv))
                    out += fv
                out += ENTRY_SIZE.pack(len(data))
            else:
                if filter_value is not None:
                    raise ValueError("Publish v1 has no filter values")
                out += SIMPLE_ENTRY.pack(publishing_id, len(data))
            out += data

    @classmethod
    def decode_content(cls, buf: memoryview, pos: int, key: int, version: int) -> Frame:
        publisher_id, count = PUBLISH_HEAD.unpack_from(buf, pos)
        pos += PUBLISH_HEAD.size
        end = len(buf)
        if count < 0 or count * SIMPLE_ENTRY.size > end - pos:
            raise _bad(f"Publish of {count} messages cannot fit in the frame")
        messages = []
        append = messages.append
        if version == 1:
            unpack = SIMPLE_ENTRY.unpack_from
            for _ in range(count):
                publishing_id, size = unpack(buf, pos)
                if size & 0x8000_0000:
                    head, records, uncompressed, size = BATCH_ENTRY.unpack_from(buf, pos + 8)
                    pos += 8 + BATCH_ENTRY.size
                    if pos + size > end:
                        raise _bad("sub-entry batch runs past the frame")
                    append((publishing_id, None, buf[pos:pos + size],
                            ((head >> 4) & 0x7, records, uncompressed)))
                else:
                    pos += SIMPLE_ENTRY.size
                    if pos + size > end:
                        raise _bad("message runs past the frame")
                    append((publishing_id, None, buf[pos:pos + size], None))
                pos += size
        else:
            unpack = FILTERED_ENTRY.unpack_from
            for _ in range(count):
                publishing_id, n = unpack(buf, pos)
                pos += FILTERED_ENTRY.size
                if n >= 0:
                    filter_value: str | None = str(buf[pos:pos + n], "utf-8")
                    pos += n
                elif n == -1:
                    filter_value = None
                else:
                    raise _bad(f"filter value length {n}")
                (size,) = ENTRY_SIZE.unpack_from(buf, pos)
                pos += 4
                if size & 0x8000_0000:
                    raise _bad("Publish v2 has no sub-entry batches")
                if pos + size > end:
                    raise _bad("message runs past the frame")
                append((publishing_id, filter_value, buf[pos:pos + size], None))
                pos += size
        if pos != end:
            raise _bad(f"{end - pos} bytes after the {count} messages of Publish")
        return cls(publisher_id, tuple(messages), version)


_REGISTRY[(Key.PUBLISH, 1)] = _REGISTRY[(Key.PUBLISH, 2)] = Publish


@dataclass(frozen=True, slots=True)
class PublishConfirm(Frame):
    publisher_id: int
    publishing_ids: tuple[int, ...]

    KEY: ClassVar[int] = Key.PUBLISH_CONFIRM

    def encode_content(self, out: bytearray) -> None:
        ids = self.publishing_ids
        out += PUBLISH_HEAD.pack(self.publisher_id, len(ids))
        out += struct.pack(f">{len(ids)}Q", *ids)

    @classmethod
    def decode_content(cls, buf: memoryview, pos: int, key: int, version: int) -> Frame:
        publisher_id, count = PUBLISH_HEAD.unpack_from(buf, pos)
        pos += PUBLISH_HEAD.size
        if count < 0 or len(buf) - pos != 8 * count:
            raise _bad("PublishConfirm count does not match its length")
        return cls(publisher_id, struct.unpack_from(f">{count}Q", buf, pos))


_REGISTRY[(Key.PUBLISH_CONFIRM, 1)] = PublishConfirm


class ChunkHeader(NamedTuple):
    """The 48-byte osiris chunk header at the start of a Deliver's chunk."""

    magic_version: int
    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    epoch: int
    chunk_id: int
    crc: int
    data_length: int
    trailer_length: int
    bloom_size: int


def chunk_header(chunk: bytes | memoryview) -> ChunkHeader:
    """The header of a delivered chunk (raises ``FrameError`` if it is shorter than 48 bytes)."""
    if len(chunk) < CHUNK_HEADER.size:
        raise _bad("chunk shorter than its header")
    return ChunkHeader(*CHUNK_HEADER.unpack_from(chunk, 0))


@dataclass(frozen=True, slots=True)
class Deliver(Frame):
    """A chunk for a subscription; v2 (``committed_chunk_id`` set) only to clients that asked."""

    subscription_id: int
    chunk: bytes | memoryview
    committed_chunk_id: int | None = None

    KEY: ClassVar[int] = Key.DELIVER

    @property
    def version(self) -> int:
        return 1 if self.committed_chunk_id is None else 2

    def encode_content(self, out: bytearray) -> None:
        out += U8.pack(self.subscription_id)
        if self.committed_chunk_id is not None:
            out += U64.pack(self.committed_chunk_id)
        out += self.chunk

    @classmethod
    def decode_content(cls, buf: memoryview, pos: int, key: int, version: int) -> Frame:
        (sub,) = U8.unpack_from(buf, pos)
        pos += 1
        committed = None
        if version == 2:
            (committed,) = U64.unpack_from(buf, pos)
            pos += 8
        return cls(sub, buf[pos:], committed)


_REGISTRY[(Key.DELIVER, 1)] = _REGISTRY[(Key.DELIVER, 2)] = Deliver


def deliver_head(subscription_id: int, chunk_length: int,
                 committed_chunk_id: int | None = None) -> bytes:
    """The bytes of a Deliver frame before its chunk: write them, then the chunk's bytes."""
    if committed_chunk_id is None:
        return DELIVER_HEAD_V1.pack(DELIVER_HEAD_V1.size - 4 + chunk_length, Key.DELIVER, 1,
                                    subscription_id)
    return DELIVER_HEAD_V2.pack(DELIVER_HEAD_V2.size - 4 + chunk_length, Key.DELIVER, 2,
                                subscription_id, committed_chunk_id)


# ---- entry points -------------------------------------------------------------------------
def encode(frame: Frame) -> bytes:
    """The bytes of ``frame``, size prefix included.

    Raises ``ValueError`` (or ``struct.error``) for values the layout cannot hold.
    """
    out = bytearray(8)
    frame.encode_content(out)
    FRAME_HEAD.pack_into(out, 0, len(out) - 4, frame.key, frame.version)
    return bytes(out)


def decode(content: bytes | memoryview) -> Frame:
    """Decode one frame given without its size prefix (key, version, content).

    Raises ``FrameError`` (``code`` = ``ResponseCode.UNKNOWN_FRAME``) for an unknown key or
    version and for any content that does not match its layout exactly. Publish and Deliver
    keep ``memoryview`` slices of ``content``.
    """
    buf = content if isinstance(content, memoryview) else memoryview(content)
    if len(buf) < 4:
        raise _bad("frame shorter than key and version")
    key, version = COMMAND_HEAD.unpack_from(buf, 0)
    cls = _REGISTRY.get((key, version))
    if cls is None:
        raise _bad(f"unknown command key 0x{key:04x} version {version}")
    try:
        return cls.decode_content(buf, 4, key, version)
    except FrameError:
        raise
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise _bad(f"malformed {cls.__name__}: {e}") from None


_EMPTY_ANSWERS: dict[int, Any] = {
    Key.QUERY_PUBLISHER_SEQUENCE: lambda c, code: QueryPublisherSequenceResponse(c, code, 0),
    Key.QUERY_OFFSET: lambda c, code: QueryOffsetResponse(c, code, 0),
    Key.PEER_PROPERTIES: lambda c, code: PeerPropertiesResponse(c, code, {}),
    Key.SASL_HANDSHAKE: lambda c, code: SaslHandshakeResponse(c, code, ()),
    Key.SASL_AUTHENTICATE: lambda c, code: SaslAuthenticateResponse(c, code),
    Key.OPEN: lambda c, code: OpenResponse(c, code),
    Key.ROUTE: lambda c, code: RouteResponse(c, code),
    Key.PARTITIONS: lambda c, code: PartitionsResponse(c, code),
    Key.EXCHANGE_COMMAND_VERSIONS: lambda c, code: ExchangeCommandVersionsResponse(c, code, ()),
    Key.STREAM_STATS: lambda c, code: StreamStatsResponse(c, code),
    Key.RESOLVE_OFFSET_SPEC: lambda c, code: ResolveOffsetSpecResponse(c, code, 0, 0),
}


def error_response(request: Frame, code: int) -> Frame:
    """The answer to ``request`` carrying ``code`` and nothing else (e.g. Route when super
    streams are not supported). Metadata has no response code of its own: each stream gets
    ``code``. Raises ``ValueError`` for a frame that is not answered (Publish, Credit...)."""
    corr = getattr(request, "correlation_id", None)
    if corr is None or request.key & R:
        raise ValueError(f"{type(request).__name__} has no response")
    command = request.key
    if isinstance(request, Metadata):
        return MetadataResponse(corr, (), tuple(
            StreamMetadata(s, code, 0xFFFF, ()) for s in request.streams))
    make = _EMPTY_ANSWERS.get(command)
    if make is not None:
        return make(corr, code)
    if command in _PLAIN_RESPONSES:
        return Response(command, corr, code)
    raise ValueError(f"{type(request).__name__} has no response")
