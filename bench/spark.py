"""Throughput of the Spark data source against a plain proton client, in the same run.

Why: the data source adds Spark (planning, Python workers, Arrow/pickle between JVM and Python)
and the row -> message mapping on top of publishing and consuming. This shows what that costs
and what pushdown saves, with the broker process started here on loopback.

Write: the same rows (``--rows``, 100 regions) published
- by a plain proton publisher (``MessagingHandler``, window of unsettled messages, messages built
  from the rows with the data source's own ``WritePlan`` inside the timed loop): the baseline;
- by ``df.write.format("amqp-stream")`` with 1 and with 2 partitions (DataFrame cached first).
Read: a stream of the same rows sorted by region (so chunks hold mostly one region), read in
full with Spark, and filtered to one region (1 % of the rows) without and with pushdown; the
broker's ``amqp_stream_read_bytes_total`` says how much it read. The baseline is a plain
``amqp_stream.client`` consumer reading the whole stream.

Against Parquet (``--parquet``, issue 25 item 18): ``--rows`` rows of five columns
(``n INT, region STRING, amount DOUBLE, message_id STRING, k BIGINT``, made by ``spark.range``
and cached; ids counted up, or ``--texts several``: ids and regions of several lengths in every
batch, as real ids are) with 1 and with 2 partitions: Spark's own Parquet write of the DataFrame, then the
same DataFrame written to a stream over AMQP 1.0 (the default) and to another over the stream
protocol (``streamUrl``), on a fresh broker; Spark's Parquet read of those files,
then the stream read of the same five columns (given with ``.schema(...)``; ``--read-schema
full``: the source's whole read schema, those five declared) (``numPartitions`` 1 and 2), over AMQP 1.0
and over the stream protocol (``streamUrl``). Reads end in
Spark's ``noop`` sink, so every column of every row is produced and nothing is collected.
Each write starts with the previous one's stream deleted, as Parquet's ``overwrite`` deletes its
files and as a broker's retention does in a steady state: the broker writes ~233 bytes a row to
the page cache, ~15x Parquet's compressed files, and on a VM that reports free pages to its host
a page the kernel has not touched lately costs ~10 µs against ~0.9 µs for one a deleted file gave
back (``bench.page_cost``). The kernel reports freed pages to the host soon, so the deletion
helps only sometimes (``bench/RESULTS.md``, session 37): read the broker's CPU with that in mind.

Run: ``.venv/bin/python -m bench.spark`` (``--rows N``, ``--repeat K``; ``--parquet`` for the
Parquet comparison only). The machine is shared: run it 2-3 times and note ``uptime``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from proton import Url  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

from amqp_stream import client as amqp  # noqa: E402
from amqp_stream.testing import BrokerProcess  # noqa: E402
from bench.stream_protocol import cpu_seconds  # noqa: E402

SCHEMA = "n INT, region STRING, amount DOUBLE, message_id STRING"
REGIONS = 100


def make_rows(count: int, sort: bool = False) -> list[tuple]:
    rows = [(i, f"r{(i * 7919) % REGIONS:02d}", i * 0.25, f"m-{i}") for i in range(count)]
    return sorted(rows, key=lambda r: r[1]) if sort else rows


class _ProtonPublisher(MessagingHandler):
    """The baseline: plain proton, a window of unsettled messages, done when all are accepted."""

    def __init__(self, url: str, address: str, messages, window: int):
        super().__init__()
        self.url, self.address, self.messages, self.window = url, address, messages, window
        self.sent = self.accepted = 0

    def on_start(self, event):
        conn = event.container.connect(Url(self.url))
        event.container.create_sender(conn, self.address)

    def on_sendable(self, event):
        s = event.sender
        while s.credit and self.sent < len(self.messages) and self.sent - self.accepted < self.window:
            s.send(self.messages[self.sent]())
            self.sent += 1

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted == len(self.messages):
            event.connection.close()
        else:
            self.on_sendable(event)

    def on_rejected(self, event):
        raise RuntimeError("baseline publisher: message rejected")


def read_bytes(broker: BrokerProcess, stream: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "amqp_stream_read_bytes_total" and s.labels.get("stream") == stream)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each measurement; the best is shown")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--parquet", action="store_true", help="only the comparison with Spark's Parquet write and read")
    ap.add_argument("--skip-amqp", action="store_true",
                    help="with --parquet: leave out the AMQP 1.0 write and read (streamUrl only)")
    ap.add_argument("--write-only", action="store_true",
                    help="with --parquet: writes only (no reads, no read ceiling, no per-message floor)")
    ap.add_argument("--read-schema", choices=("same", "full"), default="same",
                    help="with --parquet: read the DataFrame's own five columns (.schema(...), the default), "
                         "or the source's whole read schema with the five declared (offset, timestamp, "
                         "filter_value, body, application_properties too)")
    ap.add_argument("--texts", choices=("one", "several"), default="one",
                    help="with --parquet: ids and regions of one length in most batches (ids counted up, the "
                         "default), or of several lengths in every batch (hashed, as real ids are)")
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession

    from amqp_stream.spark import register

    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min), "
          f"rows {args.rows}, best of {args.repeat}")
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if args.parquet:
        with tempfile.TemporaryDirectory() as tmp:
            parquet_phase(args, spark, tmp)
        spark.stop()
        return 0
    rows = make_rows(args.rows)
    df = spark.createDataFrame(rows, SCHEMA)
    df1, df2 = df.coalesce(1).cache(), df.repartition(2).cache()
    df1.count(), df2.count()
    with tempfile.TemporaryDirectory() as tmp:
        write_phase(args, spark, tmp, rows, df1, df2)
        with BrokerProcess(os.path.join(tmp, "read")) as broker:
            try:
                read_phase(args, spark, broker, rows)
            except Exception:
                print("broker log (tail):\n" + broker.log_text()[-3000:], file=sys.stderr)
                raise
    spark.stop()
    return 0


def write_phase(args, spark, tmp: str, rows, df1, df2) -> None:
    """Each measurement on a fresh broker, so none inherits another's streams and files."""
    from amqp_stream.spark.mapping import WritePlan

    plan = WritePlan.for_schema(df1.schema, "region")
    runs = iter(range(10**6))

    def on_fresh_broker(fn) -> float:
        with BrokerProcess(os.path.join(tmp, f"w{next(runs)}")) as broker:
            try:
                with amqp.connect(broker.url) as client:
                    client.declare("w")
                    _, secs = timed(lambda: fn(broker.url))
                    assert client.info("w")["next_offset"] == len(rows)
                return secs
            except Exception:
                print("broker log (tail):\n" + broker.log_text()[-3000:], file=sys.stderr)
                raise

    def baseline(url: str) -> None:
        msgs = [lambda r=r: plan.message(r) for r in rows]
        h = _ProtonPublisher(url, amqp.queue_address("w"), msgs, args.window)
        Container(h).run()
        assert h.accepted == len(rows)

    def spark_write(frame, url: str) -> None:
        (frame.write.format("amqp-stream").option("url", url).option("stream", "w")
         .option("filterValueColumn", "region").option("window", args.window).mode("append").save())

    on_fresh_broker(lambda url: spark_write(df1, url))  # warm up Python workers and the JVM paths
    results = {}
    for label, fn in [("plain proton publisher", baseline),
                      ("spark, 1 partition", lambda url: spark_write(df1, url)),
                      ("spark, 2 partitions", lambda url: spark_write(df2, url))]:
        results[label] = min(on_fresh_broker(fn) for _ in range(args.repeat))
    base = results["plain proton publisher"]
    print("\nwrite (rows/s, ratio to plain proton)")
    for label, secs in results.items():
        print(f"  {label:<28} {args.rows / secs:>10,.0f} rows/s  x{base / secs:.2f}")


