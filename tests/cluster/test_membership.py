"""The operator's layout changes (``membership``), a catching-up member's place in the commit
(``CommitTracker`` voters) and the ADMIN frame: pure functions, no processes."""

from __future__ import annotations

import pytest

from amqp_stream.cluster import membership
from amqp_stream.cluster import replication_wire as wire
from amqp_stream.cluster.commit import CommitTracker
from amqp_stream.cluster.coordination import choose_leader_by_tail
from amqp_stream.cluster.layout import Node, StreamLayout

LIVE = {n: Node(n, "127.0.0.1", 1, 2, 3) for n in ("n1", "n2", "n3")}


def test_add_replica_joins_catching_up_and_follows_rabbitmqs_rules():
    one = StreamLayout("s", 4, "n1", ("n1",))
    two = membership.add_replica(one, "n3", LIVE)
    assert (two.members, two.catching_up, two.epoch, two.quorum) == (("n1", "n3"), ("n3",), 5, 1)
    assert StreamLayout.from_json(two.to_json()) == two
    assert "catching_up" not in one.to_json()
    assert membership.add_replica(two, "n1", LIVE) is two  # a member already
    with pytest.raises(membership.LayoutRefused, match="node_not_running"):
        membership.add_replica(one, "n9", LIVE)
    with pytest.raises(membership.LayoutRefused, match="no running leader"):
        membership.add_replica(StreamLayout("s", 4, "n9", ("n9", "n1")), "n2", LIVE)


def test_delete_replica_refuses_the_last_member_and_the_leader():
    three = StreamLayout("s", 2, "n1", ("n1", "n2", "n3"), ("n3",))
    after = membership.delete_replica(three, "n3")
    assert (after.members, after.catching_up, after.epoch) == (("n1", "n2"), (), 3)
    assert membership.delete_replica(three, "n9") is three
    with pytest.raises(membership.LayoutRefused, match="move its leadership first"):
        membership.delete_replica(three, "n1")
    with pytest.raises(membership.LayoutRefused, match="Cannot delete the last member"):
        membership.delete_replica(StreamLayout("s", 2, "n1", ("n1",)), "n1")


def test_a_catching_up_member_neither_commits_nor_is_elected():
    commits: list[int] = []
    t = CommitTracker(("n1", "n2"), 1, 0, 0, lambda end, _: commits.append(end), ("n1",))
    t.report("n2", 50, 40)  # the learner alone: nothing
    assert commits == [] and t.tails["n2"] == (50, 40)
    t.report("n1", 30, 20)
    assert commits == [30]
    t.reconfigure(("n1", "n2", "n3"), ("n1", "n2", "n3"), 2)  # n2 counted, n3 joins: 2 of 3
    assert commits == [30]
    t.report("n3", 60, 50)
    assert commits == [30, 50]  # n2 (50) and n3 (60): the quorum-th highest
    layout = StreamLayout("s", 3, "n1", ("n1", "n2", "n3"), ("n3",))
    # n3 is catching up: its tail does not count toward the majority of reports
    assert choose_leader_by_tail(layout, {"n3": (3, 99)}) is None
    assert choose_leader_by_tail(layout, {"n2": (3, 10), "n3": (3, 99)}) is None
    full = StreamLayout("s", 3, "n1", ("n1", "n2", "n3"))
    assert choose_leader_by_tail(full, {"n2": (3, 10), "n3": (3, 99)}) == "n3"


def test_admin_frames_carry_a_json_object():
    request = {"op": "status", "stream": "s"}
    (frame,), at = wire.frames(wire.encode_admin(request))
    assert frame == (wire.ADMIN, frame[1]) and wire.decode_admin(frame[1]) == request
    with pytest.raises(wire.WireError):
        wire.decode_admin(b"[1]")
    with pytest.raises(wire.WireError):
        wire.decode_admin(b"\xff")


def test_an_election_passes_over_a_drained_node_unless_it_alone_holds_the_most():
    """A leader that gave up (``leader`` empty) stands like the others; a drained node goes
    last among the most complete logs, and is chosen only when no other holds as much."""
    gave_up = StreamLayout("s", 3, "", ("n1", "n2", "n3"))
    assert choose_leader_by_tail(gave_up, {"n1": (3, 50), "n2": (3, 10)}) == "n1"
    assert choose_leader_by_tail(gave_up, {"n1": (3, 50), "n2": (3, 50)}, {"n1"}) == "n2"
    assert choose_leader_by_tail(gave_up, {"n1": (3, 50), "n2": (3, 10)}, {"n1"}) == "n1"
    assert choose_leader_by_tail(gave_up, {"n1": (3, 50)}) is None
