"""Publish a CSV file of events into a stream, one message per row, tagged by region.

    python examples/publish_events.py --url amqp://127.0.0.1:5672 --stream events
    spark-submit examples/publish_events.py --url ... --stream events   (see docs/spark.md)

Rows are sorted by region within each Spark partition before writing, so the broker's chunks
mostly hold one region and a reader filtering on a region skips the others (stage 1).
``event_id`` becomes the AMQP message-id: a retried task publishes its rows again, and readers
drop duplicates by that id.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_events import write_events  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="amqp://127.0.0.1:5672")
    p.add_argument("--stream", default="events")
    p.add_argument("--input", default=str(Path(__file__).parent / "data" / "events.csv"),
                   help="CSV with event_id,ts,region,kind,user,amount (generated when missing)")
    p.add_argument("--partitions", type=int, default=2)
    args = p.parse_args(argv)
    if not Path(args.input).exists():
        write_events(args.input)

    from pyspark.sql import SparkSession

    from amqp_stream.spark import register

    spark = SparkSession.builder.appName("publish-events").getOrCreate()
    register(spark)
    events = (spark.read.option("header", "true")
              .schema("event_id STRING, ts TIMESTAMP, region STRING, kind STRING, user STRING, amount DOUBLE")
              .csv(args.input)
              .withColumnRenamed("event_id", "message_id"))
    (events.repartition(args.partitions).sortWithinPartitions("region")
     .write.format("amqp-stream")
     .option("url", args.url).option("stream", args.stream)
     .option("declare", "true").option("x-max-length-bytes", "1000000000")
     .option("filterValueColumn", "region")
     .mode("append").save())
    print(f"published {events.count()} events from {args.input} to stream {args.stream!r}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
