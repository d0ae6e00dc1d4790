"""`amqp-stream consume --super-stream` and `--single-active-consumer`: consuming over RabbitMQ's
stream protocol (`--stream-url`), where super streams and consumer groups live.

Why the stream protocol: a super stream is a set of partition streams that only the stream
protocol lists (Partitions), and single active consumer is a stream-protocol feature (Subscribe
properties `single-active-consumer`, `name`, `super-stream`; the broker's ConsumerUpdate tells a
member when it becomes active, and the member answers where to start). The client is
``amqp_stream.client.stream.StreamClient``, one connection with one subscription per partition;
chunks are split into messages here and printed in the order they arrive, each line saying its
partition and offset.

Where a subscription starts: `--from`, or with `--name` after the offset stored for that name on
that partition (QueryOffset), both when subscribing and when a group member becomes active. A
named consumer stores its offset (StoreOffset) after each chunk it has printed and when it ends,
so the next member of the group, or the next run, resumes after it (a member killed mid-chunk
leaves that chunk to be printed again: at least once).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime as dt
from typing import Any, Callable

from amqp_stream.client import ClientError, StreamMessage
from amqp_stream.client.stream import StreamClient
from amqp_stream.commands import interrupt
from amqp_stream.streamproto import OffsetSpec, OffsetType, ResponseCode
from amqp_stream.streamproto.traffic import CHUNK_HEADER, chunk_header
from storage import OffsetSpec as StorageOffsetSpec
from storage import StorageError
from storage.format import decode_records

__all__ = ["run", "offset_spec_of", "MAX_SUBSCRIPTIONS"]

MAX_SUBSCRIPTIONS = 256  # a subscription id is one byte


def offset_spec_of(start: Any) -> OffsetSpec:
    """``consume.parse_start``'s value as a stream-protocol offset spec: first/last/next, an
    offset, or a timestamp (times and intervals)."""
    if isinstance(start, int):
        return OffsetSpec.offset(start)
    if isinstance(start, dt.datetime):
        return OffsetSpec.timestamp(int(start.timestamp() * 1000))
    if start in ("first", "last", "next"):
        return OffsetSpec(getattr(OffsetType, start.upper()))
    try:  # a RabbitMQ interval such as 10m: that long ago
        return OffsetSpec.timestamp(StorageOffsetSpec.parse(start, rabbitmq=True).value)
    except StorageError:
        raise ValueError(f"not an offset spec: {start!r}") from None


def subscription_properties(args: argparse.Namespace, super_stream: str | None) -> dict[str, str]:
    """Subscribe's properties: RabbitMQ's filter and group keys, this broker's `sql-filter`."""
    props = {f"filter.{i}": v for i, v in enumerate(args.filter)}
    if args.match_unfiltered:
        props["match-unfiltered"] = "true"
    if args.sql is not None:
        props["sql-filter"] = args.sql
    if args.single_active_consumer:
        props["single-active-consumer"] = "true"
        props["name"] = args.name
        if super_stream is not None:
            props["super-stream"] = super_stream
    return props


@dataclasses.dataclass
class _Partition:
    stream: str
    active: bool  # a group member prints only while active
    start: int = 0  # records below this offset (earlier in the first chunk) are not printed
    done: int | None = None  # the last offset handled: what a named consumer stores
    stored: int | None = None  # the last offset stored


