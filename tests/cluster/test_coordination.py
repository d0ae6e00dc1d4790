"""Coordination against a real ZooKeeper server (amqp_stream.cluster.coordination): several
Coordinators in this process, each with its own ZooKeeper session, as nodes would be."""

from __future__ import annotations

import pytest

from amqp_stream.cluster.address import parse_url
from amqp_stream.cluster.coordination import ClusterView, CoordinationError, Coordinator
from amqp_stream.cluster.layout import Node, StreamLayout
from amqp_stream.cluster.placement import place
from amqp_stream.definitions import Definitions, Exchange
from amqp_stream.testing import free_port
from tests.polling import wait_for


class Member:
    """One node's Coordinator with a fake local log tail per stream (what storage would say)."""

    def __init__(self, url: str, name: str, tails: dict[str, tuple[int, int]] | None = None):
        self.tails = tails or {}
        self.views: list[ClusterView] = []
        self.coordinator = Coordinator(url, Node(name, "127.0.0.1", 1, 2, 3), 2.0,
                                       self.views.append, self.tails.get)

    def __enter__(self) -> Coordinator:
        self.coordinator.start(10)
        return self.coordinator

    def __exit__(self, *exc: object) -> None:
        self.coordinator.stop()


@pytest.fixture
def url(zookeeper, zk_path):
    return f"zk://{zookeeper.hosts}{zk_path}"


def test_parse_url():
    assert parse_url("zk://a:1,b:2/x/y") == ("a:1,b:2", "/x/y")
    for bad in ("zk://a:1", "http://a:1/x", "zk://a/x", "zk://a:0/x", "zk:///x"):
        with pytest.raises(ValueError):
            parse_url(bad)


def test_membership_is_the_live_sessions(url):
    with Member(url, "a") as a:
        with Member(url, "b"):
            wait_for(lambda: set(a.view.nodes) == {"a", "b"}, 10, "b seen by a")
            assert a.view.nodes["b"] == Node("b", "127.0.0.1", 1, 2, 3)
        wait_for(lambda: set(a.view.nodes) == {"a"}, 10, "b gone when its session closed")


def test_a_live_node_name_cannot_be_taken_twice(url):
    with Member(url, "a"):
        second = Member(url, "a").coordinator
        with pytest.raises(CoordinationError, match="held by a live node"):
            second.start(1)
        second.stop()


def test_stream_layouts_are_shared_and_declared_once(url):
    with Member(url, "a") as a, Member(url, "b") as b:
        wait_for(lambda: len(a.view.nodes) == 2, 10, "two nodes")
        layout = place("s1", {}, sorted(a.view.nodes), "a", a.view.layouts.values())
        assert a.create_stream(layout, {"x-queue-type": "stream"})
        assert not b.create_stream(StreamLayout("s1", 1, "b", ("b",)), {})
        wait_for(lambda: "s1" in b.view.layouts, 10, "b sees s1")
        assert b.view.layouts["s1"] == layout
        assert b.view.arguments["s1"] == {"x-queue-type": "stream"}
        assert b.delete_stream("s1")
        assert not a.delete_stream("s1")
        wait_for(lambda: "s1" not in a.view.layouts, 10, "a sees s1 gone")


def test_election_picks_the_most_complete_log_with_epoch_plus_one(url):
    layout = StreamLayout("s", 1, "a", ("a", "b", "c"))
    tails_b, tails_c = {"s": (1, 10)}, {"s": (1, 25)}
    with Member(url, "b", tails_b) as b, Member(url, "c", tails_c) as c:
        with Member(url, "a") as a:
            assert a.create_stream(layout, {})
            wait_for(lambda: c.view.layouts.get("s") == layout, 10, "c sees s")
        # a's session closed: b and c report, the higher offset leads under epoch 2
        wait_for(lambda: getattr(b.view.layouts.get("s"), "epoch", 0) == 2, 10, "a new epoch")
        assert b.view.layouts["s"] == StreamLayout("s", 2, "c", ("a", "b", "c"))
        wait_for(lambda: c.view.layouts["s"].epoch == 2, 10, "c sees it")


def test_the_higher_epoch_wins_over_the_longer_log(url):
    with Member(url, "b", {"s": (2, 5)}) as b, Member(url, "c", {"s": (1, 90)}):
        with Member(url, "a") as a:
            a.create_stream(StreamLayout("s", 2, "a", ("a", "b", "c")), {})
        wait_for(lambda: getattr(b.view.layouts.get("s"), "epoch", 0) == 3, 10, "a new epoch")
        assert b.view.layouts["s"].leader == "b"


