"""A RabbitMQ node to measure against, when Debian's ``rabbitmq-server`` is installed.

Benchmarks compare this broker with RabbitMQ in the same run (``apt-get install
rabbitmq-server``: 3.10 on Debian 12, with its ``rabbitmq_stream`` plugin). ``RabbitMQNode``
starts a throw-away node of its own: its own name, data and log directories under a temporary
directory, listeners on free loopback ports only (AMQP 0-9-1/1.0 and the stream protocol; epmd
bound to loopback), nothing of the machine's /etc/rabbitmq. ``RabbitMQNode.available()`` says
whether the package is there; a benchmark that wants a peer says when it is not and carries on
without it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from amqp_stream.testing import free_ports, wait_for_port

__all__ = ["RabbitMQNode"]

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitMQNode:
    def __init__(self) -> None:
        self.host = "127.0.0.1"
        self.amqp_port, self.stream_port, self.dist_port = free_ports(3)
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-"))
        self.name = f"bench{os.getpid()}@localhost"
        self.proc: subprocess.Popen | None = None
        self.epmd_before: set[int] = set()

    @staticmethod
    def available() -> bool:
        return os.access(SERVER, os.X_OK)

    def version(self) -> str:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
                             capture_output=True, text=True)
        return out.stdout.strip() or "?"

    def start(self, timeout: float = 90.0) -> "RabbitMQNode":
        if self.proc is not None and self.proc.poll() is None:
            return self  # running: ``with RabbitMQNode().start()`` must not start a second
        conf = self.tmp / "rabbitmq.conf"
        conf.write_text(
            f"listeners.tcp.1 = {self.host}:{self.amqp_port}\n"
            f"stream.listeners.tcp.1 = {self.host}:{self.stream_port}\n"
            f"stream.advertised_host = {self.host}\n"
            f"stream.advertised_port = {self.stream_port}\n"
            "loopback_users = none\n")
        plugins = self.tmp / "enabled_plugins"
        plugins.write_text("[rabbitmq_stream].\n")
        env = dict(os.environ,
                   HOME=str(self.tmp),  # the Erlang cookie goes here
                   RABBITMQ_NODENAME=self.name,
                   RABBITMQ_NODE_IP_ADDRESS=self.host,
                   RABBITMQ_NODE_PORT=str(self.amqp_port),
                   RABBITMQ_DIST_PORT=str(self.dist_port),
                   RABBITMQ_CONFIG_FILE=str(conf),
                   RABBITMQ_ENABLED_PLUGINS_FILE=str(plugins),
                   RABBITMQ_MNESIA_BASE=str(self.tmp / "mnesia"),
                   RABBITMQ_LOG_BASE=str(self.tmp / "log"),
                   RABBITMQ_ADVANCED_CONFIG_FILE=str(self.tmp / "advanced.config"),
                   ERL_EPMD_ADDRESS="127.0.0.1")
        self.epmd_before = set(_pids("epmd"))  # an epmd this node starts is stopped with it
        self.log = open(self.tmp / "server.out", "wb")
        self.proc = subprocess.Popen([SERVER], env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_for_port(self.host, self.stream_port, timeout, self.proc)
        except Exception:
            self.stop()
            raise
        return self

    def pid(self) -> int:
        """The Erlang VM's pid (its CPU time is the broker's)."""
        assert self.proc is not None
        out = subprocess.run(["pgrep", "-s", str(self.proc.pid), "beam.smp"], capture_output=True,
                             text=True).stdout.split()
        return int(out[0]) if out else self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # epmd outlives the node: stop the one it started (on loopback), never another's
        for pid in set(_pids("epmd")) - self.epmd_before:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "RabbitMQNode":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _pids(name: str) -> list[int]:
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]
