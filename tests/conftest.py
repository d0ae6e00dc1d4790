"""Shared fixtures: a real broker process for the whole test session, unique stream names.

Tests that need a broker of their own (crashes, restarts, other settings) make one with
``amqp_stream.testing.BrokerProcess`` directly.
"""

from __future__ import annotations

import itertools
import os

import pytest

from amqp_stream.filtering import install as _install_reader
from amqp_stream.testing import BrokerProcess

_install_reader()  # filters in tests read messages as the broker's do (sqlfilter.view)

_names = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker for the session: ``broker.url``, ``broker.metrics_url``, ``broker.data_dir``."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    proc.start()
    yield proc
    proc.close()


@pytest.fixture
def stream_name(request) -> str:
    """A stream name unique within the test session (tests share the session broker)."""
    return f"{request.node.name[:40]}-{os.getpid()}-{next(_names)}".replace("[", "_").replace("]", "_")
