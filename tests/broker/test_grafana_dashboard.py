"""The filtering-and-lag dashboard shipped in docs/grafana/ against a real broker's /metrics (no
Grafana can be installed here: Debian has none, PyPI's "grafana" is an empty placeholder): its
JSON is a dashboard Grafana imports (panels with ids, positions, targets, a Prometheus data
source variable), every variable a query uses is defined, and every series its queries select
exists with the labels they match and group on; ``rate`` only over counters."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from proton import Message

from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient
from tests.promql import dashboard_queries, selectors

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "amqp-stream-filtering.json"
TARGET_LABELS = {"instance", "job"}  # Prometheus adds them to every scraped series


def exported(b: BrokerProcess) -> dict[str, tuple[str, set[str]]]:
    """Sample name -> (its family's type, the label names of its samples)."""
    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    out: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, (family.type, set()))[1].update(s.labels)
    return out


def attached_lag(b: BrokerProcess) -> list[dict]:
    """The per-attached-consumer lag samples, each with its stream's end (RabbitMQ's
    queue_messages: next - first, the first offset being 0 here)."""
    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    ends = {}
    lags = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "rabbitmq_queue_messages":
                ends[s.labels["queue"]] = s.value
            elif s.name == "amqp_stream_attached_consumer_lag_messages":
                lags.append({**s.labels, "value": s.value})
    return [{**lag, "stream_end": ends[lag["stream"]]} for lag in lags]


def test_the_dashboard_is_importable_and_selects_what_the_broker_exports(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert dashboard["uid"] and dashboard["title"] and panels
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource"} <= variables
    for p in panels:
        assert p["type"] in ("timeseries", "stat") and set(p["gridPos"]) == {"h", "w", "x", "y"}
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        for t in p["targets"]:
            assert t["refId"] and t["expr"] and t["datasource"]["uid"] == "${datasource}"
    queries = dashboard_queries(DASHBOARD)
    for query in queries:
        used = set(re.findall(r"\$(\w+)", query)) - {"__rate_interval", "__range"}
        assert used <= variables, (query, used - variables)

    with BrokerProcess(tmp_path / "data") as b:
        with StreamClient("127.0.0.1", b.stream_port) as sc:
            assert sc.create_stream("s") == OK
            assert sc.declare_publisher(1, "s") == OK
            sc.publish(1, [(i, Message(body=f"m{i}").encode()) for i in range(3)])
            assert sc.wait_confirms(1, range(3)) == {i: OK for i in range(3)}
            sc.store_offset("reader", "s", 1)
            assert sc.query_offset("reader", "s") == (OK, 1)  # stored before the scrape
            # an attached consumer without credit: nothing sent, it lags by the whole stream
            assert sc.subscribe(1, "s", credit=0) == OK
            series = exported(b)
            lag = attached_lag(b)
    assert lag[0]["protocol"] == "stream" and lag[0]["consumer"].endswith("/1")
    assert lag[0]["value"] == lag[0]["stream_end"] > 3  # 3 messages and the offset's tracking

    problems = []
    for query in queries:
        found = selectors(query)
        assert found, query
        labels = set().union(*(series.get(s.name, ("", set()))[1] for s in found))
        for sel in found:
            if sel.name not in series:
                problems.append(f"{sel.name}: not exported")
                continue
            kind, names = series[sel.name]
            if "rate(" in query and kind != "counter":
                problems.append(f"rate over {sel.name}, a {kind}")
            for label, _, _ in sel.matchers:
                if label not in names | TARGET_LABELS:
                    problems.append(f"{sel.name}: no label {label}")
        for label in set().union(*(s.grouping for s in found)) - labels - TARGET_LABELS:
            problems.append(f"grouping on {label}, which no series of {query[:50]} has")
    assert not problems, problems
