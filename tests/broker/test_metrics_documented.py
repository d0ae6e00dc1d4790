"""docs/metrics.md and docs/broker.md ("Metrics") name what the broker exports: every family a
real broker's /metrics has is documented under its full name, and every `amqp_stream_*` or
`rabbitmq_*` name the docs give is exported, or is one of the series RabbitMQ's dashboards query
that the broker says it does not export (``NOT_EXPORTED``), or a replication series, which only
a cluster node exports (``amqp_stream/cluster/metrics.py`` makes them)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from amqp_stream.rabbitmq_metrics import NOT_EXPORTED, STREAM_ERRORS

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"`((?:amqp_stream|rabbitmq)_[a-z0-9_]+)(?:\{[^}]*\})?`")


def _documented() -> set[str]:
    """The metric names of docs/metrics.md's tables (first column) and of docs/broker.md's
    Metrics section, as written (no `...` shorthand: a reader cannot tell what it stands for)."""
    names: set[str] = set()
    for row in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        if row.startswith("| `"):
            names.update(NAME.findall(row.split(" | ")[0]))
    broker = (ROOT / "docs" / "broker.md").read_text()
    names.update(NAME.findall(broker.split("\n## Metrics", 1)[1].split("\n## ", 1)[0]))
    return names


def _exported(url: str) -> set[str]:
    """The names of the families a scrape has (counters with their `_total`)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name + "_total" if kind == "counter" and not name.endswith("_total") else name)
    return names


def _cluster_only() -> set[str]:
    return set(re.findall(r'"(amqp_stream_replication_[a-z_]+)"',
                          (ROOT / "amqp_stream" / "cluster" / "metrics.py").read_text()))


def test_every_exported_family_is_documented_and_every_documented_name_exported(broker):
    documented = _documented()
    exported = _exported(broker.metrics_url)
    errors = {f"rabbitmq_global_stream_error_{code}_total" for code in STREAM_ERRORS.values()}
    assert errors <= exported  # `rabbitmq_global_stream_error_<code>_total` in docs/metrics.md
    # docs/broker.md: "the standard process (...) and platform (python_info) series"
    standard = {n for n in exported if n.startswith(("process_", "python_"))}
    undocumented = sorted(exported - documented - errors - standard)
    assert not undocumented, f"exported, not in docs/metrics.md or docs/broker.md: {undocumented}"
    cluster_only = _cluster_only()
    assert cluster_only and cluster_only <= documented
    unknown = sorted(documented - exported - set(NOT_EXPORTED) - cluster_only)
    assert not unknown, f"documented, never exported: {unknown}"
