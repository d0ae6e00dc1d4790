"""Leadership beyond failover, with three real nodes and ZooKeeper on loopback: a leader that
hears from no quorum gives its leadership up (and takes it again when it wins the election),
draining and reviving a node, the epoch raised by a member change, publishes refused during
a leadership transfer."""

from __future__ import annotations

import json

import pytest

from tests.cluster.checker import check
from tests.cluster.faults import ZkLayout
from tests.cluster.publisher import Publisher
from tests.cluster.test_replicated_nodes import converged, declare
from tests.cluster.nodes import SESSION_TIMEOUT, holds_log
from tests.stream.rstream_low import run, until

pytestmark = pytest.mark.timeout(180)

QUORUM_TIMEOUT = 3 * SESSION_TIMEOUT  # the default: 3 session timeouts


def layout_doc(layout: ZkLayout) -> dict:
    """The stream's layout document as ZooKeeper holds it."""
    data, _ = layout.zk.get(f"{layout.root}/streams/{layout.stream}")
    return json.loads(data)


def test_a_leader_whose_replicas_are_down_gives_up_once_and_leads_again(nodes, zk_path,
                                                                        zookeeper, stream_name):
    """Both replicas killed: after the quorum timeout the leader gives its leadership up (the
    layout names none, epoch 1), and it does not stand alone (it reaches no quorum), so no
    election and no new epoch while they are down: no flapping. One replica back: both stand,
    the leader (the longest log) is elected under epoch 2, publishes are confirmed again."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        await declare(n1, stream_name)
        for b in (n2, n3):
            await until(lambda b=b: holds_log(b, stream_name), "members' logs")
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        assert p.leader is n1
        await p.publish(range(1, 1001))
        await p.drop()
        first = p.confirmed
        layout = ZkLayout(zookeeper.hosts, zk_path, stream_name)
        try:
            n2.kill()
            n3.kill()
            await until(lambda: "giving up the leadership of epoch 1" in n1.log_text(),
                        "n1 to give up its leadership", QUORUM_TIMEOUT + 30)
            await until(lambda: layout_doc(layout)["leader"] == "", "a layout with no leader", 10)
            # alone, n1 stays out of the election: no new epoch
            await until(lambda: "not standing in its election (epoch 1)" in n1.log_text(),
                        "n1 to stay out of the election", 10)
            with pytest.raises(AssertionError):
                await until(lambda: layout.leader()[1] > 1, "an election", SESSION_TIMEOUT + 1)
            n2.start()
            await until(lambda: layout.leader() == ("n1", 2), "n1 elected again (epoch 2)", 60)
            p = Publisher(stream_name, (n1, n2))
            await p.connect()
            assert p.leader is n1
            await p.publish(range(1001, 2001))
            await p.drop()
            assert layout.leader() == ("n1", 2), "the leadership moved again"
        finally:
            layout.close()
        return {**first, **p.confirmed}

    confirmed = run(scenario(), 150)
    assert len(confirmed) == 2000
    n3.start()
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   list(confirmed.values()), at_least=end)
    assert report.found == 2000
