"""A pytest plugin for rstream's suite (loaded by ``scripts/rstream_suite.py`` and
``scripts/rstream_cluster_suite.py``): ``--rmq-port`` and ``--rmq-cluster-port`` as ``int``.

Why: the suite declares ``--rmq-port`` without a type, so a port given on the command line is
a ``str``. rstream's ``ClientPool`` keys its connections by ``Addr(host, port)`` and compares
them with the leader that Metadata names (an ``int`` port): with a ``str`` they never match, so
every producer and consumer opens a locator connection per partition and closes it again
(``Client.close`` sleeps 0.2 s), and the super stream tests that wait a fixed second for 10,000
messages over 3 partitions run out of time. With the suite's own default (5552, an ``int``)
this does not happen.
"""

from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    for option in ("rmq_port", "rmq_cluster_port"):
        port = getattr(config.option, option, None)
        if isinstance(port, str):
            setattr(config.option, option, int(port))
