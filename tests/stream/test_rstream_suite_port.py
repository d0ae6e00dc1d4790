"""``scripts/rstream_suite_port.py``, the plugin ``scripts/rstream_suite.py`` gives rstream's own
suite: a suite that declares ``--rmq-port`` as rstream's does (no type) and is given the port
on the command line must build clients whose ``ClientPool`` finds its locator connection again
when it asks for the leader that Metadata names. Without the plugin the port stays a ``str``,
the pool's ``Addr`` never equals the leader's, and each partition costs a connection of its
own (opened, then closed with rstream's 0.2 s sleep): what made 5 of rstream's super stream
single-active-consumer tests miss their fixed one-second wait here."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rstream")
from tests.stream.rstream_low import admin  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
def pytest_addoption(parser):
    parser.addoption("--rmq-host", action="store", default="localhost")
    parser.addoption("--rmq-port", action="store", default=5552)
'''

INNER_TEST = '''
import asyncio
from rstream.client import Addr, ClientPool

def test_locator_is_reused(pytestconfig):
    async def main():
        pool = ClientPool(pytestconfig.getoption("rmq_host"), pytestconfig.getoption("rmq_port"),
                          vhost="/", username="guest", password="guest", frame_max=1024 * 1024,
                          heartbeat=60, load_balancer_mode=False, max_retries=1)
        try:
            locator = await pool.get(connection_name="locator")
            leader, _ = await locator.query_leader_and_replicas("{stream}")
            client = await pool.get(connection_name="locator", addr=Addr(leader.host, leader.port))
            assert client is locator, (leader, pool.addr)
        finally:
            await pool.close()
    asyncio.run(asyncio.wait_for(main(), 30))
'''


def run_inner(tmp_path: Path, broker, stream: str, plugin: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TEST.replace("{stream}", stream))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--rootdir", str(tmp_path), "--rmq-host", broker.host,
            "--rmq-port", str(broker.stream_port), str(tmp_path)]
    if plugin:
        args[4:4] = ["-p", "rstream_suite_port"]
    env = {"PYTHONPATH": str(ROOT / "scripts"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_port_is_an_int_and_the_locator_is_reused(tmp_path, broker, stream_name):
    async def create() -> None:
        async with admin(broker) as c:
            await c.create_stream(stream_name)

    asyncio.run(asyncio.wait_for(create(), 30))
    done = run_inner(tmp_path, broker, stream_name, plugin=True)
    assert done.returncode == 0, done.stdout + done.stderr
