"""Tracking metrics scraped from a real broker's /metrics: deduplicated messages per stream (fed
by both protocols' named publishers) and the lag of each consumer name (committed end - 1 -
the offset stored for it), computed at scrape time from the stream's tracking state."""

from __future__ import annotations

import urllib.request

from proton import Message

from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient
from tests.broker.amqp import Client, Delivery
from tests.broker.test_dedup import send


def scrape(b: BrokerProcess) -> dict[str, float]:
    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_deduplicated_messages_and_consumer_name_lag(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        with Client(b.url) as c:
            c.declare("s")
            assert send(c, "s", "pub", [(1, "a"), (2, "b")]) == [Delivery.ACCEPTED] * 2
            # a retry over AMQP: 2 is a duplicate, 3 is new
            assert send(c, "s", "pub", [(2, "b"), (3, "c")]) == [Delivery.ACCEPTED] * 2
            with StreamClient("127.0.0.1", b.stream_port) as sc:
                assert sc.declare_publisher(1, "s", "pub") == OK
                # over the stream protocol: 1..3 are duplicates, 4 is new
                sc.publish(1, [(i, Message(body=f"m{i}").encode()) for i in (1, 2, 3, 4)])
                assert sc.wait_confirms(1, [1, 2, 3, 4]) == {i: OK for i in (1, 2, 3, 4)}
                sc.store_offset("behind", "s", 1)  # a stream-protocol consumer's offset
            # stored: a, b, c, m4 at 0..3; then the offsets' tracking chunk(s)
            assert c.request("PUT", "/queues/s/offsets/caught-up", {"offset": 3})[0] == 200
            c.publish("s", [Message(body="end")])  # accepted: everything before is committed
            end = c.info("s")["next_offset"]
            values = scrape(b)
            assert values['amqp_stream_deduplicated_messages_total{stream="s"}'] == 4
            lag = 'amqp_stream_consumer_name_lag_messages{{consumer="{}",stream="s"}}'
            assert values[lag.format("behind")] == end - 1 - 1
            assert values[lag.format("caught-up")] == end - 1 - 3
            # the stored offset moves: the lag follows at the next scrape
            assert c.request("PUT", "/queues/s/offsets/behind", {"offset": 3})[0] == 200
            c.publish("s", [Message(body="end")])
            end = c.info("s")["next_offset"]
            values = scrape(b)
            assert values[lag.format("behind")] == values[lag.format("caught-up")] == end - 1 - 3
