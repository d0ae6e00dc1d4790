"""Exactly-once writes: the publisher reference and publishing ids of each write task.

Why: Spark re-runs work. A failed task is retried, a job killed with its driver is run again, a
streaming query restarted from its checkpoint replays the micro-batch it had not committed. The
broker deduplicates a named publisher (``docs/broker.md``, "Offset tracking and
deduplication"): a message whose publishing id is not above the last one stored for its
reference is accepted and not stored. So each task publishes under a reference that every
attempt of the same work shares, and numbers its rows so that the n-th row of the partition has
the same id in every attempt: whatever an earlier attempt stored is dropped, the rest is stored,
each row once.

- Batch write (option ``writeName``): reference ``<writeName>/<partition>``, ids 1, 2, ... in
  partition order. The name is the user's, so a re-run after a crash (a new job, a new driver)
  has the same references.
- Streaming write (option ``exactlyOnce``): reference ``spark-<queryId>/<partition>``; the query
  id is kept in the checkpoint, so it survives restarts. Ids are ``batchId * 2**32 + n`` (n =
  1, 2, ...): they grow across micro-batches, and a replayed batch has its first run's ids.

This needs deterministic input: an attempt must give each partition the same rows in the same
order (``docs/spark.md``). The ids are the rows' positions, so different rows under the same
ids would be taken for duplicates and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from amqp_stream.spark.options import OptionError

__all__ = ["Numbering", "batch_numbering", "stream_numbering", "task_numbering", "BATCH_ID_KEY",
           "QUERY_ID_KEY"]

# Task local properties Spark's micro-batch execution sets (MicroBatchExecution.BATCH_ID_KEY,
# StreamExecution.QUERY_ID_KEY).
BATCH_ID_KEY = "streaming.sql.batchId"
QUERY_ID_KEY = "sql.streaming.queryId"
_BATCH_SHIFT = 32  # rows of one partition in one micro-batch: below 2**32
_ID_LIMIT = 1 << 64  # publishing ids are ulongs


@dataclass(frozen=True)
class Numbering:
    """A task's publisher ``reference`` and its ids: row n (0-based) gets ``base + n + 1``,
    which must stay below ``limit``."""

    reference: str
    base: int
    limit: int

    def publishing_id(self, n: int) -> int:
        pid = self.base + n + 1
        if pid >= self.limit:
            raise OptionError(f"publisher {self.reference!r}: more rows than its ids allow "
                              f"({self.limit - self.base - 1} per partition and micro-batch)")
        return pid


def batch_numbering(write_name: str, partition: int) -> Numbering:
    return Numbering(f"{write_name}/{partition}", 0, _ID_LIMIT)


def stream_numbering(query_id: str, batch_id: int, partition: int) -> Numbering:
    base = batch_id << _BATCH_SHIFT
    if not 0 <= base < _ID_LIMIT:
        raise OptionError(f"micro-batch id {batch_id} is out of the range exactly-once ids allow")
    return Numbering(f"spark-{query_id}/{partition}", base, base + (1 << _BATCH_SHIFT))


def task_numbering(ctx, write_name: str | None, streaming: bool) -> Numbering:
    """The running task's numbering, from its ``pyspark.TaskContext``."""
    if not streaming:
        assert write_name is not None
        return batch_numbering(write_name, ctx.partitionId())
    query_id, batch_id = ctx.getLocalProperty(QUERY_ID_KEY), ctx.getLocalProperty(BATCH_ID_KEY)
    if not query_id or batch_id is None:
        raise OptionError(f"exactlyOnce: this task has no micro-batch id ({BATCH_ID_KEY}, {QUERY_ID_KEY}); "
                          "exactly-once streaming writes need micro-batch execution")
    return stream_numbering(query_id, int(batch_id), ctx.partitionId())
