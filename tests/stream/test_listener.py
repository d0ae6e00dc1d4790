"""The stream listener's connection rules on a real broker process: PLAIN against the users file,
ANONYMOUS, the default guest, heartbeats both ways, the handshake time-out, shutdown, the
connection limit shared with the AMQP listener, hostile input (seeded random frames)."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from proton.utils import BlockingConnection

from amqp_stream.security import read_users
from amqp_stream.stream_listener.auth import Authenticator
from amqp_stream.users import UserStore
from amqp_stream.streamproto import ResponseCode
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, ServerClosed, StreamClient

USERS = "alice:wonderland\nbob:with:colons and spaces\n"


class _Security:
    def __init__(self, mechanisms: str):
        self.mechanisms = mechanisms


def _plain(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def test_authenticator_decisions(tmp_path):
    users = tmp_path / "users"
    users.write_text(USERS)
    users.chmod(0o600)
    loopback, remote = ("127.0.0.1", 5), ("192.0.2.7", 5)
    with_users = Authenticator(UserStore(str(tmp_path / "u1.json"), read_users(users)),
                               _Security("PLAIN"))
    assert with_users.mechanisms == ("PLAIN",)
    assert with_users.check("PLAIN", _plain("alice", "wonderland"), remote) == (OK, "alice")
    assert with_users.check("PLAIN", _plain("bob", "with:colons and spaces"), remote)[0] == OK
    for bad in (_plain("alice", "wonderlan"), _plain("guest", "guest"), _plain("carol", "x")):
        assert with_users.check("PLAIN", bad, loopback)[0] == ResponseCode.AUTHENTICATION_FAILURE
    assert with_users.check("ANONYMOUS", b"", loopback)[0] == \
        ResponseCode.SASL_MECHANISM_NOT_SUPPORTED
    assert with_users.check("PLAIN", b"no-separators", loopback)[0] == ResponseCode.SASL_ERROR
    store = UserStore(str(tmp_path / "u2.json"))
    store.seed_guest()  # RabbitMQ's first user
    open_broker = Authenticator(store, _Security("ANONYMOUS"))
    assert open_broker.mechanisms == ("PLAIN", "ANONYMOUS")
    assert open_broker.check("ANONYMOUS", b"", remote)[0] == OK
    assert open_broker.check("PLAIN", _plain("guest", "guest"), loopback) == (OK, "guest")
    assert open_broker.check("PLAIN", _plain("guest", "guest"), remote)[0] == \
        ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK
    assert open_broker.check("PLAIN", _plain("guest", "guessed"), loopback)[0] == \
        ResponseCode.AUTHENTICATION_FAILURE
    assert open_broker.check("SCRAM-SHA-256", b"", loopback)[0] == \
        ResponseCode.SASL_MECHANISM_NOT_SUPPORTED


def test_plain_with_a_users_file(tmp_path):
    users = tmp_path / "users"
    users.write_text(USERS)
    users.chmod(0o600)
    with BrokerProcess(tmp_path / "data", extra_args=["--users", str(users)]) as b:
        with StreamClient("127.0.0.1", b.stream_port, "alice", "wonderland") as c:
            assert c.mechanisms == ["PLAIN"]
            assert c.create_stream("s") == OK
        for user, password in (("alice", "nope"), ("guest", "guest")):
            with pytest.raises(ConnectionError, match="code 8"):
                StreamClient("127.0.0.1", b.stream_port, user, password)


def _raw_handshake(sock: socket.socket) -> None:
    def frame(key: int, body: bytes) -> bytes:
        return struct.pack(">IHHI", len(body) + 8, key, 1, 1) + body
    sock.sendall(frame(0x11, struct.pack(">i", 0)))


def test_heartbeats_both_ways_and_a_silent_client_is_disconnected(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        c = StreamClient("127.0.0.1", b.stream_port, heartbeat=1)
        closed = c.wait_closed()  # the client sends nothing: after two periods it is dropped
        assert closed.code is None and c.heartbeats >= 1
        c.sock.close()
        alive = StreamClient("127.0.0.1", b.stream_port, heartbeat=1)
        for _ in range(6):  # heartbeats from the client keep it open past two periods
            alive.heartbeat()
            before = alive.heartbeats
            while alive.heartbeats == before:
                alive._read_frame(time.monotonic() + 10)
        assert alive.create_stream("still-open") == OK
        alive.close()
        assert "no heartbeat" in b.log_text()


def test_handshake_timeout(tmp_path):
    with BrokerProcess(tmp_path / "data", extra_args=["--handshake-timeout", "1"]) as b:
        sock = socket.create_connection(("127.0.0.1", b.stream_port), timeout=20)
        _raw_handshake(sock)  # PeerProperties, then nothing
        data = b""
        while True:
            more = sock.recv(4096)
            if not more:
                break
            data += more
        sock.close()
        assert struct.unpack_from(">HH", data, 4)[0] == 0x8011  # the answer, then the close
        assert "handshake not done" in b.log_text()


def test_shutdown_sends_close_to_stream_clients(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        c = StreamClient("127.0.0.1", b.stream_port)
        assert c.create_stream("s") == OK
        b.proc.send_signal(15)
        closed = c.wait_closed()
        assert isinstance(closed, ServerClosed) and closed.code == OK
        assert b.stop() == 0
    finally:
        b.close()


def test_connections_of_both_listeners_count_against_max_connections(tmp_path):
    with BrokerProcess(tmp_path / "data", extra_args=["--max-connections", "2"]) as b:
        amqp = BlockingConnection(b.url)
        try:
            first = StreamClient("127.0.0.1", b.stream_port)
            with pytest.raises((ConnectionError, OSError, ServerClosed)):
                StreamClient("127.0.0.1", b.stream_port, timeout=5)
            first.close()
        finally:
            amqp.close()
        assert "max_connections (2) reached" in b.log_text()


def test_random_frames_close_only_their_connection(tmp_path):
    """Seeded random frames after the handshake (valid sizes, random keys, versions and
    contents): each bad one ends its own connection; a bystander keeps publishing."""
    rng = random.Random(1313)
    with BrokerProcess(tmp_path / "data") as b:
        bystander = StreamClient("127.0.0.1", b.stream_port)
        assert bystander.create_stream("s") == OK
        assert bystander.declare_publisher(1, "s") == OK
        for n in range(40):
            c = StreamClient("127.0.0.1", b.stream_port)
            key = rng.choice([rng.randrange(0x10000), rng.randrange(1, 0x20)])
            content = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
            try:
                c.send_frame(key, rng.choice([0, 1, 2, 9]), content)
                c.stream_stats("s")  # a round trip (or the server's Close)
            except (ServerClosed, OSError, TimeoutError, ValueError):
                pass
            finally:
                c.sock.close()
            bystander.publish(1, [(n, b"m%d" % n)])
            assert bystander.wait_confirms(1, [n]) == {n: OK}
        for n in range(40, 60):  # before the handshake: random bytes, huge sizes
            raw = socket.create_connection(("127.0.0.1", b.stream_port), timeout=10)
            garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
            if n % 2:
                garbage = struct.pack(">I", rng.randrange(8193, 1 << 32)) + garbage
            raw.sendall(garbage)
            raw.shutdown(socket.SHUT_WR)
            while raw.recv(4096):  # the broker closes it (after answering what was valid)
                pass
            raw.close()
            bystander.publish(1, [(n, b"m%d" % n)])
            assert bystander.wait_confirms(1, [n]) == {n: OK}
        bystander.close()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the scrape")


def test_metrics_of_the_listener(tmp_path):
    import urllib.request
    with BrokerProcess(tmp_path / "data") as b:
        c = StreamClient("127.0.0.1", b.stream_port)
        assert c.create_stream("s") == OK and c.declare_publisher(1, "s") == OK
        c.publish(1, [(i, b"m%d" % i) for i in range(10)])
        assert c.wait_confirms(1, range(10)) == {i: OK for i in range(10)}
        c.publish(9, [(1, b"x")])  # no such publisher
        assert c.wait_confirms(9, [1]) == {1: 18}
        assert c.subscribe(1, "s", credit=1) == OK
        chunk = c.next_chunk()
        text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
        assert _metric(text, "amqp_stream_stream_protocol_connections") == 1
        assert _metric(text, "amqp_stream_stream_protocol_confirmed_messages_total") == 10
        assert _metric(text, "amqp_stream_stream_protocol_publish_errors_total") == 1
        assert _metric(text, "amqp_stream_stream_protocol_delivered_chunks_total") == 1
        assert _metric(text, "amqp_stream_stream_protocol_delivered_bytes_total") == \
            48 + chunk.data_length
        assert 'amqp_stream_published_messages_total{stream="s"} 10.0' in text
        assert 'amqp_stream_delivered_messages_total{stream="s"} 10.0' in text
        c.close()


def test_a_subscriber_that_does_not_read_holds_back_the_broker_not_its_memory(tmp_path):
    """Deliveries stop while the socket is behind (about MAX_PENDING queued bytes, plus what the
    kernel buffers) and resume when the client reads: it then gets every record."""
    import urllib.request
    total_records, per_frame, size = 320_000, 8000, 100
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]) as b:
        producer = StreamClient("127.0.0.1", b.stream_port)
        assert producer.create_stream("big") == OK and producer.declare_publisher(1, "big") == OK
        body = b"x" * size
        for start in range(0, total_records, per_frame):
            producer.publish(1, [(i, body) for i in range(start, start + per_frame)])
            producer.wait_confirms(1, [start + per_frame - 1])
        slow = StreamClient("127.0.0.1", b.stream_port, handshake=False)
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        slow.handshake("guest", "guest")
        assert slow.subscribe(1, "big", credit=60_000) == OK
        for _ in range(20):  # round trips on another connection: the broker's loop turns
            assert producer.metadata(["big"])[1]["big"][0] == OK
        scrape = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
        queued = _metric(scrape, "amqp_stream_stream_protocol_delivered_bytes_total")
        assert queued < 16 << 20 < total_records * (size + 4)
        records = 0
        while records < total_records:
            records += slow.next_chunk().num_records
        assert records == total_records
        slow.close()
        producer.close()


def test_publishers_over_the_byte_budget_are_paused_and_resumed(tmp_path):
    """With a budget smaller than one frame every Publish pauses reading until the disk has it:
    nothing is lost, everything is confirmed, in order, on two connections at once."""
    with BrokerProcess(tmp_path / "data", extra_args=[
            "--max-unconfirmed-bytes-total", "1000", "--max-unconfirmed-bytes", "500"]) as b:
        clients = [StreamClient("127.0.0.1", b.stream_port) for _ in range(2)]
        assert clients[0].create_stream("s") == OK
        for c in clients:
            assert c.declare_publisher(1, "s") == OK
        for n in range(0, 200, 20):  # frames sent without waiting: the broker must pace them
            for c in clients:
                c.publish(1, [(i, b"y" * 300) for i in range(n, n + 20)])
        for c in clients:
            assert c.wait_confirms(1, range(200)) == {i: OK for i in range(200)}
        assert clients[0].subscribe(1, "s", credit=1000) == OK
        records = 0
        while records < 400:
            records += clients[0].next_chunk().num_records
        for c in clients:
            c.close()


def test_stage2_subscriber_reads_a_large_stream_to_its_end(tmp_path):
    """Stage 2 rebuilds chunks in memory: past MAX_PENDING queued bytes the subscription waits
    for the socket and must be resumed, whether the socket took everything at once or not."""
    from proton import Message
    total, per_frame = 24_000, 800
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]) as b:
        c = StreamClient("127.0.0.1", b.stream_port)
        assert c.create_stream("s2") == OK and c.declare_publisher(1, "s2") == OK
        body = Message(body="z" * 900, properties={"k": 1}).encode()
        for start in range(0, total, per_frame):
            c.publish(1, [(i, body) for i in range(start, start + per_frame)])
            c.wait_confirms(1, [start + per_frame - 1])
        assert c.subscribe(1, "s2", credit=60_000, properties={"sql-filter": "k = 1"}) == OK
        records = 0
        while records < total:
            records += c.next_chunk(timeout=20).num_records
        assert records == total
        c.close()
