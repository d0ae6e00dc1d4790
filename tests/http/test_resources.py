"""The management API's listings and changes against a real broker, with real clients of both
protocols (rstream, proton): streams (PUT, GET with the messages published, DELETE), exchanges
and bindings (a super stream made over HTTP is what the stream protocol's partitions query
answers), connections of both protocols (DELETE closes one), consumers, the stream plugin's
publishers and consumers, overview, nodes, vhosts, users, permissions."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess
from tests.http.api import call, quote
from tests.polling import wait_for

rstream = pytest.importorskip("rstream")
from rstream import Consumer, Producer  # noqa: E402

TIMEOUT = 60


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def get(broker: BrokerProcess, path: str):
    answer = call(broker, "GET", path)
    assert answer.status == 200, (path, answer.status, answer.body[:300])
    return answer.json


def test_a_stream_declared_listed_counted_and_deleted(broker):
    name = f"http-{uuid.uuid4().hex[:8]}"
    body = {"durable": True, "arguments": {"x-queue-type": "stream", "x-max-age": "1h"}}
    assert call(broker, "PUT", f"/api/queues/%2F/{name}", body).status == 201
    assert call(broker, "PUT", f"/api/queues/%2F/{name}", body).status == 204
    other = call(broker, "PUT", f"/api/queues/%2F/{name}", {"arguments": {"x-max-age": "2h"}})
    assert other.status == 400 and "x-max-age" in other.json["reason"]

    async def publish() -> None:
        async with Producer(broker.host, broker.stream_port, username="guest",
                            password="guest") as producer:
            for i in range(25):
                await producer.send_wait(name, f"m{i}".encode())

    run(publish())
    queue = get(broker, f"/api/queues/%2F/{name}")
    assert queue["type"] == "stream" and queue["vhost"] == "/" and queue["durable"] is True
    assert queue["arguments"]["x-max-age"] == "1h"
    assert queue["messages"] == 25 and queue["segments"] == 1
    assert queue["leader"] == queue["node"] and queue["members"] == [queue["node"]]
    assert name in [q["name"] for q in get(broker, "/api/queues")]
    assert name in [q["name"] for q in get(broker, "/api/queues/%2F/")]
    overview = get(broker, "/api/overview")
    assert overview["object_totals"]["queues"] >= 1 and overview["queue_totals"]["messages"] >= 25

    assert call(broker, "DELETE", f"/api/queues/%2F/{name}").status == 204
    assert call(broker, "GET", f"/api/queues/%2F/{name}").status == 404
    assert call(broker, "DELETE", f"/api/queues/%2F/{name}").status == 404


def test_a_super_stream_made_over_http_is_what_the_stream_protocol_sees(broker):
    name = f"super-{uuid.uuid4().hex[:8]}"
    answer = call(broker, "PUT", f"/api/exchanges/%2F/{name}",
                  {"type": "direct", "durable": True, "arguments": {"x-super-stream": True}})
    assert answer.status == 201
    for i in range(3):
        assert call(broker, "PUT", f"/api/queues/%2F/{name}-{i}", {"durable": True}).status == 201
    for i in (2, 0, 1):  # bound out of order: the partition order argument decides
        answer = call(broker, "POST", f"/api/bindings/%2F/e/{name}/q/{name}-{i}",
                      {"routing_key": str(i), "arguments": {"x-stream-partition-order": i}})
        assert answer.status == 201, answer.body
    exchange = get(broker, f"/api/exchanges/%2F/{name}")
    assert exchange["type"] == "direct" and exchange["arguments"] == {"x-super-stream": True}
    bindings = [b for b in get(broker, "/api/bindings") if b["source"] == name]
    assert sorted(b["destination"] for b in bindings) == [f"{name}-{i}" for i in range(3)]

    async def partitions() -> list[str]:
        async with Producer(broker.host, broker.stream_port, username="guest",
                            password="guest") as producer:
            client = await producer.default_client
            return await client.partitions(name)

    assert run(partitions()) == [f"{name}-{i}" for i in range(3)]
    assert call(broker, "DELETE", f"/api/exchanges/%2F/{name}").status == 204
    assert [b for b in get(broker, "/api/bindings") if b["source"] == name] == []


def test_connections_of_both_protocols_listed_and_closed(broker):
    stream = f"conn-{uuid.uuid4().hex[:8]}"
    call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True})
    amqp = BlockingConnection(broker.url, timeout=10, user="guest", password="guest",
                              allowed_mechs="PLAIN")
    closed: list[str] = []

    async def scenario() -> None:
        consumer = Consumer(broker.host, broker.stream_port, username="guest",
                            password="guest", connection_name="http-test-consumer",
                            on_close_handler=lambda info: _note(closed, info))
        await consumer.start()
        await consumer.subscribe(stream, callback=lambda m, c: None,
                                 properties={"identifier": "my-id"})
        producer = Producer(broker.host, broker.stream_port, username="guest",
                            password="guest", connection_name="http-test-producer")
        await producer.start()
        await producer.send_wait(stream, b"x")  # declares the publisher
        try:
            await asyncio.to_thread(_check_listings, broker, stream)
            name = next(c["name"] for c in await asyncio.to_thread(get, broker, "/api/connections")
                        if c["client_properties"].get("connection_name") == "http-test-consumer")
            answer = await asyncio.to_thread(call, broker, "DELETE",
                                             f"/api/connections/{quote(name)}")
            assert answer.status == 204
            await asyncio.to_thread(wait_for, lambda: call(
                broker, "GET", f"/api/connections/{quote(name)}").status == 404, 10,
                "the consumer's connection gone")
            await asyncio.to_thread(wait_for, lambda: closed, 10, "the client told")
        finally:
            await producer.close()
            await consumer.close()

    try:
        run(scenario())
        assert closed  # the client was told (rstream logs the Close frame and its reason)
        amqp_conns = [c for c in get(broker, "/api/connections") if c["protocol"] == "AMQP 1-0"]
        assert len(amqp_conns) == 1 and amqp_conns[0]["user"] == "guest"
        name = amqp_conns[0]["name"]
        assert call(broker, "DELETE", f"/api/connections/{quote(name)}").status == 204
        wait_for(lambda: not [c for c in get(broker, "/api/connections")
                              if c["protocol"] == "AMQP 1-0"], 10, "the AMQP connection gone")
    finally:
        try:
            amqp.close()
        except Exception:
            pass  # closed by the broker: what was asked


async def _note(closed: list[str], info: object) -> None:
    closed.append(str(getattr(info, "reason", info)))


def _check_listings(broker: BrokerProcess, stream: str) -> None:
    connections = get(broker, "/api/connections")
    protocols = [c["protocol"] for c in connections]
    # rstream opens a locator connection beside a leader's
    assert protocols.count("AMQP 1-0") == 1 and protocols.count("stream") >= 2, protocols
    for c in connections:
        assert c["vhost"] == "/" and c["peer_host"] == "127.0.0.1" and c["user"] == "guest"
        assert c["name"] == f"{c['peer_host']}:{c['peer_port']} -> {c['host']}:{c['port']}"
    streams = get(broker, "/api/stream/connections")
    names = {c["client_properties"]["connection_name"] for c in streams}
    assert {"http-test-consumer", "http-test-producer"} <= names, names
    consumer_conn = next(c for c in streams
                         if c["client_properties"]["connection_name"] == "http-test-consumer")

    consumers = [c for c in get(broker, "/api/stream/consumers/%2F/") if c["queue"]["name"] == stream]
    assert len(consumers) == 1
    assert consumers[0]["properties"]["identifier"] == "my-id"
    assert consumers[0]["connection_details"]["name"] == consumer_conn["name"]
    assert consumers[0]["active"] is True and consumers[0]["activity_status"] == "up"
    tags = [c["consumer_tag"] for c in get(broker, "/api/consumers/%2F/")
            if c["queue"]["name"] == stream]
    assert tags == [f"stream.subid-{consumers[0]['subscription_id']}"]
    per_connection = get(broker, f"/api/stream/connections/%2F/{quote(consumer_conn['name'])}"
                                 "/consumers")
    assert [c["credits"] >= 0 for c in per_connection] == [True]

    publishers = get(broker, f"/api/stream/publishers/%2F/{stream}")
    assert len(publishers) == 1 and publishers[0]["queue"]["name"] == stream
    assert get(broker, "/api/stream/publishers/%2F/no-such-stream") == []


def test_overview_nodes_vhosts_users_permissions(broker):
    node = get(broker, "/api/overview")["node"]
    assert [n["name"] for n in get(broker, "/api/nodes")] == [node]
    assert get(broker, f"/api/nodes/{quote(node)}")["running"] is True
    assert [v["name"] for v in get(broker, "/api/vhosts")] == ["/"]
    assert get(broker, "/api/vhosts/%2F")["name"] == "/"
    assert call(broker, "PUT", "/api/vhosts/other").status == 501
    assert get(broker, "/api/whoami") == {"name": "guest", "tags": ["administrator"]}
    assert [u["name"] for u in get(broker, "/api/users")] == ["guest"]
    assert get(broker, "/api/permissions") == [
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}]


def test_users_of_the_users_file(tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:secret\nbob:other\n")
    users.chmod(0o600)
    b = BrokerProcess(tmp_path / "data", extra_args=["--users", str(users)])
    b.start()
    try:
        assert call(b, "GET", "/api/whoami", auth=("guest", "guest")).status == 401
        assert call(b, "GET", "/api/whoami", auth=("alice", "nope")).status == 401
        answer = call(b, "GET", "/api/users", auth=("alice", "secret"))
        assert [u["name"] for u in answer.json] == ["alice", "bob"]
    finally:
        b.close()


def test_served_on_asyncio_s_own_loop_too(tmp_path):
    """``--event-loop asyncio``: the API runs on whichever loop the broker runs."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--event-loop", "asyncio"])
    b.start()
    try:
        assert call(b, "PUT", "/api/queues/%2F/on-asyncio", {"durable": True}).status == 201
        assert [q["name"] for q in get(b, "/api/queues")] == ["on-asyncio"]
    finally:
        b.close()


