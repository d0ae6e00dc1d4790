"""Batch and streaming readers: offset ranges per partition, filters pushed to the broker.

Planning (driver) asks the broker once for ``first_offset``/``next_offset`` and splits the
range (``offsets``). Each task opens a consumer at its range's start with the pushed-down
filters and reads until the first message at or past the range's end, or until a drain says the
stream has nothing more (a filtered range can end without any message past it). Streaming reads
use ``{"offset": n}`` dicts as progress: ``latestOffset`` is the broker's ``next_offset``, so a
query restarted from its checkpoint resumes at the first offset it had not processed.

With ``consumerName`` a read starts after the offset the broker stored for that name (when one
is; else at ``startingOffset``), and a streaming query stores its progress there once a
micro-batch is done (``store_progress``): other consumers sharing the name resume where the
query got to. Spark calls ``commit(end)`` for a batch only when it plans the next one, so the
last batch before a pause would stay unstored; ``latestOffset(start)`` comes at every trigger
with the end of the last completed batch (micro-batches run one after the other), so progress
is stored there, once per batch. Spark's checkpoint still decides where a restarted query
resumes.

Stage 1 is probabilistic, so the reader checks filter values exactly; the stage-2 SQL filter
decides on the broker (``pushdown`` explains which predicates also go back to Spark).
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType
try:  # PySpark >= 4.2: read limits and Trigger.AvailableNow for Python stream readers
    from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                                  SupportsTriggerAvailableNow)
except ImportError:  # older: every micro-batch reads all there is; batch reads need none of it
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stands in for the mixin older PySpark lacks."""

import sqlfilter

from amqp_stream import client as amqp
from amqp_stream.spark.batches import BATCH_BYTES, BATCH_ROWS, Columns
from amqp_stream.spark.mapping import STREAM_COLUMN, declared_columns
from amqp_stream.spark.offsets import OffsetRange, resolve, split
from amqp_stream.spark.options import OptionError, SourceOptions
from amqp_stream.spark.pushdown import Pushdown, fits, plan_pushdown, streams_named
from amqp_stream.spark.stream_read import read_range_stream

__all__ = ["BatchReader", "PushdownBatchReader", "StreamReader", "ReadPartition", "read_range", "read_partition",
           "stream_bounds", "start_offset", "store_progress"]

_log = logging.getLogger("amqp_stream.spark")


class ReadPartition(OffsetRange):
    """A task's offset range and the filters it asks the broker for: carried by the partition so
    that what ``amqp_stream.spark.explain`` shows is what the task sends. Reading a super
    stream, ``stream`` is the partition stream the range is in."""

    def __init__(self, start: int, end: int, pushdown: Pushdown, stream: str | None = None):
        super().__init__(start, end)
        self.pushdown = pushdown
        self.stream = stream

    def __repr__(self) -> str:
        where = f"{self.stream} " if self.stream is not None else ""
        return f"ReadPartition({where}[{self.start}, {self.end}), {self.pushdown.describe()})"


def _partitions(ranges: list[OffsetRange], pd: Pushdown, stream: str | None = None) -> list[ReadPartition]:
    return [ReadPartition(r.start, r.end, pd, stream) for r in ranges]


def read_partition(opts: SourceOptions, part: ReadPartition, schema: StructType) -> Iterator:
    """A task's rows as Arrow record batches of ``schema``; a super stream's with the partition
    stream's name in its ``stream`` column."""
    if part.stream is None:
        return read_range(opts, part, part.pushdown, schema)
    return read_range(opts.for_partition(part.stream), part, part.pushdown, schema, part.stream)


def stream_bounds(opts: SourceOptions) -> tuple[int, int]:
    """(first_offset, next_offset) from the management node; StreamNotFound names the stream."""
    with opts.connect() as c:
        try:
            info = c.info(opts.stream)
        except amqp.StreamNotFound as exc:
            raise amqp.StreamNotFound(f"stream {opts.stream!r} does not exist at "
                                      f"{amqp.safe_url(opts.url)}", 404) from exc
    if "next_offset" not in info:
        raise amqp.ClientError(f"the broker's info for {opts.stream!r} lacks next_offset; it is not amqp-stream")
    return int(info.get("first_offset", 0)), int(info["next_offset"])


