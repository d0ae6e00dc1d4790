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
publishing ends, a consumer stops once nothing has arrived for `IDLE_S` seconds (a filtered
consumer cannot know where its last chunk is).
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import proton

from amqp_stream.client import ClientError
from amqp_stream.client.stream import StreamClient, offset_spec, publish_frame
from amqp_stream.commands.perf import abort_start, due, value_of
from amqp_stream.streamproto.traffic import CHUNK_HEADER, chunk_header
from amqp_stream.wire import MessageView
from storage.format import decode_records

__all__ = ["producer", "consumer", "declare", "delete", "available", "IDLE_S"]

IDLE_S = 1.0
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
    """Create the stream; check that the broker can filter when filters are asked for (RabbitMQ
    before 3.13 cannot: Publish v2 is an unknown frame there, ``filter.N`` is ignored)."""
    with _client(args) as c:
        if (args.filter_values or args.consumer_filter) and not c.filtering:
            product = f"{c.server_properties.get('product', '?')} {c.server_properties.get('version', '?')}"
            if not args.allow_missing_filters:
                raise ClientError(f"the broker ({product}) has no stream filtering (RabbitMQ 3.13+); "
                                  "--allow-missing-filters runs without filter values")
            args.filter_values, args.consumer_filter = 0, []
        if args.producers:
            c.create(args.stream)


def delete(args: Any) -> None:
    with _client(args) as c:
        c.delete(args.stream)


def available(args: Any) -> int:
    """Records the stream holds, from StreamStats: up to the first offset of its last chunk
    (the protocol says no more; 0 where the broker has no StreamStats, as RabbitMQ 3.10)."""
    try:
        with _client(args) as c:
            stats = c.stats(args.stream)
    except ClientError:
        return 0
    return max(0, stats.get("committed_chunk_id", -1) - stats.get("first_chunk_id", 0))


def producer(args: Any, index: int, stop: threading.Event, counters: Any,
             started: threading.Barrier) -> None:
    body = bytes(range(256)) * (args.size // 256 + 1)
    values = [f"v{i}" for i in range(args.filter_values)]
    templates = {v: Template(body[:args.size], index, v) for v in values or (None,)}
    per_second = args.rate / args.producers if args.rate > 0 else 0.0
    try:
        with _client(args) as c:
            c.declare_publisher(1, args.stream)
            started.wait()
            t0 = time.monotonic()
            n = 0
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
                c.send(publish_frame(1, messages))
                n += batch
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


def consumer(args: Any, interrupted: threading.Event, counters: Any, started: threading.Barrier,
             ready: threading.Event) -> None:
    wanted = set(args.consumer_filter)
    properties = {f"filter.{i}": v for i, v in enumerate(args.consumer_filter)}
    if args.match_unfiltered:
        properties["match-unfiltered"] = "true"
    if args.consumer_sql:
        properties["sql-filter"] = args.consumer_sql

    def on_chunk(chunk: memoryview) -> None:
        now = time.time_ns()
        header = chunk_header(chunk)
        records = decode_records(bytes(chunk[CHUNK_HEADER.size:]), header.chunk_id,
                                 entries=header.num_entries)
        counters.bytes += sum(len(body) for _, body in records)
        for offset, _ in records[:1] + records[-1:]:
            counters.delivered(offset)
        if wanted:
            for _, body in records:
                value = MessageView.from_bytes(body).application_properties.get("value")
                if value in wanted or (args.match_unfiltered and value is None):
                    counters.matched += 1
        if records:
            ts = MessageView.from_bytes(records[-1][1]).application_properties.get("ts")
            if isinstance(ts, int):
                counters.latencies_ms.append((now - ts) / 1e6)

    try:
        with _client(args, on_chunk=on_chunk) as c:
            c.subscribe(1, args.stream, offset_spec(args.start_spec), credit=10,
                        properties=properties)
            started.wait()
            idle_since = time.monotonic()
            while not interrupted.is_set() and args.stream not in c.gone:
                if c.pump(0.2):
                    idle_since = time.monotonic()
                elif ready.is_set() and time.monotonic() - idle_since >= IDLE_S:
                    break
                counters.messages = c.records
                if not wanted:
                    counters.matched = c.records
            counters.messages = c.records
            if not wanted:
                counters.matched = c.records
    except ClientError as exc:
        counters.error = str(exc)
        abort_start(started)
