"""Run rstream's own test suite (a checkout of github.com/qweeze/rstream) against this broker.

The suite is rstream's, not ours: it is not copied here. Give the checkout's ``tests``
directory; the broker of this tree runs on free ports with its own data directory and the
suite is pointed at it with its own ``--rmq-host``/``--rmq-port`` options, the port made an
``int`` by ``scripts/rstream_suite_port.py`` (why: its docstring); the broker's management HTTP
API listens on 15672 (``--management-port``), where the suite's HTTP helpers look for it; the
tests that hardcode ``localhost:5552`` pass with ``--stream-port 5552`` (when that port is
free). rstream's tests need ``pytest-asyncio``, which the project does not install: put it on
``--extra-path`` (e.g. ``pip install --target /tmp/extra pytest-asyncio==0.23.8 requests``).

    python scripts/rstream_suite.py --tests /tmp/rstream/tests --extra-path /tmp/extra \\
        -- -k "super or partitions or routes" -rA

The suite's HEAD may use rstream functions newer than the installed release (its
``Consumer.get_stream``): put the checkout's own ``rstream`` package first on ``--extra-path``
(``--extra-path /tmp/rstream-src:/tmp/extra``, paths joined with ``:``). The management-dependent
tests (``-k connection_broke``) need ``--stream-port 5552``. When another process holds 5552 or
15672, run it in a network namespace of its own, where both are free and the suite cannot
reach another broker: ``unshare -n sh -c 'ip link set lo up && python scripts/rstream_suite.py
... --stream-port 5552 --management-port 15672'`` (root).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amqp_stream.testing import BrokerProcess  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, help="rstream's tests directory")
    parser.add_argument("--extra-path", default="", help="where pytest-asyncio is installed")
    parser.add_argument("--management-port", type=int, default=15672,
                        help="the broker's management port (the suite's HTTP helpers use 15672)")
    parser.add_argument("--stream-port", type=int, default=0,
                        help="the broker's stream port (default: a free one; 5552 for the tests "
                             "that hardcode it)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    tests = Path(args.tests).resolve()
    os.chdir(ROOT)  # the broker subprocess runs this tree's code
    with tempfile.TemporaryDirectory(prefix="rstream-suite-") as d:
        broker = BrokerProcess(Path(d) / "data")
        broker.management_port = args.management_port
        broker.stream_port = args.stream_port or broker.stream_port
        broker.start()
        try:
            paths = [p for p in (args.extra_path, str(tests.parent), str(ROOT / "scripts")) if p]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
            return subprocess.call(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "rstream_suite_port",
                 "-o", "asyncio_mode=auto", "--rootdir", str(tests.parent),
                 "--rmq-host", broker.host, "--rmq-port", str(broker.stream_port),
                 *args.pytest_args, str(tests)],
                cwd=tests.parent, env=env)
        finally:
            broker.close()


if __name__ == "__main__":
    raise SystemExit(main())
