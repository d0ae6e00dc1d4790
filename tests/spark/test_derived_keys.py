"""The Spark reader's pushdown on a stream with a broker-derived filter key: a ``where`` on the
indexed key becomes the broker's SQL filter, whose requirement lets the broker skip chunks and
blocks, so the same rows come back with much less read from disk than from a stream without
the key (``amqp_stream_read_bytes_total``); a range on an indexed number too (the skip
table's bounds)."""

from __future__ import annotations

import random

from amqp_stream import client as amqp
from amqp_stream.derived_keys import ARGUMENT
from tests.spark.conftest import metric

PROPS = "n INT, customer STRING"


def _fill(broker, name: str, customers: list[str], arguments: dict | None) -> None:
    with amqp.connect(broker.url) as c:
        c.declare(name, arguments)
        with c.publisher(name, window=256) as pub:
            for n, customer in enumerate(customers):
                pub.publish(f"payload-{n:06d}-".encode() * 6,
                            application_properties={"n": n, "customer": customer})
            pub.flush()


def _read(spark, broker, name: str, query: str) -> tuple[list[tuple], float]:
    before = metric(broker, "amqp_stream_read_bytes_total", name)
    df = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", name)
          .option("properties", PROPS).option("numPartitions", 2).load().where(query))
    got = sorted((r.offset, r.n, r.customer, bytes(r.body)) for r in df.collect())
    return got, metric(broker, "amqp_stream_read_bytes_total", name) - before


def test_a_where_on_a_derived_key_reads_less_from_disk(spark, broker, stream_name):
    rnd = random.Random(11)
    customers = [f"c{rnd.randrange(400)}" for _ in range(4000)]
    plain, derived = stream_name + "-plain", stream_name + "-derived"
    _fill(broker, plain, customers, None)
    _fill(broker, derived, customers, {ARGUMENT: ["customer", "n"]})
    want = customers[-1]
    # an equality (the blocks' Bloom filters) and a range (their least and greatest n)
    for query, expected in ((f"customer = '{want}'", [n for n, c in enumerate(customers) if c == want]),
                            ("n >= 3950 AND n < 3990", list(range(3950, 3990)))):
        rows_plain, read_plain = _read(spark, broker, plain, query)
        rows_derived, read_derived = _read(spark, broker, derived, query)
        assert [r[1] for r in rows_plain] == expected
        assert [r[1:] for r in rows_derived] == [r[1:] for r in rows_plain]
        assert 0 < read_derived < read_plain / 3, (query, read_derived, read_plain)
