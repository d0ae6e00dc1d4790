"""The metrics endpoint: what a real broker serves at /metrics (process figures, build info, no
``_created`` series, nothing at other paths), and the series the broker reports through
``Metrics`` (connections opened/closed, rejected publishes, segments and consumer lag computed at
scrape time), read over HTTP from a served ``Metrics`` beside a real stream directory."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

import storage
from amqp_stream import __version__
from amqp_stream.metrics import Metrics, StreamState
from amqp_stream.testing import BrokerProcess, free_port


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


def _values(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_a_broker_serves_process_figures_and_build_info_at_metrics_only(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        text = _get(b.metrics_url)
        values = _values(text)
        assert values["process_resident_memory_bytes"] > 0
        assert "process_cpu_seconds_total" in values and values["process_open_fds"] > 0
        build = [k for k in values if k.startswith("amqp_stream_build_info{")]
        assert len(build) == 1 and f'version="{__version__}"' in build[0] and values[build[0]] == 1
        assert not [k for k in values if k.split("{")[0].endswith("_created")]
        for path in ("/", "/metricsx", "/other"):
            with pytest.raises(urllib.error.HTTPError) as err:
                _get(b.metrics_url.replace("/metrics", path))
            assert err.value.code == 404


def test_reported_events_and_scrape_time_stream_state(tmp_path):
    log_dir = tmp_path / "s" / "log"
    stream = storage.Stream.open(log_dir, storage.StreamConfig(max_segment_bytes=4096))
    try:
        for _ in range(3):  # three chunks of 3 KB, one at a time: segments roll over
            durable = threading.Event()
            stream.append(b"x" * 3000, on_durable=lambda offset, error: durable.set())
            assert durable.wait(30)
    finally:
        stream.close()
    m = Metrics()
    port = free_port()
    m.serve("127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/metrics"
    m.connection_opened()
    m.connection_opened()
    m.connection_closed()
    m.publish_rejected("s", "amqp:resource-limit-exceeded", 2)
    m.for_stream("s").publish_rejected("amqp:resource-limit-exceeded")
    m.watch(lambda: [StreamState("s", log_dir, 10, [10, 4], consumers=[
        ("amqp10", "link", 10), ("stream", "peer/1", 4), ("stream", "peer/1", 6)]),
        StreamState("idle", log_dir, 7)])
    values = _values(_get(url))
    assert values["amqp_stream_connections_opened_total"] == 2
    assert values["amqp_stream_connections_closed_total"] == 1
    assert values['amqp_stream_rejected_publishes_total{reason="amqp:resource-limit-exceeded",stream="s"}'] == 3
    segments = len(list(log_dir.glob("*.segment")))
    assert segments >= 2
    assert values['amqp_stream_segments{stream="s"}'] == segments
    assert values['amqp_stream_consumer_lag_messages{stream="s"}'] == 6
    assert values['amqp_stream_consumer_lag_messages{stream="idle"}'] == 0
    attached = 'amqp_stream_attached_consumer_lag_messages{{consumer="{}",protocol="{}",stream="s"}}'
    assert values[attached.format("link", "amqp10")] == 0
    assert values[attached.format("peer/1", "stream")] == 6  # the same label twice: the max
    m.forget("s")
    assert "amqp_stream_rejected_publishes_total{" not in _get(url)


def test_consumer_turns_count_in_plain_ints_and_every_read_sees_them_exactly(tmp_path):
    """``count_turn`` only adds to ints; the scrape folds them into the counters first (a read
    right after a turn sees it, a second read adds nothing), the HTTP API's counts fold too,
    and a deleted stream's deliveries stay in the global and listener counters."""
    from amqp_stream.http.rates import all_counts
    from storage.reader import ReaderStats
    m = Metrics()
    port = free_port()
    m.serve("127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/metrics"
    s = m.for_stream("s")
    stats = ReaderStats()
    before = s.count_turn((0, 0, 0), stats, 0, 0, protocol="stream")
    stats.chunks_read, stats.bytes_read, stats.prefilter_records_dropped = 2, 300, 5
    before = s.count_turn(before, stats, 4, 120, dropped=1, protocol="stream", chunks=3)
    s.count_turn(before, stats, 2, 50, protocol="amqp10", settled=False)
    for _ in range(2):
        values = _values(_get(url))
        assert values['amqp_stream_delivered_messages_total{stream="s"}'] == 6
        assert values['amqp_stream_delivered_bytes_total{stream="s"}'] == 170
        assert values['amqp_stream_chunks_read_total{stream="s"}'] == 2
        assert values['amqp_stream_read_bytes_total{stream="s"}'] == 300
        assert values['amqp_stream_stage2_dropped_messages_total{stream="s"}'] == 6
        assert values['rabbitmq_global_messages_delivered_total{protocol="stream"}'] == 4
        assert values['rabbitmq_global_messages_delivered_total{protocol="amqp10"}'] == 2
        assert values['rabbitmq_global_messages_delivered_consume_manual_ack_total{protocol="amqp10"}'] == 2
        assert values["amqp_stream_stream_protocol_delivered_chunks_total"] == 3
        assert values["amqp_stream_stream_protocol_delivered_bytes_total"] == 120
    s.count_turn(before, stats, 1, 10, protocol="stream", chunks=1)
    # a scrape of chosen series only (prometheus_client's ``name[]``) folds too
    only = _values(_get(url + "?name[]=amqp_stream_delivered_messages_total"))
    assert only == {'amqp_stream_delivered_messages_total{stream="s"}': 7}
    core = type("Core", (), {"metrics": m, "registry": type("R", (), {"entries": {}})()})()
    assert all_counts(core)[""]["deliver_get"] == 7  # (the HTTP API folds before it reads)
    s.count_turn(before, stats, 1, 10, protocol="stream", chunks=1)
    m.forget("s")
    values = _values(_get(url))
    assert values['rabbitmq_global_messages_delivered_total{protocol="stream"}'] == 6
    assert values["amqp_stream_stream_protocol_delivered_chunks_total"] == 5
    assert 'amqp_stream_delivered_messages_total{stream="s"}' not in values
