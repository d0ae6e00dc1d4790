"""Batch and streaming writers: each task publishes its partition, at least once.

A task opens its own connection, publishes every row with a bounded window of unsettled
messages (``window`` option) and succeeds only when the broker accepted every message
(``Publisher.flush``). A rejection, a lost connection or a timeout fails the task with a
``PublishError`` naming the stream, the cause and how many messages were accepted. Spark then
retries the task, which publishes the whole partition again: messages accepted by the failed
attempt are stored twice. Nothing published can be taken back, so ``abort`` only logs.
Duplicates are detected downstream by a ``message_id`` column (the writer maps it to the AMQP
message-id), e.g. a hash of the row or a business key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, List, Optional

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from amqp_stream import client as amqp
from amqp_stream.spark.mapping import WritePlan
from amqp_stream.spark.options import SourceOptions

__all__ = ["StreamWriter", "BatchWriter", "PublishCommit", "ensure_stream"]

log = logging.getLogger(__name__)


@dataclass
class PublishCommit(WriterCommitMessage):
    partition_id: int
    published: int


def ensure_stream(opts: SourceOptions) -> None:
    """Declare the stream when ``declare=true`` (idempotent); otherwise check it exists, so a
    missing stream fails the query on the driver with a clear message."""
    with opts.connect() as c:
        if opts.declare:
            c.declare(opts.stream, opts.arguments)
        elif not c.exists(opts.stream):
            raise amqp.StreamNotFound(
                f"stream {opts.stream!r} does not exist at {amqp.safe_url(opts.url)} "
                "(set option declare=true to create it)", 404)


def publish_rows(opts: SourceOptions, plan: WritePlan, rows) -> int:
    """Publish ``rows`` and wait until all are accepted; returns how many. Raises PublishError."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    where = f"partition {ctx.partitionId()} attempt {ctx.attemptNumber()}" if ctx else "driver"
    try:
        client = opts.connect()
    except amqp.ClientError as exc:
        raise amqp.PublishError(f"{where}: cannot publish to stream {opts.stream!r}: {exc}") from exc
    with client:
        try:
            pub = client.publisher(opts.stream, window=opts.window, timeout=opts.timeout)
            n = 0
            for row in rows:
                pub.send(plan.message(row))
                n += 1
            pub.flush()
            pub.close()
            return n
        except amqp.ClientError as exc:
            cause = exc
    # raised after the connection is closed, so the task's traceback ends here, not in close()
    raise amqp.PublishError(f"{where}: {cause}", getattr(cause, "outcomes", ()),
                            getattr(cause, "unconfirmed", 0), cause.condition) from cause


class _PartitionPublisher:
    """What batch and streaming writes share: the stream is declared (if asked) on the driver,
    and each task publishes its partition at least once."""

    def __init__(self, opts: SourceOptions, schema: StructType):
        self.opts = opts
        self.plan = WritePlan.for_schema(schema, opts.filter_value_column)
        ensure_stream(opts)

    def write(self, iterator: Iterator) -> PublishCommit:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        return PublishCommit(ctx.partitionId() if ctx else 0, publish_rows(self.opts, self.plan, iterator))


class BatchWriter(_PartitionPublisher, DataSourceWriter):
    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        total = sum(m.published for m in messages if isinstance(m, PublishCommit))
        log.info("published %d rows to stream %s", total, self.opts.stream)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        done = sum(m.published for m in messages if isinstance(m, PublishCommit))
        log.warning("write to stream %s aborted; %d rows from successful tasks stay published",
                    self.opts.stream, done)


class StreamWriter(_PartitionPublisher, DataSourceStreamWriter):
    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        total = sum(m.published for m in messages if isinstance(m, PublishCommit))
        log.info("micro-batch %d: published %d rows to stream %s", batchId, total, self.opts.stream)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        log.warning("micro-batch %d to stream %s aborted; accepted rows stay published (a retry "
                    "publishes them again)", batchId, self.opts.stream)
