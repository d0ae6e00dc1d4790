"""PySpark data source ``amqp-stream``: write DataFrames into streams, read streams back.

``register(spark)`` makes the format available; see ``docs/spark.md`` for the options, the
at-least-once contract and filter pushdown.
"""

from amqp_stream.spark.source import AmqpStreamDataSource, register

__all__ = ["AmqpStreamDataSource", "register"]
