"""RabbitMQ's connection, publisher and subscription statistics on the HTTP API, against a real
broker with real clients (rstream, proton): each value is checked against what the test itself
did (the bytes it sent and took, the messages published, refused and consumed, the time it
connected, the sessions it began), so that a counter counting the wrong thing fails here."""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid

import pytest
from proton import Described, Endpoint, Message, SSLDomain, symbol
from proton.reactor import Filter
from proton.utils import BlockingConnection

from amqp_stream.http.rates import INTERVAL
from amqp_stream.testing import BrokerProcess
from tests.http.api import call, quote
from tests.polling import wait_for
from tests.stream.test_tls import certificate  # noqa: F401 (the fixture)

rstream = pytest.importorskip("rstream")
from rstream import (Consumer, ConsumerOffsetSpecification, OffsetSpecification,  # noqa: E402
                     OffsetType, Producer)

BROKER_ARGS = ("--max-message-size", "20000")  # a larger message is refused: errored
TIMEOUT = 60
SIZE = 4000  # bytes of each message body
N = 40
FIRST = Described(symbol("rabbitmq:stream-offset-spec"), "first")

pytestmark = pytest.mark.timeout(180)


def get(broker: BrokerProcess, path: str):
    answer = call(broker, "GET", path)
    assert answer.status == 200, (path, answer.status, answer.body[:300])
    return answer.json


def now_ms() -> int:
    return int(time.time() * 1000)


def by_name(rows: list[dict], name: str) -> dict:
    return next(r for r in rows if r["name"] == name)


