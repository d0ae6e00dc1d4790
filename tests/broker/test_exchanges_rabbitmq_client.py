"""Exchanges and bindings with the official ``rabbitmq-amqp-python-client``, unchanged, against
a real broker process: its management calls (declare/delete exchange, bind/unbind by path and by
specification, exchange to exchange) and its publishers to ``/exchanges/<x>/<key>`` targets and
per-message ``to`` addresses, with the outcome it reports."""

from __future__ import annotations

import pytest
from rabbitmq_amqp_python_client import (AddressHelper, Environment, ExchangeSpecification,
                                         ExchangeToExchangeBindingSpecification,
                                         ExchangeToQueueBindingSpecification, ExchangeType,
                                         Message, OutcomeState, StreamSpecification)
from rabbitmq_amqp_python_client.exceptions import ValidationCodeException
from rabbitmq_amqp_python_client.qpid.proton.utils import SendException

from tests.broker.amqp import Client

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def connection(broker):
    environment = Environment(broker.url)
    connection = environment.connection()
    connection.dial()
    yield connection
    environment.close()


def test_bind_publish_unbind_with_the_official_client(connection, broker, stream_name):
    management = connection.management()
    x, upstream = stream_name + "-x", stream_name + "-up"
    management.declare_queue(StreamSpecification(name=stream_name))
    management.declare_exchange(ExchangeSpecification(name=x, exchange_type=ExchangeType.topic))
    management.declare_exchange(ExchangeSpecification(name=upstream,
                                                      exchange_type=ExchangeType.fanout))
    path = management.bind(ExchangeToQueueBindingSpecification(
        source_exchange=x, destination_queue=stream_name, binding_key="orders.#"))
    assert path == f"/bindings/src={x};dstq={stream_name};key=orders.%23;args="
    management.bind(ExchangeToExchangeBindingSpecification(source_exchange=upstream,
                                                           destination_exchange=x))
    publisher = connection.publisher(AddressHelper.exchange_address(x, "orders.eu"))
    assert publisher.publish(Message(body=b"one")).remote_state == OutcomeState.ACCEPTED
    assert publisher.publish(Message(body=b"two")).remote_state == OutcomeState.ACCEPTED
    publisher.close()
    # the anonymous publisher: each message's to; through the exchange-to-exchange binding the
    # fanout's message reaches x with the empty key, which orders.# does not match
    anonymous = connection.publisher()
    message = AddressHelper.message_to_address_helper(
        Message(body=b"per message"), AddressHelper.exchange_address(x, "orders"))
    assert anonymous.publish(message).remote_state == OutcomeState.ACCEPTED
    unroutable = AddressHelper.message_to_address_helper(
        Message(body=b"lost"), AddressHelper.exchange_address(upstream))
    with pytest.raises(SendException, match="38"):  # the client raises on released (0x26)
        anonymous.publish(unroutable)
    anonymous.close()
    with Client(broker.url) as c:
        assert c.info(stream_name)["message_count"] == 3
    management.unbind(path)
    with Client(broker.url) as c:
        assert c.request("GET", f"/bindings?dstq={stream_name}")[1] == []
    with pytest.raises(ValidationCodeException):  # 409: another type
        management.declare_exchange(ExchangeSpecification(name=x,
                                                          exchange_type=ExchangeType.direct))
    management.delete_exchange(upstream)
    management.delete_exchange(x)
    management.delete_queue(stream_name)
    management.close()
