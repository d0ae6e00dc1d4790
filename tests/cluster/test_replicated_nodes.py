"""Coordination and replication together: three real broker processes joined through a real
ZooKeeper, one stream of three members; rstream publishes with confirms to the leader named
by Metadata. After each fault the checker reads every member's files: identical up to the
commit, every confirmed message exactly once."""

from __future__ import annotations

import asyncio
import signal

import pytest

from amqp_stream.testing import BrokerProcess
from tests.cluster.checker import body_of, check, local_end, log_dir, raw_chunks, records
from tests.cluster.nodes import SESSION_TIMEOUT, cluster_status, holds_log
from tests.cluster.publisher import Publisher, body
from tests.polling import wait_for
from tests.stream.rstream_low import admin, run, until

pytestmark = pytest.mark.timeout(180)


async def declare(broker: BrokerProcess, stream: str, *members: BrokerProcess) -> None:
    """Declare ``stream`` through ``broker``; then wait until each of ``members`` holds its log."""
    async with admin(broker) as c:
        await c.create_stream(stream)
    for b in members:
        await until(lambda b=b: holds_log(b, stream), "members' logs")


async def published(stream: str, brokers: dict[str, BrokerProcess], leader: BrokerProcess,
                    n: int) -> Publisher:
    """A named producer that found ``leader`` leading, ``n`` messages confirmed, its
    connection dropped (the scenarios' common start)."""
    p = Publisher(stream, brokers.values())
    await p.connect()
    assert p.leader is leader
    await p.publish(range(1, n + 1))
    await p.drop()
    return p


def layout_of(url: str, stream: str) -> dict:
    (layout,) = [s for s in cluster_status(url)["streams"] if s["stream"] == stream]
    return layout


def converged(brokers: dict[str, BrokerProcess], stream: str, leader: str) -> int:
    """Wait until every member's log ends where the leader's does; that end."""
    wait_for(lambda: len({local_end(b, stream) for b in brokers.values()}) == 1, 30,
             "every member at the leader's end")
    return local_end(brokers[leader], stream)


def test_confirms_wait_for_a_quorum_and_every_member_holds_the_same_log(nodes, stream_name):
    """With both replicas paused right after the declare, nothing is confirmed (not even the
    first publish, taken before the layout's poll): the commit gate is set when coordination
    opens the log. Resumed, they take the chunks; every log is identical and complete."""
    url, (n1, n2, n3) = nodes

    async def scenario() -> dict[int, bytes]:
        p = Publisher(stream_name, (n1, n2, n3))
        for b in (n2, n3):
            b.proc.send_signal(signal.SIGSTOP)
        try:
            await p._attach(n1, create=True)  # n1 declares it: client-local, so n1 leads
            p.pending.update({i: body(i) for i in range(1, 101)})
            await p._send(list(range(1, 101)))
            # paused replicas: held, not confirmed on n1's durability alone
            with pytest.raises(AssertionError):
                await until(lambda: bool(p.confirmed), "a confirm", 1.0)
        finally:
            for b in (n2, n3):
                b.proc.send_signal(signal.SIGCONT)
        await p.settle()
        await p.publish(range(101, 3001))
        assert not p.errors
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 90)
    assert len(confirmed) == 3000
    layout = layout_of(url, stream_name)
    assert (layout["leader"], layout["epoch"]) == ("n1", 1)
    brokers = {"n1": n1, "n2": n2, "n3": n3}
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   confirmed.values(), at_least=end)
    assert report.found == 3000
    assert {c[1] for c in raw_chunks(log_dir(n2.data_dir, stream_name))} == {1}


