"""Replication between real broker processes on loopback: three nodes, one stream with three
members (quorum 2), publishes confirmed through rstream once a quorum holds them, every
member's log the same bytes; a replica killed mid-publish catches up; a deposed leader gets
nothing confirmed, and its chunks of the old epoch are cut when it comes back as a replica."""

from __future__ import annotations

import asyncio

import pytest

rstream = pytest.importorskip("rstream")
from rstream import AMQPMessage, ConfirmationStatus, Consumer, Producer, amqp_decoder  # noqa: E402
from rstream import ConsumerOffsetSpecification, OffsetType  # noqa: E402

from amqp_stream.cluster.layout import StreamLayout  # noqa: E402
from tests.cluster.checker import check, log_dir, raw_chunks  # noqa: E402
from tests.cluster.nodes import Cluster  # noqa: E402
from tests.polling import wait_for  # noqa: E402

STREAM = "replicated"
MEMBERS = ("n1", "n2", "n3")


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.set_layouts([(StreamLayout(STREAM, 1, "n1", MEMBERS), {})])
    c.start()
    yield c
    c.close()


def producer(cluster: Cluster, node: str) -> Producer:
    return Producer("127.0.0.1", cluster.brokers[node].stream_port, username="guest",
                    password="guest")


async def publish(p: Producer, bodies: list[bytes], confirmed: list[bytes],
                  timeout: float = 30.0) -> None:
    """Send ``bodies`` in batches; each confirmed body goes into ``confirmed`` (as its
    confirm comes). Waits up to ``timeout`` for all confirms."""
    done = asyncio.Event()
    pending = {}

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            confirmed.append(pending.pop(status.message_id))
        if not pending:
            done.set()
    for i in range(0, len(bodies), 100):
        batch = bodies[i:i + 100]
        ids = await p.send_batch(STREAM, [AMQPMessage(body=b) for b in batch],
                                 on_publish_confirm=on_confirm)
        pending.update(zip(ids, batch, strict=True))
    await asyncio.wait_for(done.wait(), timeout)


def bodies(tag: str, n: int) -> list[bytes]:
    return [f"<{tag}-{i:06d}>".encode() for i in range(n)]


def test_confirmed_publishes_are_on_a_quorum_and_every_log_is_identical(cluster):
    confirmed: list[bytes] = []

    async def go():
        async with producer(cluster, "n1") as p:
            await publish(p, bodies("a", 3000), confirmed)
    asyncio.run(go())
    assert len(confirmed) == 3000
    dirs = cluster.data_dirs()
    # the replicas catch up with the leader (their tails are acked; the commit is behind)
    leader_end = raw_chunks(log_dir(dirs["n1"], STREAM))[-1][2]
    wait_for(lambda: all(raw_chunks(log_dir(d, STREAM))[-1][2] == leader_end
                         for d in dirs.values()), 20, "every member at the leader's end")
    report = check(dirs, STREAM, confirmed, at_least=leader_end)
    assert report.found == 3000 and report.common == leader_end


def test_consumers_on_a_replica_see_the_committed_messages(cluster):
    confirmed: list[bytes] = []

    async def go():
        async with producer(cluster, "n1") as p:
            await publish(p, bodies("c", 500), confirmed)
        got: list[bytes] = []
        done = asyncio.Event()

        def on_message(msg, ctx):
            got.append(b"".join(msg.body) if isinstance(msg.body, list) else msg.body)
            if len(got) >= 500:
                done.set()
        c = Consumer("127.0.0.1", cluster.brokers["n3"].stream_port, username="guest",
                     password="guest")
        await c.start()
        try:
            await c.subscribe(STREAM, on_message, decoder=amqp_decoder,
                              offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await asyncio.wait_for(done.wait(), 20)
        finally:
            await c.close()
        return got
    got = asyncio.run(go())
    assert got == confirmed


def test_a_replica_killed_mid_publish_catches_up(cluster):
    confirmed: list[bytes] = []

    async def go():
        async with producer(cluster, "n1") as p:
            await publish(p, bodies("b", 1000), confirmed)
            cluster.brokers["n3"].kill()
            await publish(p, bodies("k", 2000), confirmed)  # quorum 2: n1 and n2
    asyncio.run(go())
    assert len(confirmed) == 3000
    dirs = cluster.data_dirs()
    leader_end = raw_chunks(log_dir(dirs["n1"], STREAM))[-1][2]
    assert raw_chunks(log_dir(dirs["n3"], STREAM))[-1][2] < leader_end
    cluster.start("n3")
    wait_for(lambda: raw_chunks(log_dir(dirs["n3"], STREAM))[-1][2] == leader_end, 30,
             "the restarted replica at the leader's end")
    check(dirs, STREAM, confirmed, at_least=leader_end)


def test_a_deposed_leader_gets_nothing_confirmed_and_its_chunks_are_cut(cluster):
    """n1 leads epoch 1. The others move to epoch 2 under n2; n1 is not told (a stale view):
    what it takes is never confirmed (no replica follows it: n2 and n3 refuse an older
    epoch), then it learns the new layout, truncates its epoch-1 tail and converges."""
    confirmed: list[bytes] = []

    async def first():
        async with producer(cluster, "n1") as p:
            await publish(p, bodies("e1", 600), confirmed)
    asyncio.run(first())
    dirs = cluster.data_dirs()
    common = raw_chunks(log_dir(dirs["n1"], STREAM))[-1][2]
    wait_for(lambda: all(raw_chunks(log_dir(d, STREAM))[-1][2] == common
                         for d in dirs.values()), 20, "every member at the leader's end")
    epoch2 = StreamLayout(STREAM, 2, "n2", MEMBERS)
    cluster.set_layouts([(epoch2, {})], only=["n2", "n3"])
    wait_for(lambda: "leading 'replicated' (epoch 2" in cluster.log("n2")
             and "following n2 (epoch 2)" in cluster.log("n3"), 20, "epoch 2 taken up")
    lost: list[bytes] = []

    async def deposed():
        async with producer(cluster, "n1") as p:
            with pytest.raises(asyncio.TimeoutError):
                await publish(p, bodies("stale", 300), lost, timeout=3)
    asyncio.run(deposed())
    assert lost == []
    n1_end = raw_chunks(log_dir(dirs["n1"], STREAM))[-1][2]
    assert n1_end > common  # written there, under epoch 1, never confirmed

    async def second():
        async with producer(cluster, "n2") as p:
            await publish(p, bodies("e2", 400), confirmed)
    asyncio.run(second())
    cluster.set_layouts([(epoch2, {})], only=["n1"])
    leader_end = raw_chunks(log_dir(dirs["n2"], STREAM))[-1][2]
    wait_for(lambda: raw_chunks(log_dir(dirs["n1"], STREAM))[-1][2] == leader_end, 30,
             "the deposed leader at the new leader's end")
    assert "truncating" in cluster.log("n1")
    report = check(dirs, STREAM, confirmed, at_least=leader_end)
    assert report.found == 1000
    stored = b"".join(c[3] for c in raw_chunks(log_dir(dirs["n1"], STREAM)))
    assert b"<stale-" not in stored
    assert {c[1] for c in raw_chunks(log_dir(dirs["n1"], STREAM))} == {1, 2}
