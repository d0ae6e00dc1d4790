"""Prometheus metrics (names listed in docs/broker.md), served at ``/metrics`` only; the same
figures under RabbitMQ's names come from ``rabbitmq_metrics`` (docs/metrics.md).

Strategy: counters are incremented in batches by the server (once per settled chunk of publishes
or once per consumer turn), never per message through a label lookup; ``Metrics.for_stream``
caches the labelled children. A consumer's turn (``StreamMetrics.count_turn``, on the event
loop's thread, one per credit a filtered stream consumer grants) only adds to plain ints; they
are folded into their Prometheus counters when someone reads them (``Metrics.fold``: first in
every scrape, and before the HTTP API's counts), so a read right after a turn sees its counts
exactly, at ~1 µs a turn instead of ~5-10 (a ``Counter.inc`` takes a lock: ~0.7 µs each). What
is cheap to read but costly to keep current (segment files, consumer lag) is computed when
Prometheus scrapes, from a snapshot the broker hands over (``watch``). The broker's own registry
holds these series, the process collector (memory, CPU, file descriptors), the platform
collector and a build-info series; no ``_created`` series.
"""

from __future__ import annotations

import logging
import operator
import os
import socket
import sys
import threading
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any, Callable, Iterable, Mapping, Sequence
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import prometheus_client
from prometheus_client import (CollectorRegistry, Counter, Gauge, PlatformCollector,
                               ProcessCollector, make_wsgi_app)
from prometheus_client.core import GaugeMetricFamily

from amqp_stream.rabbitmq_metrics import GLOBAL_COUNTERS, PROTOCOLS, RabbitCollector

__all__ = ["Metrics", "StreamMetrics", "StreamState"]

log = logging.getLogger(__name__)

# a counter's value and its ``_created`` twin would double the series for nothing
prometheus_client.disable_created_metrics()

PATH = "/metrics"

_COUNTERS = {
    "published_messages": "messages appended to the stream",
    "published_bytes": "bytes of messages appended to the stream",
    "delivered_messages": "messages sent to consumers",
    "delivered_bytes": "bytes of messages sent to consumers",
    "chunks_read": "chunks read by consumers (stage 1 passed)",
    "chunks_skipped": "chunks skipped by stage 1 (chunk filter) without reading their data",
    "stage2_dropped_messages": "messages read but dropped by a stage-2 filter (also those its "
                               "byte search left out without decoding them)",
    "read_bytes": "bytes read from segment files by consumers",
    "deduplicated_messages": "messages of named publishers (both protocols) confirmed and not "
                             "stored: their publishing id was not above the last one stored",
    "derived_chunks_skipped": "chunks skipped by broker-derived filter keys without reading them "
                              "(also counted in chunks_skipped)",
    "derived_blocks_skipped": "record blocks of chunks read in part that broker-derived filter "
                              "keys ruled out",
    "prefilter_chunks_skipped": "chunks read whose data section holds none of the bytes a "
                                "stage-2 filter requires: dropped whole, no record decoded",
}
_READ_STATS = ("chunks_read", "chunks_skipped", "bytes_read", "derived_chunks_skipped",
               "derived_blocks_skipped", "prefilter_chunks_skipped", "prefilter_records_dropped")
_READ_COUNTERS = ("chunks_read", "chunks_skipped", "read_bytes", "derived_chunks_skipped",
                  "derived_blocks_skipped", "prefilter_chunks_skipped", "stage2_dropped_messages")
_read_stats = operator.attrgetter(*_READ_STATS)
# ``StreamMetrics.turned``: the counts a turn adds to, in this order (plain ints, folded later)
_TURNED = ("delivered_messages", "delivered_bytes") + _READ_COUNTERS
_DELIVERED, _BYTES, _READ_AT = 0, 1, 2
_DROPPED = _READ_AT + _READ_COUNTERS.index("stage2_dropped_messages")
# ``StreamMetrics.by_protocol[protocol]``: the global counters a turn adds to, in this order
_BY_PROTOCOL = ("messages_delivered", "messages_delivered_consume_auto_ack",
                "messages_delivered_consume_manual_ack")


