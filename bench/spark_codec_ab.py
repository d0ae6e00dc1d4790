"""A/B of the Spark data source's per-row Python work, outside Spark, interleaved in one run.

Why: on a shared machine Spark-level figures move with the load; the task's own Python work
per row can be compared old against new in one process. The bench's five columns
(``n INT, region STRING, amount DOUBLE, message_id STRING, k BIGINT``), ``--rows`` rows:

- write: ``ArrowEncoder.encode_values`` (per value) against ``encode`` (Arrow kernels); and the
  ``streamUrl`` sink's whole task-side work a batch (the messages and their Publish frames, as
  ``stream_sink._Sender.frames`` builds them) with ``amount`` as Spark's ``id * 0.25`` gives it
  (DECIMAL(23,2)) and the rows shuffled as Spark's ``repartition`` hands them over, against the
  same of a ``--baseline`` checkout (a ``git archive`` of another
  commit), loaded into this process beside this checkout's;
- read: the tuple path (``wire_message`` + ``message_to_row``, then Spark's worker turning the
  tuples into Arrow, ``records_to_arrow_batches``) against the batch path (``stored_message``
  + ``Columns``) against the one walk (``stored_columns.stored_adder``) against the column decode
  (``stored_arrays.StoredBatches``: 10,000 messages at a time, as ``stream_read`` gathers them);
  and the floor: one ``struct.unpack`` per message.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.spark_codec_ab --rows 100000``
(``--baseline DIR`` for the frames A/B, ``--write-only`` to leave the reads out)
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import time
from decimal import Decimal


def _frames_of(root: str | None, schema):
    """``(encoder, batch_frames, merge)`` of the checkout at ``root`` (None: this one) for ``schema``,
    imported beside this checkout's: its ``amqp_stream`` modules are dropped from
    ``sys.modules`` once loaded (its functions keep their own module globals; the encoder is
    made while they are there, as it imports its kernels when made). ``merge``: how the
    checkout's sink groups Spark's batches before encoding them (None: one at a time)."""
    if root is None:
        from amqp_stream.spark import stream_sink
        from amqp_stream.spark.encoding import ArrowEncoder
        from amqp_stream.spark.framing import batch_frames
        from amqp_stream.spark.mapping import WritePlan
        return ArrowEncoder(WritePlan.for_schema(schema, "region"), schema), batch_frames, _merge_of(stream_sink)
    saved = {k: v for k, v in sys.modules.items() if k == "amqp_stream" or k.startswith("amqp_stream.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, os.path.abspath(root))
    try:
        from amqp_stream.spark.encoding import ArrowEncoder as base_encoder
        from amqp_stream.spark.framing import batch_frames as base_frames
        from amqp_stream.spark.mapping import WritePlan as base_plan
        from amqp_stream.spark import stream_sink as base_sink
        encoder = base_encoder(base_plan.for_schema(schema, "region"), schema)
        merge = _merge_of(base_sink)
    finally:
        sys.path.remove(os.path.abspath(root))
        for k in [k for k in sys.modules if k == "amqp_stream" or k.startswith("amqp_stream.")]:
            del sys.modules[k]
        sys.modules.update(saved)
    return encoder, base_frames, merge


def _merge_of(stream_sink):
    """The sink's grouping of Spark's batches (``merged`` over ``MERGE_ROWS``), or None."""
    merged = getattr(stream_sink, "merged", None)
    return None if merged is None else (lambda numbered: merged(numbered, stream_sink.MERGE_ROWS))


def _sink_work(enc, frames, merge, batches):
    """One pass of the ``streamUrl`` sink's task-side work over ``batches``: each batch's
    messages and Publish frames (publishing ids from 1, a 1 MiB frame limit), Spark's batches
    grouped first as the checkout's sink groups them."""
    encode = enc.encode_pieces if hasattr(enc, "encode_pieces") else enc.encode_array

    def numbered():
        first = 1
        for b in batches:
            yield b, first
            first += b.num_rows

    def run() -> None:
        for b, first in (merge or iter)(numbered()):
            assert frames(encode(b), b.column(1), first, 1 << 20, 1) is not None
    return run


