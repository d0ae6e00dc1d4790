"""The ceilings of a Spark 4 Python data source, for ``bench.spark --parquet``.

Why: the goal for the ``amqp-stream`` source is a fraction of Spark's own Parquet read and
write. Any Python data source pays for its Python worker, the JVM-to-Python hand-over and
Arrow's conversion into Spark's rows, whatever it does per row; these two sources do nothing
else, so their rates are the fastest any Python data source can be on this machine:

- ``bench-ceiling`` read: each task yields ready-made Arrow ``RecordBatch``es of the schema
  it is given (built once per task, then the same batch again), no work per row;
- ``bench-ceiling`` write: an Arrow writer that counts the batches' rows and drops them.

With ``streamUrl`` (and ``url``, ``stream``, ``filterValueColumn`` as for ``amqp-stream``) the
write is the floor of a stream-protocol sink into this broker instead: each task encodes its
first batch once (as the ``streamUrl`` sink does) and then, for every batch Spark hands it,
publishes those same frames again with the sink's own sender (window, confirms), so the broker
stores as many messages of the same sizes and filter values as the real sink sends, and no row
is encoded after the first batch. What the real sink costs beyond it is its encoding.
With ``streamUrl`` and ``stream`` the read is the floor of a stream-protocol read from this
broker: each task receives its share of the stream's first ``rows`` messages as the
``streamUrl`` read does (its client, credits and end-of-range request) and yields the ready-made
batch once for every ``BATCH_ROWS`` records received: the broker's sends, the socket and Spark's
hand-over, no message decoded. What the real read costs beyond it is its decoding. With
``records`` (true) each chunk is also copied and its records found as the read finds them
(``stream_read._record_spans``): the least any decoding of a chunk does before its first field.

Options: ``schema`` (a ``StructType``'s JSON); for the read ``rows`` (in all), ``numPartitions``
and ``records``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition,
                                    WriterCommitMessage)

BATCH_ROWS = 10_000


@dataclass
class _Count(WriterCommitMessage):
    rows: int


class _Part(InputPartition):
    def __init__(self, rows: int):
        self.rows = rows


def _column(field, n: int):
    """``n`` values of ``field``'s type as an Arrow array (JSON-like text, small maps)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import (BinaryType, DecimalType, DoubleType, IntegerType, LongType, MapType,
                                   StringType, TimestampType)
    t, at = field.dataType, to_arrow_type(field.dataType, timezone="UTC")
    if isinstance(t, (IntegerType, LongType)):
        values: list = list(range(n))
    elif isinstance(t, DecimalType):
        import decimal
        values = [decimal.Decimal(i * 25).scaleb(-2) for i in range(n)]
    elif isinstance(t, DoubleType):
        values = [i * 0.25 for i in range(n)]
    elif isinstance(t, StringType):
        values = [f"m-{i}" for i in range(n)]
    elif isinstance(t, BinaryType):
        values = [b'{"n":%d,"region":"r07","amount":1.25,"message_id":"m-%d","k":3}' % (i, i) for i in range(n)]
    elif isinstance(t, TimestampType):
        start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        values = [start + dt.timedelta(milliseconds=i) for i in range(n)]
    elif isinstance(t, MapType):
        values = [[("n", str(i)), ("region", "r07"), ("amount", "1.25"), ("k", "3")] for i in range(n)]
    else:
        raise ValueError(f"bench-ceiling: no values for {t.simpleString()}")
    return pa.array(values, type=at)


