"""One broker per data directory: a second ``serve`` on a directory in use exits 2 naming the
directory and the pid that holds it, before it opens (or declares into) any stream; the lock
goes with the process, so a broker starts again after a crash."""

from __future__ import annotations

import subprocess
import sys

from amqp_stream.testing import BrokerProcess, free_ports
from tests.broker.amqp import Client


def _second_serve(data_dir) -> subprocess.CompletedProcess:
    port, metrics_port = free_ports(2)
    return subprocess.run(
        [sys.executable, "-m", "amqp_stream", "serve", "--host", "127.0.0.1",
         "--port", str(port), "--metrics-port", str(metrics_port), "--management-port", "0",
         "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=30)


def test_a_second_broker_on_the_same_data_directory_exits_2(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    try:
        with Client(first.url) as c:
            c.declare("events")
        second = _second_serve(data)
        assert second.returncode == 2, second.stderr
        assert str(data) in second.stderr
        assert str(first.proc.pid) in second.stderr
        assert "0 streams recovered" not in second.stderr
        assert not (data / "streams" / "events~1").exists()

        first.kill()  # a crash releases the lock with the process
        first.start()
        with Client(first.url) as c:
            assert c.info("events")["name"] == "events"
    finally:
        first.close()
