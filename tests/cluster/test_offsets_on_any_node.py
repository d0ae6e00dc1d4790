"""Consumer offsets through any node, as RabbitMQ keeps them on the leader: a StoreOffset on a
replica is stored on the leader, a QueryOffset on another node answers the leader's value
(over rstream, the frames a named consumer sends wherever it connected), the offset is
replicated with the log, and after the leader's SIGKILL the new leader answers it and takes
new ones through the remaining replica (the stream protocol's StoreOffset, and the management
API's offset reset). A named AMQP consumer on a node with no member of its stream, and on a
replica, resumes after the offset the leader holds and stores what it accepted there; so do
the AMQP management node's offset store on a replica and a StoreOffset / QueryOffset on the
node with no member."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from rstream.client import Client
from rstream.exceptions import OffsetNotFound

from amqp_stream.client import Client as AmqpClient
from amqp_stream.client import connect as amqp_connect
from tests.cluster.nodes import SESSION_TIMEOUT
from tests.http.api import call
from tests.polling import wait_for
from tests.stream.rstream_low import run, until

pytestmark = pytest.mark.timeout(120)


def amqp_client(broker) -> AmqpClient:
    return amqp_connect(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=60)


async def connect(broker) -> Client:
    c = Client(broker.host, broker.stream_port, frame_max=1024 * 1024, heartbeat=60)
    await c.start()
    await c.authenticate("/", "guest", "guest")
    return c


async def stored(client: Client, stream: str, name: str) -> int | None:
    try:
        return await client.query_offset(stream, name)
    except OffsetNotFound:
        return None


async def eventually(client: Client, stream: str, name: str, want: int, what: str) -> None:
    """Query through ``client`` until it answers ``want`` (a StoreOffset has no answer: it
    reaches the leader when the sending node's forwarder sends it)."""
    deadline = asyncio.get_running_loop().time() + 20
    seen = None
    while (seen := await stored(client, stream, name)) != want:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: {seen!r}, not {want}")
        await asyncio.sleep(0.05)


def local_offsets(broker, stream: str) -> dict[str, int]:
    """The offsets ``broker``'s own log of ``stream`` holds (replicated tracking)."""
    answer = call(broker, "GET", f"/api/stream/offsets/%2F/{stream}")
    return {o["consumer"]: o["offset"] for o in answer.json} if answer.status == 200 else {}


def leader_of(broker, stream: str) -> str | None:
    """The leader ``broker``'s API names for ``stream`` (the layout it holds)."""
    return call(broker, "GET", f"/api/queues/%2F/{stream}").json.get("leader")


def test_offsets_stored_and_queried_through_replicas_survive_failover(nodes):
    _, brokers = nodes
    n1, n2, n3 = brokers

    async def scenario() -> None:
        on1 = await connect(n1)
        await on1.create_stream("tracked")  # client-local: n1 leads, n2 and n3 replicate
        on2, on3 = await connect(n2), await connect(n3)
        try:
            assert await stored(on3, "tracked", "app") is None  # NO_OFFSET, from the leader
            await on2.store_offset("tracked", "app", 41)
            assert await stored(on2, "tracked", "app") == 41  # after its store, same node
            await eventually(on3, "tracked", "app", 41, "n3 asked after n2 stored")
            assert await stored(on1, "tracked", "app") == 41
            # the leader's tracking chunk reaches every member's log
            for b in brokers:
                await until(lambda b=b: local_offsets(b, "tracked").get("app") == 41,
                            f"offset 41 in {b.data_dir}'s log")

            os.kill(n1.proc.pid, signal.SIGKILL)
            await until(lambda: leader_of(n2, "tracked") in ("n2", "n3"), "a new leader",
                        10 * SESSION_TIMEOUT)
            leader = leader_of(n2, "tracked")
            replica = on3 if leader == "n2" else on2
            other = on2 if leader == "n2" else on3
            await eventually(replica, "tracked", "app", 41, "the replica asked after failover")
            await replica.store_offset("tracked", "app", 99)
            await eventually(other, "tracked", "app", 99, "the new leader after a replica's store")
            # the management API's offset reset, through the replica, is the leader's too
            replica_node = n3 if leader == "n2" else n2
            put = call(replica_node, "PUT", "/api/stream/offsets/%2F/tracked/app", {"offset": 120})
            assert put.status == 200, put.body
            await eventually(other, "tracked", "app", 120, "the leader after an HTTP reset")
        finally:
            for c in (on2, on3):
                await c.close()

    run(scenario(), 100)


def test_a_named_amqp_consumer_resumes_on_any_node(nodes):
    """A named AMQP consumer (``x-consumer-name``) of a two-member stream, on the node with no
    member (read from a member elsewhere) and on the replica, alternately: each attach starts
    after the offset the leader holds, and what each accepted is stored on the leader."""
    _, brokers = nodes
    n1 = brokers[0]
    with amqp_client(n1) as c:
        c.declare("named", {"x-initial-cluster-size": 2})
        layout = call(n1, "GET", "/api/queues/%2F/named").json
        with c.publisher("named", window=64) as pub:
            for i in range(60):
                pub.publish(b"m-%02d" % i)
            assert all(o.accepted for o in pub.flush())
    assert layout["leader"] == "n1" and len(layout["members"]) == 2
    by_name = dict(zip(("n1", "n2", "n3"), brokers, strict=True))
    names = {b: b_name for b_name, b in by_name.items()}
    replica = by_name[next(m for m in layout["members"] if m != "n1")]
    outside = by_name[next(n for n in by_name if n not in layout["members"])]

    def take(broker, count: int) -> list[int]:
        """Attach as "app" on ``broker``, accept ``count`` messages, detach: their offsets."""
        with amqp_client(broker) as c, c.consumer("named", consumer_name="app",
                                                  credit=10) as consumer:
            listed = call(n1, "GET", "/api/consumers")  # the cluster's, asked of the leader
            assert listed.status == 200, listed.body
            # the AMQP link, on its node (a member serving it from elsewhere lists the
            # remote reader's stream subscription too)
            links = [r["channel_details"]["node"] for r in listed.json
                     if r["queue"]["name"] == "named"
                     and not r["consumer_tag"].startswith("stream.subid-")]
            assert links == [names[broker]]
            got = []
            for _ in range(count):
                m = consumer.receive(timeout=30)
                assert m is not None, f"{len(got)} of {count} on {broker.port}"
                got.append(m.offset)
                consumer.accept(m)
            return got

    def leader_holds(offset: int) -> None:
        with amqp_client(n1) as c:
            wait_for(lambda: c.stored_offset("named", "app") == offset, 20,
                     f"the leader to hold {offset}")

    assert take(outside, 10) == list(range(0, 10))  # none stored: from the link's start
    leader_holds(9)
    assert take(outside, 10) == list(range(10, 20))  # after the leader's, read from a member
    leader_holds(19)
    assert take(replica, 10) == list(range(20, 30))  # a replica stores on the leader too
    leader_holds(29)
    assert take(outside, 5) == list(range(30, 35))
    leader_holds(34)
    with amqp_client(replica) as c:  # the management node's offset store, on the replica
        c.store_offset("named", "app", 50)
    leader_holds(50)
    assert take(outside, 1) == [51]
    leader_holds(51)

    async def over_the_stream_protocol() -> None:
        """rstream's Consumer stores and queries on its locator connection, whatever node
        that is: here the one with no member."""
        c = await connect(outside)
        try:
            assert await stored(c, "named", "app") == 51
            await c.store_offset("named", "app", 57)
            assert await stored(c, "named", "app") == 57
        finally:
            await c.close()
    run(over_the_stream_protocol(), 30)
    leader_holds(57)
