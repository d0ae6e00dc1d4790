"""The management API refuses what it must, with RabbitMQ's status and error JSON, and a bad
client of the HTTP port leaves the broker (and the port's other clients) unaffected:
no or wrong credentials (401 with WWW-Authenticate), unknown paths (404), malformed JSON (400),
a body above the 1 MiB limit (413), a body that never arrives (408), a connection that never
sends a request (closed after --handshake-timeout); ``--management-port 0`` turns it off."""

from __future__ import annotations

import socket
import time

import pytest

from amqp_stream.client.stream import StreamClient
from amqp_stream.http.users import Users
from amqp_stream.users import UserStore
from amqp_stream.testing import BrokerProcess
from tests.http.api import call
from tests.polling import wait_for

TIMEOUT = 1.0  # --handshake-timeout: also the HTTP body and first-request bound
BROKER_ARGS = ("--handshake-timeout", str(TIMEOUT))  # for the broker fixture (conftest.py)


def test_no_credentials_is_401_with_a_challenge(broker):
    for auth in (None, ("guest", "wrong"), ("nobody", "guest")):
        answer = call(broker, "GET", "/api/overview", auth=auth)
        assert answer.status == 401, auth
        assert answer.headers["WWW-Authenticate"].startswith("Basic ")
        assert answer.json == {"error": "not_authorised", "reason": "Login failed"}
    assert call(broker, "GET", "/api/overview").status == 200


def test_unknown_paths_and_objects_are_404_json(broker):
    for path in ("/api/nothing", "/nothing", "/api/queues/%2F/no-such-stream",
                 "/api/queues/other-vhost", "/api/connections/no%20such"):
        answer = call(broker, "GET", path)
        assert answer.status == 404, path
        assert set(answer.json) == {"error", "reason"}


def test_malformed_json_is_400_and_declares_nothing(broker):
    answer = call(broker, "PUT", "/api/queues/%2F/bad-json", raw=b'{"durable": tru')
    assert answer.status == 400
    assert answer.json == {"error": "bad_request", "reason": "payload not valid JSON"}
    assert call(broker, "GET", "/api/queues/%2F/bad-json").status == 404
    # a body that is JSON but not what a stream can be
    answer = call(broker, "PUT", "/api/queues/%2F/bad-args", {"arguments": {"x-max-age": "soon"}})
    assert answer.status == 400 and "x-max-age" in answer.json["reason"]


def test_a_body_above_the_limit_is_413(broker):
    huge = b'{"arguments": {"x": "' + b"a" * (1024 * 1024 + 10) + b'"}}'
    answer = call(broker, "PUT", "/api/queues/%2F/huge", raw=huge)
    assert answer.status == 413
    assert set(answer.json) == {"error", "reason"}
    assert call(broker, "GET", "/api/queues/%2F/huge").status == 404


def _raw_connection(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection((broker.host, broker.management_port), timeout=10)


def test_a_body_that_does_not_arrive_is_408_and_others_are_served_meanwhile(broker):
    with _raw_connection(broker) as slow:
        slow.sendall(b"PUT /api/queues/%2F/slow HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        started = time.monotonic()
        assert call(broker, "GET", "/api/overview", timeout=TIMEOUT / 2).status == 200
        with StreamClient(broker.stream_url, timeout=TIMEOUT / 2) as client:  # the broker serves on
            assert client.create("while-a-body-is-slow")
            client.delete("while-a-body-is-slow")
        reply = slow.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:100]
        assert time.monotonic() - started < TIMEOUT + 5
    assert call(broker, "GET", "/api/queues/%2F/slow").status == 404


def test_a_connection_that_sends_nothing_is_closed(broker):
    with _raw_connection(broker) as idle, _raw_connection(broker) as half:
        half.sendall(b"GET /api/overview HTTP/1.1\r\nHost:")  # headers never finished
        assert call(broker, "GET", "/api/whoami", timeout=TIMEOUT / 2).status == 200
        for sock in (idle, half):
            assert sock.recv(100) == b""  # closed by the broker
    log = broker.log_text()
    wait_for(lambda: broker.log_text().count("no request in") >= 2, 10, "the close logged")
    assert "Traceback" not in log


def test_guest_only_from_loopback_and_a_management_tag_needed(tmp_path):
    store = UserStore(str(tmp_path / "users.json"))
    store.seed_guest()
    store.add_user("alice", "pw", tags=["monitoring"])
    store.add_user("bob", "pw")  # no tag: RabbitMQ keeps such a user out of the API
    users = Users(store)
    assert users.authenticate("guest", "guest", "127.0.0.1") == "guest"
    assert users.authenticate("guest", "guest", "::1") == "guest"
    assert users.authenticate("guest", "guest", "192.0.2.7") is None
    assert users.authenticate("alice", "pw", "192.0.2.7") == "alice"
    assert users.authenticate("alice", "nope", "127.0.0.1") is None
    assert users.authenticate("bob", "pw", "127.0.0.1") is None


def test_port_zero_turns_the_api_off(tmp_path):
    b = BrokerProcess(tmp_path / "data", extra_args=["--management-port", "0"])
    port = b.management_port
    b.start()
    try:
        with pytest.raises(OSError):
            socket.create_connection((b.host, port), timeout=2).close()
    finally:
        b.close()
