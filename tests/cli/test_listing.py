"""`amqp-stream list ...` as a real subprocess against the session broker's management API,
while real rstream clients are connected: the default columns are rabbitmqctl's, a column
choice and --format json, an unknown column refused (exit 2) with the valid ones, a stream
subscription's offset and lag in the consumer listing, and clear failures for a wrong URL or
password (exit 1)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from amqp_stream.testing import free_port
from tests.cli.test_commands import cli
from tests.http.api import call
from tests.polling import wait_for

rstream = pytest.importorskip("rstream")
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def listing(broker, *args: str):
    return cli("list", *args, "--management-url", broker.management_url)


def rows(stdout: str) -> list[list[str]]:
    return [line.split("\t") for line in stdout.splitlines()]


@pytest.fixture
def declared(broker, stream_name) -> str:
    assert cli("declare", stream_name, url=broker.url).returncode == 0
    yield stream_name
    cli("delete", stream_name, url=broker.url)


def test_streams_with_default_and_chosen_columns(broker, declared):
    r = listing(broker, "streams")
    assert r.returncode == 0, r.stderr
    table = rows(r.stdout)
    assert table[0] == ["name", "messages"]  # rabbitmqctl list_queues' defaults
    assert [declared, "0"] in table[1:]
    r = listing(broker, "streams", "name", "type", "segments", "durable", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert {"name": declared, "type": "stream", "segments": 1, "durable": True} in json.loads(r.stdout)
    r = listing(broker, "users")
    assert (r.returncode, rows(r.stdout)[0]) == (0, ["user", "tags"])
    assert ["guest", '["administrator"]'] in rows(r.stdout)


def test_an_unknown_column_is_refused_with_the_valid_ones(broker):
    r = listing(broker, "connections", "user", "peer_hots")
    assert r.returncode == 2 and r.stdout == ""
    assert "unknown column 'peer_hots' (did you mean peer_host?)" in r.stderr
    assert "valid columns: auth_mechanism, channel_max, channels, client_properties, " in r.stderr


def test_connections_consumers_and_publishers_of_live_clients(broker, declared):
    viewer = f"viewer-{declared[-12:]}"  # a management user: lists only its own
    assert call(broker, "PUT", f"/api/users/{viewer}", {"password": "pw", "tags": "management"}).status == 201

    async def scenario() -> tuple:
        before = time.time() * 1000
        consumer = Consumer(broker.host, broker.stream_port, username="guest", password="guest",
                            connection_name="list-consumer")
        producer = Producer(broker.host, broker.stream_port, username="guest", password="guest")
        await consumer.start()
        await producer.start()
        try:
            for i in range(3):
                await producer.send_wait(declared, f"m{i}".encode())
            got: list = []
            await consumer.subscribe(declared, callback=lambda m, c: got.append(m),
                                     properties={"identifier": "lister"},
                                     offset_specification=ConsumerOffsetSpecification(
                                         OffsetType.FIRST))
            await asyncio.to_thread(wait_for, lambda: len(got) == 3, 30, "3 consumed")
            return (before, time.time() * 1000, *await asyncio.gather(
                asyncio.to_thread(listing, broker, "connections", "user", "protocol",
                                  "user_provided_name"),
                asyncio.to_thread(listing, broker, "consumers", "--format", "json"),
                asyncio.to_thread(listing, broker, "consumers", "queue_name", "consumer_tag",
                                  "offset_lag", "credits", "messages_consumed", "--format",
                                  "json"),
                asyncio.to_thread(listing, broker, "publishers"),
                asyncio.to_thread(listing, broker, "connections", "user_provided_name",
                                  "connected_at", "channels", "recv_oct", "send_oct",
                                  "recv_cnt", "send_cnt", "--format", "json"),
                asyncio.to_thread(listing, broker, "connections", "--user", viewer, "--password", "pw")))
        finally:
            await producer.close()
            await consumer.close()

    try:
        before, after, conns, consumers, stream_consumers, publishers, stats, viewers = (
            asyncio.run(asyncio.wait_for(scenario(), 60)))
    finally:  # the session broker's users as they were
        call(broker, "DELETE", f"/api/users/{viewer}")
    assert all(r.returncode == 0
               for r in (conns, consumers, stream_consumers, publishers, stats, viewers))
    assert rows(viewers.stdout) == [["user", "peer_host", "peer_port", "state"]]
    assert rows(conns.stdout)[0] == ["user", "protocol", "user_provided_name"]
    assert ["guest", "stream", "list-consumer"] in rows(conns.stdout)
    mine = [c for c in json.loads(consumers.stdout) if c["queue_name"] == declared]
    assert len(mine) == 1 and list(mine[0]) == ["queue_name", "consumer_tag", "ack_required",
                                                "prefetch_count", "active", "arguments"]
    assert mine[0]["arguments"]["identifier"] == "lister"
    sub = next(c for c in json.loads(stream_consumers.stdout) if c["queue_name"] == declared)
    assert sub["consumer_tag"].startswith("stream.subid-")
    assert isinstance(sub["credits"], int) and isinstance(sub["offset_lag"], int)
    assert sub["messages_consumed"] == 3  # rabbitmq-streams list_stream_consumers' name
    table = rows(publishers.stdout)
    # rabbitmq-streams list_stream_publishers' columns, counts of what the producer sent
    assert table[0] == ["publisher_id", "stream", "reference", "messages_published",
                        "messages_confirmed", "messages_errored"]
    assert [row[1:] for row in table[1:] if row[1] == declared] == [
        [declared, "", "3", "3", "0"]]
    named = [c for c in json.loads(stats.stdout) if c["user_provided_name"] == "list-consumer"]
    assert named and all(c["channels"] == 0 and c["recv_cnt"] > 0 for c in named)
    mine = max(named, key=lambda c: c["send_oct"])  # the one the 3 messages went out on
    assert before <= mine["connected_at"] <= after and mine["send_cnt"] > 0
    assert mine["recv_oct"] > 0 and mine["send_oct"] >= 3 * len(b"m0")


def test_a_wrong_url_or_password_fails_clearly(broker):
    r = cli("list", "streams", "--management-url", f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "cannot reach the management API" in r.stderr
    r = listing(broker, "streams", "--user", "guest", "--password", "wrong")
    assert r.returncode == 1 and "answered 401" in r.stderr and "management tag" in r.stderr
    r = cli("list", "streams", "--management-url", "amqp://127.0.0.1:5672")
    assert r.returncode == 2 and "http://" in r.stderr