@dataclass
class StreamState:
    """What ``watch``'s snapshot gives for one stream: its log directory (segment files are
    counted there), its next offset, the next offset each of its consumers will send and the
    offset stored for each consumer name (its tracking state)."""

    name: str
    log_dir: str | os.PathLike
    next_offset: int
    consumer_offsets: Sequence[int] = field(default_factory=list)
    stored_offsets: Mapping[str, int] = field(default_factory=dict)
    first_offset: int = 0  # the first offset still kept (RabbitMQ's queue messages: next - first)
    # each attached consumer: (protocol, label, the next offset it sends)
    consumers: Sequence[tuple[str, str, int]] = field(default_factory=list)


class StreamMetrics:
    """One stream's counters (``published_messages`` ...) and its rejected-publish count."""

    __slots__ = (*_COUNTERS, "_metrics", "_name", "turned", "folded", "by_protocol", "chunks",
                 "folded_by_protocol", "folded_chunks")
    # those read by name (the others by getattr): set from ``_COUNTERS`` in ``__init__``
    published_messages: Counter
    published_bytes: Counter
    delivered_messages: Counter
    delivered_bytes: Counter
    stage2_dropped_messages: Counter
    deduplicated_messages: Counter

    def __init__(self, counters: dict, name: str, metrics: "Metrics | None" = None):
        for key, counter in counters.items():
            setattr(self, key, counter.labels(stream=name))
        self._metrics, self._name = metrics, name
        # what turns counted (only ever added to, on the loop's thread) and how much of it
        # ``Metrics.fold`` has given the Prometheus counters (under its lock)
        self.turned = [0] * len(_TURNED)
        self.folded = [0] * len(_TURNED)
        self.by_protocol: dict[str, list[int]] = {p: [0] * len(_BY_PROTOCOL) for p in PROTOCOLS}
        self.folded_by_protocol = {p: [0] * len(_BY_PROTOCOL) for p in PROTOCOLS}
        self.chunks = [0, 0]  # stream-protocol chunks and bytes sent
        self.folded_chunks = [0, 0]

    def publish_rejected(self, reason: str, count: int = 1) -> None:
        """``count`` messages to this stream rejected with the AMQP condition ``reason``."""
        if self._metrics is not None:
            self._metrics.publish_rejected(self._name, reason, count)

    def received(self, count: int, confirm: int) -> None:
        """An AMQP 1.0 publisher's batch for this stream: ``count`` messages, ``confirm`` of
        them unsettled (RabbitMQ's global received, received_confirm and routed counters)."""
        if self._metrics is not None:
            self._metrics.received("amqp10", count, confirm, routed=count)

    def confirmed(self, count: int) -> None:
        """``count`` of an AMQP 1.0 batch are durable (on storage's writer thread)."""
        if self._metrics is not None:
            self._metrics.confirmed("amqp10", count)

    def count_dropped(self, count: int) -> None:
        """``count`` records a stage-2 filter read and left out (on the event loop's thread;
        a plain int, as ``count_turn``'s)."""
        self.turned[_DROPPED] += count

    def count_turn(self, before: tuple[int, ...], stats: Any | None, delivered: int, nbytes: int,
                   dropped: int = 0, protocol: str = "amqp10",
                   settled: bool | None = None, chunks: int = 0) -> tuple[int, ...]:
        """A consumer's turn, for consumers of every protocol, on the event loop's thread:
        ``delivered`` messages of ``nbytes`` sent, ``dropped`` by stage 2, and what its storage
        reader did since ``before`` (its ``stats``: chunks read, chunks skipped, bytes read,
        chunks and blocks skipped by derived keys; a shorter ``before`` counts the rest from
        0); returns the new ``before``. ``settled``: an AMQP 1.0 consumer's messages are sent
        settled (RabbitMQ's consume_auto_ack) or not (consume_manual_ack); None for the stream
        protocol, whose ``chunks`` (of those ``nbytes``) count in the listener's delivered
        chunks and bytes. ``stats`` None: the reader was not used this turn (``before`` is
        returned). Plain ints only: ``Metrics.fold`` gives them to the counters."""
        turned = self.turned
        if delivered:
            turned[_DELIVERED] += delivered
            turned[_BYTES] += nbytes
            counts = self.by_protocol[protocol]
            counts[0] += delivered
            if settled is not None:
                counts[1 if settled else 2] += delivered
        if chunks:
            sent = self.chunks
            sent[0] += chunks
            sent[1] += nbytes
        if dropped:
            turned[_DROPPED] += dropped
        if stats is None:  # (the reader did nothing this turn)
            return before
        now = _read_stats(stats)
        if now != before:
            if len(before) != len(now):
                before = before + (0,) * (len(now) - len(before))
            for i, (was, value) in enumerate(zip(before, now, strict=True)):
                if value != was:
                    turned[_READ_AT + i] += value - was
        return now


