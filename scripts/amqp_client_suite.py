"""Run rabbitmq-amqp-python-client's own tests (a checkout of
github.com/rabbitmq/rabbitmq-amqp-python-client) against this broker.

The suite is the client's, not ours: it is not copied here. Its tests dial
``localhost:5672``; this file is also the pytest plugin (``-p amqp_client_suite``) that points
the client's ``Environment``/``AsyncEnvironment`` at the broker this script starts on free ports
with its own data directory; its management HTTP API listens on 15672
(``--management-port``), where the suite's HTTP helpers (``tests/http_requests.py``) look for it.
Tests that need TLS or OAuth cannot pass here. The asyncio tests need ``pytest-asyncio`` and the HTTP helpers ``requests``,
which the project does not install: put them on ``--extra-path``
(``pip install --target /tmp/extra pytest-asyncio==0.23.8 requests``).

``--queues-as-streams``: the client's tests declare quorum and classic queues, which a stream
broker does not have; with this flag their declares become stream declares (the binding and
publishing steps then run as written). Say so when reporting such a run.

    python scripts/amqp_client_suite.py --tests /tmp/suite/tests --extra-path /tmp/extra \\
        -- -k "exchange or bind" -rA
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BROKER_ENV = "AMQP_CLIENT_SUITE_BROKER"  # host:port the plugin points the client at
STREAMS_ENV = "AMQP_CLIENT_SUITE_QUEUES_AS_STREAMS"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from amqp_stream.testing import BrokerProcess

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, help="the client's tests directory")
    parser.add_argument("--extra-path", default="",
                        help="where pytest-asyncio and requests are installed")
    parser.add_argument("--management-port", type=int, default=15672,
                        help="the broker's management port (the suite's HTTP helpers use 15672)")
    parser.add_argument("--queues-as-streams", action="store_true",
                        help="declare the suite's quorum and classic queues as streams")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    tests = Path(args.tests).resolve()
    os.chdir(ROOT)  # the broker subprocess runs this tree's code
    with tempfile.TemporaryDirectory(prefix="amqp-client-suite-") as d:
        broker = BrokerProcess(Path(d) / "data")
        broker.management_port = args.management_port
        broker.start()
        try:
            paths = [p for p in (args.extra_path, str(Path(__file__).parent), str(tests.parent),
                                 str(ROOT)) if p]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
                       **{BROKER_ENV: f"{broker.host}:{broker.port}"})
            if args.queues_as_streams:
                env[STREAMS_ENV] = "1"
            return subprocess.call(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-p", "amqp_client_suite", "-o", "asyncio_mode=auto",
                 "--rootdir", str(tests.parent), *args.pytest_args, str(tests)],
                cwd=tests.parent, env=env)
        finally:
            broker.close()


# -- the pytest plugin (loaded in the suite's process) ----------------------------------------
def pytest_configure(config: Any) -> None:
    target = os.environ.get(BROKER_ENV)
    if not target:
        return
    import rabbitmq_amqp_python_client as client
    from rabbitmq_amqp_python_client.asyncio import AsyncEnvironment

    def repoint(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("localhost:5672", target)
        if isinstance(value, list):
            return [repoint(v) for v in value]
        return value

    for cls in (client.Environment, AsyncEnvironment):
        original = cls.__init__

        def init(self: Any, *a: Any, _original: Any = original, **kw: Any) -> None:
            a = tuple(repoint(v) for v in a)
            kw = {k: repoint(v) for k, v in kw.items()}
            _original(self, *a, **kw)
        cls.__init__ = init  # type: ignore[method-assign]

    if os.environ.get(STREAMS_ENV):
        _queues_as_streams(client)


def _queues_as_streams(client: Any) -> None:
    from rabbitmq_amqp_python_client.asyncio.management import AsyncManagement

    def as_stream(spec: Any) -> Any:
        if isinstance(spec, (client.QuorumQueueSpecification, client.ClassicQueueSpecification)):
            return client.StreamSpecification(name=spec.name)
        return spec

    sync_declare = client.Management.declare_queue

    def declare(self: Any, spec: Any) -> Any:
        return sync_declare(self, as_stream(spec))
    client.Management.declare_queue = declare  # type: ignore[method-assign]
    async_declare = AsyncManagement.declare_queue

    async def adeclare(self: Any, spec: Any) -> Any:
        return await async_declare(self, as_stream(spec))
    AsyncManagement.declare_queue = adeclare  # type: ignore[method-assign]


if __name__ == "__main__":
    raise SystemExit(main())
