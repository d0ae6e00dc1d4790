"""Publish with confirms over the stream protocol: this checkout against a baseline checkout,
interleaved in one run.

Why: the machine is shared and noisy, so a change to the publish path is judged by running the
old and the new broker in turns (A B A B ...) in the same minutes and comparing medians. Each
round publishes ``--messages`` on a fresh stream of each broker with ``bench.stream_protocol``'s
load generator (frames pre-encoded before the clock starts, ``--frame`` messages each, at most
200,000 unconfirmed): throughput and broker CPU per message (``/proc``).

    mkdir /tmp/publish-base && git archive <baseline> | tar -x -C /tmp/publish-base
    .venv/bin/python -m bench.publish_ab --baseline /tmp/publish-base [--fsync never] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.stream_protocol import Result, publish, publish_frames

HERE = Path(__file__).resolve().parent.parent


def _round(broker: BrokerProcess, stream: str, frames: list[tuple[bytes, int]]) -> Result:
    with StreamClient(f"rabbitmq-stream://{broker.host}:{broker.stream_port}", timeout=60) as c:
        c.create(stream)
        c.declare_publisher(1, stream)
        result = publish(c, frames, broker.proc.pid)
        c.delete(stream)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--frame", type=int, default=1000, help="messages per Publish frame")
    parser.add_argument("--fsync", default="never", choices=("never", "always"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    frames = publish_frames(1, 0, args.messages, args.frame)
    results: dict[str, list[Result]] = {"baseline": [], "this checkout": []}
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from here
        brokers = {}
        try:
            for name, code in (("baseline", args.baseline.resolve()), ("this checkout", HERE)):
                brokers[name] = BrokerProcess(Path(tmp, name.split()[0]),
                                              extra_args=["--fsync", args.fsync],
                                              env={"PYTHONPATH": str(code)})
                brokers[name].start()
            for k in range(args.rounds):
                for name, broker in brokers.items():
                    results[name].append(_round(broker, f"ab-{k}", frames))
        finally:
            for broker in brokers.values():
                broker.stop()
            os.chdir(cwd)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.messages} "
          f"messages a round, {args.frame} per frame, fsync {args.fsync}, {args.rounds} rounds "
          f"alternating (2 shared cores)")
    for name, rs in results.items():
        print(f"  {name:14s} median {statistics.median(r.rate for r in rs):>11,.0f} msg/s "
              f"{statistics.median(r.cpu_us for r in rs):6.3f} CPU µs/msg  (rounds: "
              f"{', '.join(f'{r.rate / 1e6:.2f}M' for r in rs)})")
    ratio = (statistics.median(r.rate for r in results["this checkout"])
             / statistics.median(r.rate for r in results["baseline"]))
    print(f"  ratio (this checkout / baseline, median throughput): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
