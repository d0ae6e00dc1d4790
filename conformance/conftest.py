"""Options and fixtures of the conformance suite: which broker to talk to, and how.

With no `--broker-url` the suite starts this project's broker (the one thing of ours it may
import is `amqp_stream.testing`); with one, it talks to that broker only, e.g. a RabbitMQ 4.2
node: `pytest conformance --broker-url amqp://localhost:5672 --broker-user guest
--broker-password guest -m "not extension"`. The options live in `conformance.plugin`.
"""

from __future__ import annotations

import re
import uuid

import pytest
from proton import SSLDomain

from conformance import plugin
from conformance.amqp import Client
from conformance.streamclient import StreamClient, parse_stream_url


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        plugin.add_options(parser)
    except ValueError:  # already added by `-p conformance.plugin` (setup.cfg addopts)
        pass


def pytest_configure(config: pytest.Config) -> None:
    plugin.register_markers(config)


class Target:
    """How to reach the broker under test."""

    def __init__(self, url: str, user: str | None, password: str | None,
                 ssl_domain: SSLDomain | None, ours: bool, stream_url: str | None = None):
        self.url, self.user, self.password = url, user, password
        self.ssl_domain, self.ours = ssl_domain, ours
        self.stream_url = stream_url

    def connect(self) -> Client:
        return Client(self.url, self.user, self.password, self.ssl_domain)

    def stream_address(self) -> tuple[str, int, str, str, str]:
        """host, port, user, password, vhost of the stream listener (skips without one)."""
        if self.stream_url is None:
            pytest.skip("no --stream-url for the broker under test")
        return parse_stream_url(self.stream_url)

    def stream_connect(self, **kw) -> StreamClient:
        """A stream-protocol connection (authenticated and open unless ``handshake=False``)."""
        host, port, user, password, vhost = self.stream_address()
        return StreamClient(host, port, user, password, vhost, **kw)


def _ssl_domain(config: pytest.Config, url: str) -> SSLDomain | None:
    if not url.startswith("amqps://"):
        return None
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    if config.getoption("--broker-ca"):
        domain.set_trusted_ca_db(config.getoption("--broker-ca"))
    if config.getoption("--broker-cert"):
        domain.set_credentials(config.getoption("--broker-cert"), config.getoption("--broker-key"), None)
    if config.getoption("--broker-insecure"):
        domain.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)
    else:
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, config.getoption("--broker-ca"))
    return domain


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    config = request.config
    url = config.getoption("--broker-url")
    if url:
        yield Target(url, config.getoption("--broker-user"), config.getoption("--broker-password"),
                     _ssl_domain(config, url), ours=False,
                     stream_url=config.getoption("--stream-url"))
        return
    from amqp_stream.testing import BrokerProcess

    proc = BrokerProcess(tmp_path_factory.mktemp("conformance-broker") / "data")
    proc.start()
    try:
        yield Target(proc.url, None, None, None, ours=True, stream_url=proc.stream_url)
    finally:
        proc.close()


@pytest.fixture
def client(target: Target):
    """A fresh connection for one test."""
    c = target.connect()
    yield c
    c.close()


@pytest.fixture
def sclient(target: Target):
    """A fresh stream-protocol connection for one test."""
    c = target.stream_connect()
    yield c
    c.close()


@pytest.fixture
def sconnect(target: Target):
    """Open more stream-protocol connections; all are closed after the test."""
    opened: list[StreamClient] = []

    def _connect(**kw) -> StreamClient:
        opened.append(target.stream_connect(**kw))
        return opened[-1]

    yield _connect
    for c in opened:
        try:
            c.close()
        except OSError:
            pass


@pytest.fixture
def connect(target: Target):
    """Open more connections; all are closed after the test."""
    opened: list[Client] = []

    def _connect() -> Client:
        opened.append(target.connect())
        return opened[-1]

    yield _connect
    for c in opened:
        c.close()


def unique_name(request: pytest.FixtureRequest, suffix: str = "") -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    return f"conf-{base}-{uuid.uuid4().hex[:8]}{suffix}"


@pytest.fixture
def new_stream(request: pytest.FixtureRequest, target: Target):
    """Declare streams (`new_stream(arguments=None) -> name`); all are deleted after the test."""
    made: list[str] = []
    admin = target.connect()

    def _new(arguments: dict | None = None) -> str:
        name = unique_name(request, f"-{len(made)}")
        response = admin.declare(name, arguments)
        assert response.status == 201, (response.status, response.body)
        made.append(name)
        return name

    yield _new
    for name in made:
        try:
            admin.delete(name)
        except Exception:  # noqa: BLE001 - cleanup must not hide the test's own failure
            pass
    admin.close()


@pytest.fixture
def name(request: pytest.FixtureRequest, target: Target):
    """A unique stream name, not declared; deleted after the test if the test made it."""
    value = unique_name(request)
    yield value
    admin = target.connect()
    try:
        admin.delete(value)
    except Exception:  # noqa: BLE001
        pass
    admin.close()


@pytest.fixture
def stream(new_stream) -> str:
    """One freshly declared, empty stream."""
    return new_stream()
