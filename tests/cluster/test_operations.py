"""Operations on a replicated stream, against three real nodes and a real ZooKeeper:
``stream status``, ``add-replica`` (a new member catches up before it counts toward the
quorum), ``delete-replica``, ``transfer-leadership`` (no confirmed publish lost), the
replication metrics, and retention on every member. After each, ``checker.check`` reads every
member's files."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from amqp_stream.cluster import membership
from amqp_stream.cluster.coordination import change_layout, read_view
from amqp_stream.cluster.leader import admin_request
from amqp_stream.commands.replicas import cluster_secret, stream_status
from tests.cluster.checker import check, log_dir, raw_chunks
from tests.cluster.nodes import holds_log, node
from tests.cluster.test_replicated_nodes import Publisher, body, converged, declare
from tests.polling import wait_for
from tests.stream.rstream_low import admin, run, until

pytestmark = pytest.mark.timeout(180)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqp_stream", *args], capture_output=True,
                          text=True, timeout=60)


def status(url: str, stream: str) -> dict:
    """``stream status --json``'s document, computed in-process (the polls would each pay
    for a Python start); the command itself is run once per test below."""
    return stream_status(url, stream, 10)


def status_cli(url: str, stream: str) -> dict:
    out = cli("stream", "status", stream, "--cluster", url, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def rows(url: str, stream: str) -> dict[str, dict]:
    return {r["node"]: r for r in status(url, stream)["members"]}


def scrape(broker) -> str:
    return urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()


def sample(text: str, prefix: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith(prefix))
    return float(line.rsplit(" ", 1)[1])


def retention_on_every_member(brokers: dict, stream_name: str) -> None:
    """Small segments and a byte limit: once the leader's oldest segments go, every
    replica's go too (the same files on each member), and replication of the tail goes on."""
    n1, n2, n3 = brokers.values()

    def segments(b) -> list[str]:
        return sorted(f for f in os.listdir(log_dir(b.data_dir, stream_name))
                      if f.endswith(".segment"))

    async def scenario() -> dict[int, bytes]:
        async with admin(n1) as c:
            await c.create_stream(stream_name, {"stream-max-segment-size-bytes": "20000",
                                                "max-length-bytes": "60000"})
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        await p.publish(range(1, 4001))
        await asyncio.to_thread(converged, brokers, stream_name, "n1")
        files = {n: segments(b) for n, b in brokers.items()}
        assert files["n1"] == files["n2"] == files["n3"], files
        # more after that: a segment that filled with the last chunk above goes with the
        # snapshot the next append writes (the writer's rule), so the first segments are
        # gone by the end of these, and the tail still replicates past them
        await p.publish(range(4001, 6001))
        await p.drop()
        assert not p.errors
        return p.confirmed

    confirmed = run(scenario(), 90)
    end = converged(brokers, stream_name, "n1")
    assert segments(n1) == segments(n2) == segments(n3)
    firsts = {n: raw_chunks(log_dir(b.data_dir, stream_name))[0][0] for n, b in brokers.items()}
    assert len(set(firsts.values())) == 1 and firsts["n1"] > 0, firsts
    kept = [v for i, v in confirmed.items() if i > 5000]
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name, kept, at_least=end)
    assert report.found == 1000


@pytest.fixture
def slow_nodes(zookeeper, zk_path, tmp_path):
    """Three nodes whose sessions outlast a pause of a few seconds (SIGSTOP keeps the node a
    live member meanwhile, however loaded the machine)."""
    url = f"zk://{zookeeper.hosts}{zk_path}"
    brokers = [node(tmp_path, url, n, "--cluster-session-timeout", "8")
               for n in ("n1", "n2", "n3")]
    for b in brokers:
        b.start()
    yield url, brokers
    for b in brokers:
        b.close()


