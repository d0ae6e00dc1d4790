"""Security of a real broker process: SASL PLAIN against a users file, ANONYMOUS rules, TLS, and
the refusal to listen beyond loopback without authentication.

Clients are plain proton ``BlockingConnection``s (an independent client, not our own), so what is
tested is what any AMQP client sees. The TLS certificate is made at test time with the
``openssl`` command line tool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import types

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection
from proton import SSLDomain

from amqp_stream import security
from amqp_stream.client import connect
from amqp_stream.testing import BrokerProcess, free_port

USERS = "# test users\nalice:wonderland\nbob:with:colons and spaces\n"


@pytest.fixture(scope="module")
def users_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("users") / "users"
    path.write_text(USERS)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def plain_broker(tmp_path_factory, users_file):
    proc = BrokerProcess(tmp_path_factory.mktemp("plain") / "data", extra_args=["--users", str(users_file)])
    proc.start()
    yield proc
    proc.close()


def _open(url: str, **kwargs) -> BlockingConnection:
    return BlockingConnection(url, timeout=10, **kwargs)


def _plain(url: str, user: str, password: str, **kwargs) -> BlockingConnection:
    return _open(url, user=user, password=password, allowed_mechs="PLAIN", allow_insecure_mechs=True, **kwargs)


def test_plain_accepted_with_the_right_password_and_usable(plain_broker):
    conn = _plain(plain_broker.url, "alice", "wonderland")
    try:
        assert conn.conn.remote_container  # the broker opened the connection
    finally:
        conn.close()
    # a password with colons and spaces is taken whole (split at the first colon)
    client = connect(plain_broker.url, user="bob", password="with:colons and spaces")
    try:
        client.declare("secured")
        publisher = client.publisher("secured")
        publisher.publish("after PLAIN")
        assert [o.accepted for o in publisher.flush()] == [True]
        consumer = client.consumer("secured", offset="first")
        message = consumer.receive(timeout=10)
        assert message is not None and message.body == "after PLAIN"
    finally:
        client.close()


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("alice", "wonderlan"), ("carol", "wonderland"),
                                           ("bob", "with")])
def test_plain_refused_with_a_wrong_password_or_unknown_user(plain_broker, user, password):
    with pytest.raises(ConnectionException) as info:
        _plain(plain_broker.url, user, password)
    assert "unauthorized-access" in str(info.value)


@pytest.mark.parametrize("password,ok", [("guest", True), ("wrong", False)])
def test_default_guest_on_loopback_without_a_users_file(broker, password, ok):
    """With no users file, PLAIN takes RabbitMQ's default guest/guest on a loopback listener
    (its official clients and the stream clients log in so), beside ANONYMOUS."""
    if ok:
        conn = _plain(broker.url, "guest", password)
        conn.close()
    else:
        with pytest.raises(ConnectionException) as info:
            _plain(broker.url, "guest", password)
        assert "unauthorized-access" in str(info.value)


def test_a_failed_login_does_not_disturb_other_connections(plain_broker):
    client = connect(plain_broker.url, user="alice", password="wonderland")
    try:
        client.declare("bystander")
        publisher = client.publisher("bystander")
        publisher.publish("before")
        for _ in range(3):
            with pytest.raises(ConnectionException):
                _plain(plain_broker.url, "alice", "guess")
        publisher.publish("after")
        assert [o.accepted for o in publisher.flush()] == [True, True]
        consumer = client.consumer("bystander", offset="first")
        assert [consumer.receive(timeout=10).body for _ in range(2)] == ["before", "after"]
    finally:
        client.close()


def test_anonymous_refused_when_users_are_configured(plain_broker):
    with pytest.raises(ConnectionException) as info:
        _open(plain_broker.url, allowed_mechs="ANONYMOUS")
    assert "unauthorized-access" in str(info.value)
    # a client that skips SASL altogether is refused too (authentication is required)
    with pytest.raises(ConnectionException):
        _open(plain_broker.url, sasl_enabled=False)


def test_anonymous_allowed_beside_plain_only_when_asked(tmp_path, users_file):
    sasl_dir = tmp_path / "data" / ".sasl"
    sasl_dir.mkdir(parents=True)
    (sasl_dir / "stale").write_text("left by a crash")
    with BrokerProcess(tmp_path / "data", extra_args=["--users", str(users_file), "--allow-anonymous"]) as proc:
        _open(proc.url, allowed_mechs="ANONYMOUS").close()
        _plain(proc.url, "alice", "wonderland").close()
        with pytest.raises(ConnectionException):
            _plain(proc.url, "alice", "nope")
        # the Cyrus configuration lives in <data>/.sasl, private, rebuilt at start (no password
    # database: Cyrus asks the broker's saslauthd responder)
        assert sasl_dir.stat().st_mode & 0o777 == 0o700
        assert sorted(p.name for p in sasl_dir.iterdir()) == ["amqp-stream.conf"]
        proc.stop()
        assert not sasl_dir.exists()  # removed at a clean exit


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is needed to make a test certificate (scripts/bootstrap installs it)")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def _client_domain(ca: str | None) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    if ca:
        domain.set_trusted_ca_db(ca)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, ca)
    else:
        domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    return domain


def test_tls_amqps_with_plain(tmp_path, certificate, users_file):
    cert, key = certificate
    proc = BrokerProcess(tmp_path / "data", extra_args=["--tls-cert", str(cert), "--tls-key", str(key),
                                                        "--users", str(users_file)])
    with proc:
        # the broker's certificate verifies against itself as CA, host name included (proton
        # checks DNS names only, not IP addresses in subjectAltName: hence "localhost")
        url = f"amqps://localhost:{proc.port}"
        conn = BlockingConnection(url, timeout=10, ssl_domain=_client_domain(str(cert)), user="alice",
                                  password="wonderland", allowed_mechs="PLAIN")
        assert conn.conn.remote_container
        conn.close()
        # our own client over amqps: declare, publish, consume
        from amqp_stream.client import TlsOptions
        client = connect(url, user="alice", password="wonderland", tls=TlsOptions(ca_file=str(cert)))
        try:
            client.declare("over-tls")
            publisher = client.publisher("over-tls")
            for i in range(3):
                publisher.publish(f"tls-{i}")
            assert all(o.accepted for o in publisher.flush())
            consumer = client.consumer("over-tls", offset="first")
            assert [consumer.receive(timeout=10).body for _ in range(3)] == ["tls-0", "tls-1", "tls-2"]
        finally:
            client.close()
        # the official RabbitMQ client over amqps with PLAIN, verifying the certificate
        from rabbitmq_amqp_python_client import Environment, PosixSslConfigurationContext, StreamSpecification
        environment = Environment(f"amqps://alice:wonderland@localhost:{proc.port}/",
                                  ssl_context=PosixSslConfigurationContext(ca_cert=str(cert)))
        try:
            connection = environment.connection()
            connection.dial()
            management = connection.management()
            assert management.queue_info("over-tls").message_count == 3
            management.declare_queue(StreamSpecification(name="rabbit-over-tls"))
            management.close()
            connection.close()
        finally:
            environment.close()
        # a plain-TCP client cannot talk to a TLS listener
        with pytest.raises(ConnectionException):
            _plain(f"amqp://127.0.0.1:{proc.port}", "alice", "wonderland")
        # a wrong password is still refused over TLS
        with pytest.raises(ConnectionException) as info:
            BlockingConnection(url, timeout=10, ssl_domain=_client_domain(str(cert)), user="alice",
                               password="nope", allowed_mechs="PLAIN")
        assert "unauthorized-access" in str(info.value)


def _serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqp_stream", "serve", "--port", str(free_port()),
                           "--metrics-port", "0", "--management-port", "0", "--stream-port", "0", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_refuses_to_listen_on_all_interfaces_without_auth(tmp_path):
    done = _serve("--host", "0.0.0.0", "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in done.stderr
    assert "--users" in done.stderr and "--allow-anonymous" in done.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_bad_security_settings_are_clear_errors(tmp_path):
    done = _serve("--users", str(tmp_path / "missing"), "--data-dir", str(tmp_path / "d1"))
    assert done.returncode == 2 and "cannot read users file" in done.stderr
    bad = tmp_path / "bad-users"
    bad.write_text("no colon here\n")
    done = _serve("--users", str(bad), "--data-dir", str(tmp_path / "d2"))
    assert done.returncode == 2 and "expected 'user:password'" in done.stderr
    done = _serve("--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem"),
                  "--data-dir", str(tmp_path / "d3"))
    assert done.returncode == 2 and "not found" in done.stderr


# -- the rules themselves, without a process ------------------------------------------------------

@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True),
                                           ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                           ("::", False), ("", False), ("192.0.2.1", False)])
def test_is_loopback(host, loopback):
    assert security.is_loopback(host) is loopback


def _config(**kw):
    base = dict(host="127.0.0.1", allow_anonymous=False, users_file=None, tls_cert=None, tls_key=None)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_prepare_mechanisms(users_file):
    setups = [security.prepare(_config()),
              security.prepare(_config(users_file=users_file)),
              security.prepare(_config(users_file=users_file, allow_anonymous=True)),
              security.prepare(_config(host="0.0.0.0", users_file=users_file)),
              security.prepare(_config(host="0.0.0.0", allow_anonymous=True))]
    try:
        assert [s.mechanisms for s in setups] == ["PLAIN ANONYMOUS", "PLAIN", "PLAIN ANONYMOUS", "PLAIN",
                                                  "ANONYMOUS"]
        assert [s.require_auth for s in setups] == [False, True, False, True, False]
        assert setups[0].users == ("guest",)  # no users file on loopback: RabbitMQ's default
        assert setups[1].users == ("alice", "bob")
    finally:
        for s in setups:
            s.close()
    # with no data directory the users store lives in a temporary directory, gone at close
    assert not any(os.path.exists(os.path.dirname(s.store.path)) for s in setups)
    with pytest.raises(security.ConfigError, match="refusing to listen on ::"):
        security.prepare(_config(host="::"))


def test_users_file_format(tmp_path):
    path = tmp_path / "u"
    path.write_text("# comment\n\n  alice:pw with spaces \nbob::starts-with-colon\n")
    assert security.read_users(path) == {"alice": "pw with spaces ", "bob": ":starts-with-colon"}
    for text, message in [("alice:x\nalice:y\n", "appears twice"), (":pw\n", "expected"),
                          ("alice:\n", "empty password"), ("al ice:pw\n", "may not contain"), ("# none\n", "no users")]:
        path.write_text(text)
        with pytest.raises(security.ConfigError, match=message):
            security.read_users(path)


# -- other clients' PLAIN ----------------------------------------------------------------------

def test_rabbitmq_client_plain(plain_broker):
    from rabbitmq_amqp_python_client import Environment, StreamSpecification

    good = Environment(f"amqp://alice:wonderland@127.0.0.1:{plain_broker.port}/")
    try:
        connection = good.connection()
        connection.dial()
        management = connection.management()
        assert management.declare_queue(StreamSpecification(name="rabbit-plain")).name == "rabbit-plain"
        management.close()
        connection.close()
    finally:
        good.close()
    bad = Environment(f"amqp://alice:nope@127.0.0.1:{plain_broker.port}/")
    try:
        with pytest.raises(Exception) as info:
            bad.connection().dial()
        assert "unauthorized-access" in str(info.value) or "Authentication failed" in str(info.value)
    finally:
        try:
            bad.close()
        except Exception:
            pass


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_rhea_plain(plain_broker):
    import json
    from pathlib import Path

    js = Path(__file__).resolve().parents[1] / "js"
    if not (js / "node_modules" / "rhea").is_dir():
        pytest.fail("rhea is not installed: run scripts/bootstrap (npm ci in tests/js)")

    def run(user: str, password: str) -> dict:
        spec = {"op": "management", "url": f"amqp://{user}:{password}@127.0.0.1:{plain_broker.port}",
                "requests": [{"method": "GET", "path": "/queues/none-such"}]}
        done = subprocess.run(["node", str(js / "client.js"), json.dumps(spec)], capture_output=True,
                              text=True, timeout=60, cwd=js)
        return json.loads(done.stdout.strip().splitlines()[-1])

    ok = run("alice", "wonderland")
    assert ok["ok"] and ok["responses"][0]["subject"] == "404"
    refused = run("alice", "nope")
    assert not refused["ok"]
    assert "amqp:unauthorized-access" in refused["error"]


def _socket_dir(broker: BrokerProcess) -> str:
    """The private directory of the broker's saslauthd socket, as its Cyrus configuration names it."""
    conf = (broker.data_dir / ".sasl" / f"{security.SASL_CONFIG_NAME}.conf").read_text()
    path = next(line.split(":", 1)[1].strip() for line in conf.splitlines()
                if line.startswith("saslauthd_path:"))
    return os.path.dirname(path)


