"""The cluster tests' fixtures: one real ZooKeeper server per test session (it takes seconds
to start); each test works under a ZooKeeper path of its own."""

from __future__ import annotations

import itertools

import pytest

from tests.cluster.nodes import node
from tests.cluster.zookeeper import ZooKeeperServer

_paths = itertools.count()


@pytest.fixture(scope="session")
def zookeeper():
    server = ZooKeeperServer().start()
    yield server
    server.close()


@pytest.fixture
def zk_path(request) -> str:
    """A ZooKeeper chroot unique to the test: tests share the server, not their state."""
    return f"/amqp-stream-test/{request.node.name[:40]}-{next(_paths)}".replace("[", "_").replace("]", "_")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report kept on the test (``nodes`` looks at the call's)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def nodes(zookeeper, zk_path, tmp_path, request):
    """Three cluster nodes n1, n2, n3 (real broker processes) under the test's path. When the
    test fails, the tail of each node's log is printed with the failure: a rare one (a
    confirm that never came, a node late with a layout) then says what the nodes did."""
    url = f"zk://{zookeeper.hosts}{zk_path}"
    brokers = [node(tmp_path, url, name) for name in ("n1", "n2", "n3")]
    for b in brokers:
        b.start()
    yield url, brokers
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for name, b in zip(("n1", "n2", "n3"), brokers, strict=True):
            print(f"--- {name}'s log, the last 6,000 characters ---\n{b.log_text()[-6000:]}")
    for b in brokers:
        b.close()
