"""AMQP 1.0 clients on any node of a three-node cluster (real ZooKeeper, real brokers, proton
through our blocking client): publishes to a node that does not lead the stream are forwarded
to the leader and accepted only after its quorum commit; a node that holds no member of a
stream serves its consumers from a member; the management node works on every node. The
checker reads every member's files after each case."""

from __future__ import annotations

import signal
import threading

import pytest

from amqp_stream.client import Client, Publisher, connect
from amqp_stream.testing import BrokerProcess
from tests.cluster.checker import body_of, check, local_end, log_dir, records
from tests.cluster.nodes import SESSION_TIMEOUT, cluster_status, holds_log
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(180)


def body(i: int) -> bytes:
    return b"<a-%06d>" % i


def amqp(b: BrokerProcess) -> Client:
    return connect(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=60)


def known_everywhere(brokers: dict[str, BrokerProcess], stream: str) -> None:
    """Every node's view has ``stream`` (a ZooKeeper watch after the declare: an attach on a
    node before its view has it is refused ``amqp:not-found``)."""
    for b in brokers.values():
        with amqp(b) as c:
            wait_for(lambda c=c: c.exists(stream), 30, f"node {b.port} to know {stream!r}")


def layout_of(url: str, stream: str) -> dict:
    (layout,) = [s for s in cluster_status(url)["streams"] if s["stream"] == stream]
    return layout


def members_converged(brokers: dict[str, BrokerProcess], stream: str, members: list[str]) -> int:
    wait_for(lambda: len({local_end(brokers[m], stream) for m in members}) == 1, 30,
             "every member at the leader's end")
    return local_end(brokers[members[0]], stream)


def receive(c: Client, stream: str, count: int, kill_at: tuple[int, BrokerProcess] | None = None,
            **filters: object) -> list[tuple[int, bytes]]:
    """``count`` messages of ``stream`` from its start: (offset, body) in the order received;
    ``kill_at`` (n, broker): SIGKILL broker once n are received."""
    consumer = c.consumer(stream, credit=50, **filters)  # type: ignore[arg-type]
    got: list[tuple[int, bytes]] = []
    while len(got) < count:
        if kill_at is not None and len(got) == kill_at[0]:
            kill_at[1].kill()
        m = consumer.receive(timeout=30)
        assert m is not None, f"{len(got)} of {count} received"
        assert m.offset is not None
        got.append((m.offset, bytes(m.body)))
    consumer.close()
    return got


