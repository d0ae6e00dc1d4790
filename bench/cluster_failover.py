"""Failover time of a three-node cluster: from the leader's SIGKILL to the new leader named by
Metadata, and to the first publish confirmed by it.

Three broker processes and one ZooKeeper server (Debian's package, as the cluster tests run
it) on loopback; a stream declared on n1 leads there (client-local). Each trial SIGKILLs n1,
then polls Metadata on n2 every 20 ms until another leader is named (the election: the
ZooKeeper session timeout, then the tails' reports and one versioned write), then connects to
that leader and publishes one message until it is confirmed: a replicated confirm (the
surviving replica follows the new epoch and holds the chunk: quorum 2 of 3).

    python -m bench.cluster_failover                        # session timeouts 2 and 6 s, 3 trials
    python -m bench.cluster_failover --session-timeout 6 --trials 5
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Sequence

from amqp_stream.testing import BrokerProcess, free_port
from tests.cluster.zookeeper import ZooKeeperServer

__all__ = ["main"]


def _node(tmp: Path, url: str, name: str, session_timeout: float) -> BrokerProcess:
    (tmp / name).mkdir(parents=True, exist_ok=True)
    return BrokerProcess(tmp / name / "data", extra_args=[
        "--cluster", url, "--node-name", name, "--stream-advertised-host", "127.0.0.1",
        "--replication-port", str(free_port()), "--cluster-session-timeout",
        str(session_timeout)])


async def _client(port: int):
    from rstream.client import Client

    c = Client("127.0.0.1", port, frame_max=1024 * 1024, heartbeat=60)
    await c.start()
    await c.authenticate("/", "guest", "guest")
    return c


async def _trial(nodes: list[BrokerProcess], stream: str) -> tuple[float, float]:
    from rstream import AMQPMessage, exceptions, schema

    n1, n2 = nodes[0], nodes[1]
    c = await _client(n1.stream_port)
    await c.create_stream(stream)
    await c.close()
    watcher = await _client(n2.stream_port)
    await watcher.query_leader_and_replicas(stream)
    t0 = time.monotonic()
    n1.kill()
    while True:
        try:
            leader, _ = await watcher.query_leader_and_replicas(stream)
            if leader.port != n1.stream_port:
                break
        except exceptions.LeaderNotAvailable:
            pass
        await asyncio.sleep(0.02)
    elected = time.monotonic() - t0
    await watcher.close()
    publisher = await _client(leader.port)
    confirmed = asyncio.Event()

    async def on_confirm(frame: schema.PublishConfirm) -> None:
        confirmed.set()

    publisher.add_handler(schema.PublishConfirm, on_confirm)
    await publisher.declare_publisher(stream, None, 1)
    await publisher.publish([schema.Message(publishing_id=1, filter_value=None,
                                            data=bytes(AMQPMessage(body=b"x")))], 1)
    await confirmed.wait()
    first_confirm = time.monotonic() - t0
    await publisher.close()
    return elected, first_confirm


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session-timeout", type=float, action="append",
                        help="seconds (repeatable; default: 2 and 6)")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    for noisy in ("rstream", "kazoo"):  # "leader not yet elected": what is being timed
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    zk = ZooKeeperServer().start()
    try:
        print(f"{'timeout s':>9} {'trial':>5} {'elected s':>10} {'1st confirm s':>14}")
        for timeout in args.session_timeout or [2.0, 6.0]:
            firsts = []
            for trial in range(args.trials):
                with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
                    url = f"zk://{zk.hosts}/failover-{timeout:g}-{trial}"
                    nodes = [_node(Path(tmp), url, f"n{i}", timeout) for i in (1, 2, 3)]
                    try:
                        for b in nodes:
                            b.start()
                        elected, first = asyncio.run(asyncio.wait_for(
                            _trial(nodes, "failover"), 120))
                    finally:
                        for b in nodes:
                            b.close()
                firsts.append(first)
                print(f"{timeout:>9g} {trial:>5} {elected:>10.2f} {first:>14.2f}")
            print(f"{timeout:>9g}   med {'':>10} {statistics.median(firsts):>14.2f}  "
                  f"(= timeout + {statistics.median(firsts) - timeout:.2f} s)")
    finally:
        zk.close()


if __name__ == "__main__":
    main()