def test_a_killed_brokers_socket_directory_goes_at_the_next_start(tmp_path):
    """SIGKILL skips the exit handlers, so the saslauthd socket's private directory stays in the
    temporary directory (2,000 had piled up in /tmp from this suite's crash tests). The next
    broker's start removes it once nobody listens there; a live broker's is never touched, and
    the probe that tells them apart is not logged as a failed request."""
    dead = BrokerProcess(tmp_path / "dead-data").start()
    live = BrokerProcess(tmp_path / "live-data").start()
    try:
        dead_dir, live_dir = _socket_dir(dead), _socket_dir(live)
        dead.kill()
        assert os.path.isdir(dead_dir)
        old = time.time() - 2 * security.STALE_AFTER  # as if killed long ago
        for path in (dead_dir, live_dir):
            os.utime(path, (old, old))
        with BrokerProcess(tmp_path / "next-data") as fresh:
            assert not os.path.exists(dead_dir)
            assert os.path.isdir(live_dir) and os.path.isdir(_socket_dir(fresh))
        _plain(live.url, "guest", "guest").close()  # the live one still checks passwords
        assert "saslauthd request failed" not in live.log_text()
    finally:
        live.close()
        dead.close()
    assert not os.path.exists(live_dir)  # a broker that exits removes its own