def start_offset(opts: SourceOptions, first: int, next_: int) -> int:
    """Where a read starts: after ``consumerName``'s stored offset when there is one, else at
    ``startingTimestamp`` when given, else at ``startingOffset``."""
    if opts.consumer_name is not None:
        with opts.connect() as c:
            stored = c.stored_offset(opts.stream, opts.consumer_name)
        if stored is not None:
            return min(max(stored + 1, first), next_)
    if opts.starting_timestamp_ms is None:
        return resolve(opts.starting_offset, first, next_, what="startingOffset")
    return offset_at(opts, opts.starting_timestamp_ms, first, next_)


def offset_at(opts: SourceOptions, ms: int, first: int, next_: int) -> int:
    """The first offset the broker serves for the timestamp ``ms`` (the first message of the
    first chunk written at or after it), or ``next_`` when no chunk is that recent: asked with a
    consumer attached at that timestamp, as any reader would be."""
    if next_ <= first:
        return next_
    at = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(milliseconds=ms)
    with opts.connect() as client, client.consumer(opts.stream, offset=at, credit=1) as consumer:
        for m in consumer.read_available(end=next_, timeout=opts.timeout):
            if m.offset is not None:
                return min(max(m.offset, first), next_)
    return next_


def explicit_pushdown(opts: SourceOptions) -> Pushdown:
    """Filters given as options (``filterValues``, ``sqlFilter``): what streaming reads use. A
    ``sqlFilter`` the broker would refuse fails here, when the query is planned (readers are made
    on the driver), with the parser's message and a caret under the position."""
    if opts.sql_filter is not None:
        try:
            sqlfilter.compile_sql(opts.sql_filter)
        except sqlfilter.FilterError as exc:
            caret = f"\n  {opts.sql_filter}\n  {' ' * max(exc.position - 1, 0)}^" if exc.position else ""
            raise OptionError(f"option sqlFilter: {exc}{caret}") from None
    return Pushdown(opts.filter_values, opts.sql_filter, [])


def _merge(a: Pushdown, b: Pushdown) -> Pushdown:
    values = a.filter_values
    if b.filter_values is not None:
        values = b.filter_values if values is None else tuple(v for v in values if v in b.filter_values)
    sqls = [s for s in (a.sql, b.sql) if s]
    sql = " AND ".join(f"({s})" for s in sqls) if len(sqls) > 1 else (sqls[0] if sqls else None)
    if not fits(sql):  # b's clauses are all checked by Spark too: the broker gets a's alone
        sql = a.sql
    end = a.offset_end if b.offset_end is None else (b.offset_end if a.offset_end is None else min(a.offset_end, b.offset_end))
    return Pushdown(values, sql, a.pushed + b.pushed, max(a.offset_start, b.offset_start), end)


def read_range(opts: SourceOptions, rng: OffsetRange, pd: Pushdown, schema: StructType,
               stream: str | None = None) -> Iterator:
    """The rows of ``[rng.start, rng.end)`` that pass ``pd`` as Arrow record batches of
    ``schema`` (``Columns.of``) of at most ``BATCH_ROWS`` rows (fewer when their bodies reach
    ``BATCH_BYTES``), column by column (``batches``); over the stream protocol with
    ``streamUrl`` (``stream_read``). ``stream``: a super stream's partition stream, the value of
    the ``stream`` column."""
    if opts.stream_url is not None:
        yield from read_range_stream(opts, rng, pd, schema, stream)
        return
    if rng.end <= rng.start or pd.empty:
        return
    try:
        client = opts.connect()
    except amqp.ClientError as exc:
        raise amqp.ConsumerError(f"cannot read stream {opts.stream!r}: {exc}") from exc
    try:
        consumer = client.consumer(opts.stream, offset=rng.start, filter_values=pd.filter_values,
                                   match_unfiltered=opts.match_unfiltered, sql=pd.sql,
                                   credit=max(1, min(opts.credit, rng.end - rng.start)))
        missing = consumer.missing_filters
        if missing and any("offset" not in k for k in missing):
            raise amqp.ConsumerError(f"the broker did not put filter(s) {missing} in place for stream "
                                     f"{opts.stream!r} (invalid SQL filter?)")
        columns = Columns.of(schema, stream)
        held = 0  # the batch's bodies' bytes
        for m in consumer.read_available(end=rng.end, timeout=opts.timeout):
            if m.offset is None or m.offset < rng.start:
                continue
            if not pd.accepts(m.filter_value):
                continue
            m.application_properties = _owned(m.application_properties)
            columns.add(m)
            held += len(m.body) if isinstance(m.body, (bytes, str)) else 0
            if len(columns) >= BATCH_ROWS or held >= BATCH_BYTES:
                yield columns.batch()
                held = 0
        if len(columns):
            yield columns.batch()
        consumer.close()
    finally:
        client.close()


