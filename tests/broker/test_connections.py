"""Connections: open frame properties, vhosts, garbage on the socket, one client's failure
never touching another's."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from proton import Message, symbol
from proton import ConnectionException
from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client


def test_open_frame_says_rabbitmq_4_2_and_has_a_container_id(broker):
    conn = BlockingConnection(broker.url, timeout=15)
    try:
        props = conn.conn.remote_properties
        assert props[symbol("product")] == "RabbitMQ"
        major, minor, *_ = (int(x) for x in str(props[symbol("version")]).split("."))
        assert (major, minor) >= (4, 2)
        assert conn.conn.remote_container
        caps = [str(c) for c in (conn.conn.remote_offered_capabilities or [])]
        assert "AMQP_FILTEX_SQL_V1_0" in caps and "AMQP_FILTEX_PROP_V1_0" in caps
    finally:
        conn.close()


def test_official_client_accepts_the_broker_and_manages_streams(broker, stream_name):
    from rabbitmq_amqp_python_client import Environment, StreamSpecification
    env = Environment(broker.url)
    conn = env.connection()
    conn.dial()
    try:
        mgmt = conn.management()
        mgmt.declare_queue(StreamSpecification(name=stream_name, max_age=None))
        info = mgmt.queue_info(stream_name)
        assert info.name == stream_name and info.message_count == 0
        mgmt.delete_queue(stream_name)
    finally:
        conn.close()


@pytest.mark.parametrize("hostname,ok", [("vhost:/", True), ("localhost", True), ("vhost:other", False)])
def test_vhost_from_hostname(broker, hostname, ok):
    if ok:
        conn = BlockingConnection(broker.url, timeout=15, virtual_host=hostname)
        conn.close()
    else:
        with pytest.raises(ConnectionException) as info:
            conn = BlockingConnection(broker.url, timeout=15, virtual_host=hostname)
            conn.create_sender("/management")
        assert "disconnected" in str(info.value)


def test_official_client_raises_at_once_for_a_missing_vhost(tmp_path):
    """RabbitMQ 4.x refuses an unknown vhost with neither open nor close: the socket is closed
    after its silent close delay. The official client raises that at once; an open followed by
    a close (amqp:not-found, as here before) it took for a dropped connection and reconnected
    to every 5 s and more, for minutes."""
    from rabbitmq_amqp_python_client import Environment
    from rabbitmq_amqp_python_client.qpid.proton import ConnectionException as ClientConnectionException
    delay = 0.5
    b = BrokerProcess(tmp_path / "data", extra_args=["--auth-failure-delay", str(delay)]).start()
    outcome: list[BaseException | None] = []

    def dial() -> None:
        conn = Environment(b.url + "/nosuch").connection()
        try:
            conn.dial()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    try:
        started = time.monotonic()
        # a thread: without the fix the client sleeps in its reconnect loop, not to be waited for
        worker = threading.Thread(target=dial, daemon=True)
        worker.start()
        worker.join(timeout=4.0)  # the client's first reconnect waits 5 s
        elapsed = time.monotonic() - started
        assert outcome, f"the client had not raised after {elapsed:.1f} s (reconnecting?)"
        assert isinstance(outcome[0], ClientConnectionException), outcome[0]
        assert "disconnected" in str(outcome[0])
        assert elapsed >= delay  # RabbitMQ's silent close delay, kept
        assert "vhost 'nosuch' does not exist" in b.log_text()
        with Client(b.url) as c:  # the vhost that exists is served
            assert c.declare("after") in (200, 201)
    finally:
        b.close()


def _raw(broker, data: bytes) -> bytes:
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00" * 64,
                                     b"AMQP\x00\x01\x00\x00" + b"\xff" * 40,
                                     b"AMQP\x03\x01\x00\x00" + b"\x00\x00\x00\x08\x02\x00\x00\x00" * 3])
def test_garbage_instead_of_a_protocol_header_closes_only_that_socket(broker, stream_name, garbage):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        reply = _raw(broker, garbage)  # the broker answers (a header or nothing) and closes
        assert len(reply) < 4096
        sender.send(Message(body="still fine"))
        assert c.info(stream_name)["message_count"] == 1


_VANISH = """
import os, sys
from proton import Message
from proton.utils import BlockingConnection
conn = BlockingConnection(sys.argv[1], timeout=15)
s = conn.create_sender(sys.argv[2])
link = s.link
conn.wait(lambda: link.credit > 0)
d = link.delivery(b"t")
link.send(Message(body=b"x" * 100_000).encode()[:50_000])  # partial, never finished
try:
    conn.wait(lambda: False, timeout=1)  # let the partial transfer go out
except Exception:
    pass
os._exit(0)  # the socket goes away without a close frame
"""


def test_a_client_that_vanishes_mid_transfer_harms_no_one(broker, stream_name):
    import subprocess
    import sys
    with Client(broker.url) as c:
        c.declare(stream_name)
        subprocess.run([sys.executable, "-c", _VANISH, broker.url, f"/queues/{stream_name}"],
                       check=True, timeout=60)
        sender = c.sender(stream_name)
        sender.send(Message(body="ok"))
        assert c.info(stream_name)["message_count"] == 1