def test_stream_status_metrics_and_retention_on_every_member(slow_nodes, stream_name):
    """stream status and the leader's metrics: every member's tail, lag 0, then a paused
    member's lag; a transfer to it refused. Then retention on every member (on the same
    nodes: a cluster's start costs more than the test)."""
    url, (n1, n2, n3) = slow_nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        await declare(n1, stream_name)
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        await p.publish(range(1, 2001))
        await p.drop()
        return p.confirmed

    confirmed = run(scenario(), 60)
    end = converged(brokers, stream_name, "n1")
    seen: list[dict] = []

    def no_lag() -> bool:
        seen[:] = [rows(url, stream_name)]
        return all(r["lag"] == 0 and r["lag_bytes"] == 0 and r["committed_end"] == end
                   for r in seen[0].values())
    try:
        wait_for(no_lag, 40, "no lag in the status")
    except AssertionError:
        raise AssertionError(f"the status still shows a lag (end {end}): {seen}") from None
    st = status_cli(url, stream_name)
    assert (st["leader"], st["epoch"], st["quorum"], st["catching_up"]) == ("n1", 1, 2, [])
    by_node = {r["node"]: r for r in st["members"]}
    assert {n: (r["role"], r["alive"], r["durable_end"], r["offset"]) for n, r in by_node.items()} \
        == {"n1": ("leader", True, end, end - 1), "n2": ("replica", True, end, end - 1),
            "n3": ("replica", True, end, end - 1)}
    assert all(r["first_offset"] == 0 and r["segments"] >= 1 for r in by_node.values())
    text = cli("stream", "status", stream_name, "--cluster", url)
    assert text.returncode == 0 and "leader n1" in text.stdout and "\tlag_bytes" in text.stdout
    missing = cli("stream", "status", stream_name + "-none", "--cluster", url)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    wrong = cli("stream", "status", stream_name, "--cluster", url, "--cluster-secret", "wrong")
    assert wrong.returncode == 1 and "authentication failed" in wrong.stderr, wrong.stderr
    # n3 paused (a live member still): lagging on the leader's metrics once n1 goes on
    n1_node = read_view(url, 10).nodes["n1"]
    n3.proc.send_signal(signal.SIGSTOP)
    try:
        async def more() -> None:
            p = Publisher(stream_name, brokers.values())
            await p._attach(n1)
            await p.publish(range(2001, 2501))
            await p.drop()
            confirmed.update(p.confirmed)

        run(more(), 60)
        # a transfer to the lagging n3 fails within its wait, and n1 takes publishes again
        answer = admin_request(n1_node.host, n1_node.replication_port,
                               {"op": "transfer", "stream": stream_name, "node": "n3",
                                "timeout": 0.5}, 10, cluster_secret(url, None, 10))
        assert "did not catch up" in answer.get("error", ""), answer

        async def after() -> None:
            p = Publisher(stream_name, brokers.values())
            await p._attach(n1)
            await p.publish(range(2501, 2601))
            await p.drop()
            assert not p.errors
            confirmed.update(p.confirmed)

        run(after(), 60)
        leader = scrape(n1)
        assert sample(leader, f'amqp_stream_replication_role{{role="leader",stream="{stream_name}"}}') == 1
        assert sample(leader, f'amqp_stream_replication_lag_offsets{{member="n3",stream="{stream_name}"}}') >= 500
        assert sample(leader, f'amqp_stream_replication_lag_bytes{{member="n3",stream="{stream_name}"}}') > 500 * 8
        assert sample(leader, f'amqp_stream_replication_lag_bytes{{member="n2",stream="{stream_name}"}}') == 0
        assert sample(leader, f'amqp_stream_replication_commit_latency_seconds_count{{stream="{stream_name}"}}') > 0
        assert sample(scrape(n2), f'amqp_stream_replication_role{{role="replica",stream="{stream_name}"}}') == 1
    finally:
        n3.proc.send_signal(signal.SIGCONT)
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name, confirmed.values(),
                   at_least=end)
    assert report.found == 2600
    retention_on_every_member(brokers, stream_name + "-retained")


def test_a_new_replica_catches_up_before_it_counts_toward_the_quorum(slow_nodes, stream_name):
    """A one-member stream gets a replica on n3 while n3 is paused: publishes are still
    confirmed (the new member does not count yet, or the quorum would be 2 of 2); resumed, n3
    takes the log and the leader writes the layout that counts it; a replica added on n2
    through the CLI follows. Every log identical, every confirm once."""
    url, (n1, n2, n3) = slow_nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def scenario() -> dict[int, bytes]:
        async with admin(n1) as c:
            await c.create_stream(stream_name, {"initial-cluster-size": "1"})
        p = Publisher(stream_name, brokers.values())
        await p._attach(n1)
        await p.publish(range(1, 2001))
        n3.proc.send_signal(signal.SIGSTOP)
        try:
            _, new = await asyncio.to_thread(
                change_layout, url, 10, stream_name,
                lambda lay, view: membership.add_replica(lay, "n3", view.nodes))
            assert new.members == ("n1", "n3") and new.catching_up == ("n3",)
            # n1 applied the layout: the stream is replicated, confirms wait for the quorum
            await asyncio.to_thread(wait_for, lambda: f'amqp_stream_replication_role{{role='
                                    f'"leader",stream="{stream_name}"}} 1.0' in scrape(n1),
                                    20, "n1 leads the replicated stream")
            # confirmed without n3, on the same connection (no resend)
            p.pending.update({i: body(i) for i in range(2001, 2501)})
            await p._send(list(range(2001, 2501)))
            await until(lambda: not p.pending, "confirms while n3 is paused", 20)
        finally:
            n3.proc.send_signal(signal.SIGCONT)
        await asyncio.to_thread(wait_for, lambda: status(url, stream_name)["catching_up"]
                                == [], 30, "n3 counted")
        st = status(url, stream_name)
        assert (st["quorum"], sorted(r["node"] for r in st["members"])) == (2, ["n1", "n3"])
        # the CLI's add-replica; errors as RabbitMQ's
        out = cli("add-replica", stream_name, "n2", "--cluster", url)
        assert out.returncode == 0, out.stderr
        again = cli("add-replica", stream_name, "n2", "--cluster", url)
        assert again.returncode == 0 and "already a member" in again.stdout
        bad = cli("add-replica", stream_name, "n9", "--cluster", url)
        assert bad.returncode == 1 and "node_not_running" in bad.stderr
        await asyncio.to_thread(wait_for, lambda: status(url, stream_name)["catching_up"]
                                == [], 30, "n2 counted")
        await p.publish(range(2501, 3001))
        await p.drop()
        assert not p.errors
        return p.confirmed

    confirmed = run(scenario(), 120)
    assert status(url, stream_name)["quorum"] == 2
    end = converged(brokers, stream_name, "n1")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name,
                   confirmed.values(), at_least=end)
    assert report.found == 3000