def test_no_election_without_a_majority_of_members(url):
    layout = StreamLayout("s", 1, "a", ("a", "b", "c"))
    with Member(url, "b", {"s": (1, 10)}) as b:
        with Member(url, "a") as a:
            a.create_stream(layout, {})
        wait_for(lambda: "a" not in b.view.nodes, 10, "a gone")
        wait_for(lambda: b.view.leaderless() == [layout], 10, "s leaderless")
        # one of three members reported: still no leader, whatever b's log holds
        with Member(url, "x") as x:  # another node's worker looks too
            wait_for(lambda: "s" in x.view.layouts, 10, "x sees s")
        assert b.view.layouts["s"] == layout
        with Member(url, "c", {"s": (1, 4)}):
            wait_for(lambda: b.view.layouts["s"].epoch == 2, 10, "elected once c reports")
        assert b.view.layouts["s"].leader == "b"


def test_definitions_are_cluster_wide(url):
    with Member(url, "a") as a, Member(url, "b") as b:
        da, db = Definitions(a.store(), lambda s: False), Definitions(b.store(), lambda s: False)
        da.load()
        db.load()
        da.declare_exchange(Exchange("x1", "topic"))
        db.load()
        assert db.exchange("x1") == Exchange("x1", "topic")
        # a save from a stale copy fails (and is undone) instead of losing a's change
        da.declare_exchange(Exchange("x2", "fanout"))
        with pytest.raises(CoordinationError, match="another node"):
            db.declare_exchange(Exchange("x3", "direct"))
        assert db.exchange("x3") is None
        db.load()
        db.declare_exchange(Exchange("x3", "direct"))
        da.load()
        assert {x.name for x in da.exchanges.values()} == {"x1", "x2", "x3"}


def test_unreachable_zookeeper_is_a_clear_error():
    port = free_port()
    c = Coordinator(f"zk://127.0.0.1:{port}/p", Node("a", "h", 1, 2, 3), 2.0,
                    lambda v: None, lambda s: None)
    with pytest.raises(CoordinationError, match=f"cannot reach ZooKeeper at 127.0.0.1:{port}"):
        c.start(1)


def test_only_coordination_talks_to_zookeeper():
    """One module imports kazoo, so another store could take its place (issue 27)."""
    from tests.test_layering import ROOT, imports_of, modules

    users = {str(p.relative_to(ROOT)) for p in modules("amqp_stream")
             if any(n.split(".")[0] == "kazoo" for n in imports_of(p))}
    assert users == {"amqp_stream/cluster/coordination.py"}


def test_zookeeper_lost_calls_fail_at_once_and_the_node_comes_back(tmp_path):
    """While disconnected a declare fails at once (it runs on the broker's loop, which must
    keep serving); ZooKeeper back: the node is registered (in the same session or a new one)
    and declares work again."""
    from tests.cluster.zookeeper import ZooKeeperServer

    zk = ZooKeeperServer().start()
    try:
        with Member(f"zk://{zk.hosts}/lost", "a") as a:
            session = a.client.client_id
            zk.stop()
            wait_for(lambda: not a.connected.is_set(), 10, "the connection seen lost")
            with pytest.raises(CoordinationError, match="is unreachable .connection lost"):
                a.create_stream(StreamLayout("s", 1, "a", ("a",)), {})
            zk.start()
            wait_for(a.connected.is_set, 20, "connected again")
            # the same session when kazoo reconnected within its timeout (2 s) of the
            # server's start; otherwise a new one, under which the node registers again
            if a.client.client_id != session:
                wait_for(lambda: "a" in a.view.nodes and not a._lost, 10, "registered again")
            assert a.client.exists(a._path("nodes", "a"))
            assert a.create_stream(StreamLayout("s", 1, "a", ("a",)), {})
    finally:
        zk.close()


def test_a_tail_reported_while_the_leader_was_away_is_withdrawn_when_it_returns(url):
    """b reports offset 10 while a is away; a comes back and b's log grows to 50; a goes
    again: the election must rank b by 50, not by its stale report."""
    layout = StreamLayout("s", 1, "a", ("a", "b", "c"))
    tails_b = {"s": (1, 10)}
    with Member(url, "b", tails_b) as b:
        with Member(url, "a") as a:
            a.create_stream(layout, {})
        tails = f"{b.root}/streams/s/tails"
        wait_for(lambda: b.client.exists(f"{tails}/b"), 10, "b's report")
        with Member(url, "a"):
            wait_for(lambda: not b.client.exists(f"{tails}/b"), 10, "b's report withdrawn")
            tails_b["s"] = (1, 50)
        with Member(url, "c", {"s": (1, 40)}):
            wait_for(lambda: getattr(b.view.layouts.get("s"), "epoch", 0) == 2, 10, "elected")
        assert b.view.layouts["s"].leader == "b"
