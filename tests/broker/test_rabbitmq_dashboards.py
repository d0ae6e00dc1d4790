"""RabbitMQ's Prometheus names on a real broker, scraped over HTTP: the values they carry after
real traffic over both protocols, and every series RabbitMQ's published Grafana dashboards
(RabbitMQ-Overview, RabbitMQ-Stream: their JSON in ``rabbitmq_dashboards/``) select — name,
literal label values, labels matched and grouped on — exported, apart from those
``NOT_EXPORTED`` lists with its reason (and those must stay absent: the list is not a
wastebasket)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from proton import Message
from proton.reactor import AtMostOnce

from amqp_stream.rabbitmq_metrics import NOT_EXPORTED
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient
from tests.broker.amqp import OFFSET, Client, Delivery, offset
from tests.polling import wait_for
from tests.promql import Selector, dashboard_queries, selectors

DASHBOARDS = sorted((Path(__file__).parent / "rabbitmq_dashboards").glob("*.json"))
# labels Prometheus adds to every scraped series (the dashboards join on them)
TARGET_LABELS = {"instance", "job"}
# RabbitMQ's dashboards filter rabbitmq_identity_info on ``namespace``, a label Kubernetes'
# service discovery adds, not RabbitMQ: without it Grafana's $namespace is empty, and
# namespace="" matches a series that has no such label
NOT_FROM_THE_BROKER = {"namespace"}

STREAM_ALREADY_EXISTS, SUBSCRIPTION_ID_ALREADY_EXISTS = 0x05, 0x03


def scrape(b: BrokerProcess) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets of its samples (values under the key ``__value__``)."""
    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append({**s.labels, "__value__": str(s.value)})
    return out