def test_a_binding_s_location_names_it_for_get_and_delete(broker):
    """POST of a binding answers 201 with the binding's path as its Location, each segment
    encoded (the vhost `/` as `%2F`, a key `eu.#` as `eu.%23`), so a client can GET and DELETE
    what it made; to a stream and to an exchange."""
    name = f"loc-{uuid.uuid4().hex[:8]}"
    assert call(broker, "PUT", f"/api/queues/%2F/{name}", {"durable": True}).status == 201
    for exchange in (name, f"{name}-x"):
        assert call(broker, "PUT", f"/api/exchanges/%2F/{exchange}", {"type": "topic"}).status == 201
    for kind, destination in (("q", name), ("e", f"{name}-x")):
        answer = call(broker, "POST", f"/api/bindings/%2F/e/{name}/{kind}/{destination}",
                      {"routing_key": "eu.#"})
        assert answer.status == 201, answer.body
        location = answer.headers["Location"]
        assert location == f"/api/bindings/%2F/e/{name}/{kind}/{destination}/eu.%23"
        found = call(broker, "GET", location)
        assert found.status == 200 and found.json["routing_key"] == "eu.#", found.body
        assert call(broker, "DELETE", location).status == 204
        assert call(broker, "GET", location).status == 404
    for exchange in (name, f"{name}-x"):
        call(broker, "DELETE", f"/api/exchanges/%2F/{exchange}")
    call(broker, "DELETE", f"/api/queues/%2F/{name}")