PARQUET_COLUMNS = ("cast(id as int) as n", "format_string('r%02d', (id * 7919) % 100) as region",
                   "cast(id * 0.25 as double) as amount", "concat('m-', id) as message_id", "id * 3 as k")
# --texts several: ids and regions of several lengths in every batch, as real ids are (hashed);
# the ids above grow a digit at each power of ten, so their batches mostly hold one length
SEVERAL_COLUMNS = ("cast(id as int) as n", "format_string('r%d', (id * 7919) % 1000) as region",
                   "cast(id * 0.25 as double) as amount", "concat('m-', (id * 7919) % 100000000) as message_id",
                   "id * 3 as k")
PARQUET_SCHEMA = "n INT, region STRING, amount DOUBLE, message_id STRING, k BIGINT"


def parquet_phase(args, spark, tmp: str) -> None:
    """Write and read through the data source against Spark's Parquet write and read of the same
    DataFrame, interleaved in one run, for 1 and 2 partitions (best of ``--repeat``), with the
    ceilings of any Python data source (``bench.spark_ceiling``) and the floor of per-message
    Python work (``message_floor``) measured beside them."""
    from bench.spark_ceiling import CeilingDataSource

    spark.dataSource.register(CeilingDataSource)
    columns = SEVERAL_COLUMNS if args.texts == "several" else PARQUET_COLUMNS
    base = spark.range(args.rows).selectExpr(*columns)
    runs = iter(range(10**6))
    amqp_too = not args.skip_amqp

    def stream_read(url: str, stream_url: str | None, parts: int):
        r = (spark.read.format("amqp-stream").option("url", url).option("stream", "w")
             .option("numPartitions", parts))
        r = r.schema(PARQUET_SCHEMA) if args.read_schema == "same" else r.option("properties", PARQUET_SCHEMA)
        return (r.option("streamUrl", stream_url) if stream_url else r).load()

    # warm-up: the JVM's Parquet and Python data source paths, the Python workers
    small = spark.range(2000).selectExpr(*columns)
    small.write.mode("overwrite").parquet(os.path.join(tmp, "warm"))
    spark.read.parquet(os.path.join(tmp, "warm")).write.format("noop").mode("overwrite").save()
    with BrokerProcess(os.path.join(tmp, "warm-broker")) as broker:
        small.write.format("amqp-stream").option("url", broker.url).option("stream", "w").option("declare", "true") \
            .mode("append").save()
        read_schema = stream_read(broker.url, None, 1).schema
        if args.read_schema == "same":  # the rows written come back, every column
            want = sorted(small.collect())
            for stream_url in (None, broker.stream_url):
                got = sorted(stream_read(broker.url, stream_url, 2).collect())
                assert got == want, f"read back over {stream_url or broker.url}: {got[:2]} against {want[:2]}"
        for stream_url in ([None] if amqp_too else []) + [broker.stream_url]:
            stream_read(broker.url, stream_url, 1).write.format("noop").mode("overwrite").save()

    def ceiling_read(parts: int) -> None:
        (spark.read.format("bench-ceiling").option("schema", read_schema.json()).option("rows", args.rows)
         .option("numPartitions", parts).load().write.format("noop").mode("overwrite").save())

    def floor_read(broker: BrokerProcess, parts: int, records: bool = False) -> None:
        """The floor of a stream-protocol read from this broker (``bench.spark_ceiling``): the
        stream's chunks received as the streamUrl read receives them, none decoded (``records``:
        each copied and its records found, as the read does before its first field)."""
        (spark.read.format("bench-ceiling").option("schema", read_schema.json()).option("rows", args.rows)
         .option("numPartitions", parts).option("streamUrl", broker.stream_url).option("stream", "w")
         .option("records", str(records).lower()).load()
         .write.format("noop").mode("overwrite").save())

    def floor_write(broker: BrokerProcess, df) -> None:
        """The floor of a stream-protocol sink into this broker (``bench.spark_ceiling``): the
        same frames sent for every batch, none encoded after the first; deleted after."""
        with amqp.connect(broker.url) as client:
            client.declare("f")
        (df.write.format("bench-ceiling").option("schema", df.schema.json()).option("url", broker.url)
         .option("stream", "f").option("filterValueColumn", "region").option("streamUrl", broker.stream_url)
         .mode("append").save())
        with amqp.connect(broker.url) as client:
            held = client.delete("f")
        assert held == args.rows, f"floor write: {held} of {args.rows} rows stored"

    reads = not args.write_only
    if reads:
        ceiling_read(1)
    lines, floors = [], []
    broker_cpu: dict[tuple[int, str], list[float]] = {}
    for parts in (1, 2):
        df = base.repartition(parts).cache() if parts > 1 else base.coalesce(1).cache()
        assert df.count() == args.rows
        best: dict[str, float] = {}

        def note(label: str, secs: float) -> None:
            best[label] = min(best.get(label, secs), secs)

        for rep in range(args.repeat):
            path = os.path.join(tmp, f"p{parts}-{rep}")
            note("parquet write", timed(lambda: df.write.mode("overwrite").parquet(path))[1])
            note("ceiling write", timed(lambda: df.write.format("bench-ceiling").option("schema", df.schema.json())
                                        .mode("append").save())[1])
            with BrokerProcess(os.path.join(tmp, f"b{next(runs)}")) as broker:
                try:
                    def write(stream: str, stream_url: str | None) -> None:
                        before = cpu_seconds(broker.proc.pid)
                        w = (df.write.format("amqp-stream").option("url", broker.url).option("stream", stream)
                             .option("declare", "true").option("filterValueColumn", "region")
                             .option("window", args.window).mode("append"))
                        (w.option("streamUrl", stream_url) if stream_url else w).save()
                        broker_cpu.setdefault((parts, stream), []).append(cpu_seconds(broker.proc.pid) - before)
                        with amqp.connect(broker.url) as client:
                            assert client.info(stream)["next_offset"] == args.rows
                    if amqp_too:
                        note("amqp-stream write", timed(lambda: write("a", None))[1])
                        with amqp.connect(broker.url) as client:  # its pages for the next write
                            client.delete("a")
                    note("streamUrl write", timed(lambda: write("w", broker.stream_url))[1])
                    note("floor write", timed(lambda: floor_write(broker, df))[1])
                    if not reads:
                        continue
                    note("parquet read", timed(lambda: spark.read.parquet(path).write.format("noop")
                                               .mode("overwrite").save())[1])
                    note("ceiling read", timed(lambda: ceiling_read(parts))[1])
                    note("floor read", timed(lambda: floor_read(broker, parts))[1])
                    note("records read", timed(lambda: floor_read(broker, parts, records=True))[1])
                    if amqp_too:
                        note("amqp-stream read", timed(lambda: stream_read(broker.url, None, parts)
                                                       .write.format("noop").mode("overwrite").save())[1])
                    note("streamUrl read", timed(lambda: stream_read(broker.url, broker.stream_url, parts)
                                                 .write.format("noop").mode("overwrite").save())[1])
                    if parts == 1:
                        floors.append(message_floor(broker, "w", args.rows, read_schema))
                except Exception:
                    print("broker log (tail):\n" + broker.log_text()[-3000:], file=sys.stderr)
                    raise
            shutil.rmtree(broker.data_dir)  # its pages for the next turn's writes (bench.page_cost)
        df.unpersist()
        for what in ("write", "read") if reads else ("write",):
            pq = best[f"parquet {what}"]
            for ours_label in (f"ceiling {what}", f"floor {what}", f"records {what}", f"amqp-stream {what}",
                               f"streamUrl {what}"):
                if ours_label not in best:
                    continue
                ours = best[ours_label]
                of_ceiling = (f"   x{best[f'ceiling {what}'] / ours:.3f} of ceiling"
                              if not ours_label.startswith("ceiling") else "")
                lines.append(f"  {parts} partition{'s' if parts > 1 else ' '}  parquet {what:<5} "
                             f"{args.rows / pq:>10,.0f} rows/s   {ours_label:<18} {args.rows / ours:>10,.0f} rows/s"
                             f"   x{pq / ours:.3f} of parquet{of_ceiling}")
    print(f"\nagainst Parquet ({args.rows} rows of {PARQUET_SCHEMA}, texts of {args.texts} length(s) in a batch; "
          f"best of {args.repeat}; reads of "
          f"{'those five columns' if args.read_schema == 'same' else 'the whole read schema'}; the ceiling: a "
          "Python data source that yields ready-made Arrow batches of that schema / drops the written ones; "
          "the floor write: one that sends the streamUrl sink's frames of its first batch again for every batch; "
          "the floor read: one that receives the stream's chunks as the streamUrl read does and yields the "
          "ceiling's batches, none decoded; the records read: the floor read that also copies each chunk and "
          "finds its records as the streamUrl read does)")
    print("\n".join(lines))
    for (parts, stream), secs in sorted(broker_cpu.items()):
        print(f"  broker CPU, {parts} partition(s), {'streamUrl' if stream == 'w' else 'amqp-stream'} write: "
              f"{statistics.median(secs) / args.rows * 1e6:.2f} us a row (median of {len(secs)})")
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) at the end")
    if not floors:
        return
    print("\nper-message Python floor, one thread outside Spark, the stream's stored messages (best of "
          f"{len(floors)}):")
    for label in floors[0]:
        rate = max(f[label] for f in floors)
        print(f"  {label:<58} {rate:>10,.0f} msg/s  ({1e6 / rate:.2f} us a message)")


