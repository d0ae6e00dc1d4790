"""The benchmarks' AMQP load generator (``bench.amqp_load.count``) counts exactly what the
broker delivers, filtered or not, and stops at the end of the stream (the broker's answer to
its drain), not at a timeout: its figures are only as good as that."""

from __future__ import annotations

import pytest

from amqp_stream.testing import BrokerProcess
from bench import proton_floor
from bench.amqp_load import count
from bench.broker import declare, encode, publish, stream_filters


def test_the_load_generator_counts_every_delivery_and_stops_at_the_end(tmp_path):
    b = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]).start()
    try:
        declare(b.url, "s")
        variants = [encode(properties={"k": k}) for k in range(10)]
        assert publish(b.url, "/queues/s", lambda i: variants[i % 10], 3000, 500).accepted == 3000
        everything = count(b.url, "/queues/s", stream_filters("first"), timeout=60)
        assert (everything.messages, everything.timed_out) == (3000, False)
        sevens = count(b.url, "/queues/s", stream_filters("first", sql="k = 7"), timeout=60)
        assert (sevens.messages, sevens.timed_out) == (300, False)
        late = count(b.url, "/queues/s", stream_filters("last", sql="k = 7"), timeout=60)
        assert late.messages < 300 and not late.timed_out
        empty = count(b.url, "/queues/s", stream_filters("next"), timeout=60)
        assert (empty.messages, empty.timed_out) == (0, False)
        with pytest.raises(RuntimeError, match="closed the link"):
            count(b.url, "/queues/nope", stream_filters("first"), timeout=60)
    finally:
        b.stop()


def test_the_proton_floor_bench_delivers_every_message():
    """``bench.proton_floor`` times two engines over memory: every delivery it counts arrives
    whole at the receiving engine (the bench raises otherwise), with the broker's splice."""
    message = encode(body=b"x" * 100, properties={"region": "r42"})
    got = proton_floor.measure(1_000, message)
    assert got["deliveries"] == 1_000 and got["payload_bytes"] > len(message)
    assert got["send_us"] > 0 and got["receive_us"] > 0
