"""The broker the HTTP API tests talk to: one real broker process per test module (fsync
``never``: these tests are about the API, not durability)."""

from __future__ import annotations

import pytest

from amqp_stream.testing import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory, request):
    b = BrokerProcess(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "data",
                      extra_args=["--fsync", "never", *getattr(request.module, "BROKER_ARGS", ())])
    b.start()
    yield b
    b.close()