def message_floor(broker: BrokerProcess, stream: str, rows: int, schema) -> dict[str, float]:
    """Messages/s of the least Python work a reader can do per message, on one thread: the
    stream's chunks (fetched first, untimed) split into records, one ``struct.unpack`` each;
    and what the ``streamUrl`` read itself does outside Spark (same chunks, same code)."""
    import struct

    from amqp_stream.spark.offsets import OffsetRange
    from amqp_stream.spark.options import SourceOptions
    from amqp_stream.spark.pushdown import Pushdown
    from amqp_stream.spark.stream_read import read_range_stream, subscribe_properties
    from amqp_stream.client.stream import StreamClient
    from amqp_stream.streamproto import OffsetSpec
    from storage.format import CHUNK_HEADER, CHUNK_HEADER_BYTES, decode_header, decode_records

    opts = SourceOptions.parse({"url": broker.url, "stream": stream, "streamUrl": broker.stream_url})
    chunks: list[bytes] = []
    with StreamClient(broker.stream_url, on_chunk=lambda c: chunks.append(bytes(c))) as client:
        client.subscribe(1, stream, OffsetSpec.offset(0), credit=8,
                         properties=subscribe_properties(Pushdown(None, None, []), False, rows))
        while client.records < rows:
            assert client.pump(30), "no chunk in 30 s"
    got, secs = timed(lambda: sum(b.num_rows for b in read_range_stream(opts, OffsetRange(0, rows),
                                                                          Pushdown(None, None, []), schema)))
    first = struct.Struct(">B").unpack_from

    def floor() -> int:
        n = 0
        for chunk in chunks:
            if CHUNK_HEADER.unpack_from(chunk)[2] == 0:  # the broker's end-offset chunk
                continue
            h = decode_header(chunk, path="bench")
            for _, data in decode_records(chunk[CHUNK_HEADER_BYTES:CHUNK_HEADER_BYTES + h.data_length], h.chunk_id,
                                          entries=h.entries if h.entries == h.records else 0):
                first(data, 0)
                n += 1
        return n
    n, floor_secs = timed(floor)
    assert n == rows == got, (n, rows, got)
    return {"records split, one struct.unpack each (the floor)": n / floor_secs,
            "the streamUrl read outside Spark (Arrow batches)": got / secs}


