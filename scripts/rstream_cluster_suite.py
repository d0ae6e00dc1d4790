"""Run rstream's own cluster tests (``tests/test_cluster.py`` of a checkout of
github.com/rabbitmq-community/rstream, the ones its CI skips) against three nodes of this tree.

What the suite assumes (its ``conftest.py`` and ``Makefile``'s ``rabbitmq-ha-proxy``): a
three-node cluster behind a load balancer, the stream port at ``--rmq-cluster-host``/
``--rmq-cluster-port`` (default localhost:5553) and the management API at
``--rmq-cluster-http-port`` (15673), guest/guest; its clients run in ``load_balancer_mode``
(connect through the balancer until the node whose ``advertised_host``/``advertised_port``
is the leader, or a replica, answers); the file's other tests use ``--rmq-host``/
``--rmq-port`` (some the default 5552) and the management API on localhost:15672. So here: a
real ZooKeeper, three ``--cluster`` nodes on loopback (n1's stream port 5552 and management
API 15672: ``--stream-port``, ``--management-port``), and a
round-robin TCP balancer in this process in front of the three stream ports and of the three
management ports.

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

from amqp_stream.testing import free_ports  # noqa: E402
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
                        help="n1's management port (the file's non-cluster tests use 15672)")
    parser.add_argument("--stream-port", type=int, default=5552,
                        help="n1's stream port (some of the file's tests hardcode 5552)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    tests = Path(args.tests).resolve()
    os.chdir(ROOT)  # the broker subprocesses run this tree's code
    zk = ZooKeeperServer().start()
    with tempfile.TemporaryDirectory(prefix="rstream-cluster-suite-") as d:
        url = f"zk://{zk.hosts}/rstream-cluster-suite"
        brokers = [node(Path(d), url, name) for name in ("n1", "n2", "n3")]
        brokers[0].management_port = args.management_port
        brokers[0].stream_port = args.stream_port
        taken = {p for b in brokers for p in (b.port, b.stream_port, b.management_port,
                                                b.metrics_port, b.stream_tls_port)}
        stream_lb, http_lb = free_ports(2)
        while {stream_lb, http_lb} & taken:  # chosen, not yet bound by the brokers
            stream_lb, http_lb = free_ports(2)
        balancer = Balancer({stream_lb: [b.stream_port for b in brokers],
                             http_lb: [b.management_port for b in brokers]})
        try:
            for b in brokers:
                b.start()
            balancer.start()
            paths = [p for p in (args.extra_path, str(tests.parent), str(ROOT / "scripts")) if p]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
            return subprocess.call(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "rstream_suite_port", "-o", "asyncio_mode=auto",
                 "--rootdir", str(tests.parent),
                 "--rmq-host", "127.0.0.1", "--rmq-port", str(brokers[0].stream_port),
                 "--rmq-cluster-host", "127.0.0.1", "--rmq-cluster-port", str(stream_lb),
                 "--rmq-cluster-http-port", str(http_lb),
                 *args.pytest_args, str(tests / "test_cluster.py")],
                cwd=tests.parent, env=env)
        finally:
            balancer.stop()
            for b in brokers:
                b.close()
            zk.close()


if __name__ == "__main__":
    raise SystemExit(main())
