"""Stored offsets and deduplication over the stream protocol with a real client, ``rstream``
(PyPI), against a real broker process over loopback: a named producer's retried messages are
confirmed and stored once, across reconnects and a broker restart; a consumer's stored offset
is answered after a reconnect and a restart."""

from __future__ import annotations

import asyncio
import uuid

import pytest

rstream = pytest.importorskip("rstream")
from rstream import AMQPMessage, ConfirmationStatus, Consumer, ConsumerOffsetSpecification, OffsetType, Producer, amqp_decoder  # noqa: E402,E501
from rstream.exceptions import OffsetNotFound  # noqa: E402

from amqp_stream.testing import BrokerProcess  # noqa: E402

TIMEOUT = 30


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def producer(broker: BrokerProcess) -> Producer:
    return Producer("127.0.0.1", broker.stream_port, username="guest", password="guest")


def consumer(broker: BrokerProcess) -> Consumer:
    return Consumer("127.0.0.1", broker.stream_port, username="guest", password="guest")


async def publish_named(broker: BrokerProcess, stream: str, name: str, ids) -> list[int]:
    """Publish ``m<id>`` with each publishing id as producer ``name`` on a new connection and
    wait for every outcome; the ids confirmed."""
    ids = list(ids)
    outcome: list[ConfirmationStatus] = []
    done = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        outcome.append(status)
        if len(outcome) == len(ids):
            done.set()
    messages = []
    for i in ids:
        messages.append(AMQPMessage(body=b"m%d" % i))
        messages[-1].publishing_id = i  # rstream's constructor does not take it
    async with producer(broker) as p:
        await p.send_batch(stream, messages, publisher_name=name, on_publish_confirm=on_confirm)
        await done.wait()
    return sorted(s.message_id for s in outcome if s.is_confirmed)


async def bodies(broker: BrokerProcess, stream: str, count: int) -> list[bytes]:
    """The bodies of the first ``count`` messages of the stream."""
    got: list[bytes] = []
    done = asyncio.Event()

    def on_message(msg: AMQPMessage, ctx) -> None:
        got.append(b"".join(msg.body) if isinstance(msg.body, list) else msg.body)
        if len(got) >= count:
            done.set()
    c = consumer(broker)
    await c.start()
    try:
        await c.subscribe(stream, on_message, decoder=amqp_decoder,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await done.wait()
    finally:
        await c.close()
    return got[:count]


async def sequence(broker: BrokerProcess, stream: str, name: str) -> int:
    async with producer(broker) as p:
        return await (await p.default_client).query_publisher_sequence(stream, name)


async def query_offset(broker: BrokerProcess, stream: str, name: str) -> int | None:
    c = consumer(broker)
    await c.start()
    try:
        return await c.query_offset(stream, name)
    except OffsetNotFound:
        return None
    finally:
        await c.close()


def test_named_producer_retries_are_stored_once_across_reconnects_and_a_restart(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    stream = f"dedup-{uuid.uuid4().hex[:8]}"
    try:
        async def create() -> None:
            async with producer(b) as p:
                await p.create_stream(stream)
        run(create())
        assert run(sequence(b, stream, "orders")) == 0
        assert run(publish_named(b, stream, "orders", range(1, 101))) == list(range(1, 101))
        # a retry after a reconnect: 50..100 again, then 101..150 new; all confirmed
        assert run(publish_named(b, stream, "orders", range(50, 151))) == list(range(50, 151))
        assert run(sequence(b, stream, "orders")) == 150
        # another name is not deduplicated against this one
        assert run(publish_named(b, stream, "other", [1, 2])) == [1, 2]
        b.stop()
        b.start()
        assert run(sequence(b, stream, "orders")) == 150
        assert run(publish_named(b, stream, "orders", range(140, 161))) == list(range(140, 161))
        got = run(bodies(b, stream, 162))
        assert got == ([b"m%d" % i for i in range(1, 151)] + [b"m1", b"m2"]
                       + [b"m%d" % i for i in range(151, 161)])
    finally:
        b.close()


def test_stored_offsets_are_answered_after_a_reconnect_and_a_restart(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    stream = f"offsets-{uuid.uuid4().hex[:8]}"
    try:
        async def store() -> None:
            async with producer(b) as p:
                await p.create_stream(stream)
            c = consumer(b)
            await c.start()
            try:
                with pytest.raises(OffsetNotFound):
                    await c.query_offset(stream, "reader")
                await c.store_offset(stream, "reader", 42)
                await c.store_offset(stream, "other", 7)
                await c.store_offset(stream, "reader", 43)
                assert await c.query_offset(stream, "reader") == 43
            finally:
                await c.close()
        run(store())
        assert run(query_offset(b, stream, "reader")) == 43  # a new connection
        assert run(query_offset(b, stream, "other")) == 7
        b.stop()
        b.start()
        assert run(query_offset(b, stream, "reader")) == 43
        assert run(query_offset(b, stream, "other")) == 7
        assert run(query_offset(b, stream, "nobody")) is None
    finally:
        b.close()
