"""The stream listener with rabbitmq-stream-js-client (npm, through Node, like the rhea tests):
create, publish with and without filter values (confirms), consume from first, from an offset
and with filter values plus match-unfiltered (the client enables filtering only for a server
version >= 3.13.0), a named publisher's retries deduplicated, a consumer's stored offset,
StreamStats, delete. ``tests/stream/js/client.js`` runs one scenario per call."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from amqp_stream.testing import BrokerProcess

JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")

pytestmark = [pytest.mark.skipif(NODE is None, reason="node is not installed"),
              pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("js") / "data", extra_args=["--fsync", "never"])
    b.start()
    yield b
    b.close()


def run(broker: BrokerProcess, spec: dict) -> dict:
    if not (JS / "node_modules" / "rabbitmq-stream-js-client").is_dir():
        pytest.fail("rabbitmq-stream-js-client is not installed: npm ci in tests/stream/js")
    done = subprocess.run([NODE, str(JS / "client.js"), json.dumps(dict(spec, port=broker.stream_port))],
                          capture_output=True, text=True, timeout=60, cwd=JS)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_publish_and_consume(broker):
    stream = f"js-{uuid.uuid4().hex[:8]}"
    out = run(broker, {"stream": stream, "create": True,
                       "publish": [{"content": f"m{i}"} for i in range(20)],
                       "consume": {"offset": "first", "expect": 20}})
    assert out["confirmed"] == 20 and out["errors"] == []
    assert out["messages"] == [[i, f"m{i}"] for i in range(20)]
    later = run(broker, {"stream": stream, "consume": {"offset": ["offset", 15], "expect": 5},
                         "delete": True})
    assert later["messages"] == [[15 + i, f"m{15 + i}"] for i in range(5)]


def test_filter_values_and_match_unfiltered(broker):
    stream = f"js-{uuid.uuid4().hex[:8]}"
    run(broker, {"stream": stream, "create": True, "filtered": True,
                 "publish": [{"content": f"a{i}", "value": "A"} for i in range(5)]})
    run(broker, {"stream": stream, "filtered": True,
                 "publish": [{"content": f"b{i}", "value": "B"} for i in range(5)]})
    run(broker, {"stream": stream, "publish": [{"content": "plain"}]})
    out = run(broker, {"stream": stream, "consume": {"offset": "first", "values": ["B"],
                                                     "matchUnfiltered": True, "expect": 6}})
    # chunks of A are not delivered: B's and the one without a value are
    assert out["messages"] == [[5 + i, f"b{i}"] for i in range(5)] + [[10, "plain"]]


def test_messages_without_a_value_after_a_burst_are_not_sent_to_its_consumers(broker):
    """The client's own filtering test ("published messages are filtered on the server side
    keeping only the ones with filter value"): a named publisher sends 1,000 messages with
    value A, 1,000 with B, 1,000 without; a consumer of A and B without match-unfiltered may
    be sent at most 150 of those without. Here none: the end of a long run ends its chunk
    however the frames came (10 more of A mark the end)."""
    stream = f"js-{uuid.uuid4().hex[:8]}"
    publish = ([{"content": f"a{i}", "value": "A"} for i in range(1000)]
               + [{"content": f"b{i}", "value": "B"} for i in range(1000)]
               + [{"content": f"u{i}"} for i in range(1000)]
               + [{"content": f"z{i}", "value": "A"} for i in range(10)])
    out = run(broker, {"stream": stream, "create": True, "filtered": True,
                       "publisherRef": "js-filter", "publish": publish,
                       "consume": {"offset": "first", "values": ["A", "B"], "expect": 2010}})
    assert out["confirmed"] == 3010 and out["errors"] == []
    got = [content for _, content in out["messages"]]
    assert [c for c in got if c.startswith("u")] == []
    assert got == [m["content"] for m in publish if "value" in m]


def test_named_publisher_retries_are_stored_once(broker):
    stream = f"js-{uuid.uuid4().hex[:8]}"
    first = run(broker, {"stream": stream, "create": True, "publisherRef": "js-pub",
                         "publish": [{"content": f"m{i}", "id": i} for i in range(1, 11)]})
    assert first["confirmed"] == 10 and first["errors"] == [] and first["lastPublishingId"] == 10
    # a new connection retries 6..10 and goes on to 15: all confirmed, 6..10 not stored again
    again = run(broker, {"stream": stream, "publisherRef": "js-pub",
                         "publish": [{"content": f"r{i}", "id": i} for i in range(6, 16)],
                         "consume": {"offset": "first", "expect": 15}})
    assert again["confirmed"] == 10 and again["errors"] == [] and again["lastPublishingId"] == 15
    assert again["messages"] == ([[i - 1, f"m{i}"] for i in range(1, 11)]
                                 + [[i - 1, f"r{i}"] for i in range(11, 16)])


def test_consumer_stores_and_queries_its_offset(broker):
    stream = f"js-{uuid.uuid4().hex[:8]}"
    none = run(broker, {"stream": stream, "create": True, "queryOffset": "js-reader",
                        "publish": [{"content": f"m{i}"} for i in range(5)]})
    assert none["offset"] is None
    run(broker, {"stream": stream, "consume": {"offset": "first", "expect": 5, "ref": "js-reader",
                                               "store": 3}})
    assert run(broker, {"stream": stream, "queryOffset": "js-reader"})["offset"] == 3


def test_stream_stats_has_the_three_chunk_ids(broker):
    """The client reads committed_chunk_id, first_chunk_id and last_chunk_id, the three that
    RabbitMQ answers (osiris:get_stats); its own suite's StreamStats test expects each to be a
    bigint. -1 for a stream without chunks, as osiris starts them."""
    stream = f"js-{uuid.uuid4().hex[:8]}"
    empty = run(broker, {"stream": stream, "create": True, "stats": True})
    assert empty["stats"] == {"committedChunkId": -1, "firstChunkId": -1, "lastChunkId": -1}
    run(broker, {"stream": stream, "publish": [{"content": "one"}]})
    out = run(broker, {"stream": stream, "publish": [{"content": f"m{i}"} for i in range(5)],
                       "consume": {"offset": "first", "expect": 6}, "stats": True,
                       "delete": True})
    # each run's confirmed messages are in the log: the first chunk holds "one" (offset 0)
    last = out["stats"]["lastChunkId"]
    assert out["stats"]["firstChunkId"] == 0 and 1 <= last <= 5
    assert out["stats"]["committedChunkId"] == last


def test_two_publishers_of_one_connection_are_stored_in_frame_order(broker):
    """Frames of two publishers of one connection are stored in the order they came, as
    RabbitMQ's reader hands each frame to the stream's writer in turn (the client's own suite:
    "multiple publishers working on the same stream (the order is enforced when using
    flush)"), though the broker takes a publisher's frames of a loop turn as one append."""
    stream = f"js-{uuid.uuid4().hex[:8]}"
    out = run(broker, {"stream": stream, "create": True, "alternate": 50,
                       "consume": {"offset": "first", "expect": 100}, "delete": True})
    assert [content for _, content in out["messages"]] == [
        f"{k};{i}" for i in range(50) for k in range(2)]
