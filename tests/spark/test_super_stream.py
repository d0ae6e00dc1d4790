"""Super streams through the Spark data source (issue 26): real Spark local[2], the session's
broker, super streams made with the stream protocol (rstream's low-level client).

Writes route each row by ``routingKeyColumn`` as the stream clients hash: checked against a
real rstream ``SuperStreamProducer`` sending the same keys to a twin super stream. Reads plan at
least one task per partition stream and say in the ``stream`` column where a row came from.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest
from rstream import AMQPMessage, SuperStreamProducer

from amqp_stream import client as amqp
from amqp_stream.spark import broker_requests
from amqp_stream.spark.options import OptionError, SourceOptions
from amqp_stream.spark.pushdown import streams_named
from amqp_stream.spark.super_stream import hash_index
from tests.broker.amqp import Client
from tests.stream import rstream_low

TESTS = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
REGIONS = ["eu", "us", "ap"]
# keys beyond ASCII too: UTF-16 surrogate pairs (rstream hashes UTF-16) and multi-byte UTF-8
KEYS = [f"customer-{i}" for i in range(234)] + ["Zoë", "клиент-7", "顧客-42", "ключ 😀", "ü", "𝔘𝔫𝔦"]


def make_super_stream(broker, partitions: int, name: str | None = None) -> str:
    """A super stream ``<name>`` with partitions ``<name>-0``.. made with CreateSuperStream."""
    name = name or f"ss-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with rstream_low.admin(broker) as c:
            await c.create_super_stream(name, [f"{name}-{i}" for i in range(partitions)],
                                        [str(i) for i in range(partitions)])
    rstream_low.run(go(), 30)
    return name


def orders(spark, keys=KEYS):
    rows = [(k, i, REGIONS[i % 3], f"m-{i}") for i, k in enumerate(keys)]
    return spark.createDataFrame(rows, "customer STRING, n INT, region STRING, message_id STRING")


def write(df, broker, super_stream: str, **options) -> None:
    (df.write.format("amqp-stream").option("url", broker.url).option("streamUrl", broker.stream_url)
     .option("superStream", super_stream).options(**options).mode("append").save())


def customers_by_partition(broker, super_stream: str, count: int, key=None) -> list[Counter]:
    """For each partition stream, how often each ``customer`` is in it (AMQP reads; ``key``
    takes it from a message, by default its application property)."""
    key = key or (lambda m: m.application_properties["customer"])
    out = []
    with amqp.connect(broker.url) as c:
        for i in range(count):
            with c.consumer(f"{super_stream}-{i}", offset="first") as con:
                out.append(Counter(key(m) for m in con.read_available()))
    return out


def rstream_publish(broker, super_stream: str, keys: list[str]) -> None:
    """``keys`` through rstream's ``SuperStreamProducer`` (hash routing, its default), each
    message keyed and tagged by its key, confirmed."""
    async def extractor(message: AMQPMessage) -> str:
        return message.application_properties["customer"]

    async def go() -> None:
        confirmed = 0
        done = asyncio.Event()

        def on_confirm(status) -> None:
            nonlocal confirmed
            confirmed += 1
            if confirmed == len(keys):
                done.set()
        async with SuperStreamProducer("127.0.0.1", broker.stream_port, username="guest", password="guest",
                                       super_stream=super_stream, routing_extractor=extractor) as p:
            for k in keys:
                await p.send(AMQPMessage(body=k.encode(), application_properties={"customer": k}),
                             on_publish_confirm=on_confirm)
            await done.wait()
    rstream_low.run(go(), 60)


def test_writer_routes_keys_to_the_partitions_rstreams_producer_picks(spark, broker):
    """The same keys, once through a Spark write (routingHash=rstream) and once through rstream's
    SuperStreamProducer, each into a 3-partition super stream: partition i of one holds the keys
    partition i of the other holds, each key once; every partition gets some."""
    ours, theirs = make_super_stream(broker, 3), make_super_stream(broker, 3)
    write(orders(spark).repartition(2), broker, ours, routingKeyColumn="customer", routingHash="rstream")
    rstream_publish(broker, theirs, KEYS)
    mine, rs = customers_by_partition(broker, ours, 3), customers_by_partition(broker, theirs, 3)
    assert [set(c) for c in mine] == [set(c) for c in rs]
    assert all(c and max(c.values()) == 1 for c in mine) and sum(map(len, mine)) == len(KEYS)


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_default_hash_sends_keys_where_the_node_clients_publisher_does(spark, broker):
    """The default routingHash (murmur3) against rabbitmq-stream-js-client's
    SuperStreamPublisher (hash routing, as the Java client's): the same keys, the same
    partitions."""
    ours, theirs = make_super_stream(broker, 3), make_super_stream(broker, 3)
    write(orders(spark).repartition(2), broker, ours, routingKeyColumn="customer")
    js = TESTS / "stream" / "js"
    spec = {"port": broker.stream_port, "superStream": theirs, "publish": [{"content": k, "key": k} for k in KEYS]}
    done = subprocess.run([NODE, str(js / "super_stream.js"), json.dumps(spec)], capture_output=True, text=True,
                          timeout=60, cwd=js)
    assert done.returncode == 0, done.stderr + done.stdout
    node = customers_by_partition(broker, theirs, 3, key=lambda m: bytes(m.body).decode())
    mine = customers_by_partition(broker, ours, 3)
    assert [set(c) for c in mine] == [set(c) for c in node] and all(mine)


def test_named_write_twice_stores_each_row_once_per_partition_and_reads_back(spark, broker):
    """Exactly once per partition: a named write run twice stores every row once, each
    partition's publisher at the count routed there; the default hash (murmur3, the Java and
    Node clients') places each key. A read plans at least a task per partition, and its
    ``stream`` column and per-partition offsets say where each row is."""
    ss = make_super_stream(broker, 3)
    df = orders(spark).repartition(2)
    for _ in range(2):
        write(df, broker, ss, routingKeyColumn="customer", writeName="load-1", filterValueColumn="region")
    placed = customers_by_partition(broker, ss, 3)
    assert [set(c) for c in placed] == [{k for k in KEYS if hash_index(k, 3) == i} for i in range(3)]
    assert all(max(c.values()) == 1 for c in placed)
    with amqp.connect(broker.url) as c:
        sequences = [sum(c.publisher_sequence(f"{ss}-{i}", f"load-1/{t}") for t in range(2)) for i in range(3)]
    assert sequences == [len(p) for p in placed]

    reader = (spark.read.format("amqp-stream").option("url", broker.url).option("streamUrl", broker.stream_url)
              .option("superStream", ss).option("properties", "customer STRING").option("numPartitions", 2).load())
    assert reader.columns[:6] == ["offset", "timestamp", "filter_value", "body", "application_properties", "stream"]
    assert reader.rdd.getNumPartitions() == 6  # numPartitions ranges in each of the 3 partitions
    got = reader.select("stream", "offset", "customer").collect()
    assert len(got) == len(KEYS)
    for i in range(3):
        mine = [r for r in got if r.stream == f"{ss}-{i}"]
        assert {r.customer for r in mine} == set(placed[i])
        assert sorted(r.offset for r in mine) == list(range(len(mine)))
    # a predicate on stream plans that partition alone; filters go to each partition's broker read
    one = reader.where(f"stream = '{ss}-1'")
    assert one.rdd.getNumPartitions() == 2
    assert [line.split(";")[0] for line in broker_requests(one)] == [
        f"amqp-stream: {ss}-1 offsets [0, {len(placed[1])}) in 2 partition(s)"]
    assert {r.customer for r in one.collect()} == set(placed[1])
    eu = reader.where("filter_value = 'eu'").select("customer").collect()
    assert sorted(r.customer for r in eu) == sorted(KEYS[i] for i in range(0, len(KEYS), 3))


def test_stream_predicates_name_the_partitions_to_plan():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In
    assert streams_named([GreaterThan(("offset",), 3)], "stream") is None
    assert streams_named([EqualTo(("stream",), "o-1")], "stream") == {"o-1"}
    assert streams_named([In(("stream",), ("o-1", "o-2")), EqualTo(("stream",), "o-2")], "stream") == {"o-2"}
    assert streams_named([In(("stream",), ("o-1",)), EqualTo(("stream",), "o-2")], "stream") == set()


def test_bad_input_is_refused_clearly(spark, broker):
    base = {"url": "amqp://h", "streamUrl": "rabbitmq-stream://h:5552"}
    with pytest.raises(OptionError, match="superStream needs streamUrl"):
        SourceOptions.parse({"url": "amqp://h", "superStream": "s"})
    with pytest.raises(OptionError, match="stream and superStream are alternatives"):
        SourceOptions.parse(dict(base, stream="a", superStream="s"))
    with pytest.raises(OptionError, match="routingHash must be one of murmur3, rstream"):
        SourceOptions.parse(dict(base, superStream="s", routingHash="crc32"))
    with pytest.raises(OptionError, match="routingKeyColumn is for writes to a super stream"):
        SourceOptions.parse(dict(base, stream="a", routingKeyColumn="k"))
    with pytest.raises(OptionError, match="create the super stream first"):
        SourceOptions.parse(dict(base, superStream="s", declare="true"))

    missing = f"ss-missing-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match=rf"super stream '{missing}' does not exist at rabbitmq-stream://"):
        write(orders(spark, KEYS[:3]), broker, missing, routingKeyColumn="customer")
    with pytest.raises(Exception, match=rf"super stream '{missing}' does not exist"):
        (spark.read.format("amqp-stream").option("url", broker.url).option("streamUrl", broker.stream_url)
         .option("superStream", missing).load().collect())

    ss = make_super_stream(broker, 2)
    with pytest.raises(Exception, match="needs option routingKeyColumn"):
        write(orders(spark, KEYS[:3]), broker, ss)
    with pytest.raises(Exception, match=r"routingKeyColumn 'client' is not a column"):
        write(orders(spark, KEYS[:3]), broker, ss, routingKeyColumn="client")
    with pytest.raises(Exception, match=r"routingKeyColumn 'n' must be a string or integer.*double"):
        write(orders(spark, KEYS[:3]).selectExpr("customer", "cast(n as double) n"), broker, ss, routingKeyColumn="n")
    with pytest.raises(Exception, match=r"routingKeyColumn 'customer' is null in row 1"):
        write(orders(spark, ["a", None, "b"]).coalesce(1), broker, ss, routingKeyColumn="customer")

    empty = make_super_stream(broker, 0)  # the broker takes a CreateSuperStream without partitions
    with pytest.raises(Exception, match=rf"super stream '{empty}' has no partition stream"):
        write(orders(spark, KEYS[:3]), broker, empty, routingKeyColumn="customer")
    with pytest.raises(Exception, match=rf"super stream '{empty}' has no partition stream"):
        (spark.read.format("amqp-stream").option("url", broker.url).option("streamUrl", broker.stream_url)
         .option("superStream", empty).load().collect())


def test_routing_by_binding_key_asks_the_brokers_route(spark, broker):
    """routingType=key (rstream's RouteType.Key, the Java client's routing().key()): a row goes
    to every partition bound with its key, as the broker's Route answers; binding keys 'eu' and
    'us', plus 'ap' bound to both partitions over the management node. A key bound to none
    fails its task naming the key; routingHash does not go with it."""
    name = f"ss-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with rstream_low.admin(broker) as c:
            await c.create_super_stream(name, [f"{name}-0", f"{name}-1"], ["eu", "us"])
    rstream_low.run(go(), 30)
    with Client(broker.url) as c:
        for i in range(2):
            status, answer, _ = c.request("POST", "/bindings", {
                "source": name, "destination_queue": f"{name}-{i}", "binding_key": "ap", "arguments": {}})
            assert status == 204, answer
    write(orders(spark, KEYS[:60]).repartition(2), broker, name, routingKeyColumn="region", routingType="key")
    placed = customers_by_partition(broker, name, 2, key=lambda m: m.application_properties["region"])
    assert placed == [Counter(eu=20, ap=20), Counter(us=20, ap=20)]

    bad = spark.createDataFrame([("eu", 1), ("zz", 2)], "region STRING, n INT").coalesce(1)
    with pytest.raises(Exception, match=rf"routing key 'zz' \(routingKeyColumn 'region'\) routes to no "
                                        rf"partition of super stream '{name}'"):
        write(bad, broker, name, routingKeyColumn="region", routingType="key")
    # the batch is routed before any of it is sent: its 'eu' row is not stored either
    assert customers_by_partition(broker, name, 2, key=lambda m: m.application_properties["region"]) == placed
    base = {"url": "amqp://h", "streamUrl": "rabbitmq-stream://h:5552", "superStream": "s"}
    with pytest.raises(OptionError, match="routingType must be one of hash, key"):
        SourceOptions.parse(dict(base, routingType="random"))
    with pytest.raises(OptionError, match="routingHash is for routingType=hash"):
        SourceOptions.parse(dict(base, routingType="key", routingHash="rstream"))


def fill_partitions(broker, super_stream: str, counts: list[int]) -> None:
    with amqp.connect(broker.url) as c:
        for i, n in enumerate(counts):
            with c.publisher(f"{super_stream}-{i}") as pub:
                for k in range(n):
                    pub.publish(f"p{i}-{k}".encode(), application_properties={"customer": f"p{i}-{k}"})
                pub.flush()


def test_streaming_read_of_a_super_stream_limits_batches_and_stores_progress_per_partition(
        spark, broker, tmp_path):
    """Progress per partition stream: micro-batches of at most maxRecordsPerTrigger over the
    three backlogs together, every message once with its partition; consumerName stores each
    partition's last offset; a restart from the checkpoint reads only what came since."""
    ss = make_super_stream(broker, 3)
    fill_partitions(broker, ss, [20, 60, 100])

    def run_query() -> tuple[list, list[int]]:
        got: list = []
        sizes: list[int] = []

        def collect(batch, _batch_id) -> None:
            rows = batch.collect()
            got.extend(rows)
            sizes.append(len(rows))
        df = (spark.readStream.format("amqp-stream").option("url", broker.url)
              .option("streamUrl", broker.stream_url).option("superStream", ss).option("consumerName", "q")
              .option("maxRecordsPerTrigger", 50).option("properties", "customer STRING").load())
        q = (df.select("stream", "offset", "customer").writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None
        return got, [n for n in sizes if n]

    rows, sizes = run_query()
    assert sizes == [50, 50, 50, 30]
    assert sorted((r.stream, r.offset, r.customer) for r in rows) == sorted(
        (f"{ss}-{i}", k, f"p{i}-{k}") for i, n in enumerate([20, 60, 100]) for k in range(n))
    with amqp.connect(broker.url) as c:
        assert [c.stored_offset(f"{ss}-{i}", "q") for i in range(3)] == [19, 59, 99]
    fill_partitions(broker, ss, [0, 5])  # five more in partition 1 (keys p1-0.. again)
    rows, sizes = run_query()
    assert sizes == [5] and {r.stream for r in rows} == {f"{ss}-1"} and min(r.offset for r in rows) >= 60


def test_streaming_write_routes_every_micro_batch(spark, broker, tmp_path):
    """A streaming write (exactlyOnce: publishers named by the query id) over two
    micro-batches: every key once, in the partition the default hash picks."""
    ss = make_super_stream(broker, 3)
    src = tmp_path / "in"
    src.mkdir()
    for k in range(2):
        (src / f"part-{k}.json").write_text("".join(json.dumps({"customer": c, "n": i}) + "\n"
                                                    for i, c in enumerate(KEYS[k::2])))
    query = (spark.readStream.schema("customer STRING, n INT").option("maxFilesPerTrigger", 1).json(str(src))
             .writeStream.format("amqp-stream").option("url", broker.url).option("streamUrl", broker.stream_url)
             .option("superStream", ss).option("routingKeyColumn", "customer").option("exactlyOnce", "true")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 2
    placed = customers_by_partition(broker, ss, 3)
    assert [set(c) for c in placed] == [{k for k in KEYS if hash_index(k, 3) == i} for i in range(3)]
    assert all(max(c.values()) == 1 for c in placed)
