"""``queue-leader-locator`` on a real broker process, with both protocols' real clients: every
value RabbitMQ 4.2 accepts (``rabbit_queue_location:queue_leader_locators()``: client-local,
balanced and the deprecated random, least-leaders, min-masters) creates the stream over the
stream protocol (rstream's Create) and over AMQP 1.0 (the official client's ``/management``
declare); anything else is refused, with PRECONDITION_FAILED (code 17) on the stream protocol
as RabbitMQ answers it."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from rabbitmq_amqp_python_client import Environment, StreamSpecification
from rabbitmq_amqp_python_client.exceptions import ValidationCodeException
from rstream import Producer
from rstream.exceptions import PreconditionFailed

from amqp_stream.testing import BrokerProcess

RABBITMQ_42 = ("client-local", "balanced", "random", "least-leaders", "min-masters")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("locator") / "data") as b:
        yield b


def _name(locator: str) -> str:
    return f"ll-{locator}-{uuid.uuid4().hex[:6]}"


def test_stream_protocol_create_takes_every_locator_rabbitmq_takes(broker):
    async def go() -> list[str]:
        refused = []
        async with Producer("127.0.0.1", broker.stream_port, username="guest",
                            password="guest") as p:
            for locator in (*RABBITMQ_42, "nearest", "Balanced"):
                stream = _name(locator)
                try:
                    await p.create_stream(stream, arguments={"queue-leader-locator": locator})
                except PreconditionFailed:
                    refused.append(locator)
                    continue
                assert await p.stream_exists(stream)
        return refused
    assert asyncio.run(asyncio.wait_for(go(), 30)) == ["nearest", "Balanced"]


def test_amqp_management_declare_takes_every_locator_rabbitmq_takes(broker):
    env = Environment(broker.url)
    connection = env.connection()
    connection.dial()
    management = connection.management()
    try:
        for locator in RABBITMQ_42:
            stream = _name(locator)
            management.declare_queue(StreamSpecification(name=stream, leader_locator=locator))
            info = management.queue_info(stream)
            assert info.arguments["x-queue-leader-locator"] == locator
        with pytest.raises(ValidationCodeException, match="400"):
            management.declare_queue(StreamSpecification(name=_name("x"),
                                                         leader_locator="nearest"))
    finally:
        management.close()
        connection.close()
        env.close()
