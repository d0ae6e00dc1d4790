"""The stream listener with rbfly (PyPI, a second Python client with its own Cython codec):
create, publish with confirms, with filter values (Publish v2), consume from first, from an
offset and with a filter (offsets from the message context), delete."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("rbfly.streams")
from rbfly.streams import MessageFilter, Offset, get_message_ctx, stream_message_ctx, streams_client  # noqa: E402

from amqp_stream.testing import BrokerProcess  # noqa: E402

TIMEOUT = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("rbfly") / "data")
    b.start()
    yield b
    b.close()


async def take(client, stream: str, n: int, **kw) -> list[tuple[int, object]]:
    got = []
    async for body in client.subscribe(stream, timeout=TIMEOUT, **kw):
        got.append((get_message_ctx().stream_offset, body))
        if len(got) == n:
            break
    return got


def test_publish_and_consume(broker):
    async def go():
        client = streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{broker.stream_port}")
        try:
            await client.create_stream("rb")
            async with client.publisher("rb") as publisher:
                for i in range(10):
                    await publisher.send(f"m{i}")  # returns once confirmed
            first = await take(client, "rb", 10, offset=Offset.FIRST)
            later = await take(client, "rb", 3, offset=Offset.offset(7))
            await client.delete_stream("rb")
            return first, later
        finally:
            await client.disconnect()
    first, later = asyncio.run(asyncio.wait_for(go(), TIMEOUT * 2))
    assert first == [(i, f"m{i}") for i in range(10)]
    assert later == [(i, f"m{i}") for i in range(7, 10)]


def test_filter_values(broker):
    def colour(msg) -> str:
        return msg.app_properties["colour"]

    async def go():
        client = streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{broker.stream_port}")
        try:
            await client.create_stream("rbf")
            async with client.publisher("rbf", filter_extract=colour) as publisher:
                for c in ("red", "blue", "red"):
                    for i in range(3):
                        await publisher.send(stream_message_ctx(
                            f"{c}{i}", app_properties={"colour": c}))
            return await take(client, "rbf", 6, offset=Offset.FIRST,
                              filter=MessageFilter(colour, {"red"}))
        finally:
            await client.disconnect()
    got = asyncio.run(asyncio.wait_for(go(), TIMEOUT * 2))
    assert got == [(i, f"red{i}") for i in range(3)] + [(6 + i, f"red{i}") for i in range(3)]
