"""The broker's figures under the names of RabbitMQ's Prometheus plugin (rabbitmq_prometheus and
the stream plugin's global counters), so RabbitMQ's published Grafana dashboards (RabbitMQ-Overview,
RabbitMQ-Stream) show this broker. Only series with the same meaning are exported; the ones the
dashboards query that this broker cannot have are in ``NOT_EXPORTED`` with the reason (the test
and docs/metrics.md list them).

Everything here is computed when Prometheus scrapes, from our own series (``Metrics``), from the
stream snapshot and from a few ``protocol``-labelled counters the listeners add to once per batch:
nothing on the hot path beyond those.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["NOT_EXPORTED", "PROTOCOLS", "STREAM_ERRORS", "RabbitCollector"]

VHOST = "/"  # the broker has one virtual host
PROTOCOLS = ("amqp10", "stream")  # RabbitMQ's ``protocol`` label values for our two listeners

# the stream plugin's rabbitmq_global_stream_error_<name>_total counters (rabbit_stream_metrics.hrl),
# keyed by the response code they count
STREAM_ERRORS = {
    0x02: "stream_does_not_exist", 0x03: "subscription_id_already_exists",
    0x04: "subscription_id_does_not_exist", 0x05: "stream_already_exists",
    0x06: "stream_not_available", 0x07: "sasl_mechanism_not_supported",
    0x08: "authentication_failure", 0x09: "sasl_error", 0x0A: "sasl_challenge",
    0x0B: "sasl_authentication_failure_loopback", 0x0C: "vhost_access_failure",
    0x0D: "unknown_frame", 0x0E: "frame_too_large", 0x0F: "internal_error",
    0x10: "access_refused", 0x11: "precondition_failed", 0x12: "publisher_does_not_exist",
}

# Series the two dashboards query that this broker does not export, and why.
NOT_EXPORTED = {
    "rabbitmq_channels_opened_total": "AMQP 0-9-1 channels: the broker speaks AMQP 1.0 and the "
                                      "stream protocol only (rabbitmq_channels is exported, 0)",
    "rabbitmq_channels_closed_total": "AMQP 0-9-1 channels (see rabbitmq_channels_opened_total)",
    "rabbitmq_message_size_bytes_bucket": "a per-message size histogram would cost an observation "
                                          "per message on the publish path (counters are per "
                                          "batch); amqp_stream_published_bytes_total / "
                                          "_messages_total gives the mean size",
    "rabbitmq_message_size_bytes_sum": "see rabbitmq_message_size_bytes_bucket",
    "rabbitmq_message_size_bytes_count": "see rabbitmq_message_size_bytes_bucket",
    "rabbitmq_resident_memory_limit_bytes": "no memory high watermark: the broker bounds memory "
                                            "per connection and publisher (docs/broker.md)",
    "rabbitmq_disk_space_available_limit_bytes": "no free-disk alarm limit",
    "rabbitmq_global_messages_acknowledged_total": "consumers' settlements are not counted",
}

# counted by protocol (``Metrics.global_counters``, prometheus Counters: AMQP 1.0's confirms are
# counted on storage's writer threads); RabbitMQ exports them for every protocol
GLOBAL_COUNTERS = {
    "messages_received": "messages received from publishers (AMQP 1.0: once per stream a message "
                         "is routed to)",
    "messages_received_confirm": "messages received from publishers expecting confirmations",
    "messages_routed": "messages routed to streams",
    "messages_confirmed": "messages confirmed to publishers",
    "messages_unroutable_dropped": "pre-settled messages that routed to no stream, dropped",
    "messages_unroutable_returned": "messages that routed to no stream, released",
    "messages_delivered": "messages delivered to consumers",
    "messages_delivered_consume_auto_ack": "messages sent settled to AMQP 1.0 consumers",
    "messages_delivered_consume_manual_ack": "messages sent unsettled to AMQP 1.0 consumers",
}
# always 0 here, as in RabbitMQ for these two protocols: no basic.get, a stream never redelivers
ZERO_COUNTERS = {
    "messages_delivered_get_manual_ack": "messages delivered with basic.get, manual ack (none)",
    "messages_delivered_get_auto_ack": "messages delivered with basic.get, auto ack (none)",
    "messages_get_empty": "basic.get on an empty queue (none)",
    "messages_redelivered": "messages redelivered (a stream never redelivers)",
}


def _value(metric: Any) -> float:
    """The value of one of our unlabelled gauges or counters (public ``collect()`` API)."""
    for family in metric.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                return sample.value
    return 0.0


class RabbitCollector:
    """Yields the RabbitMQ-named families at each scrape."""

    def __init__(self, metrics: Any, process: Any) -> None:
        self.metrics = metrics
        self.process = process  # prometheus_client's ProcessCollector (memory, fds)
        self.started = time.time()
        self.node = "amqp-stream@localhost"
        self.cluster = self.node
        self.data_dir: str | None = None
        self.states: Callable[[], Iterable[Any]] = lambda: ()

    def collect(self) -> Iterable[Metric]:
        m = self.metrics
        yield from self._info()
        yield _gauge("connections", "Connections currently open", _value(m.connections))
        yield _gauge("channels", "AMQP 0-9-1 channels currently open (none: 0)", 0)
        yield _counter("connections_opened", "Total number of connections opened",
                       _value(m.connections_opened))
        yield _counter("connections_closed", "Total number of connections closed or terminated",
                       _value(m.connections_closed))
        yield _gauge("queues", "Queues available", _value(m.streams))
        yield _counter("queues_declared", "Total number of queues declared", m.streams_declared)
        yield _counter("queues_created", "Total number of queues created", m.streams_created)
        yield _counter("queues_deleted", "Total number of queues deleted", m.streams_deleted)
        yield _gauge("consumers", "Consumers currently connected", _value(m.consumers))
        yield from self._queues()
        yield from self._globals()
        yield from self._node()

    def _info(self) -> Iterable[Metric]:
        from amqp_stream import __version__
        build = GaugeMetricFamily(
            "rabbitmq_build_info", "the broker's versions (RabbitMQ's build info labels; value 1)",
            labels=["rabbitmq_version", "product_name", "product_version", "erlang_version",
                    "prometheus_client_version"])
        build.add_metric([__version__, "amqp-stream", __version__,
                          "none (Python " + sys.version.split()[0] + ")", _client_version()], 1)
        yield build
        identity = GaugeMetricFamily(
            "rabbitmq_identity_info", "node and cluster identity (value 1)",
            labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_endpoint"])
        identity.add_metric([self.node, self.cluster, "per-object"], 1)
        yield identity

    def _queues(self) -> Iterable[Metric]:
        """Per-object queue series (RabbitMQ's ``per-object`` endpoint): a stream's messages are
        its offsets still kept (next - first, as rabbit_osiris_metrics counts), all ready."""
        labels = ["vhost", "queue"]
        families = {name: GaugeMetricFamily(f"rabbitmq_queue_{name}", text, labels=labels)
                    for name, text in (("messages", "Sum of ready and unacknowledged messages"),
                                       ("messages_ready", "Messages ready to be delivered"),
                                       ("messages_unacked", "Messages delivered, not acknowledged "
                                                            "(always 0 for a stream)"),
                                       ("consumers", "Consumers on a queue"))}
        for s in self.states():
            kept = max(0, s.next_offset - s.first_offset)
            key = [VHOST, s.name]
            families["messages"].add_metric(key, kept)
            families["messages_ready"].add_metric(key, kept)
            families["messages_unacked"].add_metric(key, 0)
            families["consumers"].add_metric(key, len(s.consumer_offsets))
        yield from families.values()

    def _globals(self) -> Iterable[Metric]:
        """The plugin's per-protocol counters that are always 0 here, the publishers and
        consumers per protocol and the stream protocol's error counters (the others of
        ``GLOBAL_COUNTERS`` are real counters in ``Metrics``' registry)."""
        m = self.metrics
        for name, text in ZERO_COUNTERS.items():
            family = CounterMetricFamily(f"rabbitmq_global_{name}", text, labels=["protocol"])
            for protocol in PROTOCOLS:
                family.add_metric([protocol], 0)
            yield family
        for kind in ("publishers", "consumers"):
            gauge = GaugeMetricFamily(f"rabbitmq_global_{kind}", f"Current number of {kind}",
                                      labels=["protocol"])
            for protocol in PROTOCOLS:
                gauge.add_metric([protocol], m.attached[kind][protocol])
            yield gauge
        for code, name in STREAM_ERRORS.items():
            family = CounterMetricFamily(f"rabbitmq_global_stream_error_{name}",
                                         f"responses with code {name}", labels=["protocol"])
            family.add_metric(["stream"], m.stream_errors.get(code, 0))
            yield family

    def _node(self) -> Iterable[Metric]:
        """The node figures that have a true equivalent in a Python process."""
        for family in self.process.collect():
            if family.name in ("process_resident_memory_bytes", "process_open_fds",
                               "process_max_fds"):
                yield _gauge(family.name, family.documentation, family.samples[0].value)
        yield _gauge("erlang_uptime_seconds", "Node uptime (the broker process's)",
                     time.time() - self.started)
        if self.data_dir is not None:
            try:
                st = os.statvfs(self.data_dir)
            except OSError:
                return
            yield _gauge("disk_space_available_bytes",
                         "Disk space available in bytes (the data directory's file system)",
                         st.f_bavail * st.f_frsize)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"rabbitmq_{name}", text, value=value)


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"rabbitmq_{name}", text, value=value)


def _client_version() -> str:
    try:
        from importlib.metadata import version
        return version("prometheus-client")
    except Exception:
        return "unknown"

