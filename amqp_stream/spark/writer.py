"""Batch and streaming writers: each task publishes its partition, at least once, or exactly
once for deterministic input.

A task opens its own connection, publishes every row with a bounded window of unsettled
messages (``window`` option) and succeeds only when the broker accepted every message
(``Publisher.flush``). Spark hands the rows over as Arrow record batches (the writers are
Arrow writers): ``ArrowEncoder`` encodes each batch's messages column by column and they are
sent as bytes (``Publisher.send_encoded``); no ``Row`` or ``proton.Message`` per row. Rows
(PySpark 4.0's streaming writes) go through ``WritePlan.message``, under the same numbering.

A rejection, a lost connection or a timeout fails the task with a ``PublishError`` naming the
stream, the cause and how many messages were accepted. Spark then retries the task, which
publishes the whole partition again.

Without ``writeName``/``exactlyOnce`` messages accepted by a failed attempt are stored twice:
duplicates are detected downstream by a ``message_id`` column. With them, each task is a named
publisher (``numbering``): it asks the broker for the last id stored under its reference,
skips the rows up to it and publishes the rest with their ids; a message an earlier attempt got
stored in the meantime is dropped by the broker. Nothing published can be taken back, so
``abort`` only logs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
import itertools
from typing import Callable, Iterable, Iterator, List, Optional

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType, StringType, StructType

from amqp_stream import client as amqp
from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.mapping import WritePlan
from amqp_stream.spark.numbering import Numbering, task_numbering
from amqp_stream.spark.options import OptionError, SourceOptions
from amqp_stream.spark.stream_sink import Numbered, publish_over_stream, publish_routed
from amqp_stream.spark.super_stream import MAX_PUBLISHERS

__all__ = ["StreamWriter", "BatchWriter", "PublishCommit", "ensure_stream", "check_exactly_once",
           "super_stream_partitions",
           "publish_rows", "publish_batches"]

log = logging.getLogger(__name__)

try:  # PySpark >= 4.1: streaming writes take Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # 4.0: rows
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase  # type: ignore[assignment]


@dataclass
class PublishCommit(WriterCommitMessage):
    partition_id: int
    published: int
    skipped: int = 0  # rows an earlier attempt had stored (exactly-once writes)


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


def publish_rows(opts: SourceOptions, plan: WritePlan, rows, numbering: Numbering | None = None) -> tuple[int, int]:
    """Publish ``rows`` (tuples in schema order) and wait until all are accepted; returns
    (published, skipped): with a ``numbering``, rows whose id the broker already stored under its
    reference are skipped. Raises PublishError."""
    def send(pub: amqp.Publisher, stored: int) -> tuple[int, int]:
        n = skipped = 0
        for i, row in enumerate(rows):
            if numbering is None:
                pub.send(plan.message(row))
            else:
                pid = numbering.publishing_id(i)
                if pid <= stored:
                    skipped += 1
                    continue
                pub.send(plan.message(row), pid)
            n += 1
        return n, skipped
    return _publishing(opts, numbering, send)


def publish_batches(opts: SourceOptions, encoder: ArrowEncoder, batches: Iterable, numbering: Numbering | None = None
                    ) -> tuple[int, int]:
    """``publish_rows`` for Arrow record batches: each batch's rows are encoded column by column
    (``ArrowEncoder``) and sent as bytes, with the same numbering, so an exactly-once write may
    switch between the two paths. With ``streamUrl``, over the stream protocol (``stream_sink``)."""
    if opts.stream_url is not None:
        return _over_stream(opts, encoder, batches, numbering)

    def send(pub: amqp.Publisher, stored: int) -> tuple[int, int]:
        numbered = Numbered(batches, numbering, stored)
        for batch, first in numbered:
            if numbering is None:
                for data in encoder.encode(batch):
                    pub.send_encoded(data)
            else:
                for pid, data in enumerate(encoder.encode(batch, first), first):
                    pub.send_encoded(data, pid)
        return numbered.published, numbered.skipped
    return _publishing(opts, numbering, send)


def _over_stream(opts: SourceOptions, encoder: ArrowEncoder, batches: Iterable, numbering: Numbering | None
                 ) -> tuple[int, int]:
    where = _where()
    stored = 0
    if numbering is not None:  # asked over AMQP's management node, as the AMQP path does
        try:
            with opts.connect() as client:
                stored = client.publisher_sequence(opts.stream, numbering.reference)
        except amqp.ClientError as exc:
            raise amqp.PublishError(f"{where}: cannot publish to stream {opts.stream!r}: {exc}") from exc
    numbered = Numbered(batches, numbering, stored)
    publish_over_stream(opts, encoder, numbered, where)
    return numbered.published, numbered.skipped


def _where() -> str:
    from pyspark import TaskContext
    ctx = TaskContext.get()
    return f"partition {ctx.partitionId()} attempt {ctx.attemptNumber()}" if ctx else "driver"


def _publishing(opts: SourceOptions, numbering: Numbering | None,
                send: Callable[[amqp.Publisher, int], tuple[int, int]]) -> tuple[int, int]:
    """Open the task's connection and publisher (named by ``numbering``), ``send`` with the last
    id the broker stored for it, wait until every message is accepted. Raises PublishError."""
    where = _where()
    try:
        client = opts.connect()
    except amqp.ClientError as exc:
        raise amqp.PublishError(f"{where}: cannot publish to stream {opts.stream!r}: {exc}") from exc
    with client:
        try:
            reference, stored = None, 0
            if numbering is not None:
                reference = numbering.reference
                stored = client.publisher_sequence(opts.stream, reference)
            pub = client.publisher(opts.stream, window=opts.window, timeout=opts.timeout, reference=reference)
            n, skipped = send(pub, stored)
            pub.flush()
            pub.close()
            return n, skipped
        except amqp.ClientError as exc:
            cause = exc
    # raised after the connection is closed, so the task's traceback ends here, not in close()
    raise amqp.PublishError(f"{where}: {cause}", getattr(cause, "outcomes", ()),
                            getattr(cause, "unconfirmed", 0), cause.condition) from cause


class _PartitionPublisher:
    """What batch and streaming writes share: the stream is declared (if asked) on the driver,
    and each task publishes its partition at least once, or under its ``numbering``."""

    streaming = False

    def __init__(self, opts: SourceOptions, schema: StructType):
        self.opts = opts
        self.plan = WritePlan.for_schema(schema, opts.filter_value_column)
        self.schema = schema
        check_exactly_once(opts, self.streaming)
        self.partitions: list[str] | None = None
        if opts.super_stream is not None:
            self.partitions = super_stream_partitions(opts, schema)
        else:
            ensure_stream(opts)

    def write(self, iterator: Iterator) -> PublishCommit:
        """Arrow record batches (an Arrow writer, what Spark gives when it can) or ``Row``s."""
        from pyspark import TaskContext
        ctx = TaskContext.get()
        numbering = task_numbering(ctx, self.opts.write_name, self.streaming) if self.opts.exactly_once else None
        first = next(iterator, None)
        if self.partitions is not None:
            return self._write_routed(ctx, first, iterator, numbering)
        if first is None:
            published, skipped = publish_rows(self.opts, self.plan, iter(()), numbering)
        elif hasattr(first, "num_rows"):
            encoder = ArrowEncoder(self.plan, self.schema)  # built in the task: its encoders do not pickle
            published, skipped = publish_batches(self.opts, encoder, itertools.chain([first], iterator), numbering)
        else:
            published, skipped = publish_rows(self.opts, self.plan, itertools.chain([first], iterator), numbering)
        return PublishCommit(ctx.partitionId() if ctx else 0, published, skipped)


    def _write_routed(self, ctx, first, iterator: Iterator, numbering: Numbering | None) -> PublishCommit:
        assert self.partitions is not None
        if first is not None and not hasattr(first, "num_rows"):
            raise OptionError("writing to a super stream needs Arrow batches (PySpark 4.1 or later)")
        batches = itertools.chain([first], iterator) if first is not None else iter(())
        encoder = ArrowEncoder(self.plan, self.schema)
        published, skipped = publish_routed(self.opts, encoder, batches, self.partitions, numbering, _where())
        return PublishCommit(ctx.partitionId() if ctx else 0, published, skipped)


def super_stream_partitions(opts: SourceOptions, schema: StructType) -> list[str]:
    """On the driver, before any task: the routing column is a string or integer column, and
    the super stream's partitions (in the broker's order, which the routing indexes)."""
    column = opts.routing_key_column
    if column is None:
        raise OptionError("writing to a super stream needs option routingKeyColumn (the column whose value "
                          "routes each row to a partition)")
    if column not in schema.names:
        raise OptionError(f"routingKeyColumn {column!r} is not a column; columns: {schema.names}")
    dtype = schema[column].dataType
    if not isinstance(dtype, (StringType, ByteType, ShortType, IntegerType, LongType)):
        raise OptionError(f"routingKeyColumn {column!r} must be a string or integer column, not "
                          f"{dtype.simpleString()} (routing hashes the key's text)")
    found = opts.partition_streams()
    if len(found) > MAX_PUBLISHERS:
        raise OptionError(f"super stream {opts.super_stream!r} has {len(found)} partitions; a writer task "
                          f"publishes to at most {MAX_PUBLISHERS} (one connection's publishers)")
    return found


def check_exactly_once(opts: SourceOptions, streaming: bool) -> None:
    """A batch write names itself with ``writeName`` (a re-run must find the same references);
    a streaming write is named by its checkpoint's query id."""
    if streaming and opts.write_name is not None:
        raise OptionError("writeName is for batch writes: a streaming write is exactly once with "
                          "exactlyOnce=true and a checkpointLocation (its query id names the write)")
    if not streaming and opts.exactly_once and opts.write_name is None:
        raise OptionError("exactlyOnce on a batch write needs writeName: a name that stays the same "
                          "when the job is run again (e.g. the table and the date it loads)")


def _done(messages) -> tuple[int, int]:
    commits = [m for m in messages if isinstance(m, PublishCommit)]
    return sum(m.published for m in commits), sum(m.skipped for m in commits)


class BatchWriter(_PartitionPublisher, DataSourceArrowWriter):
    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        published, skipped = _done(messages)
        log.info("published %d rows to stream %s (%d already there)", published, self.opts.stream, skipped)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        published, _ = _done(messages)
        log.warning("write to stream %s aborted; %d rows from successful tasks stay published%s",
                    self.opts.stream, published,
                    " (a re-run with the same writeName publishes only the rest)" if self.opts.exactly_once else "")


class StreamWriter(_PartitionPublisher, _StreamWriterBase):
    streaming = True

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        published, skipped = _done(messages)
        log.info("micro-batch %d: published %d rows to stream %s (%d already there)", batchId, published,
                 self.opts.stream, skipped)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        log.warning("micro-batch %d to stream %s aborted; accepted rows stay published (%s)", batchId,
                    self.opts.stream, "a replay publishes only the rest" if self.opts.exactly_once
                    else "a retry publishes them again")
