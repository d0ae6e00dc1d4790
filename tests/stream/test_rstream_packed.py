"""A real client, ``rstream``, whose batches of one message size reach the broker as packed
Publish frames (``PackedEntries``): every message is confirmed and read back in order, a named
producer's resent ids are confirmed and not stored again, and a frame of mixed sizes (walked
per message) in between keeps its place. Both seen failing with the fast path's bodies rotated
or its ids shifted by one."""

from __future__ import annotations

import asyncio

import pytest

rstream = pytest.importorskip("rstream")
from rstream import AMQPMessage, ConfirmationStatus  # noqa: E402

from amqp_stream.testing import BrokerProcess  # noqa: E402
from tests.stream.test_rstream import consume, name, producer, run  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("rstream-packed") / "data")
    b.start()
    yield b
    b.close()


async def send(p, stream: str, bodies: list[bytes], ids: list[int] | None = None,
               publisher_name: str | None = None) -> list[int]:
    """One ``send_batch`` (one Publish frame); the ids confirmed, once all are."""
    outcome: list[ConfirmationStatus] = []
    done = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        outcome.append(status)
        if len(outcome) == len(bodies):
            done.set()
    messages = [AMQPMessage(body=b) for b in bodies]
    for m, i in zip(messages, ids or (), strict=False):
        m.publishing_id = i  # rstream's constructor does not take it
    await p.send_batch(stream, messages, publisher_name=publisher_name,
                       on_publish_confirm=on_confirm)
    await done.wait()
    return sorted(s.message_id for s in outcome if s.is_confirmed)


def body(i: int) -> bytes:
    return b"%08d" % i  # one size: rstream encodes the batch as a packed frame


def test_batches_of_one_size_are_confirmed_and_read_back_in_order(broker):
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            for k in range(4):
                got = await send(p, stream, [body(i) for i in range(300 * k, 300 * k + 300)])
                assert len(got) == 300
            await send(p, stream, [b"short", b"a longer one"])  # mixed sizes: walked
            await send(p, stream, [body(i) for i in range(1200, 1400)])
        return await consume(broker, stream, 1402)
    got = run(go())
    expected = ([body(i) for i in range(1200)] + [b"short", b"a longer one"]
                + [body(i) for i in range(1200, 1400)])
    assert got == list(enumerate(expected))


def test_a_named_producers_resent_ids_are_confirmed_not_stored(broker):
    stream = name()

    async def go():
        async with producer(broker) as p:
            await p.create_stream(stream)
            first = await send(p, stream, [body(i) for i in range(1, 501)], list(range(1, 501)),
                               publisher_name="packed")
            again = await send(p, stream, [body(i) for i in range(451, 601)],
                               list(range(451, 601)), publisher_name="packed")
            return first, again, await consume(broker, stream, 600)
    first, again, got = run(go())
    assert first == list(range(1, 501))
    assert again == list(range(451, 601))  # 451..500 confirmed as duplicates
    assert got == list(enumerate(body(i) for i in range(1, 601)))
