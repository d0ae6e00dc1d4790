"""Unit tests of the single active consumer coordinator (``amqp_stream.single_active``): the
choices of RabbitMQ's ``rabbit_stream_sac_coordinator`` for one node, without sockets."""

from __future__ import annotations

import pytest

from amqp_stream.single_active import (ACTIVE, DEACTIVATING, WAITING, Coordinator, Notice,
                                       PartitionConflict)


def statuses(c: Coordinator, stream: str = "s", name: str = "g") -> list[tuple[object, str]]:
    return c.status(stream, name)


def test_plain_stream_first_is_active_next_takes_over():
    c = Coordinator()
    assert c.register("s", "g", -1, "a") == (True, [Notice("a", "s", "g", True)])
    assert c.register("s", "g", -1, "b") == (False, [])
    assert c.register("s", "g", -1, "c") == (False, [])
    assert c.unregister("s", "g", "c") == []  # a waiting one leaves: nothing changes
    c.register("s", "g", -1, "c")
    assert c.unregister("s", "g", "a") == [Notice("b", "s", "g", True)]
    assert statuses(c) == [("b", ACTIVE), ("c", WAITING)]
    assert c.unregister("s", "g", "b") == [Notice("c", "s", "g", True)]
    assert c.unregister("s", "g", "c") == []
    assert statuses(c) == []  # the empty group is gone


def test_groups_are_per_stream_and_name():
    c = Coordinator()
    assert c.register("s", "g", -1, "a")[0]
    assert c.register("s", "h", -1, "b")[0]
    assert c.register("t", "g", -1, "c")[0]


def test_partition_index_conflict():
    c = Coordinator()
    c.register("s", "g", 0, "a")
    with pytest.raises(PartitionConflict):
        c.register("s", "g", -1, "b")


def test_super_stream_partition_rebalances_with_step_down():
    """Partition 1 of a super stream: the active one is index 1 mod group size."""
    c = Coordinator()
    assert c.register("p1", "g", 1, "a") == (True, [Notice("a", "p1", "g", True)])
    # two members: 1 % 2 = 1 -> b should be active; a is told to step down first
    assert c.register("p1", "g", 1, "b") == (False, [Notice("a", "p1", "g", False, True)])
    assert statuses(c, "p1") == [("a", DEACTIVATING), ("b", WAITING)]
    # a third one meanwhile: 1 % 3 = 1 -> still b; a still stepping down, not told again
    assert c.register("p1", "g", 1, "c") == (False, [])
    # a answers: b becomes active
    assert c.activate("p1", "g") == [Notice("b", "p1", "g", True)]
    assert statuses(c, "p1") == [("a", WAITING), ("b", ACTIVE), ("c", WAITING)]
    # b leaves: [a, c], 1 % 2 = 1 -> c
    assert c.unregister("p1", "g", "b") == [Notice("c", "p1", "g", True)]
    # a leaves: [c] stays active, nobody told
    assert c.unregister("p1", "g", "a") == []
    assert statuses(c, "p1") == [("c", ACTIVE)]


def test_super_stream_waiting_member_leaves_moves_the_choice():
    c = Coordinator()
    for owner in "abc":
        c.register("p0", "g", 0, owner)  # 0 % n = 0: a stays active throughout
    assert statuses(c, "p0")[0] == ("a", ACTIVE)
    c.register("p2", "g", 2, "a")
    c.register("p2", "g", 2, "b")  # 2 % 2 = 0: a stays
    assert c.register("p2", "g", 2, "c") == (False, [Notice("a", "p2", "g", False, True)])
    assert c.activate("p2", "g") == [Notice("c", "p2", "g", True)]
    # b leaves: [a, c], 2 % 2 = 0 -> a; c steps down
    assert c.unregister("p2", "g", "b") == [Notice("c", "p2", "g", False, True)]
    assert c.activate("p2", "g") == [Notice("a", "p2", "g", True)]


def test_stepping_down_member_leaves_before_answering():
    c = Coordinator()
    c.register("p1", "g", 1, "a")
    c.register("p1", "g", 1, "b")  # a told to step down
    assert c.unregister("p1", "g", "a") == [Notice("b", "p1", "g", True)]
    assert c.activate("p1", "g") == []  # a late activate changes nothing
    assert statuses(c, "p1") == [("b", ACTIVE)]
