"""The frames that carry the traffic, coded by hand: Publish, PublishConfirm, Deliver.

Strategy: these are the frames sent thousands of times a second, so no generic walker: a
Publish's entries are taken whole by ``entries`` (``PackedEntries``, ``SpannedEntries``: no
Python code per message), else split into one tuple per message whose body is a
``memoryview`` of the frame (``walk_messages``: no copy, nothing decoded); a Deliver's chunk
is passed through untouched, and ``deliver_head`` gives the bytes that precede a chunk sent
straight from a segment file (``os.sendfile``).

Layout (big-endian)::

    Publish v1  publisher:u8 | count:i32 | entry * count
      simple    publishing_id:u64 | 0:1 size:31 | message
      batch     publishing_id:u64 | 1:1 compression:3 reserved:4 | records:u16
                | uncompressed_size:u32 | size:u32 | batch (a run of simple entries)
    Publish v2  publisher:u8 | count:i32 | (publishing_id:u64 | filter_length:u16 | filter
                | 0:1 size:31 | message) * count        filter_length 0xFFFF (-1): no filter value
    PublishConfirm  publisher:u8 | count:i32 | publishing_id:u64 * count
    Deliver v1  subscription:u8 | chunk
    Deliver v2  subscription:u8 | committed_chunk_id:u64 | chunk
    chunk       magic_version:u8 | type:u8 | entries:u16 | records:u32 | timestamp:i64
                | epoch:u64 | chunk_id:u64 | crc:u32 | data_length:u32 | trailer_length:u32
                | bloom_size:u8 | reserved:3 | data (entries as in Publish v1)

RabbitMQ sends a chunk as its header and data section only (no Bloom bytes, no trailer), and
has no sub-entry batches in Publish v2.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from amqp_stream.streamproto._types import _REGISTRY, U8, U64, Frame, _bad
from amqp_stream.streamproto.constants import Key
from amqp_stream.streamproto.entries import (
    _BATCH_BIT, _NO_FILTER, BATCH_ENTRY, ENTRY_SIZE, FILTERED_ENTRY, SIMPLE_ENTRY, PackedEntries,
    PublishedMessage, SpannedEntries, _packed, _spanned, walk_messages,
)

PUBLISH_HEAD = struct.Struct(">Bi")         # publisher id, message count
DELIVER_HEAD_V1 = struct.Struct(">IHHB")    # size, key, version, subscription id
DELIVER_HEAD_V2 = struct.Struct(">IHHBQ")   # ... committed chunk id
CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB3x")  # 48 bytes, see ChunkHeader

__all__ = ["Publish", "PublishConfirm", "Deliver", "ChunkHeader", "chunk_header", "deliver_head"]


@dataclass(frozen=True, slots=True)
class Publish(Frame):
    """Publish v1 (no filter values, sub-entry batches allowed) or v2 (a filter value each)."""

    publisher_id: int
    messages: tuple[PublishedMessage, ...] | PackedEntries | SpannedEntries  # the latter from ``decode``
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
                    out += FILTERED_ENTRY.pack(publishing_id, _NO_FILTER)
                else:
                    fv = filter_value.encode("utf-8")
                    if len(fv) >= _NO_FILTER:
                        raise ValueError(f"filter value of {len(fv)} bytes")
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
        if version == 1:
            packed = _packed(buf, pos, count)
            if packed is not None:
                return cls(publisher_id, packed, version)
        spanned = _spanned(buf, pos, count, version)
        if spanned is not None:
            return cls(publisher_id, spanned, version)
        return cls(publisher_id, walk_messages(buf, pos, count, version), version)


_REGISTRY[(Key.PUBLISH, 1)] = _REGISTRY[(Key.PUBLISH, 2)] = Publish


@dataclass(frozen=True, slots=True)
class PublishConfirm(Frame):
    """``publishing_ids``: the ids, or (to send) the ids already encoded, 8 bytes each
    (``PackedEntries.id_bytes``: a publisher of packed frames makes no int per message)."""

    publisher_id: int
    publishing_ids: tuple[int, ...] | bytes

    KEY: ClassVar[int] = Key.PUBLISH_CONFIRM

    def encode_content(self, out: bytearray) -> None:
        ids = self.publishing_ids
        if type(ids) is bytes:
            if len(ids) % 8:
                raise ValueError(f"encoded publishing ids of {len(ids)} bytes")
            out += PUBLISH_HEAD.pack(self.publisher_id, len(ids) // 8)
            out += ids
            return
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
