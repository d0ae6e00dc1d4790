"""A schema given with ``.schema(...)`` is the read's: the columns it names, in its order, over
AMQP 1.0 and over the stream protocol, batch and streaming; the fixed columns keep their types,
and a ``properties`` option that names other columns is refused rather than dropped.

Real Spark (``local[2]``) and the session's broker; the rows are the whole read's, column for
column (``stored_arrays`` does not make a fixed column left out: a read of the DataFrame's own
columns pays for those alone, bench/RESULTS.md)."""

from __future__ import annotations

import contextlib

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import StreamingQueryException

ROWS = 600
WRITTEN = "n INT, region STRING, amount DOUBLE, message_id STRING, k BIGINT"


@pytest.fixture(scope="module")
def written(spark, broker):
    """A stream of the rows of ``WRITTEN``, by the sink (filter values from ``region``)."""
    stream = "read-schema"
    df = spark.range(ROWS).selectExpr("cast(id as int) as n", "format_string('r%02d', id % 7) as region",
                                      "cast(id * 0.25 as double) as amount", "concat('m-', id) as message_id",
                                      "id * 3 as k")
    (df.write.format("amqp-stream").option("url", broker.url).option("stream", stream).option("declare", "true")
     .option("filterValueColumn", "region").mode("append").save())
    return stream, df


def read(spark, broker, stream: str, via_stream: bool, schema=None, **options):
    r = spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream).option("numPartitions", 2)
    if via_stream:
        r = r.option("streamUrl", broker.stream_url)
    if schema is not None:
        r = r.schema(schema)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


@pytest.mark.parametrize("via_stream", [False, True], ids=["amqp", "stream"])
def test_the_written_dataframe_comes_back_with_its_own_schema(spark, broker, written, via_stream):
    stream, df = written
    back = read(spark, broker, stream, via_stream, df.schema)
    assert back.schema == df.schema and not df.schema["n"].nullable
    assert rows(back) == rows(df)


@pytest.mark.parametrize("via_stream", [False, True], ids=["amqp", "stream"])
def test_a_not_null_column_with_no_value_fails_the_read(spark, broker, written, via_stream):
    """Spark takes a NOT NULL column at its word: a message without the value fails the task."""
    stream, _ = written
    with pytest.raises(PySparkException, match="column missing is NOT NULL in the given schema, but"):
        read(spark, broker, stream, via_stream, "n INT NOT NULL, missing STRING NOT NULL").collect()


@pytest.mark.parametrize("via_stream", [False, True], ids=["amqp", "stream"])
@pytest.mark.parametrize("schema", [
    "k BIGINT, offset BIGINT, region STRING",
    "body BINARY, n INT",
    "application_properties MAP<STRING, STRING>, timestamp TIMESTAMP, filter_value STRING, amount DOUBLE",
    "offset BIGINT",
    "message_id STRING, offset BIGINT NOT NULL, timestamp TIMESTAMP, filter_value STRING, body BINARY, "
    "application_properties MAP<STRING, STRING>, n INT",
])
def test_a_given_schema_gives_those_columns_of_the_whole_read(spark, broker, written, via_stream, schema):
    """Fixed columns left out or reordered, declared ones among them: the whole read's values."""
    stream, _ = written
    names = [f.name for f in spark.createDataFrame([], schema).schema.fields]
    whole = read(spark, broker, stream, via_stream, properties=WRITTEN)
    some = read(spark, broker, stream, via_stream, schema)
    assert some.columns == names
    assert rows(some) == rows(whole.select(*names))
    assert len(rows(some)) == ROWS


@pytest.mark.parametrize("via_stream", [False, True], ids=["amqp", "stream"])
def test_pushdown_with_a_given_schema(spark, broker, written, via_stream):
    """Predicates on the given columns go to the broker and give what Spark alone gives."""
    stream, df = written
    pushed = read(spark, broker, stream, via_stream, "region STRING, k BIGINT").where("region = 'r03' AND k > 900")
    plain = read(spark, broker, stream, via_stream, "region STRING, k BIGINT", pushdown="false") \
        .where("region = 'r03' AND k > 900")
    want = rows(df.where("region = 'r03' AND k > 900").select("region", "k"))
    assert want and rows(pushed) == rows(plain) == want


@pytest.mark.parametrize("schema, message", [
    ("offset INT, n INT", "column offset is the read's own, of type bigint, not int"),
    ("body STRING", "column body is the read's own, of type binary, not string"),
    ("application_properties MAP<STRING, INT>", "column application_properties is the read's own"),
])
def test_a_fixed_column_keeps_its_type(spark, broker, written, schema, message):
    stream, _ = written
    with pytest.raises(PySparkException, match=message):
        read(spark, broker, stream, True, schema).collect()


def test_a_properties_option_naming_other_columns_is_refused(spark, broker, written):
    stream, df = written
    with pytest.raises(PySparkException, match="the schema given with .schema.. declares .'n'., the properties "
                                               "option .'n', 'k'."):
        read(spark, broker, stream, False, "offset BIGINT, n INT", properties="n INT, k BIGINT").collect()
    same = read(spark, broker, stream, False, "k BIGINT, n INT", properties="n INT, `k` BIGINT")
    assert rows(same) == rows(df.select("k", "n"))


def test_a_streaming_read_with_a_given_schema(spark, broker, written, tmp_path):
    stream, df = written
    q = (spark.readStream.format("amqp-stream").option("url", broker.url).option("stream", stream)
         .option("streamUrl", broker.stream_url).schema("n INT, offset BIGINT").load()
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):
        q.awaitTermination(300)
    assert q.exception() is None
    got = spark.read.parquet(str(tmp_path / "out"))
    assert got.columns == ["n", "offset"]
    assert rows(got) == rows(read(spark, broker, stream, True, properties=WRITTEN).select("n", "offset"))
    assert len(rows(got)) == ROWS
