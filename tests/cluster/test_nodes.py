"""Three real broker processes on loopback coordinated by a real ZooKeeper server: streams
placed cluster-wide, Metadata from every node, failover after SIGKILL, ZooKeeper lost."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest
from rstream import AMQPMessage, schema
from rstream.client import Client
from rstream.exceptions import LeaderNotAvailable, ServerError, StreamDoesNotExist

from amqp_stream.testing import BrokerProcess, free_port
from tests.cluster.checker import local_end
from tests.cluster.nodes import SESSION_TIMEOUT, cluster_status, holds_log, node
from tests.cluster.zookeeper import ZooKeeperServer
from tests.http.api import call
from tests.polling import wait_for
from tests.stream.rstream_low import admin, run, until

pytestmark = pytest.mark.timeout(180)


def messages(n: int) -> list[schema.Message]:
    return [schema.Message(publishing_id=i, filter_value=None,
                           data=bytes(AMQPMessage(body=b"m%d" % i))) for i in range(n)]


async def publish_confirmed(c: Client, stream: str, n: int) -> None:
    """Publish ``n`` messages through ``c`` and wait for their confirms."""
    confirmed: list[int] = []

    async def on_confirm(frame: schema.PublishConfirm) -> None:
        confirmed.extend(frame.publishing_ids)

    c.add_handler(schema.PublishConfirm, on_confirm)
    await c.declare_publisher(stream, None, 1)
    await c.publish(messages(n), 1)
    await until(lambda: len(confirmed) == n, f"{n} confirms")


async def metadata(broker: BrokerProcess, stream: str) -> tuple[tuple[str, int], list]:
    async with admin(broker) as c:
        leader, replicas = await c.query_leader_and_replicas(stream)
    return (leader.host, leader.port), sorted((r.host, r.port) for r in replicas)


def test_a_stream_declared_on_one_node_has_three_members_and_one_leader(nodes, stream_name):
    url, (n1, n2, n3) = nodes

    async def declare() -> None:
        async with admin(n2) as c:
            await c.create_stream(stream_name)

    run(declare(), 30)
    for b in (n1, n2, n3):
        wait_for(lambda b=b: holds_log(b, stream_name), 20, f"{b.stream_port} holds the log")
    answers = [run(metadata(b, stream_name), 30) for b in (n1, n2, n3)]
    assert answers[0] == answers[1] == answers[2]
    (leader, replicas) = answers[0]
    # client-local (the default locator): the declaring node leads
    assert leader == ("127.0.0.1", n2.stream_port)
    assert replicas == sorted(("127.0.0.1", b.stream_port) for b in (n1, n3))
    status = cluster_status(url)
    assert [(n["name"], n["alive"]) for n in status["nodes"]] == [
        ("n1", True), ("n2", True), ("n3", True)]
    assert {n["name"]: n["leaders"] for n in status["nodes"]}["n2"] == 1
    (layout,) = [s for s in status["streams"] if s["stream"] == stream_name]
    assert (layout["leader"], layout["epoch"], layout["members"]) == ("n2", 1, ["n1", "n2", "n3"])
    # the management HTTP API of any node shows the cluster: the stream's members and leader, and
    # every node (RabbitMQ's /api/queues and /api/nodes fields)
    queue = call(n1, "GET", f"/api/queues/%2F/{stream_name}").json
    assert (queue["leader"], queue["members"], queue["online"]) == (
        "n2", ["n1", "n2", "n3"], ["n1", "n2", "n3"])
    assert [(n["name"], n["running"]) for n in call(n3, "GET", "/api/nodes").json] == [
        ("n1", True), ("n2", True), ("n3", True)]


def test_balanced_leaders_and_a_smaller_cluster_size(nodes, stream_name):
    url, brokers = nodes

    async def declare() -> None:
        async with admin(brokers[0]) as c:
            for i in range(3):
                await c.create_stream(f"{stream_name}-{i}",
                                      {"queue-leader-locator": "balanced"})
            await c.create_stream(f"{stream_name}-two", {"initial-cluster-size": "2"})

    run(declare(), 30)
    status = cluster_status(url)
    assert sorted(n["leaders"] for n in status["nodes"]) == [1, 1, 2]
    (two,) = [s for s in status["streams"] if s["stream"] == f"{stream_name}-two"]
    assert len(two["members"]) == 2 and "n1" in two["members"]


def test_delete_on_another_node_removes_every_member_log(nodes, stream_name):
    """Declared over AMQP (the management node, through the CLI) on n1, deleted over the
    stream protocol on n3."""
    url, (n1, n2, n3) = nodes
    out = subprocess.run([sys.executable, "-m", "amqp_stream", "declare", stream_name, "--url",
                          n1.url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr

    async def declare_then_delete() -> None:
        for b in (n1, n2, n3):
            await until(lambda b=b: holds_log(b, stream_name), "every member's log")
        async with admin(n3) as c:
            await c.delete_stream(stream_name)
            assert not await c.stream_exists(stream_name)
        async with admin(n2) as c:
            assert not await c.stream_exists(stream_name)

    run(declare_then_delete(), 60)
    for b in (n1, n2, n3):
        wait_for(lambda b=b: not holds_log(b, stream_name), 20, "member logs deleted")


def test_killed_leader_is_replaced_by_a_member_with_its_log(nodes, stream_name):
    """n1 leads; its 5 messages are replicated to n2 and n3, so after n1's SIGKILL and its
    session's timeout n2 (the same log, the name that sorts first) leads under epoch 2; a
    publisher on n3 gets a MetadataUpdate. (The most complete log winning over a shorter
    one is tested against ZooKeeper in test_coordination.py.)"""
    url, (n1, n2, n3) = nodes
    updates: list[schema.MetadataUpdate] = []

    async def scenario() -> None:
        async with admin(n1) as c:
            await c.create_stream(stream_name)
        for b in (n2, n3):
            await until(lambda b=b: holds_log(b, stream_name), "members' logs")
        async with admin(n1) as c:
            await publish_confirmed(c, stream_name, 5)
        for b in (n2, n3):
            await until(lambda b=b: local_end(b, stream_name) == 5, "the replicas' logs")
        on_n3 = Client("127.0.0.1", n3.stream_port, frame_max=1024 * 1024, heartbeat=60)
        await on_n3.start()
        await on_n3.authenticate("/", "guest", "guest")

        async def on_update(frame: schema.MetadataUpdate) -> None:
            updates.append(frame)

        on_n3.add_handler(schema.MetadataUpdate, on_update)
        await on_n3.declare_publisher(stream_name, None, 7)
        n1.kill()
        await until(lambda: bool(updates), "a MetadataUpdate on n2", SESSION_TIMEOUT + 20)
        assert updates[0].metadata_info.stream == stream_name
        leader, replicas = await on_n3.query_leader_and_replicas(stream_name)
        assert leader.port == n2.stream_port
        # n1 is down: the live replica only
        assert [r.port for r in replicas] == [n3.stream_port]
        await on_n3.close()

    run(scenario(), 90)
    assert "n2 elected leader for epoch 2 (tail epoch 1 offset 5" in n2.log_text() + n3.log_text()
    (layout,) = [s for s in cluster_status(url)["streams"] if s["stream"] == stream_name]
    assert (layout["leader"], layout["epoch"]) == ("n2", 2)
    assert [(n["name"], n["alive"]) for n in cluster_status(url)["nodes"]] == [
        ("n1", False), ("n2", True), ("n3", True)]
    # n1 comes back under its name: a replica now, named again by Metadata
    n1.start()

    async def replicas() -> list[int]:
        async with admin(n2) as c:
            leader, replicas = await c.query_leader_and_replicas(stream_name)
        assert leader.port == n2.stream_port
        return sorted(r.port for r in replicas)

    wanted = sorted([n1.stream_port, n3.stream_port])
    wait_for(lambda: run(replicas(), 30) == wanted, 20, "n1 a replica again")


def test_zookeeper_lost_leaders_serve_declares_fail(tmp_path, stream_name):
    zk = ZooKeeperServer().start()
    url = f"zk://{zk.hosts}/lost"
    brokers = [node(tmp_path, url, name) for name in ("n1", "n2", "n3")]
    try:
        for b in brokers:
            b.start()
        n1 = brokers[0]

        async def declare() -> None:
            async with admin(n1) as c:
                await c.create_stream(stream_name)

        run(declare(), 30)
        zk.stop()

        async def publish_while_lost() -> None:
            async with admin(n1) as c:
                await publish_confirmed(c, stream_name, 10)  # the leader serves
                with pytest.raises(ServerError):
                    await c.create_stream(stream_name + "-new")
            # a name the view lacks is not found in ZooKeeper either: answered as before, at
            # once (the lookup on a miss gives up while the session is disconnected); a
            # member still serves its log
            async with admin(brokers[1]) as c:
                began = asyncio.get_running_loop().time()
                with pytest.raises(StreamDoesNotExist):
                    await c.subscribe(stream_name + "-none", 1)
                assert asyncio.get_running_loop().time() - began < 5
                await c.subscribe(stream_name, 2)

        run(publish_while_lost(), 60)
        out = subprocess.run([sys.executable, "-m", "amqp_stream", "declare", stream_name + "-b",
                              "--url", n1.url], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert "ZooKeeper" in out.stderr and "unreachable" in out.stderr, out.stderr
    finally:
        for b in brokers:
            b.close()
        zk.close()


def test_unreachable_zookeeper_at_start_exits_2(tmp_path):
    port = free_port()
    broker = node(tmp_path, f"zk://127.0.0.1:{port}/x", "n1")
    out = subprocess.run(broker.command(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"cannot reach ZooKeeper at 127.0.0.1:{port}" in out.stderr


def test_cluster_settings_are_checked(tmp_path):
    base = [sys.executable, "-m", "amqp_stream", "serve", "--data-dir", str(tmp_path)]
    out = subprocess.run(base + ["--cluster", "zk://127.0.0.1:1/x"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "--node-name" in out.stderr
    out = subprocess.run(base + ["--cluster", "zk://127.0.0.1/x", "--node-name", "a"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is not HOST:PORT" in out.stderr


def test_one_node_does_not_import_kazoo():
    code = ("import sys; from amqp_stream.config import load; from amqp_stream.server import "
            "Broker; Broker(load({}, env={})); assert 'kazoo' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_cluster_status_without_zookeeper_is_a_clear_failure():
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "amqp_stream", "cluster", "status", "--cluster",
                          f"zk://127.0.0.1:{port}/x", "--timeout", "1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert f"cannot reach ZooKeeper at 127.0.0.1:{port}" in out.stderr
    out = subprocess.run([sys.executable, "-m", "amqp_stream", "cluster", "status", "--cluster",
                          "zk://nowhere"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is not HOST:PORT" in out.stderr


def test_super_stream_partitions_spread_and_its_definitions_are_cluster_wide(nodes, stream_name):
    url, (n1, n2, n3) = nodes
    parts = [f"{stream_name}-{i}" for i in range(3)]

    async def scenario() -> None:
        async with admin(n1) as c:
            await c.create_super_stream(stream_name, parts, ["0", "1", "2"])
        async with admin(n3) as c:  # the exchange and bindings, read from ZooKeeper on n3
            await until_ok(lambda: c.partitions(stream_name), "n3 knows the super stream")
            assert await c.partitions(stream_name) == parts
            assert await c.route("1", stream_name) == [parts[1]]
            await c.delete_super_stream(stream_name)
        async with admin(n2) as c:
            await until_ok(lambda: c.stream_exists(parts[0]), "n2 sees the delete", False)

    run(scenario(), 60)
    # the partitions' leaders went one to each node (balanced, the super stream default);
    # checked before the delete by the log lines of the declaring node
    placed = [line for line in n1.log_text().splitlines() if "placed: leader" in line]
    assert sorted(line.split("leader ")[1].split(",")[0] for line in placed) == ["n1", "n2", "n3"]


def test_a_super_stream_created_on_one_node_is_answered_at_once_by_the_others(nodes,
                                                                             stream_name):
    """Read your writes across nodes, as RabbitMQ's metadata store gives: once the create is
    answered, Partitions and Route on another node know the super stream without waiting for
    that node's watch (rstream's cluster tests create through a balancer and query through it
    at once). Ten times, each asked on already open connections right after the answer."""
    url, (n1, n2, n3) = nodes

    async def scenario() -> None:
        async with admin(n1) as c1, admin(n2) as c2, admin(n3) as c3:
            for k in range(10):
                name = f"{stream_name}-s{k}"
                parts = [f"{name}-{i}" for i in range(2)]
                await c1.create_super_stream(name, parts, ["0", "1"])
                assert await c2.partitions(name) == parts, f"round {k}"
                assert await c3.route("1", name) == [parts[1]], f"round {k}"

    run(scenario(), 120)


async def until_ok(ask, what: str, want: object = True, timeout: float = 20) -> None:
    """Ask until the answer is ``want`` (True: any answer that does not raise; a function:
    an answer it holds true)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            answer = await ask()
            if want is True or (want(answer) if callable(want) else answer == want):
                return
        except (ServerError, LeaderNotAvailable):
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_a_paused_leader_is_deposed_and_told_when_it_resumes(nodes, stream_name):
    """SIGSTOP the leader past the session timeout: another member leads under epoch 2. On
    SIGCONT its ZooKeeper session has expired: it registers again, reads the new layout and
    its own publisher gets a MetadataUpdate (it is no longer the leader)."""
    url, (n1, n2, n3) = nodes
    updates: list[schema.MetadataUpdate] = []

    async def scenario() -> None:
        on_n1 = await admin(n1).__aenter__()

        async def on_update(frame: schema.MetadataUpdate) -> None:
            updates.append(frame)

        on_n1.add_handler(schema.MetadataUpdate, on_update)
        await on_n1.create_stream(stream_name)
        await on_n1.declare_publisher(stream_name, None, 1)
        assert n1.proc is not None
        n1.proc.send_signal(signal.SIGSTOP)
        try:
            async with admin(n2) as c:
                async def leader_port() -> int:
                    leader, _ = await c.query_leader_and_replicas(stream_name)
                    return leader.port

                await until_ok(leader_port, "a new leader",
                               lambda port: port in (n2.stream_port, n3.stream_port),
                               SESSION_TIMEOUT + 20)
        finally:
            n1.proc.send_signal(signal.SIGCONT)
        await until(lambda: bool(updates), "the deposed leader's MetadataUpdate", 30)
        assert updates[0].metadata_info.stream == stream_name
        await on_n1.close()

    run(scenario(), 90)
    status = cluster_status(url)
    (layout,) = [s for s in status["streams"] if s["stream"] == stream_name]
    assert layout["epoch"] == 2 and layout["leader"] != "n1"
    wait_for(lambda: all(n["alive"] for n in cluster_status(url)["nodes"]), 20, "n1 back")
    assert "registered again" in n1.log_text()
