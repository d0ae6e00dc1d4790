"""A stream declared through one node, used through another at once: the other node's view
has not had its ZooKeeper watch yet, so its lookup on a miss reads the layout from ZooKeeper
(``ClusterNode.look_up``). Real ZooKeeper, three real nodes, rstream and the AMQP client."""

from __future__ import annotations

import pytest

from amqp_stream.client import Client, connect
from amqp_stream.testing import BrokerProcess
from tests.stream.rstream_low import admin, run

pytestmark = pytest.mark.timeout(120)

ROUNDS = 20


def amqp(b: BrokerProcess) -> Client:
    return connect(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=30)


def test_a_stream_created_on_one_node_is_found_at_once_by_the_others(nodes, stream_name):
    """Created through n1, then at once (no wait: what a client does with the node that n1's
    Metadata names) subscribed on the other members over the stream protocol, and attached
    over AMQP 1.0 on another node: a consumer on a member, and on the node holding no member
    (two-member streams, odd rounds: read from a member elsewhere). Twenty fresh streams,
    every subscribe and attach succeeds; without the lookup some were refused
    ``STREAM_DOES_NOT_EXIST`` / ``amqp:not-found``."""
    _, (n1, n2, n3) = nodes
    by_port = {b.stream_port: b for b in (n1, n2, n3)}
    links = {b.port: amqp(b) for b in (n2, n3)}

    async def scenario() -> None:
        async with admin(n1) as c1, admin(n2) as c2, admin(n3) as c3:
            clients = {n2.stream_port: c2, n3.stream_port: c3}
            for k in range(ROUNDS):
                name = f"{stream_name}-{k}"
                size = 2 if k % 2 else 3
                await c1.create_stream(name, {"x-initial-cluster-size": size})
                _, replicas = await c1.query_leader_and_replicas(name)
                members = [by_port[r.port] for r in replicas]
                for i, m in enumerate(members):
                    await clients[m.stream_port].subscribe(name, 100 + k * 2 + i)
                outsider = [b for b in (n2, n3) if b not in members]
                target = outsider[0] if outsider else members[k % 2]
                consumer = links[target.port].consumer(name, credit=10)
                consumer.close()

    try:
        run(scenario(), 100)
    finally:
        for c in links.values():
            c.close()
    # how often the race was met and what the lookup cost (pytest -s shows it)
    took = [float(line.split("ZooKeeper in ")[1].split(" ms")[0])
            for b in (n2, n3) for line in b.log_text().splitlines()
            if "read from ZooKeeper in" in line]
    print(f"\nlookups on a miss: {len(took)} in {ROUNDS} rounds"
          + (f", {min(took):.1f}-{max(took):.1f} ms" if took else ""))


def test_streams_created_in_a_burst_are_all_served_by_every_member(nodes, stream_name):
    """Several streams created through n1 back to back reach a replica's view together; it
    opens their member logs one by one. Opening the first once reconciled replication over
    the whole view, met the next stream before its log was open, failed the view's whole
    application (``NotFound`` in the mailbox) and left the rest unserved until a later view:
    a subscribe there answered ``STREAM_DOES_NOT_EXIST`` (rstream's own cluster tests)."""
    _, (n1, n2, n3) = nodes
    names = [f"{stream_name}-burst-{k}" for k in range(6)]

    async def scenario() -> None:
        async with admin(n1) as c1, admin(n2) as c2, admin(n3) as c3:
            for name in names:
                await c1.create_stream(name)
            for i, name in enumerate(names):
                await c2.subscribe(name, 200 + i)
                await c3.subscribe(name, 200 + i)

    run(scenario(), 60)
    for b in (n2, n3):
        assert "mailbox call" not in b.log_text(), b.log_text()[-3000:]
