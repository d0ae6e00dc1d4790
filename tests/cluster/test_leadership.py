"""Leadership beyond failover, with three real nodes and ZooKeeper on loopback: a leader that
hears from no quorum gives its leadership up (and takes it again when it wins the election),
draining and reviving a node, the epoch raised by a member change, publishes refused during
a leadership transfer."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from rstream import schema

from amqp_stream.cluster.coordination import read_view
from amqp_stream.streamproto.constants import ResponseCode
from tests.cluster.checker import check, last_epoch, log_dir, raw_chunks
from tests.cluster.faults import ZkLayout
from tests.cluster.publisher import Publisher, body
from tests.cluster.test_replicated_nodes import converged, declare, published
from tests.cluster.nodes import SESSION_TIMEOUT, cluster_status, holds_log
from tests.cluster.test_operations import cli
from tests.polling import wait_for
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
        await declare(n1, stream_name, n2, n3)
        p = await published(stream_name, brokers, n1, 1000)
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


def test_drain_moves_every_leadership_and_keeps_the_node_from_leading_until_revived(
        nodes, stream_name):
    """``cluster drain n1``: the two streams n1 leads move to in-sync members (epoch 2, a
    named producer's confirmed messages all there), the one n2 leads stays; n1 is then
    chosen by no placement, no transfer and no election (its log as complete as the other
    survivor's, it would win the tie by name), across a restart of n1; ``cluster status``
    shows it; ``revive`` lets it lead again."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}
    a, b, c, d = (f"{stream_name}-{x}" for x in "abcd")

    async def scenario() -> dict[int, bytes]:
        await declare(n1, a)
        await declare(n1, b)
        await declare(n2, c)
        for x in (a, b, c):
            for node in brokers.values():
                await until(lambda node=node, x=x: holds_log(node, x), "members' logs")
        p = Publisher(a, brokers.values())
        await p.connect()
        await p.publish(range(1, 1001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 60)
    out = cli("cluster", "drain", "n1", "--cluster", url, "--wait", "30")
    assert out.returncode == 0, out.stderr
    assert "n1 leads no stream" in out.stdout
    view = read_view(url, 10)
    assert {x: (view.layouts[x].leader != "n1", view.layouts[x].epoch) for x in (a, b)} == \
        {a: (True, 2), b: (True, 2)}
    assert (view.layouts[c].leader, view.layouts[c].epoch) == ("n2", 1)
    (row,) = [r for r in cluster_status(url)["nodes"] if r["name"] == "n1"]
    assert (row["drained"], row["leaders"]) == (True, 0)
    # no transfer to it, no placement on it (client-local through n1)
    between = cli("transfer-leadership", a, "n2" if view.layouts[a].leader == "n3" else "n3",
                  "--cluster", url)
    assert between.returncode == 0, between.stderr  # between undrained members: fine
    refused = cli("transfer-leadership", a, "n1", "--cluster", url)
    assert refused.returncode == 1 and "drained" in refused.stderr, refused.stderr
    run(declare(n1, d), 30)
    wait_for(lambda: d in read_view(url, 10).layouts, 10, "the new stream's layout")
    assert read_view(url, 10).layouts[d].leader != "n1"
    # n1 restarted: still drained; then no election chooses it over an equal log
    n1.stop()
    n1.start()
    wait_for(lambda: "n1" in read_view(url, 10).nodes, 30, "n1 back")
    before = read_view(url, 10).layouts[a]
    leader = before.leader
    other = ({"n2", "n3"} - {leader}).pop()
    converged(brokers, a, leader)
    brokers[leader].kill()
    wait_for(lambda: read_view(url, 10).layouts[a].leader == other, SESSION_TIMEOUT + 30,
             f"{other} elected, not the drained n1")
    # elected at once (n1 elected would hand the leadership over: one epoch more)
    assert read_view(url, 10).layouts[a].epoch == before.epoch + 1
    assert "n1" in read_view(url, 10).drained
    brokers[leader].start()
    out = cli("cluster", "revive", "n1", "--cluster", url)
    assert out.returncode == 0 and "n1 revived" in out.stdout, out.stderr
    moved = cli("transfer-leadership", a, "n1", "--cluster", url)
    assert moved.returncode == 0, moved.stderr
    assert read_view(url, 10).layouts[a].leader == "n1"
    end = converged(brokers, a, "n1")
    report = check({n: x.data_dir for n, x in brokers.items()}, a, list(confirmed.values()),
                   at_least=end)
    assert report.found == 1000


def test_a_member_change_raises_the_epoch_and_the_leader_carries_on(nodes, stream_name):
    """``delete-replica`` then ``add-replica`` while a named producer keeps publishing to the
    leader: each raises the epoch (1, 2, 3, as RabbitMQ's coordinator restarts the members
    under a new one), n1 leads throughout on the same connection (no MetadataUpdate, no
    publish answered with an error), the chunks after each change carry the new epoch,
    nothing is cut, every log is identical and every confirm there once."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        await declare(n1, stream_name, n2, n3)
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        client = p.client
        assert p.leader is n1
        stop = asyncio.Event()

        async def publish() -> None:  # a batch every 20 ms on the same connection
            k = 1
            while not stop.is_set():
                ids = list(range(k, k + 20))
                p.pending.update({i: body(i) for i in ids})
                await p._send(ids)
                k += 20
                await asyncio.sleep(0.02)  # the producer's pace

        task = asyncio.create_task(publish())
        try:
            for args, epoch in ((("delete-replica", stream_name, "n3"), 2),
                                (("add-replica", stream_name, "n3"), 3)):
                await until(lambda: len(p.confirmed) >= 200 * epoch, "confirms", 20)
                out = await asyncio.to_thread(cli, *args, "--cluster", url)
                assert out.returncode == 0, out.stderr
                layout = read_view(url, 10).layouts[stream_name]
                assert (layout.leader, layout.epoch) == ("n1", epoch)
                # n1 takes the layout in at its next poll: the next change waits for it (two
                # changes within one poll are seen as one: test_replication covers that)
                await until(lambda: last_epoch(log_dir(n1.data_dir, stream_name)) == epoch,
                            f"n1's chunks stamped with epoch {epoch}", 20)
            await until(lambda: read_view(url, 10).layouts[stream_name].catching_up == (),
                        "n3 counted again", 30)
            await until(lambda: len(p.confirmed) >= 1000, "confirms after the changes", 20)
        finally:
            stop.set()
            await task
        await until(lambda: not p.pending, "every publish confirmed", 20)
        assert p.client is client and not p.errors
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 120)
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   list(confirmed.values()), at_least=end)
    assert report.found == len(confirmed)
    epochs = [c[1] for c in raw_chunks(log_dir(n1.data_dir, stream_name))]
    assert epochs == sorted(epochs) and set(epochs) == {1, 2, 3}
    for b in brokers.values():
        assert "truncating from" not in b.log_text()


def test_publishes_during_a_leadership_transfer_are_refused_as_rabbitmq_refuses_them(
        nodes, stream_name):
    """A transfer to a member that lags and cannot catch up (paused) keeps the leader in its
    hand-over for the whole wait. As RabbitMQ, whose transfer restarts the stream's writer:
    the publisher gets a MetadataUpdate (STREAM_NOT_AVAILABLE) when it begins and is
    dropped, so a publish sent meanwhile is answered PublishError PUBLISHER_DOES_NOT_EXIST
    at once (not held for the wait); the producer reconnects where Metadata says and sends
    it again; confirmed once."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        await declare(n1, stream_name, n2, n3)
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        assert p.leader is n1 and p.client is not None
        updates: list[int] = []

        async def on_update(frame: schema.MetadataUpdate) -> None:
            updates.append(frame.metadata_info.code)

        async def on_error(frame: schema.PublishError) -> None:
            codes.update(e.response_code for e in frame.errors)

        codes: set[int] = set()
        p.client.add_handler(schema.MetadataUpdate, on_update)
        p.client.add_handler(schema.PublishError, on_error)
        await p.publish(range(1, 401))
        n2.proc.send_signal(signal.SIGSTOP)
        try:
            await p.publish(range(401, 501))  # confirmed by n1 and n3: n2 lags behind
            transfer = asyncio.create_task(asyncio.to_thread(
                cli, "transfer-leadership", stream_name, "n2", "--wait", "4", "--cluster", url))
            await until(lambda: bool(updates), "a MetadataUpdate as the transfer begins", 10)
            assert updates == [ResponseCode.STREAM_NOT_AVAILABLE]
            p.pending.update({i: body(i) for i in range(501, 601)})
            await p._send(list(range(501, 601)))
            await until(lambda: len(p.errors) == 100, "the publishes refused", 2)
            assert codes == {ResponseCode.PUBLISHER_DOES_NOT_EXIST}
            assert not transfer.done(), "refused during the wait, not after it"
            out = await transfer
            assert out.returncode == 1 and "did not catch up" in out.stderr, out.stderr
        finally:
            n2.proc.send_signal(signal.SIGCONT)
        assert set(p.confirmed) == set(range(1, 501))
        await p.connect()
        await p.settle()
        await p.publish(range(601, 1001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 90)
    assert len(confirmed) == 1000
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   list(confirmed.values()), at_least=end)
    assert report.found == 1000
