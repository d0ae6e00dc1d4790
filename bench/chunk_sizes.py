"""Stream publish throughput of this checkout against an earlier commit, A/B in one run: what
cutting chunks as osiris batches them (``docs/storage.md``, "Chunk sizes") costs.

Two brokers side by side, each with its own data directory: A runs the code of ``--base`` (a
``git archive`` of it, started with ``python -P`` so that the checkout is not on its path), B
this checkout. Each round publishes ``--messages`` on a fresh stream to each broker in turn
(the order alternating between rounds), through the load generator of
``bench.stream_protocol`` (frames encoded before the clock starts, confirms counted from
PublishConfirm frames: not the limit), for each kind of publisher:

- ``plain``: no reference, no filter value (RabbitMQ's clients' default);
- ``named``: with a reference (deduplication: the chunks' trailers);
- ``values``: Publish v2 with a filter value, in bursts of ``--block`` messages.

Printed per broker and kind: the median rate and broker CPU per message over the rounds, the
chunks written (index records), and B's median rate and CPU per message as shares of A's. On
a loaded machine the rate follows the scheduler (the load generator and the broker share the
cores with other jobs); the broker's CPU per message is the steadier figure.

    python -m bench.chunk_sizes --base f990e33            # 1,000,000 messages, 3 rounds
    python -m bench.chunk_sizes --base f990e33 --fsync always
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from amqp_stream.client.stream import StreamClient
from amqp_stream.streams import dir_name
from amqp_stream.testing import BrokerProcess
from bench import scratch_dir
from bench.stream_protocol import Result, publish, publish_frames
from storage.format import INDEX_HEADER_BYTES, INDEX_RECORD_BYTES

__all__ = ["main"]

KINDS = ("plain", "named", "values")


class BaseBroker(BrokerProcess):
    """A broker running the code under ``source`` (``-P``: the current directory is not put
    first on the module path, ``PYTHONPATH`` is)."""

    def __init__(self, source: Path, data_dir: Path, extra_args: Sequence[str]) -> None:
        super().__init__(data_dir, extra_args, env={"PYTHONPATH": str(source)},
                         log_path=data_dir.parent / "broker-A.log")

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-P", *cmd[1:]]


def chunks_of(broker: BrokerProcess, stream: str) -> int:
    """Chunks written to ``stream`` (its index records)."""
    log = broker.data_dir / "streams" / dir_name(stream) / "log"
    return sum((p.stat().st_size - INDEX_HEADER_BYTES) // INDEX_RECORD_BYTES
               for p in log.glob("*.index"))


def one(broker: BrokerProcess, label: str, kind: str, args: argparse.Namespace,
        round_: int) -> tuple[Result, int]:
    stream = f"chunks-{kind}-{label}-{round_}"
    values = ([f"v{(i // args.block) % 100}" for i in range(args.messages)]
              if kind == "values" else None)
    frames = publish_frames(1, 1, args.messages, args.frame, values)
    assert broker.proc is not None
    with StreamClient(f"rabbitmq-stream://{broker.host}:{broker.stream_port}", timeout=60) as c:
        c.create(stream)
        c.declare_publisher(1, stream, "bench-publisher" if kind == "named" else "")
        result = publish(c, frames, broker.proc.pid)
    return result, chunks_of(broker, stream)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chunk_sizes",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit A runs (git rev)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--frame", type=int, default=1000, help="messages per Publish frame")
    parser.add_argument("--block", type=int, default=1000, help="messages per filter-value burst")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", default="never", choices=("never", "interval", "always"))
    args = parser.parse_args(argv)
    root = scratch_dir("bench-chunks-")
    source = root / "base"
    source.mkdir()
    archive = subprocess.run(["git", "archive", args.base], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    extra = ["--fsync", args.fsync]
    brokers = {"A": BaseBroker(source, root / "data-A", extra),
               "B": BrokerProcess(root / "data-B", extra, log_path=root / "broker-B.log")}
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; A = {args.base}, "
          f"B = this checkout; {args.messages} messages of 100 bytes, {args.frame} per frame, "
          f"--fsync {args.fsync}, {args.rounds} rounds", flush=True)
    got: dict[tuple[str, str], list[tuple[Result, int]]] = {}
    try:
        for b in brokers.values():
            b.start()
        for r in range(args.rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for kind in KINDS:
                for label in order:
                    res = one(brokers[label], label, kind, args, r)
                    got.setdefault((label, kind), []).append(res)
                    print(f"  round {r} {kind:6} {label}: {res[0].rate:>9,.0f} msg/s "
                          f"{res[0].cpu_us:6.2f} CPU µs/msg, {res[1]} chunks", flush=True)
    finally:
        for b in brokers.values():
            b.close()
    print(f"  {'':8} {'':2} {'msg/s (median)':>15} {'CPU µs/msg':>11} {'chunks':>8}  "
          f"B/A: msg/s, CPU/msg")
    for kind in KINDS:
        rates, cpus = {}, {}
        for label in ("A", "B"):
            runs = got[label, kind]
            rates[label] = statistics.median(x.rate for x, _ in runs)
            cpus[label] = statistics.median(x.cpu_us for x, _ in runs)
            chunks = statistics.median(n for _, n in runs)
            ratio = (f"{rates['B'] / rates['A']:.2f}, {cpus['B'] / cpus['A']:.2f}"
                     if label == "B" else "")
            print(f"  {kind:8} {label:2} {rates[label]:>15,.0f} {cpus[label]:>11.2f} "
                  f"{chunks:>8,.0f}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