def test_delete_replica_and_transfer_leadership_lose_no_confirmed_publish(nodes, stream_name):
    """transfer-leadership while a named producer publishes: the leader stops taking
    publishes, waits for the target to hold its log, and hands over under epoch 2; nothing
    confirmed is lost or doubled. delete-replica of a live member deletes its log; of the
    leader, moves the leadership first; of the last member, is refused. A member removed
    while down deletes its log when it comes back."""
    url, (n1, n2, n3) = nodes
    brokers = {"n1": n1, "n2": n2, "n3": n3}

    async def publish_through_a_transfer() -> dict[int, bytes]:
        await declare(n1, stream_name)
        # without the cluster's secret (made in ZooKeeper by the first node) no transfer
        wrong = await asyncio.to_thread(cli, "transfer-leadership", stream_name, "n2",
                                        "--cluster", url, "--cluster-secret", "wrong")
        assert wrong.returncode == 1 and "authentication failed" in wrong.stderr, wrong.stderr
        assert "refused: wrong cluster secret" in n1.log_text()
        p = Publisher(stream_name, brokers.values())
        await p.connect()
        await p.publish(range(1, 1001))
        sending = asyncio.ensure_future(p.publish(range(1001, 5001)))
        moved = await asyncio.to_thread(cli, "transfer-leadership", stream_name, "n2",
                                        "--cluster", url)
        assert moved.returncode == 0, moved.stderr
        assert "n2 leads (epoch 2)" in moved.stdout
        await sending
        await p.publish(range(5001, 6001))
        await p.drop()
        return p.confirmed

    confirmed = run(publish_through_a_transfer(), 120)
    assert len(confirmed) == 6000
    st = status(url, stream_name)
    assert (st["leader"], st["epoch"]) == ("n2", 2)
    end = converged(brokers, stream_name, "n2")
    report = check({n: b.data_dir for n, b in brokers.items()}, stream_name, confirmed.values(),
                   at_least=end)
    assert report.found == 6000
    assert not any("truncating" in b.log_text() for b in brokers.values())
    not_member = cli("transfer-leadership", stream_name, "n9", "--cluster", url)
    assert not_member.returncode == 1 and "not a member" in not_member.stderr

    # n3 removed while it is down: its log goes when it comes back
    n3.close()
    out = cli("delete-replica", stream_name, "n3", "--cluster", url)
    assert out.returncode == 0, out.stderr
    assert holds_log(n3, stream_name)
    n3.start()
    wait_for(lambda: not holds_log(n3, stream_name), 20, "n3's log deleted")
    out = cli("delete-replica", stream_name, "n2", "--cluster", url)  # the leader
    assert out.returncode == 0, out.stderr
    assert "moving the leadership to n1 first" in out.stdout
    wait_for(lambda: not holds_log(n2, stream_name), 20, "n2's log deleted")
    st = status(url, stream_name)
    assert (st["leader"], [r["node"] for r in st["members"]]) == ("n1", ["n1"])
    last = cli("delete-replica", stream_name, "n1", "--cluster", url)
    assert last.returncode == 1 and "Cannot delete the last member" in last.stderr

    async def alone() -> dict[int, bytes]:
        p = Publisher(stream_name, [n1])
        await p.connect()
        await p.publish(range(6001, 6501))
        await p.drop()
        return p.confirmed

    confirmed.update(run(alone(), 60))
    report = check({"n1": n1.data_dir}, stream_name, confirmed.values())
    assert report.found == 6500