def test_any_node_forwards_publishes_to_the_leader_and_reads_from_a_member(nodes,
                                                                            stream_name):
    """A stream of two members led by n1; AMQP publishers on the replica and on the node with
    no member: every message accepted, in order, on both members' logs exactly once. A
    consumer on the node with no member reads it from a member: the same offsets and
    messages as a consumer on the replica, filtered alike (stage 1 and SQL); when the replica
    it reads from is SIGKILLed mid-read, it goes on from the leader at the next offset: every
    message once, in order, on the same link."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}
    with amqp(n1) as c:
        c.declare(stream_name, {"x-initial-cluster-size": 2})
    layout = layout_of(url, stream_name)
    assert layout["leader"] == "n1" and len(layout["members"]) == 2
    replica = next(m for m in layout["members"] if m != "n1")
    outsider = next(n for n in brokers if n not in layout["members"])
    wait_for(lambda: holds_log(brokers[replica], stream_name), 30, "the replica's log")
    known_everywhere(brokers, stream_name)
    sent: list[bytes] = []
    accepted: list[bytes] = []
    for name, first in ((replica, 0), (outsider, 1000), ("n1", 2000)):
        with amqp(brokers[name]) as c:
            p = c.publisher(stream_name)
            batch = [body(i) for i in range(first, first + 1000)]
            for i, b in enumerate(batch):
                p.publish(b, filter_value="red" if i % 2 else "blue",
                          application_properties={"n": first + i})
            outcomes = p.flush()
            assert all(o.state == "accepted" for o in outcomes)
            sent += batch
            accepted += batch
    assert not holds_log(brokers[outsider], stream_name)
    end = members_converged(brokers, stream_name, layout["members"])
    report = check({m: brokers[m].data_dir for m in layout["members"]}, stream_name,
                   accepted, at_least=end)
    assert report.found == 3000
    # one link's messages in the order sent
    stored = [body_of(r) for _, r in records(log_dir(n1.data_dir, stream_name))]
    assert stored == sent
    assert "forwarding AMQP publishes to" in brokers[outsider].log_text()
    with amqp(brokers[replica]) as c:
        local = receive(c, stream_name, 3000)
        local_red = receive(c, stream_name, 1000, filter_values="red", sql="n >= 1000")
    with amqp(brokers[outsider]) as c:
        remote = receive(c, stream_name, 3000, kill_at=(200, brokers[replica]))
        remote_red = receive(c, stream_name, 1000, filter_values="red", sql="n >= 1000")
    assert [b for _, b in remote] == sent
    assert remote == local
    assert remote_red == local_red and remote_red[0][1] == body(1000)  # SQL: n >= 1000
    text = brokers[outsider].log_text()
    assert f"reads from member {replica}" in text
    assert "going on from offset" in text and "reads from member n1" in text


def test_leader_killed_during_a_forwarded_publish_loses_and_doubles_nothing(nodes,
                                                                           stream_name):
    """An unnamed AMQP publisher on n2 and a named one (publisher reference, publishing ids)
    on n3 send through their nodes to the leader n1; n1 is SIGKILLed mid-stream: each
    forwarder follows the new leader and sends what was unconfirmed again under the same ids
    (n2's own producer's, the link's for n3), which the new leader deduplicates. Every
    accepted message is on every member exactly once, each publisher's in the order sent, and
    nothing is rejected or released. A consumer attached to the replica n3 before the kill
    reads on through the leader move."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}
    with amqp(n1) as c:
        c.declare(stream_name)
    for b in (n2, n3):
        wait_for(lambda b=b: holds_log(b, stream_name), 30, "members' logs")
    known_everywhere(brokers, stream_name)
    total = 4000
    sent = {"unnamed": [body(i) for i in range(total)],
            "named": [body(100000 + i) for i in range(total)]}
    outcomes: dict[str, list] = {"unnamed": [], "named": []}
    failure: list[BaseException] = []
    clients = {"unnamed": amqp(n2), "named": amqp(n3)}
    publishers: dict[str, Publisher] = {
        "unnamed": clients["unnamed"].publisher(stream_name, window=500),
        "named": clients["named"].publisher(stream_name, window=500, reference="kill-test")}

    def publish(kind: str) -> None:
        try:
            for i, b in enumerate(sent[kind]):
                publishers[kind].publish(b, publishing_id=i + 1 if kind == "named" else None)
            outcomes[kind].extend(publishers[kind].flush(check=False))
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
    reader = amqp(n3)
    consumer = reader.consumer(stream_name)
    threads = [threading.Thread(target=publish, args=(k,)) for k in sent]
    for t in threads:
        t.start()
    wait_for(lambda: min(p.accepted for p in publishers.values()) >= 1000 or failure, 60,
             "1000 accepted of each")
    n1.kill()
    for t in threads:
        t.join(SESSION_TIMEOUT + 90)
    for c in clients.values():
        c.close()
    assert not failure, failure
    for kind in sent:
        states = {o.state for o in outcomes[kind]}
        assert states == {"accepted"}, (kind, states)
    layout = layout_of(url, stream_name)
    assert layout["leader"] in ("n2", "n3") and layout["epoch"] == 2
    n1.start()
    end = members_converged(brokers, stream_name, ["n1", "n2", "n3"])
    accepted = [*sent["unnamed"], *sent["named"]]
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name, accepted,
                   at_least=end)
    assert report.found == 2 * total
    stored = [body_of(r) for _, r in records(log_dir(n2.data_dir, stream_name))]
    assert len(stored) == len(set(stored)) == 2 * total  # nothing doubled, unconfirmed too
    for kind in sent:
        mine = set(sent[kind])
        assert [b for b in stored if b in mine] == sent[kind]
    assert "will go to the next leader" in n2.log_text() + n3.log_text()
    got = []
    while len(got) < 2 * total:  # the same link, attached before the leader moved
        m = consumer.receive(timeout=30)
        assert m is not None, f"{len(got)} of {2 * total} received on the replica"
        got.append(bytes(m.body))
    reader.close()
    assert got == stored

