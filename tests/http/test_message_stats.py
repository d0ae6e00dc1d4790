"""RabbitMQ's ``message_stats`` on ``/api/overview`` and ``/api/queues``: counts from the
broker's counters, rates from the API's own samples, seen after a real client published and
consumed."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from amqp_stream.testing import BrokerProcess
from tests.http.api import call
from tests.polling import wait_for

rstream = pytest.importorskip("rstream")
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer  # noqa: E402

N = 50


def get(broker: BrokerProcess, path: str):
    answer = call(broker, "GET", path)
    assert answer.status == 200, (path, answer.status, answer.body[:300])
    return answer.json


async def publish_and_consume(broker: BrokerProcess, stream: str) -> None:
    async with Producer(broker.host, broker.stream_port, username="guest",
                        password="guest") as producer:
        for i in range(N):
            await producer.send_wait(stream, f"m{i}".encode())
    got: list[bytes] = []
    async with Consumer(broker.host, broker.stream_port, username="guest",
                        password="guest") as consumer:
        await consumer.subscribe(stream, callback=lambda m, c: got.append(m),
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST))
        deadline = asyncio.get_running_loop().time() + 20
        while len(got) < N and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)  # polling the callback's list, bounded
    assert len(got) == N


def test_counts_and_rates_after_publishing_and_consuming(broker):
    stream = f"stats-{uuid.uuid4().hex[:8]}"
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status in (201, 204)
    before = get(broker, "/api/overview")["message_stats"]  # the first sample: nothing yet
    assert before["publish"] == 0 and before["publish_details"] == {"rate": 0.0}
    asyncio.run(asyncio.wait_for(publish_and_consume(broker, stream), 60))

    def seen() -> bool:
        stats = get(broker, "/api/overview")["message_stats"]
        queue = get(broker, f"/api/queues/%2F/{stream}")["message_stats"]
        return (stats["publish"] == N and stats["confirm"] == N and stats["deliver_get"] == N
                and stats["publish_details"]["rate"] > 0
                and stats["deliver_get_details"]["rate"] > 0
                and queue["publish"] == N and queue["deliver_get"] == N
                and queue["publish_details"]["rate"] > 0)

    wait_for(seen, 15, "the counts and positive rates of a second sample")
    listed = next(q for q in get(broker, "/api/queues") if q["name"] == stream)
    assert listed["message_stats"]["publish"] == N
