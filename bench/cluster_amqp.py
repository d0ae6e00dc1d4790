"""AMQP 1.0 publish throughput in a three-node cluster: to the stream's leader directly, and
through the other nodes, which forward to the leader (``amqp_stream.cluster.forwarder``).

Three broker processes and one ZooKeeper server (Debian's package, as the cluster tests run
it) on loopback. Each round declares a fresh stream on n1 with ``x-initial-cluster-size`` 2
(n1 leads; one other node is its replica, the third holds no member) and publishes
``--messages`` messages of 100 bytes with confirms (``bench.broker.publish``: proton's
reactor, a window of unsettled deliveries) to n1 ("direct"), to the replica and to the node
with no member ("forwarded": accepted once the leader's quorum commit confirms). The modes
take turns in every round; the medians and the ratio to "direct" are printed.

    python -m bench.cluster_amqp                          # 3 rounds of 50,000 messages
    python -m bench.cluster_amqp --rounds 5 --messages 100000 --fsync never
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Sequence

from amqp_stream.client import connect
from amqp_stream.testing import BrokerProcess, free_port
from bench.broker import encode, publish
from tests.cluster.zookeeper import ZooKeeperServer

__all__ = ["main"]

MODES = ("direct", "via replica", "via non-member")


def _node(tmp: Path, url: str, name: str, fsync: str) -> BrokerProcess:
    (tmp / name).mkdir(parents=True, exist_ok=True)
    return BrokerProcess(tmp / name / "data", extra_args=[
        "--cluster", url, "--node-name", name, "--stream-advertised-host", "127.0.0.1",
        "--replication-port", str(free_port()), "--fsync", fsync, "--log-level", "WARNING"])


def _targets(nodes: dict[str, BrokerProcess], stream: str) -> dict[str, BrokerProcess]:
    """Declare ``stream`` on n1; the node each mode publishes to."""
    with connect(nodes["n1"].url) as c:
        info = c.declare(stream, {"x-initial-cluster-size": 2})
    assert info["leader"] == "n1", info
    replica = next(m for m in info["replicas"] if m != "n1")
    outsider = next(n for n in nodes if n not in info["replicas"])
    for b in nodes.values():  # each node knows it once its view has the layout (a watch)
        with connect(b.url) as c:
            deadline = time.monotonic() + 30
            while not c.exists(stream):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{b.url} does not know {stream!r} after 30 s")
                time.sleep(0.02)  # polling the node's view
    return {"direct": nodes["n1"], "via replica": nodes[replica],
            "via non-member": nodes[outsider]}


def run(rounds: int, messages: int, fsync: str, window: int) -> dict[str, list[float]]:
    message = encode(b"x" * 100)
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-amqp-") as d:
        tmp = Path(d)
        zk = ZooKeeperServer().start()
        url = f"zk://{zk.hosts}/bench-amqp"
        nodes = {n: _node(tmp, url, n, fsync) for n in ("n1", "n2", "n3")}
        try:
            for b in nodes.values():
                b.start()
            for r in range(rounds):
                order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]  # who goes first turns
                for mode in order:
                    stream = f"s{r}-{MODES.index(mode)}"
                    target = _targets(nodes, stream)[mode]
                    result = publish(target.url, f"/queues/{stream}", lambda i: message,
                                     messages, window=window)
                    if result.accepted != messages:
                        raise RuntimeError(f"{mode}: {result.accepted} of {messages} accepted, "
                                           f"{result.other} other")
                    rate = messages / result.seconds
                    rates[mode].append(rate)
                    print(f"round {r + 1} {mode:>15}: {rate:>9,.0f} msg/s", flush=True)
        finally:
            for b in nodes.values():
                b.close()
            zk.close()
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--window", type=int, default=2000, help="unsettled deliveries")
    parser.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rates = run(args.rounds, args.messages, args.fsync, args.window)
    base = statistics.median(rates["direct"])
    print(f"\n{args.messages:,} messages of 100 bytes, fsync {args.fsync}, window "
          f"{args.window}, {args.rounds} rounds (medians):")
    for mode in MODES:
        med = statistics.median(rates[mode])
        print(f"  {mode:>15}: {med:>9,.0f} msg/s  {med / base:.2f}x direct")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
