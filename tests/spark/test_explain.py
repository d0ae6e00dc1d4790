"""What goes to the broker is visible before a query runs (issue 25 item 16).

``amqp_stream.spark.explain(df)`` prints Spark's plan and, for each scan, the stage-1 values and
the SQL text its tasks send (read back from the planned partitions, which carry them); a bad
``sqlFilter`` fails when the query is planned, with the parser's message and position, where it
used to fail in the tasks ("the broker did not put filter(s) in place").
"""

from __future__ import annotations

import contextlib

import pytest
from pyspark.errors import StreamingQueryException

from amqp_stream import client as amqp
from amqp_stream.spark import broker_requests, explain


@pytest.fixture
def small(broker, stream_name):
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
        with c.publisher(stream_name) as pub:
            for n in range(20):
                pub.publish(b"x", filter_value=f"r{n % 2}", application_properties={"n": n})
            pub.flush()
    return stream_name


def load(spark, broker, stream, **options):
    r = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream)
         .option("properties", "n INT").option("numPartitions", 2))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_explain_shows_the_stage1_values_and_the_sql_text(spark, broker, small, capsys):
    df = load(spark, broker, small, sqlFilter="n < 15").where("filter_value = 'r1' AND n > 3")
    text = explain(df)
    assert "BatchScan amqp-stream" in text and text == capsys.readouterr().out.rstrip("\n") + "\n"
    (line,) = broker_requests(df)
    # Spark adds n IS NOT NULL (from n > 3) itself
    assert line == ("amqp-stream: offsets [0, 20) in 2 partition(s); stage 1 filter values ['r1'] (each "
                    "message's then checked exactly); SQL filter: (n < 15) AND ((EXISTS(n)) AND (n > 3))")
    assert line in text
    assert sorted(r.n for r in df.collect()) == [5, 7, 9, 11, 13]
    # without pushed filters: what the options alone send
    assert broker_requests(load(spark, broker, small)) == [
        "amqp-stream: offsets [0, 20) in 2 partition(s); no stage 1; SQL filter: none"]


def test_a_bad_sql_filter_fails_at_planning_with_the_parsers_position(spark, broker, small, tmp_path):
    df = load(spark, broker, small, sqlFilter="n = = 1")
    with pytest.raises(Exception) as err:
        broker_requests(df)  # plans the scan, runs no task
    text = str(err.value)
    assert "option sqlFilter: unexpected '=' (at character 5)" in text and "\n  n = = 1\n      ^" in text
    with pytest.raises(Exception) as err:
        df.collect()
    assert "option sqlFilter: unexpected '='" in str(err.value) and "stage failure" not in str(err.value)
    # a streaming query fails as it starts, before any micro-batch
    q = (spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", small)
         .option("sqlFilter", "n = = 1").load().writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):  # raised again here; q.exception() holds it
        q.awaitTermination(120)
    assert q.exception() is not None and "option sqlFilter: unexpected '='" in str(q.exception())
    assert not [p for p in q.recentProgress if p["numInputRows"]]
