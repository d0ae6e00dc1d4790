"""Permissions on AMQP 1.0, against a real broker process: the official
``rabbitmq-amqp-python-client`` for the management node (declare and delete need configure, a
refusal is its 403), plain proton for links (a consumer needs read on the stream, a publisher
write on the default exchange, ``amq.default``, as ``rabbit_amqp_session`` checks; a refusal
detaches with ``amqp:unauthorized-access``) and for our tracking paths (read); a user without
any permission on the vhost is refused at open. The users are made with ``amqp-stream users``
while the broker runs."""

from __future__ import annotations

import pytest
from proton import ConnectionException, Message
from proton.utils import LinkDetached
from rabbitmq_amqp_python_client import Environment, StreamSpecification
from rabbitmq_amqp_python_client.exceptions import ValidationCodeException

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import OFFSET, Client, offset
from tests.polling import wait_for
from tests.users_cli import PASSWORD, make_users

pytestmark = pytest.mark.timeout(120)


def _client(broker: BrokerProcess, user: str, password: str = PASSWORD) -> Client:
    return Client(broker.url, user=user, password=password, allowed_mechs="PLAIN",
                  allow_insecure_mechs=True)


def _logs_in(broker: BrokerProcess, user: str) -> bool:
    try:
        _client(broker, user).close()
        return True
    except ConnectionException:
        return False


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("amqp-permissions") / "data"
    b = BrokerProcess(data, extra_args=["--auth-failure-delay", "0"])
    b.start()
    make_users(data)
    wait_for(lambda: _logs_in(b, "reader"), 30, "the broker to take up the new users")
    yield b
    b.close()


@pytest.fixture
def management(broker):
    """``management(user)``: the official client's management, logged in as ``user``."""
    opened = []

    def make(user: str):
        env = Environment(f"amqp://{user}:{PASSWORD}@127.0.0.1:{broker.port}/")
        connection = env.connection()
        connection.dial()
        opened.append((env, connection))
        return connection.management()
    yield make
    for env, connection in opened:
        connection.close()
        env.close()


def _admin(broker: BrokerProcess) -> Client:
    return Client(broker.url, user="guest", password="guest", allowed_mechs="PLAIN",
                  allow_insecure_mechs=True)


def test_no_permission_on_the_vhost_is_refused_at_open(broker):
    with pytest.raises(ConnectionException):
        _client(broker, "stranger")
    with pytest.raises(ConnectionException):
        _client(broker, "reader", "wrong")


def test_declare_and_delete_need_configure(broker, management):
    for user in ("reader", "writer"):
        with pytest.raises(ValidationCodeException, match="403"):
            management(user).declare_queue(StreamSpecification(name="p-made"))
    maker = management("maker")
    with pytest.raises(ValidationCodeException, match="403"):
        maker.declare_queue(StreamSpecification(name="other"))  # configure is ^p- only
    assert maker.declare_queue(StreamSpecification(name="p-made")).name == "p-made"
    with pytest.raises(ValidationCodeException, match="403"):
        management("reader").delete_queue("p-made")
    maker.delete_queue("p-made")
    with _admin(broker) as admin:
        assert admin.request("GET", "/queues/p-made")[0] == 404


def test_queue_info_needs_any_permission(broker, management):
    with _admin(broker) as admin:
        admin.declare("p-info")
        admin.declare("q-info")
    assert management("reader").queue_info("p-info").name == "p-info"
    assert management("writer").queue_info("p-info").name == "p-info"
    with pytest.raises(ValidationCodeException, match="403"):
        management("reader").queue_info("q-info")


def test_publish_needs_write_on_the_default_exchange_and_consume_read(broker):
    with _admin(broker) as admin:
        admin.declare("p-data")
    with _client(broker, "reader") as reader:
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            reader.sender("p-data")
    with _client(broker, "writer") as writer:
        assert writer.publish("p-data", [Message(body="by writer")]) == [writer.last_delivery.ACCEPTED]
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            writer.receiver("p-data")
    with _client(broker, "reader") as reader:
        receiver = reader.receiver("p-data", entries=[(OFFSET, offset("first"))])
        assert [m.body for m in reader.receive_all(receiver, 1)] == ["by writer"]
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            reader.receiver("q-data")  # read is ^p- only


def test_offsets_on_the_management_node_need_read(broker):
    with _admin(broker) as admin:
        admin.declare("p-tracked")
    with _client(broker, "writer") as writer:
        assert writer.request("PUT", "/queues/p-tracked/offsets/app", {"offset": 3})[0] == 403
        assert writer.request("GET", "/queues/p-tracked/offsets/app")[0] == 403
    with _client(broker, "reader") as reader:
        assert reader.request("PUT", "/queues/p-tracked/offsets/app", {"offset": 3})[0] == 200
        wait_for(lambda: reader.request("GET", "/queues/p-tracked/offsets/app")[:2] == (200, {"offset": 3}),
                 20, "the stored offset")