def _fold(counts: list[int], done: list[int], counters: list[Any]) -> None:
    """Give each of ``counters`` what its count in ``counts`` gained since ``done`` (then
    ``done`` is ``counts`` as read)."""
    for i, counter in enumerate(counters):
        value = counts[i]
        if value != done[i]:
            counter.inc(value - done[i])
            done[i] = value


class _Fold:
    """Registered first: a scrape folds the turns' counts (``Metrics.fold``) before the
    counters are read; it yields nothing itself."""

    def __init__(self, metrics: "Metrics") -> None:
        self.metrics = metrics

    def describe(self) -> list:
        return []

    def collect(self) -> Iterable[Any]:
        self.metrics.fold()
        return ()


class _StreamStateCollector:
    """Segment files, consumer lag per stream and per consumer name, computed at scrape time
    from the snapshot."""

    def __init__(self) -> None:
        self.snapshot: Callable[[], Iterable[StreamState]] | None = None

    def states(self) -> list[StreamState]:
        if self.snapshot is None:
            return []
        try:
            return list(self.snapshot())
        except Exception:  # a scrape must not fail because the broker's state moved
            log.exception("metrics snapshot")
            return []

    def collect(self):
        segments = GaugeMetricFamily("amqp_stream_segments", "segment files of the stream",
                                     labels=["stream"])
        lag = GaugeMetricFamily(
            "amqp_stream_consumer_lag_messages",
            "offsets between the stream's end and its furthest-behind consumer (0 without consumers)",
            labels=["stream"])
        named_lag = GaugeMetricFamily(
            "amqp_stream_consumer_name_lag_messages",
            "offsets committed after the one stored for a consumer name (committed end - 1 - "
            "stored offset; both protocols' stored offsets)",
            labels=["stream", "consumer"])
        attached_lag = GaugeMetricFamily(
            "amqp_stream_attached_consumer_lag_messages",
            "offsets between the stream's end and the next one an attached consumer sends "
            "(consumer: an AMQP link's name, or a stream connection's peer/subscription id)",
            labels=["stream", "protocol", "consumer"])
        for s in self.states():
            segments.add_metric([s.name], _count_segments(s.log_dir))
            behind = [max(0, s.next_offset - o) for o in s.consumer_offsets]
            lag.add_metric([s.name], max(behind, default=0))
            for consumer, stored in s.stored_offsets.items():
                named_lag.add_metric([s.name, consumer], max(0, s.next_offset - 1 - stored))
            each: dict[tuple[str, str], int] = {}  # two links of one name: the furthest behind
            for protocol, label, offset in s.consumers:
                key = (protocol, label)
                each[key] = max(each.get(key, 0), max(0, s.next_offset - offset))
            for (protocol, label), offsets in each.items():
                attached_lag.add_metric([s.name, protocol, label], offsets)
        yield segments
        yield attached_lag
        yield lag
        yield named_lag


