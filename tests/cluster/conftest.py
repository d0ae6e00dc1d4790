"""The cluster tests' fixtures: one real ZooKeeper server per test session (it takes seconds
to start); each test works under a ZooKeeper path of its own."""

from __future__ import annotations

import itertools

import pytest

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
