"""Data source options that fail loudly (issue 12 item 15): an unknown option names the closest
known one, a typo in the ``properties`` DDL is reported in the user's text, and
``startingTimestamp`` starts a read at the first chunk written at or after a time."""

from __future__ import annotations

import time

import pytest

from amqp_stream import client as amqp
from amqp_stream.spark.options import OptionError, SourceOptions


def test_an_unknown_option_is_an_error_naming_the_right_one():
    # Kafka's spelling: silently ignored before, so a read started at the default (everything)
    with pytest.raises(OptionError, match=r"unknown option 'startingoffsets'; did you mean startingOffset\?"):
        SourceOptions.parse({"url": "amqp://h", "stream": "s", "startingOffsets": "latest"})
    with pytest.raises(OptionError, match=r"unknown option 'kafka.bootstrap.servers' \(options: url"):
        SourceOptions.parse({"url": "amqp://h", "stream": "s", "kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(OptionError, match="alternatives"):
        SourceOptions.parse({"url": "amqp://h", "stream": "s", "startingOffset": "first",
                             "startingTimestamp": "0"})
    opts = SourceOptions.parse({"url": "amqp://h", "stream": "s", "x-max-age": "7D", "path": "ignored",
                                "startingTimestamp": "2026-11-22T04:00:00"})
    assert opts.arguments == {"x-max-age": "7D"} and opts.starting_timestamp_ms == 1795320000000


def test_a_properties_typo_is_reported_in_the_users_text(spark, broker):
    with pytest.raises(Exception) as err:
        (spark.read.format("amqp-stream").option("url", broker.url).option("stream", "any")
         .option("properties", "region STRIN, n INT").load().schema)
    text = str(err.value)
    assert "properties option 'region STRIN, n INT': column region: unknown type 'STRIN'" in text
    assert "did you mean STRING?" in text


def test_starting_timestamp_reads_from_the_first_chunk_at_or_after_it(spark, broker, stream_name):
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
        with c.publisher(stream_name) as pub:
            for i in range(3):
                pub.publish(f"old-{i}")
            pub.flush()  # durable: its chunk's timestamp is now or earlier
            mid = time.time_ns() // 1_000_000 + 1
            while time.time_ns() // 1_000_000 < mid:  # the clock passes mid before the next chunk
                pass
            for i in range(2):
                pub.publish(f"new-{i}")
            pub.flush()

    def offsets(**options):
        r = spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
        for k, v in options.items():
            r = r.option(k, v)
        return sorted(row.offset for row in r.load().select("offset").collect())

    assert offsets(startingTimestamp=str(mid)) == [3, 4]
    assert offsets(startingTimestamp="2000-01-01T00:00:00+00:00") == [0, 1, 2, 3, 4]
    assert offsets(startingTimestamp=str(mid + 3_600_000)) == []