class _Reader(DataSourceReader):
    def __init__(self, schema, rows: int, parts: int):
        self.schema, self.rows, self.parts = schema, rows, parts

    def partitions(self):
        share = [self.rows // self.parts + (1 if i < self.rows % self.parts else 0) for i in range(self.parts)]
        return [_Part(n) for n in share]

    def read(self, partition):
        import pyarrow as pa  # type: ignore[import-untyped]
        from pyspark.sql.pandas.types import to_arrow_schema
        schema = to_arrow_schema(self.schema, timezone="UTC")
        n = min(BATCH_ROWS, partition.rows)
        batch = pa.RecordBatch.from_arrays([_column(f, n) for f in self.schema.fields], schema=schema)
        left = partition.rows
        while left > 0:
            yield batch if left >= n else batch.slice(0, left)
            left -= n


class _Range(InputPartition):
    def __init__(self, start: int, end: int):
        self.start, self.end = start, end


class _ReceiveReader(_Reader):
    def __init__(self, schema, rows: int, parts: int, stream_url: str, stream: str, records: bool = False):
        super().__init__(schema, rows, parts)
        self.stream_url, self.stream, self.records = stream_url, stream, records

    def partitions(self):
        import itertools
        shares = [p.rows for p in super().partitions()]
        return [_Range(end - n, end) for end, n in zip(itertools.accumulate(shares), shares, strict=True)]

    def read(self, partition):
        import pyarrow as pa  # type: ignore[import-untyped]
        from pyspark.sql.pandas.types import to_arrow_schema

        from amqp_stream.client.stream import StreamClient
        from amqp_stream.spark.pushdown import Pushdown
        from amqp_stream.spark.stream_read import _record_spans, subscribe_properties
        from amqp_stream.streamproto import OffsetSpec
        from storage.format import CHUNK_HEADER, CHUNK_HEADER_BYTES
        start, end = partition.start, partition.end
        schema = to_arrow_schema(self.schema, timezone="UTC")
        batch = pa.RecordBatch.from_arrays([_column(f, BATCH_ROWS) for f in self.schema.fields], schema=schema)
        got = [0, False]  # records of the range received, the range's end seen

        def chunk(c) -> None:
            _, _, entries, records, _, _, first, _, data_length, *_ = CHUNK_HEADER.unpack_from(c)
            if entries == 0:  # the broker's end-of-range chunk
                got[1] = True
            else:
                if self.records:  # copied and its records found, as the streamUrl read does
                    spans = _record_spans(bytes(c), CHUNK_HEADER_BYTES, CHUNK_HEADER_BYTES + data_length, records)
                    if spans is None or len(spans[0]) != records:
                        raise RuntimeError(f"bench-ceiling floor read: the records of chunk {first} not found")
                got[0] += max(0, min(end, first + records) - max(start, first))
                got[1] = got[1] or first + records >= end

        client = StreamClient(self.stream_url, on_chunk=chunk)
        try:
            client.subscribe(1, self.stream, OffsetSpec.offset(start), credit=8,
                             properties=subscribe_properties(Pushdown(None, None, []), False, end))
            sent = 0
            while not got[1]:
                if not client.pump(30):
                    raise RuntimeError(f"bench-ceiling floor read: nothing came at {start + got[0]}")
                while got[0] - sent >= BATCH_ROWS:
                    yield batch
                    sent += BATCH_ROWS
        finally:
            client.close()
        if got[0] != end - start:
            raise RuntimeError(f"bench-ceiling floor read: {got[0]} of {end - start} records")
        if got[0] > sent:
            yield batch.slice(0, got[0] - sent)


class _Writer(DataSourceArrowWriter):
    def write(self, iterator):
        return _Count(sum(batch.num_rows for batch in iterator))


class _ResendWriter(DataSourceArrowWriter):
    def __init__(self, options, schema):
        self.options, self.schema = dict(options), schema

    def write(self, iterator):
        from amqp_stream.spark.encoding import ArrowEncoder
        from amqp_stream.spark.mapping import WritePlan
        from amqp_stream.spark.options import SourceOptions
        from amqp_stream.spark.stream_sink import _Sender
        opts = {k: v for k, v in self.options.items() if k.lower() != "schema"}
        parsed = SourceOptions.parse(opts)
        encoder = ArrowEncoder(WritePlan.for_schema(self.schema, parsed.filter_value_column), self.schema)
        frames: dict[int, list] = {}  # by batch size: the frames of the first batch of that size
        rows = 0
        with _Sender(parsed, encoder, "bench-ceiling") as sender:
            sender.declare(1, parsed.stream, None)  # no reference: the broker keeps every copy
            for batch in iterator:
                n = batch.num_rows
                if n not in frames:
                    frames[n] = list(sender.frames(1, batch, 1))
                sender.send_frames(frames[n])
                rows += n
            sender.finish()
        return _Count(rows)


class CeilingDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-ceiling"

    def schema(self):
        import json

        from pyspark.sql.types import StructType
        return StructType.fromJson(json.loads(self.options["schema"]))

    def _stream_url(self) -> str | None:
        return next((v for k, v in self.options.items() if k.lower() == "streamurl"), None)

    def reader(self, schema):
        rows, parts = int(self.options.get("rows", "0")), int(self.options.get("numPartitions", "1"))
        stream_url = self._stream_url()
        if stream_url:
            return _ReceiveReader(schema, rows, parts, stream_url, self.options["stream"],
                                  self.options.get("records", "false") == "true")
        return _Reader(schema, rows, parts)

    def writer(self, schema, overwrite: bool):
        if self._stream_url():
            return _ResendWriter(self.options, schema)
        return _Writer()


def main(argv=None) -> int:
    """Spark's Parquet read against the read ceiling for the read schema and for the Parquet
    file's own five columns, interleaved: what the schema itself costs a Python data source."""
    import argparse
    import os
    import sys
    import tempfile
    import time

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from bench.spark import PARQUET_COLUMNS

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0] if main.__doc__ else None)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CeilingDataSource)
    from amqp_stream.spark.mapping import read_schema
    ours = spark.createDataFrame([], read_schema("n INT, region STRING, amount DOUBLE, message_id STRING, k BIGINT")).schema
    print(f"load {os.getloadavg()[0]:.1f}; {args.rows} rows; best of {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        for parts in (1, 2):
            path = os.path.join(tmp, f"p{parts}")
            spark.range(args.rows).selectExpr(*PARQUET_COLUMNS).repartition(parts).write.parquet(path)
            five = spark.read.parquet(path).schema
            cases = {
                "parquet read": lambda: spark.read.parquet(path),  # noqa: B023
                "ceiling, read schema (10 columns)": lambda: spark.read.format("bench-ceiling")  # noqa: B023
                .option("schema", ours.json()).option("rows", args.rows).option("numPartitions", parts).load(),
                "ceiling, Parquet's 5 columns": lambda: spark.read.format("bench-ceiling")  # noqa: B023
                .option("schema", five.json()).option("rows", args.rows).option("numPartitions", parts).load(),
            }
            best = {k: float("inf") for k in cases}
            for _ in range(args.repeat + 1):  # the first round warms up
                for label, df in cases.items():
                    t = time.perf_counter()
                    df().write.format("noop").mode("overwrite").save()
                    best[label] = min(best[label], time.perf_counter() - t) if _ else float("inf")
            pq = best["parquet read"]
            for label, secs in best.items():
                print(f"  {parts} partition(s)  {label:<36} {args.rows / secs:>10,.0f} rows/s  x{pq / secs:.3f} of parquet")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
