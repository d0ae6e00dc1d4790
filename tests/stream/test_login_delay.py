"""A refused stream-protocol login (or vhost) is answered after ``--auth-failure-delay``
seconds, then the connection is closed, as RabbitMQ's silent close delay does; the delay holds
only that connection: others are served meanwhile."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from amqp_stream.client import ClientError
from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import StreamClient as RawClient

DELAY = 3.0  # the default, RabbitMQ's
AUTHENTICATION_FAILURE, VHOST_ACCESS_FAILURE = 8, 12


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("delay")) as b:
        yield b


def test_a_wrong_password_is_answered_late_and_others_are_served_meanwhile(delayed):
    bad = RawClient(delayed.host, delayed.stream_port, handshake=False)
    bad.request(17, struct.pack(">i", 0))  # PeerProperties
    bad.request(18, b"")  # SaslHandshake
    answers: list[int] = []
    started = time.monotonic()
    login = threading.Thread(target=lambda: answers.append(
        bad.authenticate("PLAIN", b"\0guest\0wrong")))
    login.start()
    # meanwhile another client logs in and works: the delay holds one connection only
    url = f"rabbitmq-stream://{delayed.host}:{delayed.stream_port}"
    with StreamClient(url) as good:
        assert good.create("delay-meanwhile") is True
    assert login.is_alive()  # the bad login is still unanswered
    login.join()
    assert answers == [AUTHENTICATION_FAILURE]
    assert time.monotonic() - started >= DELAY  # a lower bound only: the deliberate delay
    assert bad.wait_closed().code is None  # then the broker closes the socket


def test_an_unknown_vhost_is_answered_late(delayed):
    started = time.monotonic()
    with pytest.raises(ClientError, match="VHOST_ACCESS_FAILURE"):
        StreamClient(f"rabbitmq-stream://{delayed.host}:{delayed.stream_port}/nowhere")
    assert time.monotonic() - started >= DELAY


def test_a_negative_delay_is_refused(tmp_path):
    b = BrokerProcess(tmp_path, extra_args=["--auth-failure-delay", "-1"])
    with pytest.raises(RuntimeError):
        b.start(timeout=20)
    assert "auth_failure_delay must be >= 0" in b.log_text()
    b.stop()
