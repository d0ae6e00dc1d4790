"""Spark writes killed mid-write, then run again: rows lost and duplicated, without and with the
exactly-once options, in the same run (issue 14).

Why: a sink is only as good as what is in the stream after a crash and a re-run. Each scenario
starts a fresh broker on loopback, writes ``--rows`` deterministic rows (``message_id``
``m-<n>``), kills something once a third of them are in the stream (seen by a consumer of the
stream, not after a sleep), re-runs the same write to completion and reads the whole stream back:
- driver: a batch job in a child process (``local[2]``, its own SparkSession) gets SIGKILL on its
  whole process group (Python driver, JVM, Python workers); the same job is run again here;
- broker: the broker gets SIGKILL while a batch job here writes; the job fails, the broker is
  started again on the same data directory and the job is run again;
- streaming: a stream-to-stream query (``maxRecordsPerTrigger`` = rows/4, two partitions per
  micro-batch) in a child process gets SIGKILL in its second micro-batch; the query is
  restarted here from its checkpoint.
"without": the writer as before (at least once); "with": ``writeName`` (batch) or
``exactlyOnce=true`` (streaming).

Run: ``.venv/bin/python -m bench.spark_crash [--rows 300000] [--partitions 4]
[--scenarios driver,broker,streaming] [--kill-at FRACTION|random]``; the scenarios ``none``
and ``none-streaming`` write without a kill (the re-run column is then the write's time: what
the options cost). The child is also this module
(``python -m bench.spark_crash job ...``); ``tests/spark/test_exactly_once.py`` uses the same
pieces with fewer rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from amqp_stream import client as amqp  # noqa: E402
from amqp_stream.testing import BrokerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def session(local_dir: str | os.PathLike, app: str = "spark-crash"):
    """A ``local[2]`` SparkSession with the data source registered (no task retries)."""
    from pyspark.sql import SparkSession

    from amqp_stream.spark import register

    spark = (SparkSession.builder.master("local[2]").appName(app).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.task.maxFailures", "1")
             .config("spark.local.dir", str(local_dir)).config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


# -- the jobs --------------------------------------------------------------------------------


def batch_write(spark, url: str, stream: str, rows: int, partitions: int, write_name: str | None,
                window: int = 512) -> None:
    """``rows`` rows ``n, region, message_id`` in ``partitions`` partitions, the same in every
    run (``spark.range``): deterministic input."""
    df = spark.range(0, rows, 1, partitions).selectExpr(
        "id AS n", "concat('r', CAST(id % 10 AS STRING)) AS region", "concat('m-', CAST(id AS STRING)) AS message_id")
    w = (df.write.format("amqp-stream").option("url", url).option("stream", stream)
         .option("filterValueColumn", "region").option("window", window).option("timeout", 20))
    if write_name:
        w = w.option("writeName", write_name)
    w.mode("append").save()


def fill_source(url: str, stream: str, rows: int) -> None:
    """The streaming scenario's input stream: bodies ``m-<n>`` at offsets 0..rows-1."""
    with amqp.connect(url) as c:
        c.declare(stream)
        with c.publisher(stream, window=1024) as pub:
            for n in range(rows):
                pub.publish(f"m-{n}".encode())
            pub.flush()


