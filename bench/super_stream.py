"""Publishing to a super stream of 3 partitions against the same client to one stream.

The issue's bar: a ``SuperStreamProducer`` (rstream's default hash routing: murmur3 of a key
per message) publishing to 3 partitions reaches at least 0.9x the throughput of rstream's
``Producer`` to one stream, in the same run. Both send ``--messages`` 100-byte messages one
``send`` at a time with confirms, with the same batching delay (rstream's timer, 0.2 s: the
super stream producer's default), and are timed from the first send to the last confirm. The
two alternate in ``--rounds`` rounds on one broker (fsync ``always``, the default), each on a
fresh stream / super stream; the ratio is of the medians.

The same with the project's load generator (``bench.stream_protocol``'s: Publish frames of
1,000 pre-encoded messages built before the clock starts, confirms counted from each
PublishConfirm; it is not the limit): one connection, one publisher per partition, the frames
of the 3 partitions interleaved (a third of the messages each: the routing is the client's
and done before the clock, like the encoding), against one publisher to one stream
(``--generator-messages``, fsync ``always``).

    python -m bench.super_stream                 # rstream 100,000 messages, generator 1,000,000; 5 rounds
    python -m bench.super_stream --messages 20000 --rounds 3 --client generator
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from itertools import zip_longest
from typing import Sequence

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.stream_protocol import publish, publish_frames

__all__ = ["main"]

BODY = bytes(range(100))
DELAY = 0.2  # rstream's batching timer, the same for both


async def _publish(send, count: int) -> float:
    """Seconds from the first ``send`` to the last confirm."""
    from rstream import AMQPMessage
    done = asyncio.Event()
    confirmed = 0

    def on_confirm(status) -> None:
        nonlocal confirmed
        confirmed += 1
        if confirmed == count:
            done.set()
    start = time.perf_counter()
    for i in range(count):
        await send(AMQPMessage(body=BODY, application_properties={"id": str(i)}), on_confirm)
    await done.wait()
    return time.perf_counter() - start


async def one_stream(port: int, name: str, count: int) -> float:
    from rstream import Producer
    async with Producer("127.0.0.1", port, username="guest", password="guest",
                        default_batch_publishing_delay=DELAY) as p:
        await p.create_stream(name)
        return await _publish(lambda m, cb: p.send(name, m, on_publish_confirm=cb), count)


async def super_stream(port: int, name: str, count: int, partitions: int) -> float:
    from rstream import RouteType, SuperStreamCreationOption, SuperStreamProducer

    async def key(message) -> str:
        return message.application_properties["id"]
    async with SuperStreamProducer(
            "127.0.0.1", port, username="guest", password="guest", super_stream=name,
            routing=RouteType.Hash, routing_extractor=key,
            super_stream_creation_option=SuperStreamCreationOption(partitions),
            default_batch_publishing_delay=DELAY) as p:
        return await _publish(lambda m, cb: p.send(m, on_publish_confirm=cb), count)


def create_super_stream(port: int, name: str, partitions: list[str]) -> None:
    from rstream.client import Client

    async def create() -> None:
        c = Client("127.0.0.1", port, frame_max=1024 * 1024, heartbeat=60)
        await c.start()
        await c.authenticate("/", "guest", "guest")
        await c.create_super_stream(name, partitions, [str(i) for i in range(len(partitions))])
        await c.close()
    asyncio.run(create())


def generator_one_stream(b: BrokerProcess, name: str, count: int) -> float:
    """Seconds for the load generator to publish ``count`` messages to one stream."""
    assert b.proc is not None
    with StreamClient(b.stream_url, timeout=60) as c:
        c.create(name)
        c.declare_publisher(1, name)
        return publish(c, publish_frames(1, 0, count, 1000), b.proc.pid).seconds


def generator_super_stream(b: BrokerProcess, name: str, count: int, partitions: int) -> float:
    """Seconds for the load generator to publish ``count`` messages over the partitions of a
    new super stream, one publisher each on one connection, frames interleaved."""
    assert b.proc is not None
    streams = [f"{name}-{i}" for i in range(partitions)]
    create_super_stream(b.stream_port, name, streams)
    with StreamClient(b.stream_url, timeout=60) as c:
        per_partition = []
        for i, stream in enumerate(streams):
            c.declare_publisher(i + 1, stream)
            share = count // partitions + (1 if i < count % partitions else 0)
            per_partition.append(publish_frames(i + 1, 0, share, 1000))
        frames = [f for group in zip_longest(*per_partition) for f in group if f is not None]
        return publish(c, frames, b.proc.pid).seconds


def report(label: str, n: int, times: list[float]) -> str:
    return (f"  {label:48} median {n / statistics.median(times):>9,.0f} msg/s  "
            f"(rounds: {', '.join(f'{n / t:,.0f}' for t in times)})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--generator-messages", type=int, default=1_000_000)
    parser.add_argument("--client", choices=("rstream", "generator", "both"), default="both")
    args = parser.parse_args(argv)
    clients = ("rstream", "generator") if args.client == "both" else (args.client,)
    times: dict[str, list[float]] = {k: [] for k in ("one", "super", "gen-one", "gen-super")}
    n, g = args.messages, args.generator_messages
    with BrokerProcess() as b:
        for r in range(args.rounds):  # A and B alternate in each round
            if "rstream" in clients:
                times["one"].append(asyncio.run(one_stream(b.stream_port, f"one-{r}", n)))
                times["super"].append(asyncio.run(super_stream(b.stream_port, f"super-{r}", n,
                                                               args.partitions)))
            if "generator" in clients:
                times["gen-one"].append(generator_one_stream(b, f"gen-one-{r}", g))
                times["gen-super"].append(generator_super_stream(b, f"gen-super-{r}", g,
                                                                 args.partitions))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; messages of "
          f"{len(BODY)} bytes, {args.rounds} rounds alternating, fsync always")
    if "rstream" in clients:
        print(f"rstream, {n} messages a round, one send at a time with confirms:")
        print(report("Producer, one stream", n, times["one"]))
        print(report(f"SuperStreamProducer, {args.partitions} partitions", n, times["super"]))
        print(f"  ratio (super stream / one stream, medians): "
              f"{statistics.median(times['one']) / statistics.median(times['super']):.2f}x")
    if "generator" in clients:
        print(f"load generator, {g} messages a round, frames of 1,000, confirms:")
        print(report("one publisher, one stream", g, times["gen-one"]))
        print(report(f"{args.partitions} publishers, {args.partitions} partitions, one "
                     f"connection", g, times["gen-super"]))
        print(f"  ratio (super stream / one stream, medians): "
              f"{statistics.median(times['gen-one']) / statistics.median(times['gen-super']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
