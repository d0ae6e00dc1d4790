"""A consumer group of single active consumers over a super stream, one member killed every
few seconds while a producer publishes: how long each partition goes without a consumer.

Three member processes (rstream ``SuperStreamConsumer``s, group ``bench``, one partition each
as RabbitMQ spreads them) consume a super stream of 3 partitions while this process publishes
``--rate`` messages a second across them. Every ``--every`` seconds a random member is
SIGKILLed (its connection drops: the broker moves its partition) and a new member is started
in its place (the partitions rebalance again, through step-downs). Each member stores its
offset on the broker every ``--store-every`` messages and when told to step down, and answers
its activation with the stored offset + 1 (query on a connection of its own): at-least-once,
the messages since the last store of a killed member come again.

Each member prints every message it gets (partition, offset, CLOCK_MONOTONIC time, which is
the machine's, the same in every process). Per partition, a handover is a change of the member
receiving; its gap is the first message of the new member minus the last of the old one (the
producer publishes every 10 ms, so a partition's messages are ~10 ms apart without failover).
Reported: the gaps' median and maximum per partition (against the gaps between consecutive
messages at one member, the same run's baseline), and that the union of what the members got
holds every message the producer was confirmed (lost = 0; by the producer's number in each
body, not by offset: a StoreOffset takes an offset of its own, as osiris's tracking chunks do),
with the count of redeliveries.

    python -m bench.sac_failover                 # 40 s, a kill every 4 s, 600 msg/s
    python -m bench.sac_failover --seconds 20 --every 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Sequence

from amqp_stream.testing import BrokerProcess

__all__ = ["main"]

GROUP = "bench"

# One member: prints "m <partition> <offset> <monotonic> <producer's number>" per message, "a <partition> <0|1>"
# per ConsumerUpdate.
MEMBER = r"""
import asyncio, sys, time
from rstream import (SuperStreamConsumer, OffsetSpecification, OffsetType, amqp_decoder,
                     exceptions)
from rstream.client import Client

port, ss, group, store_every = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])

async def main():
    tracker = Client("127.0.0.1", port, frame_max=1024 * 1024, heartbeat=60)
    await tracker.start()
    await tracker.authenticate("/", "guest", "guest")
    last = {}
    out = sys.stdout

    async def on_message(msg, ctx):
        body = msg.body if isinstance(msg.body, bytes) else b"".join(msg.body)
        out.write(f"m {ctx.stream} {ctx.offset} {time.monotonic():.6f} {body[1:].decode()}\n")
        last[ctx.stream] = ctx.offset
        if ctx.offset % store_every == 0:
            await tracker.store_offset(ctx.stream, group, ctx.offset)

    async def on_update(active, ctx):
        out.write(f"a {ctx.stream} {int(active)} {time.monotonic():.6f}\n")
        out.flush()
        if not active:
            if ctx.stream in last:
                await tracker.store_offset(ctx.stream, group, last[ctx.stream])
            return OffsetSpecification(OffsetType.NEXT, 0)
        try:
            stored = await tracker.query_offset(ctx.stream, group)
        except exceptions.OffsetNotFound:
            return OffsetSpecification(OffsetType.FIRST, 0)
        return OffsetSpecification(OffsetType.OFFSET, stored + 1)

    c = SuperStreamConsumer("127.0.0.1", port, username="guest", password="guest",
                            super_stream=ss)
    await c.start()
    await c.subscribe(on_message, decoder=amqp_decoder,
                      properties={"single-active-consumer": "true", "name": group,
                                  "super-stream": ss},
                      consumer_update_listener=on_update)
    out.write("ready\n")
    out.flush()
    while True:
        await asyncio.sleep(0.05)
        out.flush()

