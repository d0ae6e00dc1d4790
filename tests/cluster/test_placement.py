"""Placement of a new stream's members and leader (amqp_stream.cluster.placement): pure
functions, checked against the rules of RabbitMQ's rabbit_queue_location."""

from __future__ import annotations

import pytest

from amqp_stream.cluster.layout import StreamLayout
from amqp_stream.cluster.placement import choose_leader, choose_members, place

NODES = ["a", "b", "c", "d", "e"]


def test_default_size_is_three_or_every_node_when_fewer():
    assert len(place("s", {}, NODES, "a", []).members) == 3
    assert place("s", {}, ["a", "b"], "b", []).members == ("a", "b")
    assert place("s", {}, ["a"], "a", []).members == ("a",)


def test_size_argument_and_local_node_is_a_member():
    layout = place("s", {"x-initial-cluster-size": 2}, NODES, "d", [])
    assert len(layout.members) == 2 and "d" in layout.members
    assert layout.epoch == 1 and layout.stream == "s"
    assert place("s", {"x-initial-cluster-size": 9}, NODES, "a", []).members == tuple(NODES)


def test_members_go_to_the_least_loaded_nodes():
    busy = [StreamLayout("x", 1, "b", ("b", "c")), StreamLayout("y", 1, "c", ("c", "d"))]
    # a (local) + the two holding fewest members: e (0), b or d (1 each; b sorts first)
    assert choose_members(3, NODES, "a", busy) == ("a", "b", "e")


def test_client_local_leads_on_the_declaring_node():
    layout = place("s", {"x-queue-leader-locator": "client-local"}, NODES, "c", [])
    assert layout.leader == "c"
    # the default locator is client-local, as RabbitMQ's
    assert place("s", {}, NODES, "e", []).leader == "e"


def test_client_local_falls_back_to_balanced_when_not_a_member():
    led = [StreamLayout("x", 1, "a", ("a",))]
    assert choose_leader("client-local", ["a", "b"], "z", led) == "b"


@pytest.mark.parametrize("locator", ["balanced", "least-leaders"])
def test_balanced_leader_is_the_member_leading_fewest(locator):
    led = [StreamLayout("x", 1, "a", ("a", "b", "c")), StreamLayout("y", 1, "b", ("a", "b", "c"))]
    layout = place("s", {"x-queue-leader-locator": locator}, ["a", "b", "c"], "a", led)
    assert layout.leader == "c"
    assert layout.members == ("a", "b", "c")


def test_balanced_spreads_leaders_of_successive_streams():
    layouts: list[StreamLayout] = []
    for i in range(6):
        layouts.append(place(f"s{i}", {"x-queue-leader-locator": "balanced"}, ["a", "b", "c"],
                             "a", layouts))
    leaders = [x.leader for x in layouts]
    assert sorted(leaders.count(n) for n in "abc") == [2, 2, 2]


def test_bad_input():
    with pytest.raises(ValueError):
        place("s", {}, [], "a", [])
    with pytest.raises(ValueError):
        choose_leader("nearest", ["a"], "a", [])


def test_a_drained_node_is_not_chosen_to_lead_while_another_member_can():
    members = ("n1", "n2", "n3")
    assert choose_leader("client-local", members, "n1", [], drained={"n1"}) == "n2"
    assert choose_leader("balanced", members, "n1", [], drained={"n1", "n2"}) == "n3"
    assert choose_leader("client-local", ("n1",), "n1", [], drained={"n1"}) == "n1"  # alone
    assert place("s", {}, members, "n2", [], drained={"n2"}).leader == "n1"