class _Reader:
    """The subscriptions of one connection and the chunks that came for them."""

    def __init__(self, args: argparse.Namespace, err: Any):
        self.args, self.err = args, err
        self.pending: collections.deque[tuple[int, bytes]] = collections.deque()
        self.client = StreamClient(args.stream_url, user=args.user, password=args.password,
                                   timeout=args.timeout, on_chunk=self._on_chunk)
        self.parts: list[_Partition] = []

    def _on_chunk(self, chunk: memoryview) -> None:
        self.pending.append((self.client.subscription, bytes(chunk)))  # handled after the read

    def start_of(self, stream: str) -> OffsetSpec:
        """After the stored offset of `--name` on ``stream``, else `--from`."""
        if self.args.name:
            stored = self.client.query_offset(self.args.name, stream)
            if stored is not None:
                return OffsetSpec.offset(stored + 1)
        return self.args.offset_spec

    def subscribe(self, streams: list[str], super_stream: str | None) -> None:
        sac = self.args.single_active_consumer
        props = subscription_properties(self.args, super_stream)
        for sub, stream in enumerate(streams):
            spec = OffsetSpec.next() if sac else self.start_of(stream)
            part = _Partition(stream, active=not sac)
            part.start = spec.value if spec.type == OffsetType.OFFSET else 0
            self.parts.append(part)
            self.client.subscribe(sub, stream, spec, credit=2, properties=props)
        if not sac:
            self.err.info(f"consuming {', '.join(streams)}")

    def answer_updates(self) -> None:
        """ConsumerUpdate: becoming active, start where `--name` stopped (or `--from`)."""
        while self.client.updates:
            update = self.client.updates.popleft()
            part = self.parts[update.subscription_id]
            if update.active:
                spec = self.start_of(part.stream)
                part.start = spec.value if spec.type == OffsetType.OFFSET else 0
                part.active = True
                self.client.answer_update(update, spec)
                where = f"offset {spec.value}" if spec.type == OffsetType.OFFSET else \
                    OffsetType(spec.type).name.lower()
                self.err.info(f"active on {part.stream} (group {self.args.name}) from {where}")
            else:
                self.store(part)
                part.active = False
                self.client.answer_update(update, None)
                self.err.info(f"inactive on {part.stream} (group {self.args.name}): another member took it")

    def messages(self) -> Any:
        """(partition stream, message) of the chunks that came, in order."""
        while self.pending:
            sub, chunk = self.pending.popleft()
            part = self.parts[sub]
            header = chunk_header(chunk)
            if not part.active or header.chunk_type != 0:
                continue  # a chunk sent before a step-down; tracking chunks
            data = chunk[CHUNK_HEADER.size:CHUNK_HEADER.size + header.data_length]
            for offset, body in decode_records(data, header.chunk_id, entries=header.num_entries):
                if offset < part.start:
                    continue
                part.done = offset  # handled once shown (the caller may stop after it)
                yield part, _message(offset, body)
            self.store(part)

    def store(self, part: _Partition) -> None:
        if self.args.name and part.done is not None and part.done != part.stored:
            self.client.store_offset(self.args.name, part.stream, part.done)
            part.stored = part.done


def _message(offset: int, body: bytes) -> StreamMessage:
    from proton import Message

    msg = Message()
    msg.decode(body)
    return dataclasses.replace(StreamMessage.from_message(msg), offset=offset)


def run(args: argparse.Namespace, err: Any, show: Callable[[str, StreamMessage], None],
        until: Callable[[], bool]) -> int:
    """Consume and hand each message (and its partition) to ``show``
    until ``until()`` says enough (`--count`) or Ctrl-C. Raises ``ClientError``."""
    reader = _Reader(args, err)
    with reader.client as client:
        if args.super_stream:
            try:
                streams = client.partitions(args.stream)
            except ClientError as exc:
                if exc.condition == ResponseCode.STREAM_DOES_NOT_EXIST.name:
                    raise ClientError(f"super stream {args.stream!r} not found") from None
                raise
            if not streams:
                raise ClientError(f"super stream {args.stream!r} has no partitions")
            if len(streams) > MAX_SUBSCRIPTIONS:
                raise ClientError(f"super stream {args.stream!r} has {len(streams)} partitions; "
                                  f"one connection subscribes to {MAX_SUBSCRIPTIONS} at most")
        else:
            streams = [args.stream]
        try:
            reader.subscribe(streams, args.stream if args.super_stream else None)
        except ClientError as exc:
            if exc.condition == ResponseCode.STREAM_DOES_NOT_EXIST.name:
                raise ClientError(f"stream {args.stream!r} not found") from None
            raise
        try:
            while True:
                reader.answer_updates()
                for part, m in reader.messages():
                    show(part.stream, m)
                    if until():
                        return 0
                interrupt.check()
                if not reader.pending and not client.updates:
                    client.pump(1.0)
                if client.gone & {p.stream for p in reader.parts}:
                    raise ClientError(f"deleted while consuming: {', '.join(sorted(client.gone))}")
        finally:
            try:
                for part in reader.parts:
                    if part.active:
                        reader.store(part)
            except OSError:
                pass  # the connection is gone: what was stored before stays
