"""Super streams with rabbitmq-stream-js-client (npm, through Node): createSuperStream with a
partition count and with binding keys, a SuperStreamPublisher routing by hash (the Java and
Node clients' murmur3 32-bit of the key's UTF-8, seed 104729, computed here too) and by key
(Route), every partition read back, queryPartitions, routeQuery, deleteSuperStream, the
refusals, and a group of the client's SuperStreamConsumers (single active consumers, as that
class always subscribes). ``tests/stream/js/super_stream.js`` runs one scenario per call."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import mmh3
import pytest

from amqp_stream.testing import BrokerProcess

JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")

pytestmark = [pytest.mark.skipif(NODE is None, reason="node is not installed"),
              pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("js-super") / "data")
    b.start()
    yield b
    b.close()


def run(broker: BrokerProcess, spec: dict) -> dict:
    if not (JS / "node_modules" / "rabbitmq-stream-js-client").is_dir():
        pytest.fail("rabbitmq-stream-js-client is not installed: npm ci in tests/stream/js")
    done = subprocess.run([NODE, str(JS / "super_stream.js"),
                           json.dumps(dict(spec, port=broker.stream_port))],
                          capture_output=True, text=True, timeout=60, cwd=JS)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_partition(key: str, n: int) -> int:
    return mmh3.hash(key.encode("utf-8"), 104729, signed=False) % n


def test_hash_routing_consume_and_delete(broker):
    ss = f"js-{uuid.uuid4().hex[:8]}"
    keys = [f"key-{i}" for i in range(40)]
    out = run(broker, {"superStream": ss, "create": {"partitions": 3},
                       "publish": [{"content": k, "key": k} for k in keys],
                       "route": ["0", "2", "none"], "consume": {"expect": len(keys)},
                       "delete": True})
    assert out["created"] and out["deleted"]
    assert out["partitions"] == [f"{ss}-0", f"{ss}-1", f"{ss}-2"]
    assert out["routes"] == {"0": [f"{ss}-0"], "2": [f"{ss}-2"], "none": []}
    got: dict[str, list[str]] = {}
    for stream, content in out["messages"]:
        got.setdefault(stream, []).append(content)
    expected: dict[str, list[str]] = {}
    for k in keys:
        expected.setdefault(f"{ss}-{node_partition(k, 3)}", []).append(k)
    assert got == expected and len(got) == 3
    gone = run(broker, {"superStream": ss, "delete": True})
    assert "partitionsError" in gone and "deleteError" in gone


def test_key_routing_with_binding_keys(broker):
    ss = f"js-{uuid.uuid4().hex[:8]}"
    regions = ["eu", "us", "ap"]
    out = run(broker, {"superStream": ss, "create": {"bindingKeys": regions},
                       "routing": "key",
                       "publish": [{"content": f"{r}{i}", "key": r}
                                   for i in range(4) for r in regions],
                       "consume": {"expect": 12}, "delete": True})
    assert out["partitions"] == [f"{ss}-{r}" for r in regions]
    assert sorted(out["messages"]) == sorted([f"{ss}-{r}", f"{r}{i}"]
                                             for i in range(4) for r in regions)


def test_create_refused_when_a_partition_exists(broker):
    ss = f"js-{uuid.uuid4().hex[:8]}"
    run(broker, {"superStream": f"{ss}-x", "create": {"partitions": 1}})  # makes <ss>-x-0
    out = run(broker, {"superStream": ss, "create": {"bindingKeys": ["x-0", "y"]}})
    # the client takes the answer, STREAM_ALREADY_EXISTS, for a success; nothing was made
    assert "Stream does not exist" in out["partitionsError"], out
    assert not list((broker.data_dir / "streams").glob(f"{ss}-y"))
    run(broker, {"superStream": f"{ss}-x", "delete": True})


def test_super_stream_consumer_group(broker):
    """3 SuperStreamConsumers of one consumerRef (each on a client of its own) over 3
    partitions: partition i's messages all go to member i (RabbitMQ's choice, index mod group
    size), each once; when the third's client closes, its partition moves to member 2 mod 2 =
    the first, which reads it from the offset it answers (the client's: first), so the
    partition's earlier messages come again there."""
    ss = f"js-{uuid.uuid4().hex[:8]}"
    keys = [f"k{i}" for i in range(30)]
    later = [f"later-{i}" for i in range(30)]
    out = run(broker, {"superStream": ss, "create": {"partitions": 3},
                       "group": {"members": 3,
                                 "publish": [{"content": k, "key": k} for k in keys],
                                 "publishAfter": [{"content": k, "key": k} for k in later]},
                       "delete": True})
    seen = out["group"]
    first = [g for g in seen if g[2] in keys]
    assert sorted(c for _, _, c in first[:len(keys)]) == sorted(keys)  # each once, before
    for member, partition, content in first[:len(keys)]:
        p = node_partition(content, 3)
        assert partition == f"{ss}-{p}" and member == p, (member, partition, content)
    after = seen[seen.index(first[len(keys) - 1]) + 1:]
    assert sorted(c for _, _, c in after if c in later) == sorted(later)  # each once
    for member, partition, content in after:
        p = node_partition(content, 3)
        assert partition == f"{ss}-{p}" and member == p % 2, (member, partition, content)
    again = sorted(c for _, _, c in after if c in keys)
    assert again == sorted(k for k in keys if node_partition(k, 3) == 2)
