"""Read one region's events back from a stream, with the filters pushed down to the broker.

    python examples/read_region.py --url amqp://127.0.0.1:5672 --stream events --region eu-west

``filter_value = region`` becomes a stage-1 filter (chunks of other regions are skipped on the
broker); ``amount > 100`` on the declared ``amount`` column becomes a stage-2 SQL filter; what
cannot be pushed (here ``kind`` in a computed expression) Spark checks itself.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="amqp://127.0.0.1:5672")
    p.add_argument("--stream", default="events")
    p.add_argument("--region", default="eu-west")
    p.add_argument("--min-amount", type=float, default=100.0)
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession, functions as F

    from amqp_stream.spark import register

    spark = SparkSession.builder.appName("read-region").getOrCreate()
    register(spark)  # also sets spark.sql.python.filterPushdown.enabled=true
    events = (spark.read.format("amqp-stream").option("url", args.url).option("stream", args.stream)
              .option("properties", "ts TIMESTAMP, region STRING, kind STRING, user STRING, amount DOUBLE, "
                                    "message_id STRING")
              .load())
    region = (events.where(F.col("filter_value") == args.region)
              .where(F.col("amount") > args.min_amount)
              .where(F.upper("kind") != "REFUND")
              .dropDuplicates(["message_id"]))  # a retried write may have published a row twice
    region.explain()
    summary = region.groupBy("kind").agg(F.count("*").alias("events"), F.round(F.sum("amount"), 2).alias("total"))
    summary.orderBy("kind").show()
    print(f"{region.count()} events in {args.region} with amount > {args.min_amount}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
