"""Three real broker processes joined into one cluster through a real ZooKeeper, on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from amqp_stream.streams import dir_name
from amqp_stream.testing import BrokerProcess, free_port

__all__ = ["SESSION_TIMEOUT", "node", "cluster_status", "holds_log"]

SESSION_TIMEOUT = 2.0  # seconds: ZooKeeper's floor here is 2 ticks of 500 ms


def node(tmp: Path, url: str, name: str, *extra: str) -> BrokerProcess:
    """A cluster node ``name`` (not started) with its data under ``tmp/name``."""
    (tmp / name).mkdir(parents=True, exist_ok=True)
    return BrokerProcess(tmp / name / "data", extra_args=[
        "--cluster", url, "--node-name", name, "--stream-advertised-host", "127.0.0.1",
        "--replication-port", str(free_port()),
        "--cluster-session-timeout", str(SESSION_TIMEOUT), *extra])


def cluster_status(url: str) -> dict:
    """``amqp-stream cluster status --json``, run as a user would."""
    out = subprocess.run([sys.executable, "-m", "amqp_stream", "cluster", "status", "--cluster",
                          url, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def holds_log(broker: BrokerProcess, stream: str) -> bool:
    """Whether ``broker`` opened its member log of ``stream`` (its directory is complete)."""
    return (broker.data_dir / "streams" / dir_name(stream) / "stream.json").is_file()
