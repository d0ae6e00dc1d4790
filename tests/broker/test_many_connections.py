"""Thousands of connections, idle, half-open, malformed or over the limit: the broker holds them,
closes the bad ones and releases their file descriptors, and keeps serving everyone else.

Each test runs its own broker process (limits are flags) and talks to it over loopback: raw
sockets, proton client engines (``tests.broker.engines``) and a blocking proton client.
"""

from __future__ import annotations

import random
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from proton import Message, symbol

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, Delivery, offset
from tests.broker.engines import EngineClient, fd_count, pump, raw_socket, connection_count, wait_for

pytestmark = pytest.mark.timeout(300)

# what a proton client sends first: the SASL header, then (after the server's mechanisms)
# sasl-init ANONYMOUS and the AMQP header; the open frame follows
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


@pytest.fixture(autouse=True)
def _many_fds():
    """This test process holds thousands of sockets too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _publish_and_consume(url: str, stream: str, n: int) -> None:
    """A publisher and a consumer work: ``n`` messages accepted and read back in order, by a
    client in a process of its own (proton's blocking client waits with ``select()``, which
    this process's thousands of sockets would be out of range for)."""
    root = Path(__file__).resolve().parents[2]
    code = ("import sys; from tests.broker.test_many_connections import publish_and_consume; "
            "publish_and_consume(sys.argv[1], sys.argv[2], int(sys.argv[3]))")
    done = subprocess.run([sys.executable, "-c", code, url, stream, str(n)], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def publish_and_consume(url: str, stream: str, n: int) -> None:
    """In the client process: declare, publish ``n``, read them back from where they start."""
    with Client(url, timeout=30) as c:
        assert c.declare(stream) in (200, 201)
        first = c.info(stream)["next_offset"]
        bodies = [f"{stream}-{first + i}" for i in range(n)]
        assert c.publish(stream, [Message(body=b) for b in bodies]) == [Delivery.ACCEPTED] * n
        r = c.receiver(stream, [(symbol("o"), offset(first))], credit=n)
        assert [r.receive(timeout=30).body for _ in range(n)] == bodies


def test_ten_thousand_idle_sockets_and_two_thousand_amqp_connections_held_while_serving(tmp_path):
    idle_count, amqp_count = 10_000, 2_000
    b = BrokerProcess(tmp_path / "data", extra_args=["--max-connections", "13000",
                                                     "--handshake-timeout", "600"]).start()
    idle: list[socket.socket] = []
    engines: list[EngineClient] = []
    try:
        _publish_and_consume(b.url, "busy", 50)
        for _ in range(idle_count):
            idle.append(raw_socket(b.host, b.port))
        for _ in range(amqp_count):
            engines.append(EngineClient(b.host, b.port))
        assert pump(engines, lambda e: e.opened, timeout=120) == []
        assert not any(e.closed_by_peer for e in engines)
        # the broker holds every one of them (plus the listener and its own files)
        wait_for(lambda: connection_count(b.proc.pid) >= idle_count + amqp_count, 60,
                 "the broker holding every connection")
        # and keeps serving: a publisher and a consumer go on working
        _publish_and_consume(b.url, "busy", 500)
        # the idle ones were not closed meanwhile, the AMQP ones are still open
        for s in random.sample(idle, 100):
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
        assert pump(engines, lambda e: e.opened and not e.closed_by_peer, timeout=5) == []
        assert b.proc.poll() is None
    finally:
        for s in idle:
            s.close()
        for e in engines:
            e.close()
        b.close()
    assert "Traceback" not in b.log_text()


def test_connections_beyond_max_connections_are_refused_without_harm(tmp_path):
    b = BrokerProcess(tmp_path / "data", extra_args=["--max-connections", "40",
                                                     "--handshake-timeout", "600"]).start()
    held: list[socket.socket] = []
    try:
        _publish_and_consume(b.url, "s", 5)
        wait_for(lambda: connection_count(b.proc.pid) == 0, 10, "the client's socket closed")
        for _ in range(40):
            held.append(raw_socket(b.host, b.port))
        wait_for(lambda: connection_count(b.proc.pid) == 40, 10, "40 connections held")
        refused = [raw_socket(b.host, b.port) for _ in range(200)]
        for s in refused:  # accepted and closed at once: EOF (or a reset), never a hang
            s.settimeout(10)
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
            s.close()
        assert connection_count(b.proc.pid) == 40
        for s in held[:10]:
            s.close()
        wait_for(lambda: connection_count(b.proc.pid) == 30, 10, "10 closed connections released")
        _publish_and_consume(b.url, "s", 5)  # room again: served as usual
        assert b.proc.poll() is None
        assert "max_connections (40) reached" in b.log_text()
    finally:
        for s in held:
            s.close()
        b.close()
    assert "Traceback" not in b.log_text()


def _garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:  # a valid SASL header, then garbage
        return SASL_HEADER + rng.randbytes(rng.randrange(1, 100))
    if kind == 2:  # the AMQP header without SASL (refused: SASL is required), then garbage
        return AMQP_HEADER + rng.randbytes(rng.randrange(0, 100))
    if kind == 3:  # a frame header that announces a huge frame
        return SASL_HEADER + b"\xff\xff\xff\xf0\x02\x01\x00\x00"
    if kind == 4:  # a truncated frame, then nothing (half-open)
        return SASL_HEADER + b"\x00\x00\x00\x40\x02\x01\x00\x00\x00\x53"
    return b""  # connect and say nothing


def _after_sasl_then_garbage(host: str, port: int, rng: random.Random) -> EngineClient:
    """A real client that completes SASL and open, then sends a malformed frame: the case
    where proton's own reactor stopped reading and kept the socket forever."""
    e = EngineClient(host, port)
    pump([e], lambda c: c.opened, timeout=10)
    e.sock.setblocking(True)
    e.sock.sendall(b"\x00\x00\x00\x10\x02\x00\x00\x00" + rng.randbytes(8))
    return e


def test_malformed_and_half_open_connections_are_closed_and_their_fds_released(tmp_path):
    b = BrokerProcess(tmp_path / "data", extra_args=["--handshake-timeout", "1"]).start()
    rng = random.Random(7)
    try:
        _publish_and_consume(b.url, "s", 5)
        socks = []
        for _i in range(300):
            s = raw_socket(b.host, b.port)
            s.sendall(_garbage(rng))
            socks.append(s)
        engines = [_after_sasl_then_garbage(b.host, b.port, rng) for _ in range(40)]
        # every one is closed by the broker (protocol error, or the handshake timeout)
        for s in socks + [e.sock for e in engines]:
            s.settimeout(15)
            try:
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass
        wait_for(lambda: connection_count(b.proc.pid) == 0, 15, "sockets back to the baseline")
        _publish_and_consume(b.url, "s", 5)
        for s in socks:
            s.close()
        for e in engines:
            e.close()
        assert b.proc.poll() is None
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_fifteen_thousand_fuzzed_connections_leave_fds_and_memory_at_the_baseline(tmp_path):
    """15,000 connections with random bytes at every stage: none crashes the broker, each is
    closed, and the fds and resident memory come back to where a warmed-up broker had them."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--handshake-timeout", "2"]).start()
    rng = random.Random(15)
    try:
        _publish_and_consume(b.url, "s", 5)

        def fuzz(n: int) -> None:
            open_socks: list[socket.socket] = []
            for _i in range(n):
                s = raw_socket(b.host, b.port)
                data = _garbage(rng)
                if rng.random() < 0.5:
                    data = SASL_HEADER + data
                try:
                    s.sendall(data)
                except OSError:
                    pass
                open_socks.append(s)
                if len(open_socks) >= 200:  # the client hangs up on some, waits for others
                    for t in open_socks:
                        t.close()
                    open_socks.clear()
            for t in open_socks:
                t.close()

        fuzz(2_000)  # warm up: allocator pools, caches
        wait_for(lambda: connection_count(b.proc.pid) == 0, 30, "warm-up connections closed")
        all_fds, base_rss = fd_count(b.proc.pid), _rss_kib(b.proc.pid)
        fuzz(15_000)
        wait_for(lambda: connection_count(b.proc.pid) == 0, 30, "sockets back to the baseline")
        assert fd_count(b.proc.pid) == all_fds
        grown = _rss_kib(b.proc.pid) - base_rss
        # a leak of even 1 KiB a connection would be 15 MB
        assert grown < 12 * 1024, f"RSS grew by {grown} KiB over 15,000 connections"
        _publish_and_consume(b.url, "s", 5)
        assert b.proc.poll() is None
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_amqp_idle_timeouts_as_negotiated(tmp_path):
    """The broker announces its idle time-out and closes a client silent for longer; to a
    client that announces one, it sends heartbeats in time (proton's ``tick``)."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--idle-timeout", "1"]).start()
    try:
        silent = EngineClient(b.host, b.port)
        silent.ticks = False  # answers nothing once open: no heartbeats
        chatty = EngineClient(b.host, b.port)
        chatty.transport.idle_timeout = 2.0  # heartbeats expected every ~1 s
        assert pump([silent, chatty], lambda c: c.opened, timeout=15) == []
        assert silent.transport.remote_idle_timeout == 0.5  # proton announces half of it
        frames_before = chatty.transport.frames_input
        # the silent one sends nothing more: closed by the broker; the chatty one (heartbeats
        # both ways) gets empty frames, the only frames that come after open, and stays open
        assert pump([silent, chatty], lambda c: c.closed_by_peer if c is silent
                    else c.transport.frames_input >= frames_before + 3, timeout=15) == []
        cond = silent.connection.remote_condition or silent.transport.condition
        assert cond is not None and "idle" in (cond.description or "").lower()
        # and it stays open well past the broker's time-out, as long as it heartbeats
        assert pump([chatty], lambda c: c.closed_by_peer, timeout=2.5) == [chatty]
        silent.close()
        chatty.close()
    finally:
        b.close()
    assert "Traceback" not in b.log_text()
