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


def test_exchanges_and_bindings_need_rabbitmqs_permissions(broker):
    """Declare and delete an exchange: configure on it; a binding: write on its destination and
    read on its source; publishing through ``/exchanges/<x>`` (and ``to`` on the anonymous
    terminus): write on the exchange (``rabbit_amqp_management``, ``rabbit_amqp_session``)."""
    binding = {"source": "p-ex", "destination_queue": "p-routed", "binding_key": "k",
               "arguments": {}}
    with _admin(broker) as admin:
        admin.declare("p-routed")
        assert admin.request("PUT", "/exchanges/q-ex", {"type": "direct", "durable": True,
                                                       "auto_delete": False, "internal": False,
                                                       "arguments": {}})[0] == 204
    for user in ("reader", "writer"):
        with _client(broker, user) as c:
            assert c.request("PUT", "/exchanges/p-ex", {"type": "direct"})[0] == 403
    with _client(broker, "maker") as maker:
        assert maker.request("PUT", "/exchanges/q-other", {"type": "direct"})[0] == 403
        assert maker.request("PUT", "/exchanges/p-ex", {"type": "direct"})[0] == 204
        assert maker.request("POST", "/bindings", binding)[0] == 403  # no write, no read
    for user in ("reader", "writer"):  # each holds one of the two permissions a binding needs
        with _client(broker, user) as c:
            assert c.request("POST", "/bindings", binding)[0] == 403
    with _admin(broker) as admin:
        assert admin.request("POST", "/bindings", binding)[0] == 204
    with _client(broker, "reader") as reader:
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            reader.conn.create_sender("/exchanges/p-ex/k")
    with _client(broker, "writer") as writer:
        sender = writer.conn.create_sender("/exchanges/p-ex/k")
        assert writer.send_bytes(sender, Message(body="routed").encode()) == writer.last_delivery.ACCEPTED
        anonymous = writer.conn.create_sender(None)
        outcome = writer.send_bytes(anonymous, Message(address="/exchanges/q-ex/k",
                                                       body="not mine").encode())
        assert outcome == writer.last_delivery.REJECTED
        assert "unauthorized-access" in str(writer.last_delivery.remote.condition)
    with _client(broker, "maker") as maker:
        assert maker.request("DELETE", "/exchanges/p-ex")[0] == 204
    with _client(broker, "reader") as reader:
        receiver = reader.receiver("p-routed", entries=[(OFFSET, offset("first"))])
        assert [m.body for m in reader.receive_all(receiver, 1)] == ["routed"]
