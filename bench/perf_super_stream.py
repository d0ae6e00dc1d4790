"""The load generator (`amqp-stream perf --protocol stream`) publishing to a super stream of 3
partitions against the same tool publishing to one stream.

The issue's bar: at least 0.9x one stream's figure. Each round runs `perf` twice as a process
on one broker (fsync ``always``, the default), one producer and no consumer, for
``--duration`` seconds: once to a fresh stream, once with ``--super-streams`` to a fresh super
stream of 3 partitions (each Publish frame to the next partition). The two alternate over
``--rounds`` rounds; the ratio is of the medians of ``publish_rate_msg_s`` (confirmed messages
a second).

    python -m bench.perf_super_stream                  # 5 s a run, 5 rounds
    python -m bench.perf_super_stream --duration 3 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Sequence

from amqp_stream.testing import BrokerProcess

__all__ = ["main"]


def _rate(broker: BrokerProcess, duration: float, *extra: str) -> float:
    """One `perf` run's publish_rate_msg_s."""
    command = [sys.executable, "-m", "amqp_stream", "perf", "--protocol", "stream", "--stream-url",
               broker.stream_url, "--url", broker.url, "--consumers", "0", "--duration",
               str(duration), *extra]
    r = subprocess.run(command, capture_output=True, text=True, timeout=duration + 120,
                       env={k: v for k, v in os.environ.items() if not k.startswith("AMQP_STREAM_")})
    if r.returncode:
        raise SystemExit(f"perf failed ({r.returncode}): {r.stderr[-500:]}")
    summary = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    return float(summary["publish_rate_msg_s"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    one, three = [], []
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(os.path.join(tmp, "data")) as broker:
        for i in range(args.rounds):
            one.append(_rate(broker, args.duration))
            three.append(_rate(broker, args.duration, "--super-streams", "--super-stream-partitions", "3"))
            print(f"round {i + 1}: one stream {one[-1]:,.0f} msg/s, super stream of 3 "
                  f"{three[-1]:,.0f} msg/s", flush=True)
    a, b = statistics.median(one), statistics.median(three)
    print(f"median: one stream {a:,.0f} msg/s, super stream of 3 {b:,.0f} msg/s")
    print(f"ratio (super stream / one stream, medians): {b / a:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