def test_the_management_node_declares_gets_and_deletes_through_every_node(nodes, stream_name):
    """A stream of one member (n1): GET and an equal PUT answer it on the nodes that hold no
    log of it, with the layout's leader and members; a PUT with other arguments is refused
    there as on n1; DELETE through n3 removes it from every node."""
    url, (n1, n2, n3) = nodes
    with amqp(n1) as c:
        created = c.declare(stream_name, {"x-initial-cluster-size": 1})
    assert created["leader"] == "n1" and created["replicas"] == ["n1"]
    for b in (n2, n3):
        with amqp(b) as c:
            info = c.info(stream_name)
            assert (info["name"], info["type"], info["leader"], info["replicas"]) == (
                stream_name, "stream", "n1", ["n1"])
            assert info["arguments"].get("x-initial-cluster-size") == 1
            again = c.declare(stream_name, {"x-initial-cluster-size": 1})
            assert again["leader"] == "n1"
            with pytest.raises(Exception, match="409|precondition|inequivalent"):
                c.declare(stream_name, {"x-initial-cluster-size": 1, "x-max-age": "1h"})
    with amqp(n3) as c:
        c.delete(stream_name)
    for b in (n1, n2, n3):
        with amqp(b) as c:
            wait_for(lambda c=c: not c.exists(stream_name), 30, "the stream gone everywhere")


def test_a_deposed_leaders_amqp_publishes_are_not_rejected(nodes, stream_name):
    """Publishers on the leader n1: SIGSTOP it past the session timeout with a batch of each in
    its socket, SIGCONT once another member leads: n1 takes the batches as leader of epoch 1,
    then learns it was deposed. The named publisher's batch goes on to the new leader (its
    ids keep it once): all accepted; the unnamed one's is released, never rejected (the
    client may send it again). Every accepted message is on every member exactly once."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}
    with amqp(n1) as c:
        c.declare(stream_name)
    for b in (n2, n3):
        wait_for(lambda b=b: holds_log(b, stream_name), 30, "members' logs")
    client = amqp(n1)
    named = client.publisher(stream_name, reference="deposed", window=1000)
    unnamed = client.publisher(stream_name, window=1000)
    sent_named = [body(i) for i in range(300)]
    sent_unnamed = [body(i) for i in range(1000, 1300)]
    for i in range(100):
        named.publish(sent_named[i], publishing_id=i + 1)
        unnamed.publish(sent_unnamed[i])
    first = named.flush() + unnamed.flush()
    assert len(first) == 200
    n1.proc.send_signal(signal.SIGSTOP)
    try:
        for i in range(100, 300):
            named.publish(sent_named[i], publishing_id=i + 1)
            unnamed.publish(sent_unnamed[i])
        wait_for(lambda: layout_of(url, stream_name)["epoch"] == 2, SESSION_TIMEOUT + 30,
                 "another leader")
    finally:
        n1.proc.send_signal(signal.SIGCONT)
    named_out = named.flush(check=False)
    unnamed_out = unnamed.flush(check=False)
    client.close()
    assert {o.state for o in named_out} == {"accepted"}
    assert {o.state for o in unnamed_out} <= {"accepted", "released"}
    wait_for(lambda: "left unconfirmed by the leader change" in n1.log_text(), 30,
             "n1 to answer what it held as leader")
    accepted = sent_named + sent_unnamed[:100] + [
        sent_unnamed[o.seq] for o in unnamed_out if o.state == "accepted"]
    layout = layout_of(url, stream_name)
    end = members_converged(brokers, stream_name, list(brokers))
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name, accepted,
                   at_least=end)
    assert report.found == len(accepted)
    assert layout["leader"] != "n1"

