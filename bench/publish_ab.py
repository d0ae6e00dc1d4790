"""Publish with confirms over the stream protocol: this checkout against a baseline checkout,
interleaved in one run.

Why: the machine is shared and noisy, so a change to the publish path is judged by running the
old and the new broker in turns (A B A B ...) in the same minutes and comparing medians. Each
round publishes ``--messages`` on a fresh stream of each broker with ``bench.stream_protocol``'s
load generator (frames pre-encoded before the clock starts, ``--frame`` messages each, at most
200,000 unconfirmed): throughput and broker CPU per message (``/proc``), and the load
generator's own CPU per message (this process: it must not be the limit). RabbitMQ (Debian's,
``bench.peer.RabbitMQNode``, a throw-away node) takes its turn in the same rounds when it is
installed (``--no-rabbitmq``: not): its streams never fsync, whatever ``--fsync`` says here.

    mkdir /tmp/publish-base && git archive <baseline> | tar -x -C /tmp/publish-base
    .venv/bin/python -m bench.publish_ab --baseline /tmp/publish-base [--fsync never] [--rounds 5]

``--sink``: the Spark sink's traffic (``amqp_stream.spark``'s ``streamUrl`` writer): a named
publisher (deduplication), Publish v2 with a filter value each (100 regions, ``r00``..``r99``,
interleaved) and messages of varying sizes (150-190 bytes).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.peer import RabbitMQNode
from bench.stream_protocol import Result, publish, publish_frames

HERE = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    host: str
    port: int
    pid: int


def _round(target: Target, stream: str, frames: list[tuple[bytes, int]],
           reference: str = "") -> tuple[Result, float]:
    """One publish; its result and the load generator's CPU µs per message."""
    with StreamClient(f"rabbitmq-stream://{target.host}:{target.port}", timeout=60) as c:
        c.create(stream)
        c.declare_publisher(1, stream, reference)
        c0 = time.process_time()
        result = publish(c, frames, target.pid)
        client = (time.process_time() - c0) / result.messages * 1e6
        c.delete(stream)
    return result, client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--frame", type=int, default=1000, help="messages per Publish frame")
    parser.add_argument("--fsync", default="never", choices=("never", "always"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-rabbitmq", action="store_true", help="leave RabbitMQ out")
    parser.add_argument("--sink", action="store_true",
                        help="the Spark sink's traffic: named, v2, a value each, sizes varying")
    args = parser.parse_args()
    if args.sink:
        rnd = random.Random(1)
        messages = [b"\x00\x53\x75\xa0" + bytes([n]) + rnd.randbytes(n)  # an AMQP data section
                    for n in (rnd.randrange(145, 185) for _ in range(997))]
        values = [f"r{(i * 7919) % 100:02d}" for i in range(args.messages)]
        frames = publish_frames(1, 0, args.messages, args.frame, values, messages)
    else:
        frames = publish_frames(1, 0, args.messages, args.frame)
    reference = "sink-bench" if args.sink else ""
    results: dict[str, list[tuple[Result, float]]] = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from here
        brokers: list[BrokerProcess] = []
        node = None
        targets: dict[str, Target] = {}
        try:
            for name, code in (("baseline", args.baseline.resolve()), ("this checkout", HERE)):
                b = BrokerProcess(Path(tmp, name.split()[0]), extra_args=["--fsync", args.fsync],
                                  env={"PYTHONPATH": str(code)})
                brokers.append(b)
                b.start()
                targets[name] = Target(b.host, b.stream_port, b.proc.pid)
            if not args.no_rabbitmq and RabbitMQNode.available():
                node = RabbitMQNode().start()
                targets[f"RabbitMQ {node.version().split('-')[0]}"] = Target(
                    node.host, node.stream_port, node.pid())
            for k in range(args.rounds):
                for name, target in targets.items():
                    results.setdefault(name, []).append(_round(target, f"ab-{k}", frames, reference))
                loads.append(os.getloadavg()[0])
        finally:
            for b in brokers:
                b.stop()
            if node is not None:
                node.stop()
            os.chdir(cwd)
    print(f"load average (1 min) {min(loads):.1f}-{max(loads):.1f} over the rounds; "
          f"{args.messages} messages a round, {args.frame} per frame, fsync {args.fsync}, "
          f"{args.rounds} rounds alternating (2 shared cores)"
          + ("; the Spark sink's traffic (named, v2, sizes varying)" if args.sink else ""))
    rates = {}
    for name, rs in results.items():
        rates[name] = statistics.median(r.rate for r, _ in rs)
        print(f"  {name:16s} median {rates[name]:>11,.0f} msg/s "
              f"{statistics.median(r.cpu_us for r, _ in rs):6.3f} broker CPU µs/msg "
              f"{statistics.median(c for _, c in rs):6.3f} load generator CPU µs/msg  (rounds: "
              f"{', '.join(f'{r.rate / 1e6:.2f}M' for r, _ in rs)})")
    print(f"  ratio (this checkout / baseline, median throughput): "
          f"{rates['this checkout'] / rates['baseline']:.2f}x")
    for name in rates.keys() - {"this checkout", "baseline"}:
        print(f"  ratio to {name}: this checkout {rates['this checkout'] / rates[name]:.2f}x, "
              f"baseline {rates['baseline'] / rates[name]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
