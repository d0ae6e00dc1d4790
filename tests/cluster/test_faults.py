"""Repeated faults, Jepsen-style: for ``CLUSTER_FAULTS_SECONDS`` (default 20) a seeded nemesis
kills and restarts the leader (and replicas) and pauses nodes at random moments while a named
stream-protocol producer and a named AMQP 1.0 publisher publish with confirms and a consumer
reads; then the checker (``tests/cluster/faults.py``). Once per fsync policy: ``always`` (an
ack after fdatasync) and ``never`` (after the write). ``CLUSTER_FAULTS_SEED`` replays a
schedule; ``scripts/cluster_soak.py`` runs it for longer."""

from __future__ import annotations

import os

import pytest

from tests.cluster.faults import run_faults, seed_from_env
from tests.cluster.nodes import SESSION_TIMEOUT, node

pytestmark = pytest.mark.timeout(900)

DURATION = float(os.environ.get("CLUSTER_FAULTS_SECONDS", "20"))


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_repeated_kills_and_pauses_lose_and_double_nothing_confirmed(zookeeper, zk_path, tmp_path,
                                                                     stream_name, fsync):
    seed = seed_from_env()
    url = f"zk://{zookeeper.hosts}{zk_path}"
    brokers = {n: node(tmp_path, url, n, "--fsync", fsync) for n in ("n1", "n2", "n3")}
    try:
        for b in brokers.values():
            b.start()
        outcome = run_faults(zookeeper.hosts, zk_path, brokers, stream_name, seed, DURATION,
                             SESSION_TIMEOUT)
    finally:
        for b in brokers.values():
            b.close()
    print(f"fsync {fsync}: {outcome.line()}")
    kinds = {f.kind for f in outcome.faults}
    assert "kill-leader" in kinds or "pause-leader" in kinds, f"no leader fault: {outcome.line()}"
    assert outcome.epoch > 1, "the leader never moved"
    assert outcome.confirmed_stream and outcome.confirmed_amqp, outcome.line()
