"""`amqp-stream perf --protocol stream`: the same producers and consumers over RabbitMQ's stream
protocol (this broker's stream port, or RabbitMQ's).

Why separate from `perf`'s AMQP workers: the stream protocol publishes in batches (`--batch`
messages per Publish frame, the filter value carried per message by Publish v2) and delivers
whole chunks under credit, so the workers are shaped differently; the counters, the live table
and the summary are `perf`'s. A message is encoded once per producer and value
(`Template`): only its send time changes, patched into the encoded bytes.

Consumers subscribe with RabbitMQ's stage-1 properties (`filter.N`, `match-unfiltered`) and
this broker's stage-2 `sql-filter`; they count records from chunk headers and decode messages
only for what they report: every message's `value` when stage-1 values were asked for (the
client-side post-filter, stage 3: `matched`) and one send time per chunk (latency); a chunk's
records are split with ``storage.format.decode_records`` (sub-entry batches opened). After
publishing ends (the producers' last confirms came), a consumer stops once nothing has arrived
for `IDLE_S` seconds, counted from the later of its last delivery and that end (a filtered
consumer cannot know where its last chunk is).

Super streams (`--super-streams`): the run makes `--stream` a super stream of
`--super-stream-partitions` partitions `<stream>-0..` (binding keys `0..`, as Stream PerfTest
makes them) unless it exists, and deletes it at the end if it made the name up. A producer has
one publisher per partition and sends each Publish frame (`--batch` messages) to the next
partition in turn: as even as PerfTest's hashing of each message's id, without hashing in
Python. A consumer subscribes to every partition on its connection.

Single active consumer (`--single-active-consumer`): each subscription carries
`single-active-consumer`, `name` (`--consumer-names`) and, on a partition, `super-stream`.
Consumers join one after another (a lock, in the order their threads get it, not by number), so
the broker's choice follows that order: on a partition of index i the i mod members-th to join.
Becoming active, a consumer starts after the offset its name stored there (else at `--from`,
where `next` on a partition that held nothing is its offset 0: `_pin_next`); it stores its offset every
`STORE_EVERY` messages of a partition, as PerfTest does, and when it steps down, before it
answers, so the member taking over starts after the last message counted: each message is
counted once across the group. Chunks that come after a step-down are not counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import threading
import time
import uuid
from typing import Any

import proton

from amqp_stream.client import ClientError
from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.streamproto import OffsetSpec, OffsetType, ResponseCode
from amqp_stream.commands.perf import abort_start, due, value_of
from amqp_stream.streamproto.traffic import CHUNK_HEADER, chunk_header
from amqp_stream.wire import MessageView
from storage.format import decode_records

__all__ = ["producer", "consumer", "declare", "delete", "available", "IDLE_S"]

IDLE_S = 1.0
STORE_EVERY = 10_000  # Stream PerfTest's --store-every with --single-active-consumer
_JOIN = threading.Lock()  # consumers join their groups one at a time
_TS = struct.Struct(">q")
_SENTINEL = 0x0123456789ABCDEF


class Template:
    """An AMQP message (application properties `ts`, `producer`, `value`; a data body) encoded
    once; ``encode(ts)`` patches the send time in."""

    def __init__(self, body: bytes, producer: int, value: str | None):
        props: dict[str, Any] = {"ts": _SENTINEL, "producer": producer}
        if value is not None:
            props["value"] = value
        data = proton.Message(body=body, properties=props, inferred=True).encode()
        at = data.index(_TS.pack(_SENTINEL))
        self.head, self.tail = data[:at], data[at + _TS.size:]

    def encode(self, ts: int) -> bytes:
        return self.head + _TS.pack(ts) + self.tail


def _client(args: Any, **kwargs: Any) -> StreamClient:
    return StreamClient(args.stream_url, user=args.user, password=args.password,
                        timeout=args.timeout, **kwargs)


def declare(args: Any) -> None:
    """Create the stream (or super stream); check that the broker can filter when filters are
    asked for (RabbitMQ before 3.13 cannot: Publish v2 is an unknown frame there, ``filter.N``
    is ignored). ``args.partitions``: the streams the run publishes to and reads."""
    with _client(args) as c:
        if (args.filter_values or args.consumer_filter) and not c.filtering:
            product = f"{c.server_properties.get('product', '?')} {c.server_properties.get('version', '?')}"
            if not args.allow_missing_filters:
                raise ClientError(f"the broker ({product}) has no stream filtering (RabbitMQ 3.13+); "
                                  "--allow-missing-filters runs without filter values")
            args.filter_values, args.consumer_filter = 0, []
        if not args.super_streams:
            if args.producers:
                c.create(args.stream)
            args.partitions = [args.stream]
            return
        try:
            args.partitions = c.partitions(args.stream)
        except ClientError as exc:
            if exc.condition != ResponseCode.STREAM_DOES_NOT_EXIST.name:
                raise
            n = args.super_stream_partitions
            c.create_super_stream(args.stream, [f"{args.stream}-{i}" for i in range(n)],
                                  [str(i) for i in range(n)])
            args.partitions = c.partitions(args.stream)
        if not 1 <= len(args.partitions) <= 255:
            raise ClientError(f"super stream {args.stream!r} has {len(args.partitions)} partitions "
                              "(1..255 on one connection)")


def delete(args: Any) -> None:
    with _client(args) as c:
        if args.super_streams:
            c.delete_super_stream(args.stream)
        else:
            c.delete(args.stream)


def available(args: Any) -> int:
    """Records the streams hold, from StreamStats: up to the first offset of each one's last
    chunk (the protocol says no more; 0 where the broker has no StreamStats, as RabbitMQ 3.10)."""
    total = 0
    try:
        with _client(args) as c:
            for stream in args.partitions:
                stats = c.stats(stream)
                total += max(0, stats.get("committed_chunk_id", -1) - stats.get("first_chunk_id", 0))
    except ClientError:
        return 0
    return total


def consumer_name(pattern: str, stream: str, index: int) -> str:
    """``--consumer-names``: ``uuid``, or the pattern with ``%s`` the stream and ``%d`` the
    consumer's number from 1 (PerfTest's naming strategy)."""
    if pattern == "uuid":
        return str(uuid.uuid4())
    return pattern.replace("%s", stream).replace("%d", str(index + 1))


def producer(args: Any, index: int, stop: threading.Event, counters: Any,
             started: threading.Barrier) -> None:
    body = bytes(range(256)) * (args.size // 256 + 1)
    values = [f"v{i}" for i in range(args.filter_values)]
    templates = {v: Template(body[:args.size], index, v) for v in values or (None,)}
    per_second = args.rate / args.producers if args.rate > 0 else 0.0
    partitions = args.partitions
    try:
        with _client(args) as c:
            for pid, stream in enumerate(partitions):
                c.declare_publisher(pid, stream)
            started.wait()
            t0 = time.monotonic()
            n = frames = 0
            while not stop.is_set():
                if n - c.confirmed >= args.window:
                    c.pump(0.1)
                    continue
                batch = min(args.batch, args.window - (n - c.confirmed))
                if per_second:
                    if not due(t0, n, per_second, stop):
                        continue
                    batch = 1
                now = time.time_ns()
                messages = []
                for i in range(n, n + batch):
                    value = value_of(i, args.filter_run, values)
                    messages.append((i, value, templates[value].encode(now)))
                c.send(publish_frame(frames % len(partitions), messages))  # partitions in turn
                n += batch
                frames += 1
                counters.messages = c.confirmed
                c.pump(0)
            deadline = time.monotonic() + args.timeout
            while c.confirmed + c.errors < n and time.monotonic() < deadline:
                c.pump(0.5)
            counters.messages = c.confirmed
            counters.errors = c.errors + (n - c.confirmed - c.errors)
            counters.bytes = c.confirmed * args.size
    except ClientError as exc:
        counters.error = str(exc)
        abort_start(started)


@dataclasses.dataclass
class _Sub:
    """One subscription of a consumer: its stream and, for a single active consumer, whether
    it is active and what it has counted (to store)."""

    stream: str
    active: bool
    spec: OffsetSpec  # where it starts, and where a member taking it over starts if none stored
    start: int = 0  # records below it (in the first chunk after a takeover) are not counted
    last: int | None = None  # the last offset counted
    stored: int | None = None
    since_store: int = 0


def _pin_next(c: StreamClient, subs: list[_Sub]) -> None:
    """``next`` on a stream that holds nothing is offset 0 (or its first offset, where retention
    took everything): so pinned, a member of a single active consumer group that takes a
    partition over from one that stored nothing starts where the group began, not at the end
    as it is when the takeover comes. Publishing may have begun by then (the members that joined
    first answer their step-downs once the run has started), and the messages in between were
    counted by nobody. A stream that holds messages, or a broker without StreamStats (RabbitMQ
    before 3.11), keeps ``next`` as it is."""
    for sub in subs:
        if sub.spec.type != OffsetType.NEXT:
            continue
        try:
            stats = c.stats(sub.stream)
        except ClientError:
            continue
        if stats.get("first_chunk_id") == -1 and stats.get("committed_chunk_id") == -1:
            sub.spec = OffsetSpec.offset(0)


def consumer(args: Any, index: int, interrupted: threading.Event, counters: Any,
             started: threading.Barrier, ready: threading.Event) -> None:
    wanted = set(args.consumer_filter)
    properties = {f"filter.{i}": v for i, v in enumerate(args.consumer_filter)}
    if args.match_unfiltered:
        properties["match-unfiltered"] = "true"
    if args.consumer_sql:
        properties["sql-filter"] = args.consumer_sql
    sac = args.single_active_consumer
    name = consumer_name(args.consumer_names, args.stream, index) if sac else ""
    if sac:
        properties.update({"single-active-consumer": "true", "name": name})
        if args.super_streams:
            properties["super-stream"] = args.stream
    subs = [_Sub(stream, active=not sac, spec=args.start_spec) for stream in args.partitions]
    counted = 0  # records counted (a step-down leaves later chunks of that stream out)
    read_from: set[str] = set()

    def on_chunk(chunk: memoryview) -> None:
        nonlocal counted
        sub = subs[c.subscription]
        if not sub.active:
            return
        now = time.time_ns()
        header = chunk_header(chunk)
        records = decode_records(bytes(chunk[CHUNK_HEADER.size:]), header.chunk_id,
                                 entries=header.num_entries)
        if sub.start > header.chunk_id:
            records = [r for r in records if r[0] >= sub.start]
        counted += len(records)
        counters.bytes += sum(len(body) for _, body in records)
        for offset, _ in records[:1] + records[-1:]:
            counters.delivered(offset)
        if records:
            sub.last = records[-1][0]
            sub.since_store += len(records)
            read_from.add(sub.stream)
        if wanted:
            for _, body in records:
                value = MessageView.from_bytes(body).application_properties.get("value")
                if value in wanted or (args.match_unfiltered and value is None):
                    counters.matched += 1
        if records:
            ts = MessageView.from_bytes(records[-1][1]).application_properties.get("ts")
            if isinstance(ts, int):
                counters.latencies_ms.append((now - ts) / 1e6)

    def store(sub: _Sub) -> None:
        if sac and sub.last is not None and sub.last != sub.stored:
            c.store_offset(name, sub.stream, sub.last)
            sub.stored, sub.since_store = sub.last, 0

    def answer_updates() -> None:
        while c.updates:
            update = c.updates.popleft()
            sub = subs[update.subscription_id]
            if update.active:
                stored = c.query_offset(name, sub.stream)
                start = OffsetSpec.offset(stored + 1) if stored is not None else sub.spec
                sub.start = stored + 1 if stored is not None else 0
                sub.active = True
                c.answer_update(update, start)
            else:
                store(sub)  # before the answer: the next member starts after what was counted
                sub.active = False
                c.answer_update(update, None)

    try:
        with _client(args, on_chunk=on_chunk) as c:
            if sac:
                _pin_next(c, subs)
            with _JOIN if sac else contextlib.nullcontext():
                for sid, sub in enumerate(subs):
                    c.subscribe(sid, sub.stream, sub.spec, credit=10,
                                properties=properties)
                answer_updates()
            started.wait()
            idle_since = time.monotonic()
            publishing = True
            while not interrupted.is_set() and not c.gone & set(args.partitions):
                if c.pump(0.2):
                    idle_since = time.monotonic()
                elif publishing and ready.is_set():
                    # the last confirms just came: the chunks they committed are delivered
                    # after them, so the quiet that ends the run counts from here (a loaded
                    # broker's last confirm can come over IDLE_S after the last delivery)
                    publishing = False
                    idle_since = time.monotonic()
                elif ready.is_set() and time.monotonic() - idle_since >= IDLE_S:
                    break
                answer_updates()
                for sub in subs:
                    if sub.since_store >= STORE_EVERY:
                        store(sub)
                counters.messages = counted
                if not wanted:
                    counters.matched = counted
            counters.messages = counted
            if not wanted:
                counters.matched = counted
            counters.streams = sorted(read_from)
            for sub in subs:
                if sub.active:
                    store(sub)
    except ClientError as exc:
        counters.error = str(exc)
        abort_start(started)