def value(series: dict[str, list[dict[str, str]]], name: str, **labels: str) -> float:
    found = [s for s in series.get(name, ())
             if all(s.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, series.get(name))
    return float(found[0]["__value__"])


def traffic(b: BrokerProcess) -> dict[str, list[dict[str, str]]]:
    """Both protocols publish to and consume from stream ``s``; returns a scrape taken while
    one publisher and one consumer of each protocol are attached."""
    with Client(b.url) as c:
        c.declare("s")
        c.declare("s")  # declared again: not created
        c.publish("s", [Message(body=f"a{i}") for i in range(3)])  # unsettled: confirmed
        # routed to no stream: released (returned), and a pre-settled one dropped
        c.request("PUT", "/exchanges/x", {"type": "direct"})
        nowhere = c.conn.create_sender("/exchanges/x/none")
        assert c.send_bytes(nowhere, Message(body="lost").encode()) == Delivery.RELEASED
        presettled = c.conn.create_sender("/exchanges/x/none", name="presettled",
                                          options=AtMostOnce())
        presettled.send(Message(body="x"))
        c.info("s")  # a round trip: the pre-settled transfer is on its way before it
        wait_for(lambda: value(scrape(b), "rabbitmq_global_messages_unroutable_dropped_total",
                               protocol="amqp10") == 1, 15, "the pre-settled message dropped")
        nowhere.close()
        presettled.close()
        receiver = c.receiver("s", {OFFSET: offset("first")}, credit=10)
        assert len(c.receive_all(receiver, 3)) == 3
        amqp_sender = c.sender("s")
        with StreamClient("127.0.0.1", b.stream_port) as sc:
            assert sc.declare_publisher(1, "s") == OK
            sc.publish(1, [(i, Message(body=f"m{i}").encode()) for i in range(4)])
            assert sc.wait_confirms(1, range(4)) == {i: OK for i in range(4)}
            assert sc.subscribe(1, "s", credit=10) == OK
            assert sc.subscribe(1, "s") == SUBSCRIPTION_ID_ALREADY_EXISTS
            assert sc.create_stream("s") == STREAM_ALREADY_EXISTS
            # both consumers (the AMQP receiver has credit left) get the 4 new messages too
            wait_for(lambda: [value(scrape(b), "rabbitmq_global_messages_delivered_total",
                                    protocol=p) for p in ("amqp10", "stream")] == [7, 7], 15,
                     "both consumers' 7 messages")
            attached = scrape(b)
        amqp_sender.close()
    return attached


def test_rabbitmq_names_carry_the_brokers_figures(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        series = traffic(b)
        assert value(series, "rabbitmq_identity_info", rabbitmq_endpoint="per-object") == 1
        build = series["rabbitmq_build_info"][0]
        assert build["product_name"] == "amqp-stream" and build["rabbitmq_version"]
        assert value(series, "rabbitmq_connections") == 2
        assert value(series, "rabbitmq_connections_opened_total") == 2
        assert value(series, "rabbitmq_queues") == 1
        assert value(series, "rabbitmq_queues_created_total") == 1
        assert value(series, "rabbitmq_queues_declared_total") == 2
        for name in ("rabbitmq_queue_messages", "rabbitmq_queue_messages_ready"):
            assert value(series, name, queue="s", vhost="/") == 7
        assert value(series, "rabbitmq_queue_messages_unacked", queue="s", vhost="/") == 0
        assert value(series, "rabbitmq_queue_consumers", queue="s", vhost="/") == 2
        for protocol, published in (("amqp10", 3), ("stream", 4)):
            for name in ("received", "received_confirm", "confirmed"):
                assert value(series, f"rabbitmq_global_messages_{name}_total",
                             protocol=protocol) == published, (name, protocol)
            assert value(series, "rabbitmq_global_publishers", protocol=protocol) == 1
            assert value(series, "rabbitmq_global_consumers", protocol=protocol) == 1
        assert value(series, "rabbitmq_global_messages_routed_total", protocol="amqp10") == 3
        for outcome in ("returned", "dropped"):
            assert value(series, f"rabbitmq_global_messages_unroutable_{outcome}_total",
                         protocol="amqp10") == 1
        assert value(series, "rabbitmq_global_messages_delivered_total", protocol="amqp10") == 7
        # the receiver settles: manual ack; the stream protocol has no acks (as RabbitMQ)
        for protocol, manual in (("amqp10", 7), ("stream", 0)):
            assert value(series, "rabbitmq_global_messages_delivered_consume_manual_ack_total",
                         protocol=protocol) == manual
            assert value(series, "rabbitmq_global_messages_delivered_consume_auto_ack_total",
                         protocol=protocol) == 0
        assert value(series, "rabbitmq_global_stream_error_subscription_id_already_exists_total",
                     protocol="stream") == 1
        assert value(series, "rabbitmq_global_stream_error_stream_already_exists_total",
                     protocol="stream") == 1
        assert value(series, "rabbitmq_process_resident_memory_bytes") > 0
        assert 0 < value(series, "rabbitmq_process_open_fds") < value(series,
                                                                     "rabbitmq_process_max_fds")
        assert value(series, "rabbitmq_disk_space_available_bytes") > 0
        assert value(series, "rabbitmq_erlang_uptime_seconds") > 0
        # the clients are gone: the gauges follow
        after = scrape(b)
        for protocol in ("amqp10", "stream"):
            assert value(after, "rabbitmq_global_publishers", protocol=protocol) == 0
            assert value(after, "rabbitmq_global_consumers", protocol=protocol) == 0
        assert value(after, "rabbitmq_connections_closed_total") == 2


def check_selector(sel: Selector, series: dict[str, list[dict[str, str]]]) -> list[str]:
    """What ``sel`` needs that the scrape lacks (empty: it selects data)."""
    samples = series.get(sel.name)
    if not samples:
        return [f"{sel.name}: not exported"]
    problems = []
    for label, op, wanted in sel.matchers:
        if label in NOT_FROM_THE_BROKER:
            continue
        if not any(label in s for s in samples):
            problems.append(f"{sel.name}: no label {label}")
        elif "$" not in wanted and op == "=" and not any(s.get(label) == wanted for s in samples):
            problems.append(f"{sel.name}: no series with {label}={wanted!r}")
    return problems


def test_rabbitmqs_dashboards_select_data_from_the_broker(tmp_path):
    assert [p.name for p in DASHBOARDS] == ["RabbitMQ-Overview.json", "RabbitMQ-Stream.json"]
    with BrokerProcess(tmp_path / "data") as b:
        traffic(b)
        series = scrape(b)
    missing: dict[str, list[str]] = {}
    seen: set[str] = set()
    for path in DASHBOARDS:
        for query in dashboard_queries(path):
            found = selectors(query)
            for sel in found:
                seen.add(sel.name)
                if sel.name in NOT_EXPORTED:
                    continue
                for problem in check_selector(sel, series):
                    missing.setdefault(problem, []).append(path.name)
            labels = {k for sel in found for s in series.get(sel.name, ()) for k in s}
            for label in {g for sel in found for g in sel.grouping} - TARGET_LABELS - labels:
                if not any(sel.name in NOT_EXPORTED for sel in found):
                    missing.setdefault(f"grouping label {label} in {query[:60]}", []).append(
                        path.name)
    assert not missing, missing
    assert len(seen) > 50  # the reader found the dashboards' selectors
    exported_anyway = {name for name in NOT_EXPORTED if name in series}
    assert not exported_anyway, f"exported but listed as not: {exported_anyway}"
    assert set(NOT_EXPORTED) <= seen, set(NOT_EXPORTED) - seen
