"""The ``amqp-stream`` data source: wires options, schema, readers and writers together.

``spark.read/readStream/write/writeStream.format("amqp-stream")`` after ``register(spark)``.
Reads with ``pushdown=true`` (the default) use a reader with ``pushFilters``, which Spark only
allows when ``spark.sql.python.filterPushdown.enabled`` is true; ``register`` sets it, and
``pushdown=false`` gives a reader without it.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from amqp_stream.spark.mapping import check_schema_options, read_schema
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.reader import BatchReader, PushdownBatchReader, StreamReader
from amqp_stream.spark.writer import BatchWriter, StreamWriter

__all__ = ["AmqpStreamDataSource", "register"]


class AmqpStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "amqp-stream"

    def _opts(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def _super_stream(self) -> bool:
        return any(str(k).lower() == "superstream" for k in self.options)

    def schema(self):
        return read_schema(self.options.get("properties"), self._super_stream())

    def reader(self, schema):
        check_schema_options(self.options.get("properties"), schema, self._super_stream())
        opts = self._opts()
        return PushdownBatchReader(opts, schema) if opts.pushdown else BatchReader(opts, schema)

    def streamReader(self, schema):
        check_schema_options(self.options.get("properties"), schema, self._super_stream())
        return StreamReader(self._opts(), schema)

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError("streams are append-only: use mode('append')")
        return BatchWriter(self._opts(), schema)

    def streamWriter(self, schema, overwrite: bool):
        return StreamWriter(self._opts(), schema)


def register(spark, *, enable_pushdown: bool = True) -> None:
    """Register the ``amqp-stream`` format with ``spark`` (and enable Python filter pushdown)."""
    if enable_pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(AmqpStreamDataSource)
