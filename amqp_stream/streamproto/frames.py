"""Every frame of RabbitMQ's stream protocol, as bytes and as frozen dataclasses.

Strategy: this module owns the frame layout (PROTOCOL.adoc of rabbitmq-server, checked against
what ``rabbit_stream_core.erl`` really writes and reads). Control commands are declared as
data: each dataclass lists one field codec (``_types``) per field, and ``Frame`` encodes and
decodes them all, so a layout is written once for both directions. The traffic frames
(Publish, PublishConfirm, Deliver) are coded by hand in ``traffic``, a Publish's entries in
``entries``, and re-exported here.

Layout (all integers big-endian; types in ``_types``)::

    frame     size:u32 | key:u16 | version:u16 | content     size counts key..end
    key       response:1 | command:15                          0x8007 answers 0x0007
    request   key | version | correlation_id:u32 | ...
    response  key | version | correlation_id:u32 | code:u16 | ...

Quirks kept as RabbitMQ has them: Tune is sent by the server with the request key and answered
with either key; CreditResponse has no correlation id; OpenResponse leaves out an empty
property map and SaslAuthenticateResponse an empty challenge (which it writes with a 16-bit
length); Subscribe may leave out its properties entirely; MetadataResponse has no code of its
own. Decoding is strict otherwise: a truncated field, trailing bytes, an array count that the
bytes cannot hold, an unknown key or version all raise ``FrameError`` with
``ResponseCode.UNKNOWN_FRAME``.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from amqp_stream.streamproto._types import (
    _REGISTRY, U16, U32, Frame, OffsetSpec, _Array, _Bool, _Bytes, _i64, _Map,
    _Offset, _Optional, _properties, _Record, _string, _strings, _u8, _u16, _u32, _u64, _bad,
    _frame,
)
from amqp_stream.streamproto.constants import RESPONSE_FLAG, Key
from amqp_stream.streamproto.errors import FrameError
from amqp_stream.streamproto.entries import PackedEntries, PublishedMessage, SpannedEntries
from amqp_stream.streamproto.traffic import (
    CHUNK_HEADER, ChunkHeader, Deliver, Publish, PublishConfirm, chunk_header, deliver_head,
)

FRAME_SIZE = struct.Struct(">I")            # size of what follows
FRAME_HEAD = struct.Struct(">IHH")          # size, key, version
COMMAND_HEAD = struct.Struct(">HH")         # key, version
PUBLISHING_ERROR = struct.Struct(">QH")     # publishing id, code
COMMAND_VERSION = struct.Struct(">HHH")     # key, min version, max version

__all__ = [
    "Frame", "Response", "Publish", "PublishedMessage", "PackedEntries", "SpannedEntries", "PublishConfirm", "PublishError",
    "Deliver", "OffsetSpec", "ChunkHeader", "chunk_header", "deliver_head", "encode", "decode",
    "error_response", "CHUNK_HEADER", "FRAME_SIZE",
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

class Broker(NamedTuple):
    reference: int
    host: str
    port: int


class StreamMetadata(NamedTuple):
    stream: str
    code: int
    leader: int            # a Broker.reference; 0xFFFF when the stream has none (code != OK)
    replicas: tuple[int, ...]


R = RESPONSE_FLAG


# Client -> server.
@_frame(Key.DECLARE_PUBLISHER, _u32, _u8, _string, _string)
class DeclarePublisher(Frame):
    correlation_id: int
    publisher_id: int
    reference: str
    stream: str


@_frame(Key.QUERY_PUBLISHER_SEQUENCE, _u32, _string, _string)
class QueryPublisherSequence(Frame):
    correlation_id: int
    reference: str
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


@_frame(Key.STORE_OFFSET, _string, _string, _u64)
class StoreOffset(Frame):
    reference: str
    stream: str
    offset: int


@_frame(Key.QUERY_OFFSET, _u32, _string, _string)
class QueryOffset(Frame):
    correlation_id: int
    reference: str
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


# ---- entry points -------------------------------------------------------------------------
def encode(frame: Frame) -> bytes:
    """The bytes of ``frame``, size prefix included.

    Raises ``ValueError`` (or ``struct.error``) for values the layout cannot hold.
    """
    out = bytearray(8)
    frame.encode_content(out)
    FRAME_HEAD.pack_into(out, 0, len(out) - 4, frame.key, frame.version)
    return bytes(out)


def decode(content: bytes | bytearray | memoryview) -> Frame:
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
