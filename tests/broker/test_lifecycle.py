"""The broker process: settings from flags/env/file, clean shutdown, restart recovery, metrics."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

from proton import Described, Message, symbol
from proton.reactor import AtMostOnce

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import OFFSET, Client, annotations, offset


def test_restart_recovers_streams_with_their_arguments_and_data(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("keep", {"x-queue-type": "stream", "x-max-age": "2D",
                               "x-stream-filter-size-bytes": 64})
            c.declare("other")
            sender = c.sender("keep")
            for i in range(5):
                sender.send(Message(body=i, annotations={"x-stream-filter-value": f"v{i}"}))
        assert b.stop() == 0
        b.start()
        with Client(b.url) as c:
            info = c.info("keep")
            assert info["arguments"] == {"x-queue-type": "stream", "x-max-age": "2D",
                                         "x-stream-filter-size-bytes": 64}
            assert info["message_count"] == 5
            assert c.info("other")["message_count"] == 0
            r = c.receiver("keep", [(OFFSET, offset("first"))])
            got = [r.receive(timeout=15) for _ in range(5)]
            assert [m.body for m in got] == list(range(5))
            assert [annotations(m)["x-stream-offset"] for m in got] == list(range(5))
            # appending continues after the recovered end
            c.sender("keep").send(Message(body=5))
            assert c.info("keep")["next_offset"] == 6
    finally:
        b.close()


def test_sigterm_settles_durable_messages_and_exits_0(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("s")
            fast = c.conn.create_sender("/queues/s", options=[AtMostOnce()], name="fast")
            for i in range(500):
                fast.send(Message(body=i))
            c.sender("s").send(Message(body="confirmed"))  # waits for its accept
        assert b.stop() == 0
        assert "stopped" in b.log_text()
        b.start()
        with Client(b.url) as c:
            assert c.info("s")["message_count"] == 501
    finally:
        b.close()


def test_metrics_endpoint_counts_per_stream(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("m")
            sender = c.sender("m")
            for i in range(4):
                sender.send(Message(body=i, properties={"n": i},
                                    annotations={"x-stream-filter-value": "a" if i < 2 else "b"}))
            r = c.receiver("m", [(OFFSET, offset("first")),
                                 (symbol("f"), Described(symbol("rabbitmq:stream-filter"), "a")),
                                 (symbol("q"), Described(symbol("amqp:sql-filter"), "n = 1"))])
            assert r.receive(timeout=15).body == 1
            text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()

        def value(name: str) -> float:
            for line in text.splitlines():
                if line.startswith(name + '{stream="m"}'):
                    return float(line.split()[-1])
            raise AssertionError(f"{name} not in metrics")

        assert value("amqp_stream_published_messages_total") == 4
        assert value("amqp_stream_published_bytes_total") > 0
        assert value("amqp_stream_delivered_messages_total") == 1
        assert value("amqp_stream_delivered_bytes_total") > 0
        assert value("amqp_stream_chunks_read_total") == 2
        assert value("amqp_stream_chunks_skipped_total") == 2
        assert value("amqp_stream_stage2_dropped_messages_total") == 1
        assert value("amqp_stream_read_bytes_total") > 0
    finally:
        b.close()


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    # the default stream and management ports off: the outcome must not depend on whether
    # 5552/15672 are free on the machine (a fresh-clone run failed while another broker held 5552)
    return subprocess.run([sys.executable, "-m", "amqp_stream", "serve", "--management-port", "0",
                           "--stream-port", "0", *args],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


def test_bad_settings_exit_2_with_a_message(tmp_path):
    r = _serve("--fsync", "sometimes")
    assert r.returncode == 2
    r = _serve("--filter-size", "8", "--data-dir", str(tmp_path))
    assert r.returncode == 2 and "filter_size" in r.stderr
    r = _serve("--data-dir", str(tmp_path), env={"AMQP_STREAM_PORT": "notaport"})
    assert r.returncode == 2 and "AMQP_STREAM_PORT" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("port = [1")
    r = _serve("--config", str(bad))
    assert r.returncode == 2 and "bad.toml" in r.stderr


def test_settings_from_a_config_file_and_the_environment(tmp_path):
    from amqp_stream.testing import free_port
    port = free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text('port = 1\nfilter-size = 32\n')
    b = BrokerProcess(tmp_path / "data", extra_args=["--config", str(cfg)],
                      env={"AMQP_STREAM_MAX_MESSAGE_SIZE": "2000"})
    # the CLI flags of BrokerProcess (--port) win over the file's port = 1
    b.start()
    try:
        with Client(b.url) as c:
            c.declare("s")
            sender = c.sender("s")
            c.send_bytes(sender, Message(body=b"x" * 3000).encode())
            assert c.last_delivery.remote.condition.name == "amqp:link:message-size-exceeded"
    finally:
        b.close()
    del port


def test_a_damaged_stream_directory_does_not_keep_the_others_offline(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("good")
            c.declare("bad")
            c.sender("good").send(Message(body="kept"))
        assert b.stop() == 0
        bad_meta = next(p for p in (tmp_path / "data" / "streams").glob("*/stream.json")
                        if '"bad"' in p.read_text())
        bad_meta.write_text("{ not json")
        b.start()
        with Client(b.url) as c:
            assert c.info("good")["message_count"] == 1
            status, body, _ = c.request("GET", "/queues/bad")
            assert status == 404
        assert "not opened" in b.log_text()
        assert bad_meta.exists()  # left for the operator, not deleted
    finally:
        b.close()


def test_a_port_in_use_exits_1_with_a_message(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _serve("--port", str(port), "--metrics-port", "0", "--data-dir", str(tmp_path / "d"))
        assert r.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
        r = _serve("--port", "1", "--metrics-port", str(port), "--data-dir", str(tmp_path / "d"))
        assert r.returncode == 1 and "cannot serve metrics" in r.stderr
