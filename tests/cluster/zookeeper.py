"""A real ZooKeeper server for the cluster tests: Debian's ``zookeeper`` package, run in the
foreground with a config of its own in a temporary directory (loopback unless given another
address, a free port, no admin server), ready once a kazoo client connects."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from amqp_stream.testing import free_ports

__all__ = ["ZooKeeperServer", "ZK_SERVER"]

ZK_SERVER = "/usr/share/zookeeper/bin/zkServer.sh"
TICK_MS = 500  # ZooKeeper's session timeouts run from 2 to 20 ticks: 1 s .. 10 s here


class ZooKeeperServer:
    """``start()`` runs it and waits until it serves; ``stop()`` ends it (SIGTERM, then
    SIGKILL); ``start()`` again reuses its data. ``hosts`` is kazoo's ``HOST:PORT``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="zookeeper-")
        self.dir = Path(self._tmp.name)
        (self.port,) = free_ports(1)
        self.hosts = f"{host}:{self.port}"
        self.config = self.dir / "zoo.cfg"
        self.config.write_text(
            f"tickTime={TICK_MS}\ninitLimit=10\nsyncLimit=5\ndataDir={self.dir / 'data'}\n"
            f"clientPort={self.port}\nclientPortAddress={host}\nadmin.enableServer=false\n"
            f"4lw.commands.whitelist=ruok\n")
        self.log_path = self.dir / "zookeeper.out"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        env = dict(os.environ, ZOOCFGDIR=str(self.dir), ZOO_LOG_DIR=str(self.dir),
                   JMXDISABLE="true")
        with open(self.log_path, "ab") as log:
            # the config as an absolute path: Debian's zkEnv.sh sets ZOOCFGDIR itself
            self.proc = subprocess.Popen([ZK_SERVER, "start-foreground", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, env=env)
        self._wait_serving(timeout)
        return self

    def _wait_serving(self, timeout: float) -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n"
                                   f"{self.log_path.read_text(errors='replace')[-3000:]}")
            client = KazooClient(hosts=self.hosts, timeout=4.0)
            try:
                client.start(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
                client.stop()
                return
            except KazooTimeoutError:
                pass
            finally:
                client.close()
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"ZooKeeper not serving on {self.hosts} after {timeout} s")

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()
