"""Single active consumer with the real ``rstream`` client against a real broker process: a
group of 3 on a plain stream (only the first gets deliveries; when its process is killed the
next gets ConsumerUpdate and resumes from the offset it answers), a Subscribe without a name
(PRECONDITION_FAILED, as RabbitMQ), and a group of 3 ``SuperStreamConsumer``s over 3
partitions (one active per partition, RabbitMQ's choice; one leaves, its partition moves)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid

import pytest

rstream = pytest.importorskip("rstream")
from rstream import (AMQPMessage, Consumer, ConsumerOffsetSpecification,  # noqa: E402
                     OffsetSpecification, OffsetType, Producer, SuperStreamConsumer,
                     amqp_decoder, exceptions)

from amqp_stream.testing import BrokerProcess  # noqa: E402
from tests.stream import rstream_low  # noqa: E402
from tests.stream.rstream_low import admin, until  # noqa: E402

TIMEOUT = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("sac") / "data")
    b.start()
    yield b
    b.close()


def run(coro):
    return rstream_low.run(coro, TIMEOUT)


def consumer(broker: BrokerProcess) -> Consumer:
    return Consumer("127.0.0.1", port=broker.stream_port, username="guest", password="guest")


async def publish(broker: BrokerProcess, stream: str, bodies: list[bytes]) -> None:
    async with Producer("127.0.0.1", port=broker.stream_port, username="guest",
                        password="guest") as producer:
        await producer.send_batch(stream, [AMQPMessage(body=b) for b in bodies])


# The first member runs in its own process, so that killing it drops its connection for real.
_MEMBER = """
import asyncio, sys
from rstream import (Consumer, ConsumerOffsetSpecification, OffsetSpecification, OffsetType,
                     amqp_decoder)

async def main(port, stream):
    c = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    await c.start()
    async def on_message(msg, ctx):
        print("got", ctx.offset, flush=True)
    async def on_update(active, ctx):
        print("active", active, flush=True)
        return OffsetSpecification(OffsetType.FIRST, 0)
    await c.subscribe(stream, on_message, decoder=amqp_decoder,
                      offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
                      properties={"single-active-consumer": "true", "name": "group"},
                      consumer_update_listener=on_update)
    print("subscribed", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""


def test_plain_stream_group_takeover_on_kill(broker):
    stream = f"sac-{uuid.uuid4().hex[:8]}"

    async def go():
        async with admin(broker) as a:
            await a.create_stream(stream)
        await publish(broker, stream, [b"m%d" % i for i in range(10)])
        first = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _MEMBER, str(broker.stream_port), stream,
            stdout=subprocess.PIPE)
        lines: list[str] = []

        async def read() -> None:
            assert first.stdout is not None
            async for line in first.stdout:
                lines.append(line.decode().strip())

        reader = asyncio.create_task(read())
        await until(lambda: "subscribed" in lines and sum(x.startswith("got") for x in lines) == 10,
                    "the first member's 10 messages")
        assert lines[0] == "active True"  # told before any delivery

        got: dict[str, list[int]] = {"b": [], "c": []}
        told: dict[str, list[bool]] = {"b": [], "c": []}
        members = []
        for who in ("b", "c"):
            c = consumer(broker)
            await c.start()

            async def on_message(msg, ctx, who=who):
                got[who].append(ctx.offset)

            async def on_update(active, ctx, who=who):
                told[who].append(active)
                return OffsetSpecification(OffsetType.OFFSET, 10)  # where "a" got to

            await c.subscribe(stream, on_message, decoder=amqp_decoder,
                              offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
                              properties={"single-active-consumer": "true", "name": "group"},
                              consumer_update_listener=on_update)
            members.append(c)
        await publish(broker, stream, [b"m%d" % i for i in range(10, 20)])
        await until(lambda: sum(x.startswith("got") for x in lines) == 20,
                    "the first member's 20 messages")
        assert got == {"b": [], "c": []} and told == {"b": [], "c": []}

        first.send_signal(signal.SIGKILL)
        await first.wait()
        reader.cancel()
        await publish(broker, stream, [b"m%d" % i for i in range(20, 25)])
        await until(lambda: len(got["b"]) >= 15, "the second member's messages")
        assert told == {"b": [True], "c": []}
        # it resumed from the offset it answered (10), not from its Subscribe's (first)
        assert sorted(set(got["b"])) == list(range(10, 25))
        assert got["c"] == []

        await members[0].close()  # a clean close: the third takes over
        await until(lambda: told["c"] == [True], "the third member's ConsumerUpdate")
        await until(lambda: len(got["c"]) >= 15, "the third member's messages")
        assert sorted(set(got["c"])) == list(range(10, 25))
        await members[1].close()

    run(go())


def test_single_active_consumer_needs_a_name(broker):
    stream = f"sac-{uuid.uuid4().hex[:8]}"

    async def go():
        async with admin(broker) as c:
            await c.create_stream(stream)
            with pytest.raises(exceptions.PreconditionFailed):
                await c.subscribe(stream, 1, properties={"single-active-consumer": "true"})
            await c.subscribe(stream, 2, properties={"single-active-consumer": "true",
                                                     "name": "g"})

    run(go())


def test_super_stream_group_one_active_per_partition(broker):
    """3 members over 3 partitions: partition i's active one is member i mod 3 (RabbitMQ's
    choice, reached through step-downs as they join); when the third leaves, its partition
    moves to member 2 mod 2 = the first."""
    ss = f"sac-ss-{uuid.uuid4().hex[:8]}"
    parts = [f"{ss}-{i}" for i in range(3)]

    async def go():
        async with admin(broker) as a:
            await a.create_super_stream(ss, parts, ["0", "1", "2"])
        state: dict[str, dict[str, bool]] = {w: {} for w in "ABC"}
        got: dict[str, dict[str, list[int]]] = {w: {p: [] for p in parts} for w in "ABC"}
        members = {}
        for who in "ABC":
            c = SuperStreamConsumer("127.0.0.1", broker.stream_port, username="guest",
                                    password="guest", super_stream=ss)
            await c.start()

            async def on_message(msg, ctx, who=who):
                got[who][ctx.stream].append(ctx.offset)

            async def on_update(active, ctx, who=who):
                state[who][ctx.stream] = active
                return OffsetSpecification(OffsetType.FIRST, 0)

            await c.subscribe(on_message, decoder=amqp_decoder,
                              properties={"single-active-consumer": "true", "name": "group",
                                          "super-stream": ss},
                              consumer_update_listener=on_update)
            members[who] = c

        def actives() -> dict[str, list[str]]:
            return {p: [w for w in "ABC" if state[w].get(p)] for p in parts}

        expected = {parts[0]: ["A"], parts[1]: ["B"], parts[2]: ["C"]}
        await until(lambda: actives() == expected, f"one active per partition, {expected}")
        for p in parts:
            await publish(broker, p, [b"x"] * 5)
        await until(lambda: all(len(got[w][p]) == 5 for p, (w,) in expected.items()),
                    "each partition's messages at its active member")
        for p, (w,) in expected.items():
            assert [x for x in "ABC" if got[x][p]] == [w]

        await members.pop("C").close()
        await until(lambda: state["A"].get(parts[2]) is True, "the third partition moving to A")
        await publish(broker, parts[2], [b"y"] * 5)
        await until(lambda: len(got["A"][parts[2]]) == 10, "the third partition's messages at A")
        assert got["B"][parts[2]] == [] and got["B"][parts[0]] == [] and got["A"][parts[1]] == []
        for c in members.values():
            await c.close()

    run(go())
