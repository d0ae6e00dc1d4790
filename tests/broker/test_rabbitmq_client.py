"""The official ``rabbitmq-amqp-python-client``, unchanged, against a real broker process.

It is the client most users will point at us: it checks the open frame's ``product``/``version``,
declares streams through ``/management``, publishes with ``x-stream-filter-value`` annotations
and consumes with offset specs, stage-1 values, match-unfiltered, property filters and SQL
(enabled only for a broker that says it is RabbitMQ >= 4.2.0).

Every consumer test publishes a final matching ``END`` message and stops the consumer there, so
the assertion is on the exact list of messages the broker let through, extras included. The
client's publisher waits for each accept, so every message is a chunk of its own and stage-1
filtering is exact per message here.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest
from rabbitmq_amqp_python_client import (
    AMQPMessagingHandler,
    Environment,
    Event,
    Message,
    MessageProperties,
    OffsetSpecification,
    StreamConsumerOptions,
    StreamFilterOptions,
    StreamSpecification,
    AddressHelper,
)

pytestmark = pytest.mark.timeout(120)


class _Done(Exception):
    """Raised from the handler to leave ``consumer.run()`` (as the client's own tests do)."""


class _Collect(AMQPMessagingHandler):
    """Accept and record every message; stop the consumer at the body ``END``."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[Message] = []
        self.attached = threading.Event()
        self.consumer = None

    def on_link_opened(self, event: Event) -> None:
        self.attached.set()

    def on_amqp_message(self, event: Event) -> None:
        self.delivery_context.accept(event)
        if bytes(event.message.body) == b"END":
            raise _Done()
        self.messages.append(event.message)


@pytest.fixture
def env(broker):
    environment = Environment(broker.url)
    yield environment
    environment.close()


@pytest.fixture
def stream(env, stream_name):
    connection = env.connection()
    connection.dial()
    management = connection.management()
    info = management.declare_queue(StreamSpecification(name=stream_name))
    assert info.name == stream_name
    yield stream_name
    management.delete_queue(stream_name)
    management.close()
    connection.close()


def _publish(env, stream: str, messages: list[Message]) -> None:
    connection = env.connection()
    connection.dial()
    publisher = connection.publisher(AddressHelper.queue_address(stream))
    try:
        for message in messages:
            publisher.publish(message)  # waits for the accept; raises on reject/release
    finally:
        publisher.close()
        connection.close()


def _msg(body: str, value: str | None = None, app: dict | None = None, subject: str | None = None) -> Message:
    annotations = {"x-stream-filter-value": value} if value is not None else None
    return Message(body=body.encode(), annotations=annotations, application_properties=app, subject=subject)


class _Running:
    """A consumer running in a thread of its own (``consumer.run()`` blocks)."""

    def __init__(self, env, stream: str, options: StreamConsumerOptions):
        self.connection = env.connection()
        self.connection.dial()
        self.handler = _Collect()
        self.consumer = self.connection.consumer(AddressHelper.queue_address(stream),
                                                 message_handler=self.handler, consumer_options=options)
        self.handler.consumer = self.consumer
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.consumer.run()
        except _Done:
            pass

    def bodies(self, timeout: float = 60) -> list[str]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the consumer never saw END"
        self.consumer.close()
        self.connection.close()
        return [bytes(m.body).decode() for m in self.handler.messages]


def _consume(env, stream: str, options: StreamConsumerOptions) -> list[str]:
    return _Running(env, stream, options).bodies()


def _offsets(running: _Running) -> list[int]:
    return [m.annotations["x-stream-offset"] for m in running.handler.messages]


def test_offset_first_and_absolute(env, stream):
    _publish(env, stream, [_msg(f"m{i}") for i in range(6)] + [_msg("END")])
    running = _Running(env, stream, StreamConsumerOptions(offset_specification=OffsetSpecification.first))
    assert running.bodies() == [f"m{i}" for i in range(6)]
    assert _offsets(running) == list(range(6))
    assert _consume(env, stream, StreamConsumerOptions(offset_specification=4)) == ["m4", "m5"]
    assert _consume(env, stream, StreamConsumerOptions(offset_specification=0)) == [f"m{i}" for i in range(6)]


def test_offset_last_is_the_last_chunk(env, stream):
    _publish(env, stream, [_msg(f"m{i}") for i in range(4)])
    running = _Running(env, stream, StreamConsumerOptions(offset_specification=OffsetSpecification.last))
    assert running.handler.attached.wait(30)
    _publish(env, stream, [_msg("after"), _msg("END")])
    # one message per chunk here: "last" starts at m3, the last chunk when the consumer attached
    assert running.bodies() == ["m3", "after"]


def test_offset_next_sees_only_new_messages(env, stream):
    _publish(env, stream, [_msg("old-0"), _msg("old-1")])
    running = _Running(env, stream, StreamConsumerOptions(offset_specification=OffsetSpecification.next))
    assert running.handler.attached.wait(30)
    _publish(env, stream, [_msg("new-0"), _msg("new-1"), _msg("END")])
    assert running.bodies() == ["new-0", "new-1"]
    assert _offsets(running) == [2, 3]


def test_offset_timestamp(env, stream):
    _publish(env, stream, [_msg("before-0"), _msg("before-1")])
    time.sleep(0.05)  # chunk timestamps are milliseconds: keep the two groups apart
    since = datetime.now(timezone.utc)
    time.sleep(0.05)
    _publish(env, stream, [_msg("after-0"), _msg("after-1"), _msg("END")])
    assert _consume(env, stream, StreamConsumerOptions(offset_specification=since)) == ["after-0", "after-1"]


def _filtered_stream(env, stream: str) -> None:
    _publish(env, stream, [
        _msg("a1", "apple", {"region": "emea", "n": 1}, subject="fruit"),
        _msg("b1", "banana", {"region": "amer", "n": 2}, subject="fruit"),
        _msg("u1", None, {"region": "emea", "n": 3}),
        _msg("a2", "apple", {"region": "apac", "n": 4}, subject="tree"),
        _msg("c1", "cherry", {"region": "emea", "n": 5}, subject="fruit"),
        _msg("u2", None, {"region": "amer", "n": 6}, subject="tree"),
        # the sentinel matches every filter below
        _msg("END", "apple", {"region": "emea", "n": 100}, subject="fruit"),
    ])


def _opts(**filters) -> StreamConsumerOptions:
    return StreamConsumerOptions(offset_specification=OffsetSpecification.first,
                                 filter_options=StreamFilterOptions(**filters))


def test_filter_values(env, stream):
    _filtered_stream(env, stream)
    assert _consume(env, stream, _opts(values=["apple"])) == ["a1", "a2"]
    assert _consume(env, stream, _opts(values=["cherry", "apple"])) == ["a1", "a2", "c1"]


def test_filter_values_match_unfiltered(env, stream):
    _filtered_stream(env, stream)
    assert _consume(env, stream, _opts(values=["apple"], match_unfiltered=True)) == ["a1", "u1", "a2", "u2"]


def test_message_properties_filter(env, stream):
    _filtered_stream(env, stream)
    assert _consume(env, stream, _opts(message_properties=MessageProperties(subject="fruit"))) == ["a1", "b1", "c1"]


def test_application_properties_filter(env, stream):
    _filtered_stream(env, stream)
    assert _consume(env, stream, _opts(application_properties={"region": "emea"})) == ["a1", "u1", "c1"]


def test_values_and_application_properties_together(env, stream):
    _filtered_stream(env, stream)
    assert _consume(env, stream, _opts(values=["apple"], application_properties={"region": "emea"})) == ["a1"]


def test_sql_filter(env, stream):
    _filtered_stream(env, stream)
    assert _consume(env, stream, _opts(sql="region = 'emea' AND n > 1")) == ["u1", "c1"]
    assert _consume(env, stream, _opts(sql="properties.subject = 'fruit' OR n IN (4, 6)")) \
        == ["a1", "b1", "a2", "c1", "u2"]
    assert _consume(env, stream, _opts(values=["apple"], sql="n < 1000")) == ["a1", "a2"]


def test_queue_info_counts_messages(env, stream):
    _publish(env, stream, [_msg(f"m{i}") for i in range(3)])
    connection = env.connection()
    connection.dial()
    try:
        info = connection.management().queue_info(stream)
        assert info.name == stream and info.message_count == 3
    finally:
        connection.close()
