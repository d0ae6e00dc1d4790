"""The tracking extension driven by the official ``rabbitmq-amqp-python-client``, unchanged,
through what it lets a user set: it sends fixed attach properties, so the consumer name and
the publisher reference ride in the link address (``/queues/<s>/consumers/<name>``,
``/queues/<s>/publishers/<reference>``) and the publishing id in a message annotation."""

from __future__ import annotations

import threading

import pytest
from rabbitmq_amqp_python_client import (AddressHelper, Environment, OffsetSpecification,
                                         StreamConsumerOptions, StreamSpecification)

from tests.broker.test_rabbitmq_client import _Collect, _msg, _publish, _Running

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def official(broker, stream_name):
    environment = Environment(broker.url)
    connection = environment.connection()
    connection.dial()
    management = connection.management()
    management.declare_queue(StreamSpecification(name=stream_name))
    yield environment, stream_name
    management.delete_queue(stream_name)
    management.close()
    connection.close()
    environment.close()


class _RunningAt(_Running):
    """``_Running`` on a whole address (a named consumer's) instead of a stream's."""

    def __init__(self, env, address: str, options: StreamConsumerOptions):
        self.connection = env.connection()
        self.connection.dial()
        self.handler = _Collect()
        self.consumer = self.connection.consumer(address, message_handler=self.handler,
                                                 consumer_options=options)
        self.handler.consumer = self.consumer
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()


def _consume_at(env, address: str, options: StreamConsumerOptions) -> list[str]:
    return _RunningAt(env, address, options).bodies()


def test_a_named_consumer_resumes(official):
    env, stream = official
    first = StreamConsumerOptions(offset_specification=OffsetSpecification.first)
    named = AddressHelper.queue_address(stream) + "/consumers/" + "app%201"
    _publish(env, stream, [_msg(f"m{i}") for i in range(3)] + [_msg("END")])
    assert _consume_at(env, named, first) == ["m0", "m1", "m2"]
    _publish(env, stream, [_msg("m3"), _msg("m4"), _msg("END")])
    # the handler accepted everything up to the first END: the name resumes after it
    assert _consume_at(env, named, first) == ["m3", "m4"]
    # an unnamed consumer starts where its offset spec says
    assert _consume_at(env, AddressHelper.queue_address(stream), first) == ["m0", "m1", "m2"]


def test_a_named_publisher_is_deduplicated(official):
    env, stream = official
    named = AddressHelper.queue_address(stream) + "/publishers/job-7"

    def publish(items: list[tuple[int, str]]) -> None:
        connection = env.connection()
        connection.dial()
        publisher = connection.publisher(named)
        try:
            for pid, body in items:
                m = _msg(body)
                m.annotations = {"x-publishing-id": pid}
                publisher.publish(m)  # waits for the outcome: raises unless accepted
        finally:
            publisher.close()
            connection.close()

    publish([(1, "a"), (2, "b"), (3, "c")])
    publish([(2, "b"), (3, "c"), (4, "d")])  # a retry after a lost connection, then a new one
    _publish(env, stream, [_msg("END")])
    first = StreamConsumerOptions(offset_specification=OffsetSpecification.first)
    assert _consume_at(env, AddressHelper.queue_address(stream), first) == ["a", "b", "c", "d"]
