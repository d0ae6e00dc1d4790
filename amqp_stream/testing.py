"""Start and stop a real ``amqp-stream serve`` process, for tests and benchmarks.

Test suites (``tests/``, ``conformance/`` when no ``--broker-url`` is given, the Spark tests,
``bench/``) talk to the broker over loopback exactly as any client would; this module only
launches the process on free ports and waits until it accepts connections. It uses nothing of
the broker's internals.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _port_range() -> tuple[int, int]:
    """The ports this process may offer: 16k below the ephemeral range, or, when pytest-xdist
    runs the tests in several workers, this worker's own slice of them. Two workers walking the
    same range could each offer a port before the other's broker binds it."""
    high = _ephemeral_low()
    low = max(1024, high - 16384)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        size = (high - low) // count
        low += int(worker[2:]) % count * size
        high = low + size
    return low, high


_cursor: int | None = None  # the next port this process offers (see free_ports)


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports on 127.0.0.1 that nothing is bound to right now.

    They lie below the kernel's ephemeral range: a port from ``bind(0)`` lies in that range,
    where any client socket on the machine may take it as its local port between the pick and
    the broker's bind (or between a broker's kill and its restart on the same ports). And the
    picks walk the range from a random start, so this process never offers a port twice until
    it has offered all 16k (its own slice of them under pytest-xdist): a test that picks ports
    for three nodes before starting any of them would otherwise be offered the first node's
    ports again for the second (both seen as "Address already in use" in fresh-clone runs)."""
    global _cursor
    low, high = _port_range()
    if _cursor is None or not low <= _cursor < high:
        _cursor = random.randrange(low, high)
    ports: list[int] = []
    for _ in range(high - low):
        port, _cursor = _cursor, low + (_cursor + 1 - low) % (high - low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise OSError(f"fewer than {n} free ports in {low}..{high - 1}")


def wait_for_port(host: str, port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until ``host:port`` accepts TCP connections; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class BrokerProcess:
    """A broker subprocess on free ports with its own data directory.

    ``url`` is the AMQP URL, ``stream_url`` the stream protocol's, ``metrics_url`` the Prometheus
    endpoint, ``management_url`` the management HTTP API's root. ``stop()`` sends SIGTERM (a
    clean shutdown), ``kill()`` SIGKILL (a crash); ``start()`` again reuses the data directory,
    so a test can check what survives a restart.
    """

    def __init__(self, data_dir: str | os.PathLike | None = None, extra_args: Sequence[str] = (),
                 env: dict[str, str] | None = None, log_path: str | os.PathLike | None = None):
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="amqp-stream-")
            data_dir = self._tmp.name
        self.data_dir = Path(data_dir)
        self.extra_args = list(extra_args)
        self.env = env
        self.host = "127.0.0.1"
        # (the TLS stream port is used when TLS is configured)
        (self.port, self.metrics_port, self.stream_port, self.stream_tls_port,
         self.management_port) = free_ports(5)
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    @property
    def stream_url(self) -> str:
        return f"rabbitmq-stream://{self.host}:{self.stream_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def management_url(self) -> str:
        """The management HTTP API's root (``.../api/overview`` and so on)."""
        return f"http://{self.host}:{self.management_port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "amqp_stream", "serve", "--host", self.host,
                "--port", str(self.port), "--data-dir", str(self.data_dir),
                "--metrics-port", str(self.metrics_port), "--stream-port", str(self.stream_port),
                "--stream-tls-port", str(self.stream_tls_port),
                "--management-port", str(self.management_port), *self.extra_args]

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        env = dict(os.environ, **(self.env or {}))
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_for_port(self.host, self.port, timeout, self.proc)
        except Exception as exc:
            self.kill()
            raise RuntimeError(f"{exc}; broker log:\n{self.log_text()[-4000:]}") from None
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait: the broker settles what is durable and closes its logs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self._wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self._wait(timeout)
        return self.proc.returncode if self.proc else None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self._wait(20)

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