def main(argv=None) -> int:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from amqp_stream.spark.batches import BASE_COLUMNS, Columns
    from amqp_stream.spark.encoding import ArrowEncoder
    from amqp_stream.spark.mapping import WritePlan, declared_columns, message_to_row
    from amqp_stream.spark.source import AmqpStreamDataSource
    from amqp_stream.spark.stored_arrays import StoredBatches
    from amqp_stream.spark.stored_columns import stored_adder
    from amqp_stream.spark.stream_read import stored_message, wire_message

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="a checkout (git archive) whose streamUrl sink work is timed beside this one's")
    ap.add_argument("--write-only", action="store_true", help="leave out the read cases")
    args = ap.parse_args(argv)

    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                         StructField("amount", DoubleType()), StructField("message_id", StringType()),
                         StructField("k", LongType())])
    batches = []
    for start in range(0, args.rows, 10_000):
        ids = range(start, min(args.rows, start + 10_000))
        batches.append(pa.RecordBatch.from_arrays([
            pa.array(list(ids), pa.int32()), pa.array([f"r{(i * 7919) % 100:02d}" for i in ids]),
            pa.array([i * 0.25 for i in ids]), pa.array([f"m-{i}" for i in ids]),
            pa.array([i * 3 for i in ids], pa.int64())], names=schema.names))
    from pyspark.sql.types import DecimalType
    sink_schema = StructType([f if f.name != "amount" else StructField("amount", DecimalType(23, 2))
                              for f in schema.fields])
    # the rows in the order Spark's repartition hands them over: shuffled, so every batch has
    # integers of both AMQP forms (-128..127 in one byte) and numbers' texts of several widths
    shuffled = list(range(args.rows))
    random.Random(7).shuffle(shuffled)
    sink_batches = []
    for start in range(0, args.rows, 10_000):
        ids = shuffled[start:start + 10_000]
        sink_batches.append(pa.RecordBatch.from_arrays([
            pa.array(ids, pa.int32()), pa.array([f"r{(i * 7919) % 100:02d}" for i in ids]),
            pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(23, 2)), pa.array([f"m-{i}" for i in ids]),
            pa.array([i * 3 for i in ids], pa.int64())], names=schema.names))
    base_sink = _frames_of(args.baseline, sink_schema) if args.baseline else None
    enc = ArrowEncoder(WritePlan.for_schema(schema, "region"), schema)
    messages = [m for b in batches for m in enc.encode_values(b)]
    declared = declared_columns(StructType(list(BASE_COLUMNS.fields) + list(schema.fields)))
    full = StructType(list(BASE_COLUMNS.fields) + list(declared.fields))

    def rows_path() -> None:
        for start in range(0, len(messages), 10_000):
            rows = [message_to_row(wire_message(d, start + i), declared)  # type: ignore[arg-type]
                    for i, d in enumerate(messages[start:start + 10_000])]
            for _ in records_to_arrow_batches(iter(rows), 10_000, full, AmqpStreamDataSource):  # type: ignore[arg-type]
                pass

    def batch_path() -> None:
        columns = Columns(declared)
        for i, d in enumerate(messages):
            columns.add(stored_message(d, i))
            if len(columns) >= 10_000:
                columns.batch()
        if len(columns):
            columns.batch()

    def walk_path() -> None:
        columns = Columns(declared)
        add = stored_adder(columns)
        for i, d in enumerate(messages):
            add(d, i)
            if len(columns) >= 10_000:
                columns.batch()
        if len(columns):
            columns.batch()

    def columns_path() -> None:
        batches = StoredBatches(Columns(declared))
        for start in range(0, len(messages), 10_000):
            batches.extend(start, messages[start:start + 10_000])
            batches.batch()

    unpack = struct.Struct(">B").unpack_from
    cases = {
        "write: per value (encode_values)": lambda: [enc.encode_values(b) for b in batches],
        "write: Arrow kernels (encode)": lambda: [enc.encode(b) for b in batches],
        "read: tuples + Spark's conversion": rows_path,
        "read: Arrow batches (Columns)": batch_path,
        "read: one walk (stored_adder)": walk_path,
        "read: columns (StoredBatches)": columns_path,
        "floor: one struct.unpack a message": lambda: [unpack(d, 0) for d in messages],
    }
    if args.write_only:
        cases = {k: v for k, v in cases.items() if k.startswith("write")}
    if base_sink is not None:
        cases["write: streamUrl frames, baseline"] = _sink_work(*base_sink, sink_batches)
    cases["write: streamUrl frames"] = _sink_work(*_frames_of(None, sink_schema), sink_batches)
    best = {k: float("inf") for k in cases}
    for _ in range(args.repeat):  # interleaved: each round runs every case once
        for label, fn in cases.items():
            t = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - t)
    print(f"load {os.getloadavg()[0]:.1f}; {args.rows} rows; best of {args.repeat}, interleaved")
    for label, secs in best.items():
        print(f"  {label:<38} {args.rows / secs:>12,.0f} rows/s  {secs / args.rows * 1e6:7.2f} us a row")
    w = best["write: per value (encode_values)"] / best["write: Arrow kernels (encode)"]
    if not args.write_only:
        r = best["read: tuples + Spark's conversion"] / best["read: Arrow batches (Columns)"]
        k = best["read: Arrow batches (Columns)"] / best["read: one walk (stored_adder)"]
        c = best["read: one walk (stored_adder)"] / best["read: columns (StoredBatches)"]
        print(f"  write x{w:.2f}, read x{r:.2f} (Arrow batches against tuples), x{k:.2f} (one walk against "
              f"Arrow batches), x{c:.2f} (columns against the one walk)")
    if base_sink is not None:
        f = best["write: streamUrl frames, baseline"] / best["write: streamUrl frames"]
        print(f"  streamUrl frames: x{f:.2f} against the baseline")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
