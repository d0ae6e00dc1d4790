"""The stream listener with a real client, ``rstream`` (PyPI), against a real broker process over
loopback: create, publish with and without filter values (confirms), consume with every offset
spec and with filter values (stage 1 plus rstream's post-filter), delete, reconnect."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest

rstream = pytest.importorskip("rstream")
from rstream import (AMQPMessage, ConfirmationStatus, Consumer, ConsumerOffsetSpecification,  # noqa: E402
                     FilterConfiguration, OffsetType, Producer, amqp_decoder)

from amqp_stream.testing import BrokerProcess  # noqa: E402

TIMEOUT = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("rstream") / "data")
    b.start()
    yield b
    b.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def producer(broker: BrokerProcess, **kw) -> Producer:
    return Producer("127.0.0.1", broker.stream_port, username="guest", password="guest", **kw)


def consumer(broker: BrokerProcess) -> Consumer:
    return Consumer("127.0.0.1", broker.stream_port, username="guest", password="guest")


async def publish(p: Producer, stream: str, bodies: list) -> list[int]:
    """Send ``bodies`` (bytes or ``AMQPMessage``s) in one batch and wait for every confirm;
    the publishing ids."""
    confirmed: list[ConfirmationStatus] = []
    done = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        confirmed.append(status)
        if len(confirmed) == len(bodies):
            done.set()
    ids = await p.send_batch(stream, [b if isinstance(b, AMQPMessage) else AMQPMessage(body=b)
                                      for b in bodies],
                             on_publish_confirm=on_confirm)
    await done.wait()
    assert all(s.is_confirmed for s in confirmed)
    return ids


async def consume(broker: BrokerProcess, stream: str, count: int,
                  spec: ConsumerOffsetSpecification | None = None,
                  filter_input: FilterConfiguration | None = None,
                  properties: dict | None = None) -> list[tuple[int, bytes]]:
    """(offset, body) of the first ``count`` messages delivered."""
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    def on_message(msg: AMQPMessage, ctx) -> None:
        got.append((ctx.offset, b"".join(msg.body) if isinstance(msg.body, list) else msg.body))
        if len(got) >= count:
            done.set()
    c = consumer(broker)
    await c.start()
    try:
        await c.subscribe(stream, on_message, decoder=amqp_decoder, offset_specification=spec,
                          filter_input=filter_input, properties=properties)
        await done.wait()
    finally:
        await c.close()
    return got[:count]


def name() -> str:
    return f"rs-{uuid.uuid4().hex[:8]}"


def test_create_publish_consume_from_first_with_offsets(broker):
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            await publish(p, stream, [b"m%d" % i for i in range(50)])
            await publish(p, stream, [b"n%d" % i for i in range(30)])
        return await consume(broker, stream, 80)
    got = run(go())
    assert got == [(i, b"m%d" % i) for i in range(50)] + [(50 + i, b"n%d" % i) for i in range(30)]


def test_offset_specs(broker):
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            await publish(p, stream, [b"a%d" % i for i in range(10)])
            time.sleep(0.01)  # timestamps are per chunk, in ms: the next chunk is later
            before_b = int(time.time() * 1000)
            await publish(p, stream, [b"b%d" % i for i in range(10)])
            at_offset = await consume(broker, stream, 5,
                                      ConsumerOffsetSpecification(OffsetType.OFFSET, 13))
            last = await consume(broker, stream, 10, ConsumerOffsetSpecification(OffsetType.LAST))
            by_time = await consume(broker, stream, 10,
                                    ConsumerOffsetSpecification(OffsetType.TIMESTAMP, before_b))
            # next: only what is published after the subscription
            task = asyncio.create_task(consume(broker, stream, 3,
                                               ConsumerOffsetSpecification(OffsetType.NEXT)))
            await asyncio.sleep(0.5)
            await publish(p, stream, [b"c%d" % i for i in range(3)])
            nxt = await task
        return at_offset, last, by_time, nxt
    at_offset, last, by_time, nxt = run(go())
    # rstream drops the records below the requested offset of the first chunk
    assert at_offset == [(13 + i, b"b%d" % (3 + i)) for i in range(5)]
    assert last == [(10 + i, b"b%d" % i) for i in range(10)]  # the last chunk, whole
    assert by_time == [(10 + i, b"b%d" % i) for i in range(10)]
    assert nxt == [(20 + i, b"c%d" % i) for i in range(3)]


def test_next_right_after_an_unconfirmed_send_batch_gets_only_what_follows(broker):
    """rstream's test_offset_type_next: send_batch (no wait for its confirm), then subscribe
    with next on another connection, then send_wait one more: only that one is delivered,
    however late the writer thread writes the batch (the Subscribe often came first)."""
    async def go(stream: str) -> list[bytes]:
        async with producer(broker) as p:
            await p.create_stream(stream)
            c = consumer(broker)
            await c.start()
            try:
                got: list[bytes] = []
                await p.send_batch(stream, [b"%d" % i for i in range(3000)])
                await c.subscribe(stream, lambda m, ctx: got.append(bytes(m)), offset_specification=
                                  ConsumerOffsetSpecification(OffsetType.NEXT, None))
                await p.send_wait(stream, b"last")
                while not got:
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.1)  # anything after it would come in this chunk or the next
                return got
            finally:
                await c.close()
    for _ in range(5):
        assert run(go(name())) == [b"last"]


def test_a_send_batch_of_4999_is_cut_as_rabbitmq_cuts_it_and_last_gives_its_last_chunk(broker):
    """rstream's own test_offset_type_last expects RabbitMQ's chunks: a send_batch of 4,999
    (one Publish frame) is stored as 32, 64 ... 2,048 and 935, as osiris's writer batches it,
    so OffsetType.LAST delivers the last 935, not the 4,999."""
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            await publish(p, stream, [b"%d" % i for i in range(1, 5000)])
        return await consume(broker, stream, 935, ConsumerOffsetSpecification(OffsetType.LAST))
    assert run(go()) == [(4064 + i, b"%d" % (4065 + i)) for i in range(935)]


def test_filter_values_select_chunks_and_the_post_filter_messages(broker):
    stream = name()

    async def go():
        async def colour_of(m: AMQPMessage) -> str:
            return m.application_properties["colour"]
        async with producer(broker, filter_value_extractor=colour_of) as p:
            await p.create_stream(stream)
            for colour in ("red", "blue", "red", "green"):
                await publish(p, stream, [AMQPMessage(body=f"{colour}{i}".encode(),
                                                      application_properties={"colour": colour})
                                          for i in range(5)])
        async with producer(broker) as p:  # no filter value
            await publish(p, stream, [b"plain"])
        red = await consume(broker, stream, 10, filter_input=FilterConfiguration(
            ["red"], predicate=lambda m: m.application_properties[b"colour"] == b"red"))
        blue_or_plain = await consume(broker, stream, 6, filter_input=FilterConfiguration(
            ["blue"], predicate=lambda m: True, match_unfiltered=True))
        return red, blue_or_plain
    red, blue_or_plain = run(go())
    assert [b for _, b in red] == [b"red%d" % i for i in range(5)] * 2
    assert [o for o, _ in red] == list(range(0, 5)) + list(range(10, 15))
    assert [b for _, b in blue_or_plain] == [b"blue%d" % i for i in range(5)] + [b"plain"]


def test_sql_filter_property_sends_only_matching_runs_with_their_offsets(broker):
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            await publish(p, stream, [AMQPMessage(body=b"x%d" % i, application_properties={"n": i})
                                      for i in range(20)])
        return await consume(broker, stream, 5,
                             properties={"sql-filter": "n % 5 = 0 OR n = 11"})
    got = run(go())
    assert got == [(0, b"x0"), (5, b"x5"), (10, b"x10"), (11, b"x11"), (15, b"x15")]


def test_delete_then_reconnect_and_create_again(broker):
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            await publish(p, stream, [b"old"])
            assert await p.stream_exists(stream)
            await p.delete_stream(stream)
            assert not await p.stream_exists(stream)
        async with producer(broker) as p:  # a new connection
            await p.create_stream(stream)
            await publish(p, stream, [b"new"])
        return await consume(broker, stream, 1)
    assert run(go()) == [(0, b"new")]


def _stored_chunks(broker: BrokerProcess, stream: str) -> list[dict]:
    """The user chunks of ``stream`` as ``amqp-stream inspect --json`` reads them on disk."""
    out = subprocess.run([sys.executable, "-m", "amqp_stream", "inspect",
                          str(broker.data_dir / "streams" / stream / "log"), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return [c for c in map(json.loads, out.splitlines()) if c.get("type") == "user"]


def test_deliver_carries_zero_in_the_bytes_osiris_reserves(broker):
    """rstream's test_deliver reads header bytes 44-47 as one u32 (``_reserved``): RabbitMQ
    sends the filter size in byte 44 and zeros after it. The log keeps its filter scheme and
    flags in bytes 45-47; they stay on disk and off the wire."""
    from rstream import schema
    from rstream.client import Client
    plain, filtered = name(), name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(plain)
            await publish(p, plain, [b"test message"])
        async with producer(broker, filter_value_extractor=_region) as p:
            await p.create_stream(filtered)
            await publish(p, filtered, [AMQPMessage(body=b"m", application_properties={
                "region": "eu"})])
        client = Client("127.0.0.1", broker.stream_port, frame_max=1 << 20, heartbeat=60)
        await client.start()
        await client.authenticate(vhost="/", username="guest", password="guest")
        try:
            got = []
            for sub, stream in enumerate((plain, filtered), 1):
                waiter = client.wait_frame(schema.Deliver)
                await client.subscribe(stream, sub)
                got.append(await waiter)
            return got
        finally:
            await client.close()
    delivered = run(go())
    stored = [_stored_chunks(broker, s)[0] for s in (plain, filtered)]
    assert stored[0]["simple_entries"] and stored[1]["simple_entries"]  # byte 47 on disk
    assert stored[0]["filter_size"] == 0 and stored[1]["filter_size"] > 0
    assert stored[1]["filter_scheme"] or stored[1]["filter_param"]  # bytes 45-46 on disk
    assert [d._reserved for d in delivered] == [0, stored[1]["filter_size"] << 24]
    assert [d.num_records for d in delivered] == [1, 1]


async def _region(msg: AMQPMessage) -> str:
    return msg.application_properties["region"]
