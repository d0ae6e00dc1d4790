"""Prometheus metrics (names fixed in docs/DEVELOPING.md), one label: ``stream``.

Strategy: counters are incremented in batches by the server (once per settled chunk of publishes
or once per consumer turn), never per message through a label lookup; ``Metrics.for_stream``
caches the labelled children. The broker's own registry holds only these series.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = ["Metrics", "StreamMetrics"]

log = logging.getLogger(__name__)

_COUNTERS = {
    "published_messages": "messages appended to the stream",
    "published_bytes": "bytes of messages appended to the stream",
    "delivered_messages": "messages sent to consumers",
    "delivered_bytes": "bytes of messages sent to consumers",
    "chunks_read": "chunks read by consumers (stage 1 passed)",
    "chunks_skipped": "chunks skipped by stage 1 (chunk filter) without reading their data",
    "stage2_dropped_messages": "messages read but dropped by a stage-2 filter",
    "read_bytes": "bytes read from segment files by consumers",
}


class StreamMetrics:
    __slots__ = tuple(_COUNTERS)

    def __init__(self, counters: dict, name: str):
        for key, counter in counters.items():
            setattr(self, key, counter.labels(stream=name))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.counters = {
            key: Counter(f"amqp_stream_{key}", help_text, ["stream"], registry=self.registry)
            for key, help_text in _COUNTERS.items()
        }
        self.connections = Gauge("amqp_stream_connections", "open AMQP connections",
                                 registry=self.registry)
        self.streams = Gauge("amqp_stream_streams", "streams", registry=self.registry)
        self.consumers = Gauge("amqp_stream_consumers", "attached consumer links",
                               registry=self.registry)
        self.publishers = Gauge("amqp_stream_publishers", "attached publisher links",
                                registry=self.registry)
        self._children: dict[str, StreamMetrics] = {}

    def for_stream(self, name: str) -> StreamMetrics:
        child = self._children.get(name)
        if child is None:
            child = self._children[name] = StreamMetrics(self.counters, name)
        return child

    def forget(self, name: str) -> None:
        """A deleted stream's series go away."""
        if self._children.pop(name, None) is not None:
            for counter in self.counters.values():
                try:
                    counter.remove(name)
                except KeyError:
                    pass

    def serve(self, host: str, port: int) -> None:
        """Start the HTTP endpoint in a daemon thread (port 0 = off)."""
        if port:
            start_http_server(port, addr=host, registry=self.registry)
            log.info("metrics on http://%s:%d/metrics", host, port)
