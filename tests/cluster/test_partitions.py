"""Cut links, for real: each node runs in a network namespace of its own (``tests/cluster/
netns.py``) and a test drops a node's packets to the other nodes, or to ZooKeeper, with
iptables inside that namespace, then heals. Publishing goes on through a named rstream
producer following Metadata; after the heal the checker reads every member's files: nothing
confirmed lost or doubled, every log identical up to the commit end.

Needs root (namespaces, iptables): without it the tests are skipped and say why."""

from __future__ import annotations

import asyncio

import pytest
from rstream.client import Client

from tests.cluster.checker import body_of, check, local_end, log_dir, records
from tests.cluster.faults import ZkLayout
from tests.cluster.netns import Network, NetnsBroker, unavailable
from tests.cluster.nodes import SESSION_TIMEOUT, holds_log
from tests.cluster.publisher import Publisher, body, login
from tests.cluster.zookeeper import ZooKeeperServer
from tests.polling import wait_for
from tests.stream.rstream_low import run, until

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]

NAMES = ("n1", "n2", "n3")


@pytest.fixture(scope="module")
def network():
    net = Network(len(NAMES))
    zk = ZooKeeperServer(host=net.host)
    try:
        zk.start()
        yield net, zk
    finally:
        zk.close()
        net.close()


@pytest.fixture
def cluster(network, tmp_path, request):
    """Three nodes, one per namespace, under a ZooKeeper path of the test's own; the cuts are
    healed and the nodes closed afterwards."""
    net, zk = network
    root = f"/amqp-stream-partitions/{request.node.name[:40]}"
    url = f"zk://{zk.hosts}{root}"
    brokers = {n: NetnsBroker(net.namespaces[n], net.addresses[n], tmp_path, url, n)
               for n in NAMES}
    try:
        for b in brokers.values():
            b.start()
        yield net, zk, root, brokers
    finally:
        for n in NAMES:
            net.heal(n)
        for b in brokers.values():
            b.close()


async def declared(brokers: dict, stream: str) -> Publisher:
    """``stream`` declared on n1 (it leads: client-local), every member's log open, and a
    producer attached to n1."""
    n1 = brokers["n1"]
    c = Client(n1.host, n1.stream_port, frame_max=1024 * 1024, heartbeat=60)
    await c.start()
    await c.authenticate("/", *login(n1))
    await c.create_stream(stream)
    await c.close()
    for b in brokers.values():
        await until(lambda b=b: holds_log(b, stream), "every member's log", 30)
    p = Publisher(stream, brokers.values())
    await p.connect()
    assert p.leader is brokers["n1"]
    return p


def converged_and_checked(brokers: dict, stream: str, confirmed: dict[int, bytes]) -> int:
    wait_for(lambda: len({local_end(b, stream) for b in brokers.values()}) == 1, 60,
             "every member at the leader's end after the heal")
    end = local_end(brokers["n1"], stream)
    report = check({n: b.data_dir for n, b in brokers.items()}, stream, confirmed.values(),
                   at_least=end)
    assert report.found == len(confirmed)
    return end


def test_leader_cut_off_from_the_other_nodes_but_not_zookeeper(cluster, stream_name):
    """The leader keeps its ZooKeeper session but hears from no replica: after the quorum
    timeout (3 session timeouts) it gives the leadership up, the two members that reach each
    other elect one of them (epoch 2) and publishing resumes there; the old leader, reaching
    no quorum itself, does not stand, so it is not elected again (no flapping). Nothing it
    took while cut off is confirmed; healed, it cuts those chunks and follows; the logs agree."""
    net, zk, root, brokers = cluster

    async def scenario() -> tuple[dict[int, bytes], Publisher]:
        old = await declared(brokers, stream_name)
        await old.publish(range(1, 1001))
        layout = ZkLayout(zk.hosts, root, stream_name)
        net.cut_peers("n1")
        try:
            old.pending.update({i: body(i) for i in range(1001, 1501)})
            await old._send(list(range(1001, 1501)))
            await until(lambda: layout.leader()[0] in ("n2", "n3"),
                        "the members that reach each other to elect a leader",
                        4 * SESSION_TIMEOUT + 30)
            assert layout.leader()[1] == 2
            assert "giving up the leadership of epoch 1" in brokers["n1"].log_text()
            assert set(old.confirmed) == set(range(1, 1001)), "confirmed without a quorum"
            # the same named producer on the new leader: what n1 never confirmed goes again
            new = Publisher(stream_name, (brokers["n2"], brokers["n3"]))
            new.pending.update(old.pending)
            await new.connect(timeout=30)
            await new.settle(stall=2.0, timeout=60)
            await new.publish(range(1501, 2501))
            assert layout.leader()[1] == 2, "a leader was elected again while n1 is cut off"
        finally:
            net.heal("n1")
            layout.close()
        await until(lambda: "truncating from" in brokers["n1"].log_text(),
                    "n1 to cut what it took without a quorum", 60)
        await new.publish(range(2501, 3001))
        await new.drop()
        await old.drop()
        return {**old.confirmed, **new.confirmed}, old

    confirmed, old = run(scenario(), 200)
    assert set(old.confirmed) == set(range(1, 1001))
    assert len(confirmed) == 3000
    converged_and_checked(brokers, stream_name, confirmed)
    held = [body_of(r) for _, r in records(log_dir(brokers["n1"].data_dir, stream_name))]
    assert len(held) == len(set(held)) == 3000, "n1's log is not the new leader's"