def test_stream_publisher_subscription_and_connection_statistics(broker):
    stream = f"stats-{uuid.uuid4().hex[:8]}"
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201
    bodies = [bytes([65 + i % 26]) * SIZE for i in range(N)]  # one size: the packed path

    async def scenario() -> tuple:
        before = now_ms()
        producer = Producer(broker.host, broker.stream_port, username="guest", password="guest")
        consumer = Consumer(broker.host, broker.stream_port, username="guest", password="guest")
        await producer.start()
        await consumer.start()
        try:
            confirms: list = []
            await producer.send_batch(stream, bodies, on_publish_confirm=confirms.append)
            await producer.send_batch(stream, [b"z" * 30000], on_publish_confirm=confirms.append)
            await asyncio.to_thread(wait_for, lambda: len(confirms) == N + 1, 30,
                                    "every message confirmed or refused")
            assert sum(not c.is_confirmed for c in confirms) == 1
            received: list = []
            await consumer.subscribe(
                stream, callback=lambda m, ctx: received.append(m), initial_credit=5,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await asyncio.to_thread(wait_for, lambda: len(received) == N, 30, "all consumed")
            after = now_ms()  # rstream connects to the leader on the first send, subscribe
            read = await asyncio.to_thread(_read, broker, stream)
            await _check_rate(broker, producer, stream, read[0][0]["connection_details"]["name"])
            return (before, after) + read
        finally:
            await producer.close()
            await consumer.close()

    before, after, publishers, subs, conns, everyone = asyncio.run(
        asyncio.wait_for(scenario(), TIMEOUT))

    assert len(publishers) == 1
    pub = publishers[0]
    # rabbit_stream_reader: published counts every message received, refused ones too
    assert (pub["published"], pub["confirmed"], pub["errored"]) == (N + 1, N, 1)
    assert isinstance(pub["publisher_id"], int) and pub["reference"] == ""
    (sub,) = [s for s in subs if s["queue"]["name"] == stream]
    assert sub["consumed"] == N and sub["offset"] == N - 1 and sub["offset_lag"] == 0
    assert sub["credits"] >= 0 and sub["active"] is True and sub["activity_status"] == "up"

    pub_conn = by_name(conns, pub["connection_details"]["name"])
    sub_conn = by_name(conns, sub["connection_details"]["name"])
    assert pub_conn["recv_oct"] >= N * SIZE + 30000  # every byte the producer published
    assert sub_conn["send_oct"] >= N * SIZE  # every byte the consumer was sent
    assert sub_conn["recv_oct"] < N * SIZE and pub_conn["send_oct"] < N * SIZE
    for c in (pub_conn, sub_conn):
        assert before <= c["connected_at"] <= after, (before, c["connected_at"], after)
        assert (c["channels"], c["channel_max"]) == (0, 0)  # rabbit_stream_reader's
        # counted per recv/send call: at least one, never more than one per byte
        assert 1 <= c["recv_cnt"] <= c["recv_oct"] and 1 <= c["send_cnt"] <= c["send_oct"]
        assert c["send_pend"] == 0 and (c["ssl"], c["ssl_protocol"]) == (False, "")
        # /api/connections lists the same counts
        same = by_name(everyone, c["name"])
        assert same["recv_oct"] >= c["recv_oct"] and same["connected_at"] == c["connected_at"]


def _read(broker: BrokerProcess, stream: str) -> tuple:
    return (get(broker, f"/api/stream/publishers/%2F/{stream}"),
            get(broker, "/api/stream/consumers"), get(broker, "/api/stream/connections"),
            get(broker, "/api/connections"))


async def _check_rate(broker: BrokerProcess, producer: Producer, stream: str, name: str) -> None:
    """recv_oct's rate: the bytes between the API's two newest samples (taken on request, at
    least ``INTERVAL`` apart) over their distance; publish and ask until it is above 0."""
    path = f"/api/stream/connections/%2F/{quote(name)}"
    deadline = time.monotonic() + 30
    while True:
        await producer.send_wait(stream, b"r" * SIZE)
        conn = await asyncio.to_thread(get, broker, path)
        rate = conn["recv_oct_details"]["rate"]
        if rate > 0:
            break
        assert time.monotonic() < deadline, "recv_oct's rate never above 0 while publishing"
    assert rate <= conn["recv_oct"] / INTERVAL
    assert conn["send_oct_details"]["rate"] >= 0


def test_amqp_connection_statistics_and_sessions(broker):
    stream = f"stats-amqp-{uuid.uuid4().hex[:8]}"
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201
    before = now_ms()
    conn = BlockingConnection(broker.url, timeout=TIMEOUT, user="guest", password="guest",
                              allowed_mechs="PLAIN")
    after = now_ms()
    try:
        sender = conn.create_sender(f"/queues/{stream}")
        for i in range(N):
            sender.send(Message(body=bytes([65 + i % 26]) * SIZE))
        receiver = conn.create_receiver(
            f"/queues/{stream}", credit=N,
            options=Filter({symbol("rabbitmq:stream-offset-spec"): FIRST}))
        for _ in range(N):
            receiver.receive(timeout=TIMEOUT)
            receiver.accept()
        extra = conn.conn.session()  # a second session: RabbitMQ 4 counts it as a channel
        extra.open()
        conn.wait(lambda: extra.state & Endpoint.REMOTE_ACTIVE, msg="the session begun")

        def mine() -> dict:
            (c,) = [c for c in get(broker, "/api/connections") if c["protocol"] == "AMQP 1-0"]
            return c

        c = mine()
        assert c["recv_oct"] >= N * SIZE and c["send_oct"] >= N * SIZE
        assert 1 <= c["recv_cnt"] <= c["recv_oct"] and 1 <= c["send_cnt"] <= c["send_oct"]
        assert before <= c["connected_at"] <= after, (before, c["connected_at"], after)
        assert c["channels"] == 2 and c["channel_max"] > 0
        assert c["container_id"] == conn.conn.container
        assert get(broker, f"/api/connections/{quote(c['name'])}")["channels"] == 2
        extra.close()
        conn.wait(lambda: extra.state & Endpoint.REMOTE_CLOSED, msg="the session ended")
        wait_for(lambda: mine()["channels"] == 1, 10, "one session left")
    finally:
        conn.close()


def test_tls_connections_count_what_went_on_the_wire(tmp_path, certificate):  # noqa: F811
    """TLS on both protocols: the counts are of the records on the socket (a subscription's
    chunks are encrypted, not sendfile'd: ``TlsStreamConnection.write``) and ``ssl_protocol``
    is the version agreed."""
    cert, key = certificate
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(cert))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, str(cert))
    context = ssl.create_default_context(cafile=str(cert))
    stream = "over-tls"
    bodies = [bytes([65 + i % 26]) * SIZE for i in range(N)]
    with BrokerProcess(tmp_path / "data", extra_args=["--tls-cert", str(cert),
                                                      "--tls-key", str(key)]) as b:
        amqp = BlockingConnection(f"amqps://localhost:{b.port}", timeout=TIMEOUT,
                                  ssl_domain=domain, user="guest", password="guest",
                                  allowed_mechs="PLAIN")

        async def scenario() -> tuple:
            async with Producer("localhost", b.stream_tls_port, username="guest",
                                password="guest", ssl_context=context) as producer:
                confirms: list = []
                await producer.send_batch(stream, bodies, on_publish_confirm=confirms.append)
                await asyncio.to_thread(wait_for, lambda: len(confirms) == N, 30, "confirms")
            consumer = Consumer("localhost", b.stream_tls_port, username="guest",
                                password="guest", ssl_context=context)
            await consumer.start()
            try:
                received: list = []
                await consumer.subscribe(
                    stream, callback=lambda m, ctx: received.append(m),
                    offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
                await asyncio.to_thread(wait_for, lambda: len(received) == N + 1, 30, "consumed")
                return await asyncio.to_thread(lambda: (get(b, "/api/stream/consumers"),
                                                        get(b, "/api/connections")))
            finally:
                await consumer.close()

        try:
            assert call(b, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201
            sender = amqp.create_sender(f"/queues/{stream}")
            sender.send(Message(body=b"a" * SIZE))
            subs, conns = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
        finally:
            amqp.close()
    (amqp_conn,) = [c for c in conns if c["protocol"] == "AMQP 1-0"]
    assert amqp_conn["ssl"] is True and amqp_conn["ssl_protocol"].startswith("tlsv1.")
    assert amqp_conn["recv_oct"] >= SIZE
    sub_conn = by_name(conns, subs[0]["connection_details"]["name"])
    assert sub_conn["ssl"] is True and sub_conn["ssl_protocol"].startswith("tlsv1.")
    assert sub_conn["send_oct"] >= N * SIZE and sub_conn["send_cnt"] >= 1


def test_single_active_consumers_listed_active_and_waiting(broker):
    """Two members of one group: ``rabbit_stream_utils:consumer_activity_status`` gives
    ``single_active`` to the one that is sent messages and ``waiting`` to the other, whose
    ``consumed`` stays 0."""
    stream = f"stats-sac-{uuid.uuid4().hex[:8]}"
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201

    async def scenario() -> list:
        async with Producer(broker.host, broker.stream_port, username="guest",
                            password="guest") as producer:
            await producer.send_batch(stream, [b"s%d" % i for i in range(5)])
        members = [Consumer(broker.host, broker.stream_port, username="guest", password="guest")
                   for _ in range(2)]
        got: list[list] = [[], []]

        async def on_update(active: bool, ctx: object) -> OffsetSpecification:
            return OffsetSpecification(OffsetType.FIRST, 0)
        try:
            for member, inbox in zip(members, got, strict=True):
                await member.start()
                await member.subscribe(
                    stream, callback=lambda m, ctx, inbox=inbox: inbox.append(m),
                    offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
                    properties={"single-active-consumer": "true", "name": "group"},
                    consumer_update_listener=on_update)
            await asyncio.to_thread(wait_for, lambda: len(got[0]) == 5, 30, "the first consumed")

            def listed() -> list:
                return [s for s in get(broker, "/api/stream/consumers")
                        if s["queue"]["name"] == stream]
            await asyncio.to_thread(wait_for, lambda: [s["consumed"] for s in listed()] in (
                [5, 0], [0, 5]), 30, "both listed, the first with its 5 messages")
            return await asyncio.to_thread(listed)
        finally:
            for member in members:
                await member.close()

    subs = asyncio.run(asyncio.wait_for(scenario(), TIMEOUT))
    by_status = {s["activity_status"]: s for s in subs}
    assert set(by_status) == {"single_active", "waiting"}
    active, waiting = by_status["single_active"], by_status["waiting"]
    assert (active["active"], active["consumed"], active["offset"]) == (True, 5, 4)
    assert (waiting["active"], waiting["consumed"]) == (False, 0)
    assert active["properties"]["name"] == waiting["properties"]["name"] == "group"
