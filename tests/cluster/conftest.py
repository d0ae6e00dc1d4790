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


@pytest.fixture
def nodes(zookeeper, zk_path, tmp_path):
    """Three cluster nodes n1, n2, n3 (real broker processes) under the test's path."""
    url = f"zk://{zookeeper.hosts}{zk_path}"
    brokers = [node(tmp_path, url, name) for name in ("n1", "n2", "n3")]
    for b in brokers:
        b.start()
    yield url, brokers
    for b in brokers:
        b.close()