def _owned(value: Any) -> Any:
    """``value`` with every binary that proton handed as a view of its buffer copied: a batch
    reads the values after later deliveries have reused that buffer."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {_owned(k): _owned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_owned(v) for v in value]
    return value


class BatchReader(DataSourceReader):
    """Reads ``startingOffset``..``endingOffset`` (default: all there is at planning). A super
    stream is read partition stream by partition stream, each planned as a stream is (its own
    bounds, offsets, stored consumer offset, ``numPartitions``): at least one task each."""

    def __init__(self, opts: SourceOptions, schema):
        self.opts, self.schema = opts, schema
        self.declared = declared_columns(schema, opts.super_stream is not None)
        self.pd = explicit_pushdown(opts)
        self.only: set[str] | None = None  # a super stream's partitions the query's predicates allow

    def partitions(self):
        if self.opts.super_stream is None:
            return self._plan(self.opts, None)
        streams = [s for s in self.opts.partition_streams() if self.only is None or s in self.only]
        planned = [p for s in streams for p in self._plan(self.opts.for_partition(s), s)]
        return planned or [ReadPartition(0, 0, self.pd)]  # every partition ruled out: no rows

    def _plan(self, opts: SourceOptions, stream: str | None) -> list[ReadPartition]:
        first, next_ = stream_bounds(opts)
        start = start_offset(opts, first, next_)
        end = resolve(opts.ending_offset, first, next_, what="endingOffset")
        start, end = self.pd.clamp(start, max(start, end))
        return _partitions(split(start, end, num_partitions=opts.num_partitions,
                                 max_records=opts.max_records_per_partition), self.pd, stream)

    def read(self, partition: InputPartition):
        assert isinstance(partition, ReadPartition)
        return read_partition(self.opts, partition, self.schema)


class PushdownBatchReader(BatchReader):
    """A batch reader that takes filters from Spark (needs
    ``spark.sql.python.filterPushdown.enabled=true``, which ``register`` sets)."""

    def pushFilters(self, filters):
        filters = list(filters)
        if self.opts.super_stream is not None:
            self.only = streams_named(filters, STREAM_COLUMN)
        columns = {f.name: f.dataType for f in self.declared.fields}
        pd, rest = plan_pushdown(filters, columns)
        self.pd = _merge(self.pd, pd)
        return rest


Positions = dict[str | None, int]  # stream (None: the ``stream`` option's) -> next offset to read


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offset ranges; progress is ``{"offset": next offset to read}``, or for
    a super stream ``{"offsets": {partition stream: next offset}}`` (a partition that appears
    while the query runs is read from its first offset).

    ``maxRecordsPerTrigger`` is the default read limit, so Spark cuts micro-batches to it under
    every trigger: with ``Trigger.AvailableNow`` too, since the reader fixes the end once
    (``prepareForTriggerAvailableNow``) and Spark asks for batches up to it, as Kafka's source
    does with ``maxOffsetsPerTrigger`` (over a super stream's partitions, shared as evenly as
    their backlogs allow). Offsets that retention removed before the query read them fail the
    micro-batch (``failOnDataLoss``, default true) or are skipped with a warning."""

    def __init__(self, opts: SourceOptions, schema):
        self.opts, self.schema = opts, schema
        self.declared = declared_columns(schema, opts.super_stream is not None)
        self.pd = explicit_pushdown(opts)
        self.progress: Positions = {}  # with consumerName: the ends whose progress is stored
        self.target: Positions | None = None  # Trigger.AvailableNow: the ends fixed when the query started

    # -- positions: one stream, or a super stream's partitions --------------------------------
    def _streams(self) -> list[str | None]:
        return [None] if self.opts.super_stream is None else list(self.opts.partition_streams())

    def _opts(self, stream: str | None) -> SourceOptions:
        return self.opts if stream is None else self.opts.for_partition(stream)

    def _encode(self, positions: Positions) -> dict:
        if self.opts.super_stream is None:
            return {"offset": positions[None]}
        return {"offsets": dict(positions)}

    def _decode(self, offset: dict) -> Positions:
        if self.opts.super_stream is None:
            return {None: int(offset["offset"])}
        if "offsets" not in offset:
            raise OptionError("this checkpoint holds a stream's progress, not a super stream's: start the "
                              "query with a new checkpointLocation")
        return {str(k): int(v) for k, v in offset["offsets"].items()}

    def initialOffset(self) -> dict:
        starts: Positions = {}
        for s in self._streams():
            o = self._opts(s)
            starts[s] = start_offset(o, *stream_bounds(o))
        return self._encode(starts)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {s: stream_bounds(self._opts(s))[1] for s in self._streams()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:  # PySpark without read limits asks without a start
            return self._encode({s: stream_bounds(self._opts(s))[1] for s in self._streams()})
        begins = self._decode(start)
        self._progress(begins)  # the previous batches are done: [.., begin) is processed
        spans: dict[str | None, tuple[int, int]] = {}
        for s in self._streams():
            first, next_ = stream_bounds(self._opts(s))
            if self.target is not None:
                next_ = min(next_, self.target.get(s, next_))
            begin = max(begins.get(s, first), first)  # what retention removed is not counted against the limit
            spans[s] = (begin, max(next_, begin))
        if limit is not None and isinstance(limit, ReadMaxRows):
            spans = _share(spans, limit.max_rows)
        return self._encode({s: end for s, (_, end) in spans.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def partitions(self, start: dict, end: dict):
        begins, planned = self._decode(start), []
        for s, e in self._decode(end).items():
            o = self._opts(s)
            b = begins[s] if s in begins else stream_bounds(o)[0]
            if e <= b:
                continue
            b = self._lost(o, b)
            planned += _partitions(split(b, max(b, e), num_partitions=o.num_partitions,
                                         max_records=o.max_records_per_partition), self.pd, s)
        return planned

    def _lost(self, opts: SourceOptions, start: int) -> int:
        """Where a micro-batch that should start at ``start`` can start: the stream's first
        offset when retention removed the ones before it (failOnDataLoss=false), else ``start``."""
        first, _ = stream_bounds(opts)
        if start >= first:
            return start
        what = (f"stream {opts.stream!r}: offsets {start}..{first - 1} were removed by retention "
                f"before this query read them")
        if self.opts.fail_on_data_loss:
            raise amqp.ConsumerError(f"{what}; the query stops (failOnDataLoss=true). Set "
                                     f"failOnDataLoss=false to go on from the first offset there is.")
        _log.warning("%s; going on from offset %d (failOnDataLoss=false)", what, first)
        return first

    def read(self, partition: InputPartition):
        assert isinstance(partition, ReadPartition)
        return read_partition(self.opts, partition, self.schema)

    def commit(self, end: dict) -> None:
        """With ``consumerName``: store the last offset of the committed micro-batch (in each
        partition stream of a super stream)."""
        self._progress(self._decode(end))

    def _progress(self, ends: Positions) -> None:
        if self.opts.consumer_name is None:
            return
        for s, end in ends.items():
            if end > self.progress.get(s, -1):
                store_progress(self._opts(s), end)
                self.progress[s] = end


def _share(spans: dict[str | None, tuple[int, int]], max_rows: int) -> dict[str | None, tuple[int, int]]:
    """Cut the ``(begin, end)`` spans so that they hold ``max_rows`` offsets at most together:
    the smallest backlogs whole, the rest an even share of what is left."""
    out, left = dict(spans), max_rows
    order = sorted(spans, key=lambda s: spans[s][1] - spans[s][0])
    for i, s in enumerate(order):
        begin, end = spans[s]
        take = min(end - begin, left // (len(order) - i))
        out[s] = (begin, begin + take)
        left -= take
    return out


def store_progress(opts: SourceOptions, end: int) -> None:
    """Store ``end - 1`` for ``consumerName``: only forward, and only when a message lies between
    the stored offset and ``end``. A stored offset is a tracking chunk that takes an offset of
    its own, so storing after a micro-batch that held nothing but the previous store's chunk
    would make one more such batch, and so on."""
    name = opts.consumer_name
    assert name is not None
    with opts.connect() as c:
        stored = c.stored_offset(opts.stream, name)
        start = 0 if stored is None else stored + 1
        if end <= start:
            return
        with c.consumer(opts.stream, offset=start, credit=64) as consumer:
            if not any(start <= m.offset < end for m in consumer.read_available(end=end, timeout=opts.timeout)
                       if m.offset is not None):
                return
        c.store_offset(opts.stream, name, end - 1)
