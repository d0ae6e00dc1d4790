"""CPU a row of a Spark write, by process: the JVM, the Python workers, the broker.

Why: on the shared 2-core machine the rows a second of a write swing 2-3x with the load, and
the ratio to Parquet with them; the CPU each process spends a row moves much less. With
``local[2]`` and the broker on the same 2 cores, 2 cores / (CPU a row) bounds what a quiet
machine can do. Each process's CPU is read from ``/proc`` (this process's descendants: the
JVM, the Python workers under it, the broker; a worker that exited is counted in its parent)
before and after Spark's Parquet write, the no-op Arrow writer (``bench.spark_ceiling``) and
the floor of a stream-protocol sink (``bench.spark_ceiling``: the first batch's frames sent again for
every batch, no encoding after it) and the ``streamUrl`` sink, of the same cached DataFrame (``bench.spark``'s five columns). Each
stream is deleted after its write, as Parquet's ``overwrite`` deletes its files: the next write
may take the pages they gave back (on a VM that reports free pages, a page not touched lately
costs ~10x more, and freed pages are soon reported: ``bench.page_cost``).

``--jvm-threads`` adds the JVM's CPU by thread name (digits folded: the task threads, the JIT's
compiler threads, GC...): which part of the JVM a writer's figure is.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.spark_write_cpu --rows 1000000 --partitions 2``
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from typing import Callable

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from amqp_stream import client as amqp  # noqa: E402
from amqp_stream.testing import BrokerProcess  # noqa: E402
from bench.spark import PARQUET_COLUMNS  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds (own and waited-for children's) of this process's descendants, by kind."""
    children: dict[int, list[tuple[int, float, str]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(
            (int(name), sum(int(x) for x in fields[11:15]) / _TICK, cmd))
    out: dict[str, float] = {}
    todo = [os.getpid()]
    while todo:
        for pid, cpu, cmd in children.get(todo.pop(), []):
            kind = "java" if "java" in cmd else "broker" if "amqp_stream" in cmd else "python"
            out[kind] = out.get(kind, 0.0) + cpu
            todo.append(pid)
    return out


def jvm_threads() -> dict[str, float]:
    """CPU seconds of this process's JVM child by thread name (digits folded into ``#``)."""
    out: dict[str, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline") as f:
                java = "java" in f.read()
        except OSError:
            continue
        if not java or parent != os.getpid():
            continue
        for task in os.listdir(f"/proc/{name}/task"):
            try:
                with open(f"/proc/{name}/task/{task}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            thread = re.sub(r"\d+", "#", stat[stat.index("(") + 1:stat.rindex(")")])
            fields = stat.rsplit(")", 1)[1].split()
            out[thread] = out.get(thread, 0.0) + (int(fields[11]) + int(fields[12])) / _TICK
    return out


def main(argv=None) -> int:
    from pyspark.sql import SparkSession

    from amqp_stream.spark import register
    from bench.spark_ceiling import CeilingDataSource

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--jvm-threads", action="store_true", help="the JVM's CPU a row by thread name too")
    args = ap.parse_args(argv)
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(CeilingDataSource)
    df = spark.range(args.rows).selectExpr(*PARQUET_COLUMNS).repartition(args.partitions).cache()
    assert df.count() == args.rows
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(os.path.join(tmp, "b")) as broker:
        def measure(label: str, fn: Callable[[], None]) -> None:
            threads = jvm_threads() if args.jvm_threads else {}
            before, t = cpu_by_kind(), time.perf_counter()
            fn()
            secs, after = time.perf_counter() - t, cpu_by_kind()
            cpu = {k: (after.get(k, 0) - before.get(k, 0)) / args.rows * 1e6 for k in after}
            print(f"  {label:<10} {args.rows / secs:>10,.0f} rows/s   "
                  + "  ".join(f"{k} {v:5.2f}" for k, v in sorted(cpu.items()))
                  + f"   all {sum(cpu.values()):.2f} us a row   load {os.getloadavg()[0]:.1f}", flush=True)
            if args.jvm_threads:
                used = {k: (v - threads.get(k, 0)) / args.rows * 1e6 for k, v in jvm_threads().items()}
                print("      java by thread: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(
                    used.items(), key=lambda kv: -kv[1]) if v >= 0.01), flush=True)

        def sink(stream: str) -> None:
            (df.write.format("amqp-stream").option("url", broker.url).option("stream", stream)
             .option("declare", "true").option("filterValueColumn", "region")
             .option("streamUrl", broker.stream_url).mode("append").save())

        def floor(stream: str) -> None:
            with amqp.connect(broker.url) as client:
                client.declare(stream)
            (df.write.format("bench-ceiling").option("schema", df.schema.json()).option("url", broker.url)
             .option("stream", stream).option("filterValueColumn", "region")
             .option("streamUrl", broker.stream_url).mode("append").save())

        def stored(stream: str) -> None:
            """Every row is in the stream; then the stream is deleted: its pages for the next
            write, as Parquet's overwrite gives its files' back."""
            with amqp.connect(broker.url) as client:
                held = client.delete(stream)
            assert held == args.rows, f"{stream}: {held} of {args.rows} rows stored"

        # warm-up: the JVM's paths, the Python workers
        df.write.mode("overwrite").parquet(os.path.join(tmp, "p"))
        sink("warm")
        stored("warm")
        print(f"{args.rows} rows, {args.partitions} partition(s); CPU us a row by process")
        for r in range(args.rounds):
            measure("parquet", lambda: df.write.mode("overwrite").parquet(os.path.join(tmp, "p")))
            measure("ceiling", lambda: df.write.format("bench-ceiling").option("schema", df.schema.json())
                    .mode("append").save())
            measure("floor", lambda: floor(f"f{r}"))
            stored(f"f{r}")
            measure("streamUrl", lambda: sink(f"w{r}"))
            stored(f"w{r}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
