"""rstream publishing to a super stream of 3 partitions against the same client to one stream.

The issue's bar: a ``SuperStreamProducer`` (rstream's default hash routing: murmur3 of a key
per message) publishing to 3 partitions reaches at least 0.9x the throughput of rstream's
``Producer`` to one stream, in the same run. Both send ``--messages`` 100-byte messages one
``send`` at a time with confirms, with the same batching delay (rstream's timer, 0.2 s: the
super stream producer's default), and are timed from the first send to the last confirm. The
two alternate in ``--rounds`` rounds on one broker (fsync ``always``, the default), each on a
fresh stream / super stream; the ratio is of the medians.

    python -m bench.super_stream                 # 100,000 messages, 5 rounds
    python -m bench.super_stream --messages 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Sequence

from amqp_stream.testing import BrokerProcess

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args(argv)
    single: list[float] = []
    partitioned: list[float] = []
    with BrokerProcess() as b:
        for r in range(args.rounds):
            single.append(asyncio.run(one_stream(b.stream_port, f"one-{r}", args.messages)))
            partitioned.append(asyncio.run(super_stream(b.stream_port, f"super-{r}",
                                                        args.messages, args.partitions)))
    n = args.messages
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {n} messages of "
          f"{len(BODY)} bytes a round, {args.rounds} rounds alternating")
    for label, times in (("rstream Producer, one stream", single),
                         (f"rstream SuperStreamProducer, {args.partitions} partitions", partitioned)):
        print(f"  {label:48} median {n / statistics.median(times):>9,.0f} msg/s  "
              f"(rounds: {', '.join(f'{n / t:,.0f}' for t in times)})")
    print(f"  ratio (super stream / one stream, medians): "
          f"{statistics.median(single) / statistics.median(partitioned):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
