"""RabbitMQ's ``message_stats``: counts with ``<name>_details: {"rate": ...}``, for the overview
(the broker's global counters) and for each stream (its published and delivered counters).

Why samples taken here: the counters are the ones ``metrics`` already keeps (no work per
message); the rates are the difference between the two newest samples of a small ring, taken on
request at most every ``INTERVAL`` seconds (RabbitMQ samples every 5 s), so an idle broker does
no sampling at all."""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

__all__ = ["Rates", "INTERVAL", "all_counts", "counter_value"]

INTERVAL = 2.0  # seconds between samples, at most
KEEP = 4  # samples kept: bounded memory, however long the broker runs

# overview field -> RabbitMQ's global counter (``rabbitmq_metrics.GLOBAL_COUNTERS``)
OVERVIEW = {"publish": "messages_received", "confirm": "messages_confirmed",
            "deliver_get": "messages_delivered",
            "deliver": "messages_delivered_consume_manual_ack",
            "deliver_no_ack": "messages_delivered_consume_auto_ack",
            "drop_unroutable": "messages_unroutable_dropped",
            "return_unroutable": "messages_unroutable_returned"}
ZERO = ("get", "get_no_ack", "redeliver")  # no basic.get, a stream never redelivers
# per stream field -> ``StreamMetrics`` counter
STREAM = {"publish": "published_messages", "deliver_get": "delivered_messages"}

Counts = dict[str, int]


def counter_value(counter: Any) -> int:
    """A prometheus counter's (or labelled child's) value, through its public ``collect()``."""
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                return int(sample.value)
    return 0


def overview_counts(metrics: Any) -> Counts:
    """The overview's counts, summed over both protocols."""
    return {field: sum(counter_value(c) for c in metrics.global_counters[key].values())
            for field, key in OVERVIEW.items()}


def stream_counts(stream_metrics: Any) -> Counts:
    if stream_metrics is None:
        return dict.fromkeys(STREAM, 0)
    return {field: counter_value(getattr(stream_metrics, key)) for field, key in STREAM.items()}


def all_counts(core: Any) -> dict[str, Counts]:
    """One sample: the overview's counts (key ``""``) and each stream's (key: its name)."""
    core.metrics.fold()  # (consumers' turns count in plain ints until then)
    counts = {"": overview_counts(core.metrics)}
    for name, entry in list(core.registry.entries.items()):
        counts[name] = stream_counts(getattr(entry, "metrics", None))
    return counts


class Rates:
    """A ring of ``(time, counts by key)`` samples; ``key`` is ``""`` for the overview or a
    stream's name. ``read`` gives the counts now and the rates of the two newest samples."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.samples: deque[tuple[float, dict[str, Counts]]] = deque(maxlen=KEEP)

    def read(self, now: dict[str, Counts]) -> dict[str, dict[str, Any]]:
        """``message_stats`` for each key of ``now`` (the counts just read)."""
        t = self.clock()
        if not self.samples or t - self.samples[-1][0] >= INTERVAL:
            self.samples.append((t, now))
        rates: dict[str, dict[str, float]] = {}
        if len(self.samples) >= 2:
            (t0, old), (t1, new) = self.samples[-2], self.samples[-1]
            rates = {key: {f: (v - old.get(key, {}).get(f, v)) / (t1 - t0)
                           for f, v in counts.items()} for key, counts in new.items()}
        out = {}
        for key, counts in now.items():
            stats: dict[str, Any] = {}
            for field, value in counts.items():
                stats[field] = value
                stats[f"{field}_details"] = {"rate": float(max(
                    rates.get(key, {}).get(field, 0.0), 0.0))}
            if key == "":
                for field in ZERO:
                    stats[field] = 0
                    stats[f"{field}_details"] = {"rate": 0.0}
            out[key] = stats
        return out
