"""PySpark data source ``amqp-stream``: write DataFrames into streams, read streams back.

``register(spark)`` makes the format available; see ``docs/spark.md`` for the options, the
at-least-once and exactly-once contracts, consumer names and filter pushdown.
"""

from amqp_stream.spark.explain import broker_requests, explain
from amqp_stream.spark.source import AmqpStreamDataSource, register

__all__ = ["AmqpStreamDataSource", "register", "explain", "broker_requests"]
