"""Run rstream's own cluster tests (``tests/test_cluster.py`` of a checkout of
github.com/rabbitmq-community/rstream, the ones its CI skips) against three nodes of this tree.

What the suite assumes (its ``conftest.py``, ``Makefile``'s ``rabbitmq-ha-proxy`` and
``compose/README.md``): a three-node cluster behind a load balancer, the stream port at
``--rmq-cluster-host``/``--rmq-cluster-port`` (default localhost:5553) and the management API at
``--rmq-cluster-http-port`` (15673), guest/guest; its cluster clients run in
``load_balancer_mode`` (connect through the balancer until the node whose ``advertised_host``/
``advertised_port`` is the leader, or a replica, answers). The file's other 9 tests (no
``skipif``, so its CI runs them) use ``--rmq-host``/``--rmq-port`` (some the default 5552) and
the management API on localhost:15672: a single node, as in its CI (one ``rabbitmq:4.1``
service on 5552/15672) and its compose README (a single node on 5552/15672 beside the cluster
on 5553/15673; the cluster's nodes advertise ``node0:5562`` and so on, which a client outside
the compose network could not even reach without the balancer). So here: a real ZooKeeper,
three ``--cluster`` nodes on loopback behind a round-robin TCP balancer in this process (one
for the three stream ports, one for the three management ports), and one node without
``--cluster`` on 5552 and 15672 (``--stream-port``, ``--management-port``).

Why the single node matters: ``test_spin_new_connection_for_consumer_stream`` counts one
connection for 4 subscriptions, while rstream's consumer subscribes through a random replica
of each stream (``random.choice(replicas)``) and keys its connections by the advertised
host/port Metadata names. On three nodes (ours, or RabbitMQ's, whose Metadata names every
running member but the leader as a replica) the 4 draws seldom agree. ``--plain-on-cluster``
points those 9 tests at n1 of the cluster instead, to see that.

    python scripts/rstream_cluster_suite.py --tests /tmp/rstream/tests \\
        --extra-path /tmp/rstream-src:/tmp/extra -- -rA

(``--extra-path``: the checkout's ``rstream`` package and ``pytest-asyncio``, ``requests``,
``mmh3``, as for ``scripts/rstream_suite.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp_stream.testing import BrokerProcess, free_ports  # noqa: E402
from tests.cluster.nodes import node  # noqa: E402
from tests.cluster.zookeeper import ZooKeeperServer  # noqa: E402


class Balancer:
    """Round-robin TCP forwarding from ``listen`` ports to their backends (127.0.0.1), on a
    loop of its own thread: each connection goes to the next backend in turn."""

    def __init__(self, routes: dict[int, list[int]]):
        self.routes = routes
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="balancer")

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        for port, backends in self.routes.items():
            turn = itertools.cycle(backends)
            self.loop.run_until_complete(asyncio.start_server(
                lambda r, w, turn=turn: self._forward(r, w, next(turn)), "127.0.0.1", port))
        self.ready.set()
        self.loop.run_forever()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       backend: int) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", backend)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(1 << 16):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, help="rstream's tests directory")
    parser.add_argument("--extra-path", default="", help="rstream's package, pytest-asyncio ...")
    parser.add_argument("--management-port", type=int, default=15672,
                        help="the single node's management port (the file's non-cluster tests "
                             "use 15672)")
    parser.add_argument("--stream-port", type=int, default=5552,
                        help="the single node's stream port (some of the file's tests "
                             "hardcode 5552)")
    parser.add_argument("--plain-on-cluster", action="store_true",
                        help="no single node: the non-cluster tests go to n1 of the cluster "
                             "(on --stream-port/--management-port)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    tests = Path(args.tests).resolve()
    os.chdir(ROOT)  # the broker subprocesses run this tree's code
    zk = ZooKeeperServer().start()
    with tempfile.TemporaryDirectory(prefix="rstream-cluster-suite-") as d:
        url = f"zk://{zk.hosts}/rstream-cluster-suite"
        brokers = [node(Path(d), url, name) for name in ("n1", "n2", "n3")]
        # the node of the file's non-cluster tests: a single node of its own, as rstream's CI
        plain = brokers[0] if args.plain_on_cluster else BrokerProcess(Path(d) / "single")
        plain.management_port = args.management_port
        plain.stream_port = args.stream_port
        everyone = brokers if args.plain_on_cluster else [*brokers, plain]
        taken = {p for b in everyone for p in (b.port, b.stream_port, b.management_port,
                                                 b.metrics_port, b.stream_tls_port)}
        stream_lb, http_lb = free_ports(2)
        while {stream_lb, http_lb} & taken:  # chosen, not yet bound by the brokers
            stream_lb, http_lb = free_ports(2)
        balancer = Balancer({stream_lb: [b.stream_port for b in brokers],
                             http_lb: [b.management_port for b in brokers]})
        try:
            for b in everyone:
                b.start()
            balancer.start()
            paths = [p for p in (args.extra_path, str(tests.parent), str(ROOT / "scripts")) if p]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
            return subprocess.call(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "rstream_suite_port", "-o", "asyncio_mode=auto",
                 "--rootdir", str(tests.parent),
                 "--rmq-host", plain.host, "--rmq-port", str(plain.stream_port),
                 "--rmq-cluster-host", "127.0.0.1", "--rmq-cluster-port", str(stream_lb),
                 "--rmq-cluster-http-port", str(http_lb),
                 *args.pytest_args, str(tests / "test_cluster.py")],
                cwd=tests.parent, env=env)
        finally:
            balancer.stop()
            for b in everyone:
                b.close()
            zk.close()


if __name__ == "__main__":
    raise SystemExit(main())