asyncio.run(main())
"""


class Member:
    """A member process and what it printed (read by a thread)."""

    def __init__(self, name: str, port: int, ss: str, store_every: int):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MEMBER, str(port), ss, GROUP, str(store_every)],
            stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.killed_at = float("inf")
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line == "ready\n":
                self.ready.set()
            self.lines.append(line)

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.thread.join(5)


async def produce(port: int, partitions: list[str], rate: int, stop: threading.Event,
                  confirmed: dict[str, set[int]]) -> None:
    """Publish ``rate`` messages a second (message ``i``'s body: ``m<i>``) round robin over
    the partitions in 10 ms batches until ``stop``; ``confirmed[partition]`` gets the ``i`` of
    each message the broker confirmed."""
    from rstream import AMQPMessage, Producer

    async with Producer("127.0.0.1", port, username="guest", password="guest") as p:
        per_tick = max(1, rate // 100)
        i = 0
        numbers: dict[tuple[str, int], int] = {}  # (partition, publishing id): i
        ids: dict[str, set[int]] = defaultdict(set)  # confirmed publishing ids
        callbacks = {}
        for stream in partitions:
            def on_confirm(status, stream=stream) -> None:
                if status.is_confirmed:
                    ids[stream].add(status.message_id)
            callbacks[stream] = on_confirm
        while not stop.is_set():
            t = time.monotonic()
            batch: dict[str, list[tuple[int, AMQPMessage]]] = defaultdict(list)
            for _ in range(per_tick):
                batch[partitions[i % len(partitions)]].append((i, AMQPMessage(body=b"m%d" % i)))
                i += 1
            for stream, items in batch.items():
                sent = await p.send_batch(stream, [m for _, m in items],
                                          on_publish_confirm=callbacks[stream])
                for pid, (n, _) in zip(sent, items, strict=True):
                    numbers[(stream, pid)] = n
            await asyncio.sleep(max(0.0, 0.01 - (time.monotonic() - t)))
        deadline = time.monotonic() + 30
        while sum(map(len, ids.values())) < len(numbers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for stream, done in ids.items():
            confirmed[stream] |= {numbers[(stream, pid)] for pid in done}


def analyse(members: list[Member], confirmed: dict[str, set[int]]) -> list[str]:
    got: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for m in members:
        for line in m.lines:
            parts = line.split()
            if len(parts) == 5 and parts[0] == "m":
                got[parts[1]].append((float(parts[3]), int(parts[4]), m.name))
    killed_at = {m.name: m.killed_at for m in members}
    out = []
    kills: list[float] = []  # the new member's first message minus the kill
    moves: list[float] = []  # a member joined: the old one stepped down
    all_gaps: list[float] = []
    for stream in sorted(confirmed):
        events = sorted(got[stream])
        numbers = [n for _, n, _ in events]
        missing = confirmed[stream] - set(numbers)
        redelivered = len(numbers) - len(set(numbers))
        gaps = []
        for (t0, _, a), (t1, _, b) in pairwise(events):
            if a != b:
                gaps.append(t1 - t0)
                if killed_at[a] <= t1:
                    kills.append(t1 - killed_at[a])
                else:
                    moves.append(t1 - t0)
        all_gaps += gaps
        med = f"{statistics.median(gaps) * 1000:.0f}" if gaps else "-"
        mx = f"{max(gaps) * 1000:.0f}" if gaps else "-"
        out.append(f"  {stream}: {len(confirmed[stream])} confirmed, {len(set(numbers))} distinct "
                   f"got (lost {len(missing)}), {redelivered} redelivered; {len(gaps)} handovers, "
                   f"gap median {med} ms, max {mx} ms")
    if all_gaps:
        same = sorted(same_member_gaps(got))
        out.append(f"  all partitions: {len(all_gaps)} handovers, gap median "
                   f"{statistics.median(all_gaps) * 1000:.0f} ms, max {max(all_gaps) * 1000:.0f} "
                   f"ms; without a handover (consecutive messages at one member, the baseline): "
                   f"median {statistics.median(same) * 1000:.1f} ms, p99 "
                   f"{same[int(len(same) * 0.99)] * 1000:.1f} ms, max {same[-1] * 1000:.0f} ms")
        for label, xs in (("after a kill (the kill to the new member's first message)", kills),
                          ("after a join (step-down, old member's last to new one's first)",
                           moves)):
            if xs:
                out.append(f"  {label}: {len(xs)}, median {statistics.median(xs) * 1000:.0f} "
                           f"ms, max {max(xs) * 1000:.0f} ms")
    return out


def same_member_gaps(got: dict[str, list[tuple[float, int, str]]]) -> list[float]:
    """The gaps between consecutive messages of a partition at the same member."""
    gaps = []
    for events in got.values():
        events = sorted(events)
        gaps += [t1 - t0 for (t0, _, a), (t1, _, b) in pairwise(events) if a == b]
    return gaps or [0.0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--every", type=float, default=4, help="seconds between kills")
    parser.add_argument("--rate", type=int, default=600, help="messages a second, all partitions")
    parser.add_argument("--store-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    ss = "bench-sac"
    partitions = [f"{ss}-{i}" for i in range(3)]
    with tempfile.TemporaryDirectory(prefix="bench-sac-") as d, \
            BrokerProcess(Path(d) / "data") as b:
        from rstream.client import Client

        async def create() -> None:
            c = Client("127.0.0.1", b.stream_port, frame_max=1024 * 1024, heartbeat=60)
            await c.start()
            await c.authenticate("/", "guest", "guest")
            await c.create_super_stream(ss, partitions, ["0", "1", "2"])
            await c.close()
        asyncio.run(create())
        members = [Member(f"m{i}", b.stream_port, ss, args.store_every) for i in range(3)]
        alive = list(members)
        for m in members:
            if not m.ready.wait(60):
                raise RuntimeError("a member did not start")
        stop = threading.Event()
        confirmed: dict[str, set[int]] = defaultdict(set)
        producer = threading.Thread(
            target=lambda: asyncio.run(produce(b.stream_port, partitions, args.rate, stop,
                                               confirmed)), daemon=True)
        producer.start()
        kills = 0
        start = time.monotonic()
        next_kill = start + args.every
        while time.monotonic() - start < args.seconds:
            time.sleep(0.05)
            if time.monotonic() >= next_kill:
                victim = rng.choice(alive)
                victim.kill()
                alive.remove(victim)
                kills += 1
                new = Member(f"m{len(members)}", b.stream_port, ss, args.store_every)
                members.append(new)
                alive.append(new)
                next_kill += args.every
        stop.set()
        producer.join(30)

        def caught_up() -> bool:
            seen: dict[str, set[int]] = defaultdict(set)
            for m in members:
                for line in list(m.lines):
                    p = line.split()
                    if len(p) == 5 and p[0] == "m":
                        seen[p[1]].add(int(p[4]))
            return all(confirmed[s] <= seen[s] for s in partitions)
        deadline = time.monotonic() + 30
        while not caught_up() and time.monotonic() < deadline:
            time.sleep(0.1)
        for m in alive:
            m.kill()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.seconds:.0f} s, "
          f"{args.rate} msg/s over 3 partitions, {kills} members SIGKILLed (one every "
          f"{args.every} s, a new one started each time), offsets stored every "
          f"{args.store_every} messages")
    print("\n".join(analyse(members, dict(confirmed))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