def test_replica_cut_off_from_the_other_nodes_catches_up_after_the_heal(cluster, stream_name):
    """A replica cut off: the leader and the other replica are a quorum and go on confirming;
    healed, the replica catches up to the same log."""
    net, zk, root, brokers = cluster

    async def scenario() -> dict[int, bytes]:
        p = await declared(brokers, stream_name)
        await p.publish(range(1, 1001))
        net.cut_peers("n2")
        try:
            await p.publish(range(1001, 4001))
            cut_end = local_end(brokers["n2"], stream_name)
            assert cut_end < local_end(brokers["n1"], stream_name), "n2 took chunks while cut"
        finally:
            net.heal("n2")
        await p.publish(range(4001, 5001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 200)
    assert len(confirmed) == 5000
    converged_and_checked(brokers, stream_name, confirmed)


def test_leader_cut_off_from_zookeeper_but_not_the_others(cluster, stream_name):
    """The leader's session ends while it still reaches its replicas and its clients, and a
    producer keeps sending to it: the others report their tails, elect a new leader (epoch
    2) and follow it. Nothing the old leader takes after the election is confirmed, and
    nothing it confirmed is lost: a replica acknowledges nothing beyond the tail it reported
    (without that fence, a chunk acknowledged by one replica between its report and its
    following the new leader was confirmed and then cut). Healed, the old leader cuts what it
    took and follows; the logs agree."""
    net, zk, root, brokers = cluster
    stale: set[int] = set()  # sent once the election was visible in ZooKeeper

    async def scenario() -> tuple[dict[int, bytes], Publisher]:
        old = await declared(brokers, stream_name)
        await old.publish(range(1, 1001))
        layout = ZkLayout(zk.hosts, root, stream_name)
        net.cut_zookeeper("n1", zk.port)
        try:
            k, elected_at = 100001, None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SESSION_TIMEOUT + 30
            # a batch every 20 ms to the old leader, through the election and 1 s past it
            while elected_at is None or loop.time() < elected_at + 1.0:
                assert loop.time() < deadline, "no election without n1"
                if elected_at is None and layout.leader()[1] >= 2:
                    elected_at = loop.time()
                ids = list(range(k, k + 20))
                old.pending.update({i: body(i) for i in ids})
                if elected_at is not None:
                    stale.update(ids)
                await old._send(ids)
                k += 20
                await asyncio.sleep(0.02)  # the producer's pace
            assert layout.leader()[0] in ("n2", "n3")
            new = Publisher(stream_name, (brokers["n2"], brokers["n3"]))
            await new.connect(timeout=30)
            # the same producer name: its ids go on above the old leader's
            await new.publish(range(200001, 202001))
            assert not set(old.confirmed) & stale, "the deposed leader confirmed publishes"
        finally:
            net.heal("n1")
            layout.close()
        await until(lambda: "truncating from" in brokers["n1"].log_text(),
                    "n1 to cut what it took as a deposed leader", 60)
        await new.drop()
        await old.drop()
        return {**old.confirmed, **new.confirmed}, old

    confirmed, old = run(scenario(), 200)
    assert not set(old.confirmed) & stale, "a leader cut off from ZooKeeper confirmed"
    assert len(confirmed) >= 3000
    converged_and_checked(brokers, stream_name, confirmed)
    held = {body_of(r) for _, r in records(log_dir(brokers["n1"].data_dir, stream_name))}
    assert not held & {body(i) for i in stale}, "the deposed leader kept its stale chunks"


def test_replica_cut_off_from_zookeeper_keeps_replicating(cluster, stream_name):
    """A replica's session ends (it leaves Metadata) but it still reaches the leader: it
    keeps taking the chunks; healed, it registers again; nothing lost, the logs agree."""
    net, zk, root, brokers = cluster

    async def scenario() -> dict[int, bytes]:
        p = await declared(brokers, stream_name)
        await p.publish(range(1, 1001))
        net.cut_zookeeper("n3", zk.port)
        layout = ZkLayout(zk.hosts, root, stream_name)
        try:
            await until(lambda: "n3" not in layout.live(), "n3's session to end",
                        SESSION_TIMEOUT + 30)
            await p.publish(range(1001, 3001))
            assert layout.leader() == ("n1", 1)
        finally:
            net.heal("n3")
        await until(lambda: "n3" in layout.live(), "n3 registered again", 60)
        layout.close()
        await p.publish(range(3001, 4001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 200)
    assert len(confirmed) == 4000
    converged_and_checked(brokers, stream_name, confirmed)