def stream_copy(spark, url: str, source: str, sink: str, checkpoint: str, per_batch: int,
                exactly_once: bool) -> None:
    """Copy ``source`` into ``sink`` in micro-batches of ``per_batch`` offsets (two partitions
    each), until the query has processed all there is."""
    df = (spark.readStream.format("amqp-stream").option("url", url).option("stream", source)
          .option("maxRecordsPerTrigger", per_batch).option("numPartitions", 2).load()
          .selectExpr("body", "CAST(body AS STRING) AS message_id"))
    q = (df.writeStream.format("amqp-stream").option("url", url).option("stream", sink)
         .option("exactlyOnce", str(exactly_once).lower()).option("timeout", 20)
         .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")


def job_main(argv: list[str]) -> int:
    """The child: ``job batch URL STREAM ROWS PARTITIONS WRITE_NAME|-`` or
    ``job stream URL SOURCE SINK CHECKPOINT PER_BATCH true|false``; local dir in $SPARK_CRASH_DIR."""
    spark = session(os.environ.get("SPARK_CRASH_DIR", tempfile.gettempdir()), "spark-crash-child")
    if argv[0] == "batch":
        url, stream, rows, partitions, name = argv[1:6]
        batch_write(spark, url, stream, int(rows), int(partitions), None if name == "-" else name)
    else:
        url, source, sink, checkpoint, per_batch, once = argv[1:7]
        stream_copy(spark, url, source, sink, checkpoint, int(per_batch), once == "true")
    spark.stop()
    return 0


# -- crashing and counting -------------------------------------------------------------------


def start_child(args: list[str], local_dir: str | os.PathLike, log_path: str | os.PathLike) -> subprocess.Popen:
    """A job in a child process of its own process group (killed as a whole)."""
    env = dict(os.environ, SPARK_CRASH_DIR=str(local_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "bench.spark_crash", "job", *args], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_rows(url: str, stream: str, count: int, alive=lambda: True, timeout: float = 300.0) -> None:
    """Return once ``count`` messages are in ``stream``. ``AssertionError`` when ``alive()``
    turns false first (the writer ended) or after ``timeout`` seconds.

    Why the count and not a consumer: a Python consumer reads far slower than the Arrow sink
    writes, so by the time it had counted a third of the rows the job could be done, and the
    kill came after the write instead of in it."""
    deadline = time.monotonic() + timeout
    with amqp.connect(url) as c:
        while (seen := int(c.info(stream)["message_count"])) < count:
            if not alive():
                raise AssertionError(f"the writer ended with {seen} of the {count} rows awaited in {stream!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{seen} of {count} rows in {stream!r} after {timeout}s")
            time.sleep(0.01)  # a poll interval, not a wait for an event


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (driver, JVM, Python workers)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def stored(url: str, stream: str) -> int:
    with amqp.connect(url) as c:
        return int(c.info(stream)["message_count"])


@dataclass
class Tally:
    """What a stream holds against the ``rows`` expected ids ``m-0`` .. ``m-<rows-1>``."""

    rows: int
    stored: int
    lost: int
    duplicated: int
    strangers: int  # ids that were never written


def tally(url: str, stream: str, rows: int) -> Tally:
    with amqp.connect(url) as c, c.consumer(stream, offset="first", credit=2048) as con:
        ids = Counter(str(m.properties.get("message_id")) for m in con.read_available())
    expected = {f"m-{n}" for n in range(rows)}
    return Tally(rows, sum(ids.values()), len(expected - ids.keys()),
                 sum(k - 1 for i, k in ids.items() if i in expected), sum(k for i, k in ids.items() if i not in expected))


# -- scenarios -------------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: str
    mode: str
    at_kill: int      # messages in the stream right after the kill
    tally: Tally
    rerun_s: float    # the re-run's duration


def driver_kill(spark, tmp: Path, rows: int, partitions: int, write_name: str | None,
                kill_at: float = 1 / 3) -> Outcome:
    with BrokerProcess(tmp / "data") as broker:
        with amqp.connect(broker.url) as c:
            c.declare("out")
        child = start_child(["batch", broker.url, "out", str(rows), str(partitions), write_name or "-"],
                            tmp, tmp / "child.log")
        try:
            wait_for_rows(broker.url, "out", int(rows * kill_at), lambda: child.poll() is None)
        finally:
            kill_group(child)
        at_kill = stored(broker.url, "out")
        t = time.perf_counter()
        batch_write(spark, broker.url, "out", rows, partitions, write_name)
        secs = time.perf_counter() - t
        return Outcome("driver", "with" if write_name else "without", at_kill, tally(broker.url, "out", rows), secs)


def broker_kill(spark, tmp: Path, rows: int, partitions: int, write_name: str | None,
                kill_at: float = 1 / 3) -> Outcome:
    with BrokerProcess(tmp / "data") as broker:
        with amqp.connect(broker.url) as c:
            c.declare("out")
        failure: list[BaseException] = []

        def job() -> None:
            # A Python thread gets a JVM thread of its own, without an active session, and Spark
            # looks Python data sources up in the active session.
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            try:
                batch_write(spark, broker.url, "out", rows, partitions, write_name)
            except Exception as exc:  # the broker's death fails the job: expected
                failure.append(exc)

        writer = threading.Thread(target=job)
        writer.start()
        try:
            wait_for_rows(broker.url, "out", int(rows * kill_at), writer.is_alive)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {failure and str(failure[0])[-3000:]}") from None
        finally:
            broker.kill()
            writer.join()
        if not failure:
            raise AssertionError("the job survived the broker's death: nothing was killed mid-write")
        broker.start()
        at_kill = stored(broker.url, "out")
        t = time.perf_counter()
        batch_write(spark, broker.url, "out", rows, partitions, write_name)
        secs = time.perf_counter() - t
        return Outcome("broker", "with" if write_name else "without", at_kill, tally(broker.url, "out", rows), secs)


def streaming_kill(spark, tmp: Path, rows: int, exactly_once: bool, kill_at: float = 3 / 8) -> Outcome:
    per_batch = rows // 4
    with BrokerProcess(tmp / "data") as broker:
        fill_source(broker.url, "in", rows)
        with amqp.connect(broker.url) as c:
            c.declare("out")
        checkpoint = str(tmp / "checkpoint")
        child = start_child(["stream", broker.url, "in", "out", checkpoint, str(per_batch), str(exactly_once).lower()],
                            tmp, tmp / "child.log")
        try:  # by default in the second micro-batch
            wait_for_rows(broker.url, "out", int(rows * kill_at), lambda: child.poll() is None)
        finally:
            kill_group(child)
        at_kill = stored(broker.url, "out")
        t = time.perf_counter()
        stream_copy(spark, broker.url, "in", "out", checkpoint, per_batch, exactly_once)
        secs = time.perf_counter() - t
        return Outcome("streaming", "with" if exactly_once else "without", at_kill, tally(broker.url, "out", rows), secs)


def no_kill(spark, tmp: Path, rows: int, partitions: int, once: bool, streaming: bool) -> Outcome:
    """The write without a crash: what the options cost."""
    with BrokerProcess(tmp / "data") as broker:
        with amqp.connect(broker.url) as c:
            c.declare("out")
        if streaming:
            fill_source(broker.url, "in", rows)
        t = time.perf_counter()
        if streaming:
            stream_copy(spark, broker.url, "in", "out", str(tmp / "checkpoint"), rows // 4, once)
        else:
            batch_write(spark, broker.url, "out", rows, partitions, "bench-load" if once else None)
        secs = time.perf_counter() - t
        return Outcome("none (streaming)" if streaming else "none (batch)", "with" if once else "without", 0,
                       tally(broker.url, "out", rows), secs)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["job"]:
        return job_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--scenarios", default="driver,broker,streaming")
    ap.add_argument("--kill-at", default=None,
                    help="fraction of the rows in the stream when the kill comes (default: a third, streaming "
                         "3/8), or 'random' (0.05..0.95, one draw per scenario, printed)")
    args = ap.parse_args(argv)
    rng = random.Random()

    def kill_at(default: float) -> float:
        if args.kill_at is None:
            return default
        if args.kill_at != "random":
            return float(args.kill_at)
        at = round(rng.uniform(0.05, 0.95), 3)
        print(f"kill at {at:.3f} of the rows", flush=True)
        return at
    scenarios = args.scenarios.split(",")
    load = os.getloadavg()
    print(f"load: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min), rows {args.rows}, "
          f"{args.partitions} partitions (batch), kill at {args.kill_at or 'a third (streaming 3/8)'} of the "
          "rows", flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="spark-crash-") as tmp:
        spark = session(Path(tmp) / "local")
        with BrokerProcess(Path(tmp) / "warm-up") as broker:  # JVM paths and Python workers
            with amqp.connect(broker.url) as c:
                c.declare("out")
            batch_write(spark, broker.url, "out", 1000, args.partitions, "warm-up")
        runs = iter(range(100))
        for scenario in scenarios:
            for once in (False, True):
                where = Path(tmp) / f"run{next(runs)}"
                where.mkdir()
                if scenario == "driver":
                    out = driver_kill(spark, where, args.rows, args.partitions, "bench-load" if once else None,
                                      kill_at(1 / 3))
                elif scenario == "broker":
                    out = broker_kill(spark, where, args.rows, args.partitions, "bench-load" if once else None,
                                      kill_at(1 / 3))
                elif scenario == "streaming":
                    out = streaming_kill(spark, where, args.rows, once, kill_at(3 / 8))
                elif scenario in ("none", "none-streaming"):
                    out = no_kill(spark, where, args.rows, args.partitions, once, scenario == "none-streaming")
                else:
                    raise SystemExit(f"unknown scenario {scenario!r}")
                outcomes.append(out)
                print(json.dumps({"scenario": out.scenario, "mode": out.mode, "at_kill": out.at_kill,
                                  **out.tally.__dict__, "rerun_s": round(out.rerun_s, 2)}), flush=True)
        spark.stop()
    print(f"\n{'killed':<16} {'options':<8} {'in stream at kill':>17} {'after re-run':>12} {'lost':>6} "
          f"{'duplicated':>10} {'re-run s':>8}")
    for o in outcomes:
        print(f"{o.scenario:<16} {o.mode:<8} {o.at_kill:>17,} {o.tally.stored:>12,} {o.tally.lost:>6,} "
              f"{o.tally.duplicated:>10,} {o.rerun_s:>8.1f}")
    bad = [o for o in outcomes if o.mode == "with" and (o.tally.lost or o.tally.duplicated or o.tally.strangers)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