def read_phase(args, spark, broker: BrokerProcess, rows) -> None:
    from amqp_stream.spark.mapping import WritePlan

    with amqp.connect(broker.url) as client:
        plan = WritePlan.for_schema(spark.createDataFrame([], SCHEMA).schema, "region")
        # read: a stream sorted by region, published once by the client
        stream = "read"
        client.declare(stream)
        with client.publisher(stream, window=args.window) as pub:
            last = None
            for r in make_rows(args.rows, sort=True):
                if r[1] != last and last is not None:
                    pub.flush()  # chunk boundary at every region change
                last = r[1]
                pub.send(plan.message(r))
            pub.flush()
        target = "r42"
        expected = sum(1 for r in rows if r[1] == target)

        def reader(pushdown: bool):
            return (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream)
                    .option("properties", SCHEMA).option("numPartitions", 2)
                    .option("pushdown", str(pushdown).lower()).load())

        def plain_client():
            with amqp.connect(broker.url) as c, c.consumer(stream, credit=args.window) as con:
                return sum(1 for _ in con.read_available())

        def spark_count(pushdown: bool, filtered: bool):
            df = reader(pushdown)
            if filtered:
                df = df.where(f"filter_value = '{target}'")
            return df.select("offset", "n").collect()

        spark_count(False, False)  # warm-up
        reads = {}
        for label, fn, n_expected in [
                ("plain client, whole stream", plain_client, None),
                ("spark, whole stream", lambda: len(spark_count(False, False)), None),
                ("spark, 1 % filter, no pushdown", lambda: len(spark_count(False, True)), expected),
                ("spark, 1 % filter, pushdown", lambda: len(spark_count(True, True)), expected)]:
            best, bytes_read = None, None
            for _ in range(args.repeat):
                before = read_bytes(broker, stream)
                got, secs = timed(fn)
                assert got == (n_expected if n_expected is not None else args.rows), (label, got)
                if best is None or secs < best:
                    best, bytes_read = secs, read_bytes(broker, stream) - before
            reads[label] = (best, bytes_read)
        base = reads["plain client, whole stream"][0]
        nopd = reads["spark, 1 % filter, no pushdown"]
        print(f"\nread ({args.rows} rows in the stream, {expected} match the filter; stream rows/s, "
              "ratio to the plain client; bytes the broker read)")
        for label, (secs, b) in reads.items():
            print(f"  {label:<32} {args.rows / secs:>10,.0f} rows/s  x{base / secs:.2f}  "
                  f"{b / 1e6:7.2f} MB read")
        pd = reads["spark, 1 % filter, pushdown"]
        print(f"  pushdown vs none for the 1 % filter: time x{nopd[0] / pd[0]:.2f} faster, "
              f"bytes read x{pd[1] / max(nopd[1], 1):.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