def _count_segments(log_dir: str | os.PathLike) -> int:
    try:
        return sum(1 for name in os.listdir(log_dir) if name.endswith(".segment"))
    except OSError:
        return 0


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._fold_lock = threading.Lock()
        self.registry.register(_Fold(self))  # first: every scrape folds before it reads
        process = ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.counters = {
            key: Counter(f"amqp_stream_{key}", help_text, ["stream"], registry=self.registry)
            for key, help_text in _COUNTERS.items()
        }
        self.connections = Gauge("amqp_stream_connections", "open connections (both listeners)",
                                 registry=self.registry)
        self.connections_opened = Counter("amqp_stream_connections_opened",
                                          "AMQP connections opened", registry=self.registry)
        self.connections_closed = Counter("amqp_stream_connections_closed",
                                          "AMQP connections closed", registry=self.registry)
        self.streams = Gauge("amqp_stream_streams", "streams", registry=self.registry)
        self.consumers = Gauge("amqp_stream_consumers", "attached consumer links",
                               registry=self.registry)
        self.publishers = Gauge("amqp_stream_publishers", "attached publisher links",
                                registry=self.registry)
        self.rejected = Counter("amqp_stream_rejected_publishes",
                                "published messages rejected, by AMQP error condition",
                                ["stream", "reason"], registry=self.registry)
        # the stream-protocol listener (per-stream counters above count both protocols)
        self.stream_protocol: dict[str, Any] = {
            "connections": Gauge("amqp_stream_stream_protocol_connections",
                                 "open stream-protocol connections", registry=self.registry),
            "confirmed": Counter("amqp_stream_stream_protocol_confirmed_messages",
                                 "publishing ids confirmed to stream-protocol publishers",
                                 registry=self.registry),
            "publish_errors": Counter("amqp_stream_stream_protocol_publish_errors",
                                      "publishing ids answered with a PublishError",
                                      registry=self.registry),
            "protocol_errors": Counter("amqp_stream_stream_protocol_errors",
                                       "stream-protocol connections closed for a protocol error",
                                       registry=self.registry),
            "chunks": Counter("amqp_stream_stream_protocol_delivered_chunks",
                              "chunks sent to stream-protocol subscribers", registry=self.registry),
            "bytes": Counter("amqp_stream_stream_protocol_delivered_bytes",
                             "chunk bytes sent to stream-protocol subscribers",
                             registry=self.registry),
        }
        build = Gauge("amqp_stream_build_info", "the broker's version (value 1)",
                      ["version", "python", "proton"], registry=self.registry)
        build.labels(version=_version(), python=sys.version.split()[0],
                     proton=_proton_version()).set(1)
        self._state = _StreamStateCollector()
        self.registry.register(self._state)
        # RabbitMQ's names (rabbitmq_metrics.py): counters by protocol, added to once per batch
        self.global_counters: dict[str, dict[str, Any]] = {}
        for key, help_text in GLOBAL_COUNTERS.items():
            counter = Counter(f"rabbitmq_global_{key}", help_text, ["protocol"],
                              registry=self.registry)
            self.global_counters[key] = {p: counter.labels(protocol=p) for p in PROTOCOLS}
        # the others are plain ints: only the event loop's thread adds to them
        self.attached: dict[str, dict[str, int]] = {
            kind: dict.fromkeys(PROTOCOLS, 0) for kind in ("publishers", "consumers")}
        self.stream_errors: dict[int, int] = {}
        self.streams_declared = self.streams_created = self.streams_deleted = 0
        self.rabbit = RabbitCollector(self, process)
        self.registry.register(self.rabbit)
        self._children: dict[str, StreamMetrics] = {}
        self._reasons: dict[str, set[str]] = {}
        self._server: Any = None

    def for_stream(self, name: str) -> StreamMetrics:
        child = self._children.get(name)
        if child is None:
            child = self._children[name] = StreamMetrics(self.counters, name, self)
        return child

    def declared(self) -> None:
        """A stream was declared (created or not: RabbitMQ's queues_declared_total)."""
        self.streams_declared += 1

    def unroutable(self, presettled: bool) -> None:
        """An AMQP 1.0 message routed to no stream: dropped (pre-settled) or released."""
        self.global_counters["messages_unroutable_dropped" if presettled
                             else "messages_unroutable_returned"]["amqp10"].inc()

    def created(self, name: str) -> StreamMetrics:
        """A stream was created (not recovered at start): its counters."""
        self.streams_created += 1
        return self.for_stream(name)

    def fold(self) -> None:
        """Give the Prometheus counters what consumers' turns counted since the last fold
        (``StreamMetrics.count_turn``); from any thread (the turns' ints are only added to, on
        the loop's thread: what a reader misses now, the next fold gives)."""
        by_protocol, sent = self.global_counters, self.stream_protocol
        with self._fold_lock:
            for child in list(self._children.values()):
                _fold(child.turned, child.folded, [getattr(child, key) for key in _TURNED])
                for protocol, counts in child.by_protocol.items():
                    _fold(counts, child.folded_by_protocol[protocol],
                          [by_protocol[key][protocol] for key in _BY_PROTOCOL])
                _fold(child.chunks, child.folded_chunks, [sent["chunks"], sent["bytes"]])

    def forget(self, name: str) -> None:
        """A deleted stream's series go away (what its consumers counted stays in the
        global and listener counters: folded first)."""
        self.fold()
        self.streams_deleted += 1
        if self._children.pop(name, None) is not None:
            for counter in self.counters.values():
                try:
                    counter.remove(name)
                except KeyError:
                    pass
        for reason in self._reasons.pop(name, ()):
            try:
                self.rejected.remove(name, reason)
            except KeyError:
                pass

    # -- events the broker reports ----------------------------------------------------------
    def connection_opened(self) -> None:
        self.connections_opened.inc()

    def connection_closed(self) -> None:
        self.connections_closed.inc()

    def attach(self, kind: str, protocol: str, delta: int) -> None:
        """A ``kind`` ("publishers" or "consumers") of ``protocol`` attached (+1) or left (-1)."""
        self.attached[kind][protocol] += delta

    def received(self, protocol: str, count: int, confirm: int, routed: int = 0) -> None:
        """A batch of ``count`` messages from publishers, ``confirm`` of them to be confirmed,
        ``routed`` stored in streams (a thread-safe Counter each)."""
        counters = self.global_counters
        counters["messages_received"][protocol].inc(count)
        if confirm:
            counters["messages_received_confirm"][protocol].inc(confirm)
        if routed:
            counters["messages_routed"][protocol].inc(routed)

    def confirmed(self, protocol: str, count: int) -> None:
        """``count`` messages confirmed to publishers (called on storage's writer threads too)."""
        self.global_counters["messages_confirmed"][protocol].inc(count)

    def stream_error(self, code: int, count: int = 1) -> None:
        """The stream-protocol listener answered ``count`` times with response code ``code``."""
        self.stream_errors[code] = self.stream_errors.get(code, 0) + count

    def identify(self, node: str, cluster: str, data_dir: str | os.PathLike) -> None:
        """The node's name and cluster for RabbitMQ's ``rabbitmq_identity_info``, and the data
        directory whose file system ``rabbitmq_disk_space_available_bytes`` reports."""
        self.rabbit.node, self.rabbit.cluster, self.rabbit.data_dir = node, cluster, str(data_dir)

    def publish_rejected(self, stream: str, reason: str, count: int = 1) -> None:
        """``count`` messages to ``stream`` rejected with the AMQP condition ``reason``
        (e.g. ``amqp:resource-limit-exceeded``; a small fixed set, so a bounded label)."""
        self._reasons.setdefault(stream, set()).add(reason)
        self.rejected.labels(stream=stream, reason=reason).inc(count)

    def watch(self, snapshot: Callable[[], Iterable[StreamState]]) -> None:
        """Segment count and consumer lag come from ``snapshot()`` at each scrape. It runs on the
        metrics HTTP thread: it must only copy the broker's state (``list(...)`` of dicts and
        sets, reads of ints), never call into proton."""
        self._state.snapshot = snapshot
        self.rabbit.states = lambda: self._state.states()

    # -- the endpoint ---------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> None:
        """Serve ``/metrics`` (any other path: 404) from a daemon thread (port 0 = off)."""
        if not port:
            return
        app = make_wsgi_app(self.registry)

        def only_metrics(environ: dict, start_response: Callable) -> list[bytes]:
            if environ.get("PATH_INFO") != PATH:
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"not found: the metrics are at {PATH}\n".encode()]
            self.fold()  # (also for a scrape of chosen series, ``name[]``, which skips ``_Fold``)
            return app(environ, start_response)

        self._server = make_server(host, port, only_metrics,
                                   server_class=_Server6 if ":" in host else _Server,
                                   handler_class=_QuietHandler)
        threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True).start()
        log.info("metrics on http://%s:%d%s", host, port, PATH)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # no access log on stderr
        pass


def _version() -> str:
    from amqp_stream import __version__
    return __version__


def _proton_version() -> str:
    try:
        from importlib.metadata import version
        return version("python-qpid-proton")
    except Exception:
        return "unknown"