def test_leader_killed_while_publishing_a_new_leader_takes_over_without_loss(nodes,
                                                                            stream_name):
    """SIGKILL the leader mid-publish: after the session timeout a member leads under epoch 2,
    the named producer carries on there (Metadata) and sends its unconfirmed ids again:
    nothing confirmed is lost, nothing doubled; the killed node restarted converges."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        await declare(n1, stream_name, n2, n3)
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        assert p.leader is n1
        await p.publish(range(1, 2001))
        for i in range(2001, 6001):
            p.pending[i] = body(i)
        kill = asyncio.get_running_loop().run_in_executor(None, n1.kill)
        try:
            await p._send(list(range(2001, 6001)))
        except Exception:  # the leader died under the send
            pass
        await kill
        await p.settle(stall=1.0, timeout=SESSION_TIMEOUT + 40)
        assert p.leader in (n2, n3)
        await p.publish(range(6001, 8001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 120)
    assert len(confirmed) == 8000
    layout = layout_of(url, stream_name)
    assert layout["epoch"] == 2 and layout["leader"] in ("n2", "n3")
    n1.start()
    end = converged(brokers, stream_name, layout["leader"])
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   confirmed.values(), at_least=end)
    assert report.found == 8000
    epochs = [c[1] for c in raw_chunks(log_dir(n1.data_dir, stream_name))]
    assert epochs == sorted(epochs) and epochs[-1] == 2


def test_a_paused_leader_gets_nothing_confirmed_after_it_is_deposed(nodes, stream_name):
    """SIGSTOP the leader past the session timeout with a batch sent to it; publish to the new
    leader; SIGCONT: the old leader takes that batch as it resumes, but none of it is
    confirmed (no member takes a chunk of the old epoch), and its log converges."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}
    stale = range(100001, 100501)

    async def scenario() -> tuple[dict[int, bytes], BrokerProcess | None, Publisher]:
        await declare(n1, stream_name, n2, n3)
        old = Publisher(stream_name, brokers.values())
        await old.connect()
        assert old.leader is n1
        await old.publish(range(1, 1001))
        n1.proc.send_signal(signal.SIGSTOP)
        try:
            old.pending.update({i: body(i) for i in stale})
            await old._send(list(stale))  # into n1's socket: read when it resumes
            new = Publisher(stream_name, (n2, n3))
            await new.connect(timeout=SESSION_TIMEOUT + 30)
            await new.publish(range(1001, 3001))
            assert layout_of(url, stream_name)["epoch"] == 2
        finally:
            n1.proc.send_signal(signal.SIGCONT)
        leader = new.leader
        await new.drop()
        # n1 resumes, reads the stale batch, learns it was deposed; it must confirm none
        wait_for(lambda: "registered again" in n1.log_text(), 30, "n1 back in the cluster")
        # it wrote the stale batch as leader of epoch 1, then learnt it was deposed
        await until(lambda: "left unconfirmed by the leader change" in n1.log_text(),
                    "n1 to drop what it held", 30)
        await until(lambda: "truncating from" in n1.log_text(), "n1 to cut its stale chunks", 30)
        await old.drop()
        return {**old.confirmed, **new.confirmed}, leader, old

    confirmed, leader, old = run(scenario(), 120)
    assert len(confirmed) == 3000
    name = {b: n for n, b in brokers.items()}[leader]
    end = converged(brokers, stream_name, name)
    assert not set(old.confirmed) & set(stale), "a deposed leader confirmed publishes"
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   confirmed.values(), at_least=end)
    assert report.found == 3000
    held = {body_of(r) for _, r in records(log_dir(n1.data_dir, stream_name))}
    assert not held & {body(i) for i in stale}, "the deposed leader kept its stale chunks"


def test_every_node_restarted_the_leader_last_serves_and_converges(nodes, stream_name):
    """All three stopped, the leader last; the replicas start while the layout still names the
    stopped leader (its address unknown to them: they wait instead of failing to start) and
    elect one of them; the old leader comes back as a replica; confirms go on, every log is
    the same."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def publish(ids: range) -> dict[int, bytes]:
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        await p.publish(ids)
        await p.drop()
        return p.confirmed

    async def declared() -> None:
        await declare(n1, stream_name, n2, n3)
    run(declared(), 30)
    confirmed = run(publish(range(1, 1001)), 60)
    for b in (n2, n3, n1):  # the leader last: no election meanwhile, n1 stays the leader
        b.stop()
    n2.start()
    n3.start()
    n1.start()
    confirmed.update(run(publish(range(1001, 2001)), 60))
    assert len(confirmed) == 2000
    layout = layout_of(url, stream_name)
    end = converged(brokers, stream_name, layout["leader"])
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   confirmed.values(), at_least=end)
    assert report.found == 2000


def test_a_leader_back_before_any_election_is_followed_again(nodes, stream_name):
    """One replica down, the leader paused past the session timeout: the other replica
    reports its tail (and fences its link to the leader), but one report of three members is
    no majority, so no election. The leader resumes and registers again under the same epoch:
    the replica withdraws its report, lifts the fence and follows it again, so publishes are
    confirmed (a quorum of the leader and that replica); the third node restarted catches up."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        await declare(n1, stream_name, n2, n3)
        p = await published(stream_name, brokers, n1, 1000)
        n3.kill()
        n1.proc.send_signal(signal.SIGSTOP)
        try:
            await until(lambda: "reported tail" in n2.log_text(), "n2 to report its tail",
                        SESSION_TIMEOUT + 30)
        finally:
            n1.proc.send_signal(signal.SIGCONT)
        await until(lambda: "registered again" in n1.log_text(), "n1 back", 30)
        assert layout_of(url, stream_name)["epoch"] == 1, "no election without a majority"
        p = Publisher(stream_name, (n1, n2))
        await p.connect()
        assert p.leader is n1
        await p.publish(range(1001, 3001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 150)
    assert len(confirmed) == 2000
    n3.start()
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   [body(i) for i in range(1, 3001)], at_least=end)
    assert report.found == 3000
