"""What a DataFrame's ``amqp-stream`` scans ask the broker for, beside Spark's own plan.

Spark 4 prints a Python data source's scan as ``BatchScan amqp-stream[...] (Python)`` (the
description is fixed in the JVM's ``PythonScan``), and ``explain("formatted")`` adds only
``PushedFilters``, the Spark predicates the reader took: a Python reader has no way to put text
of its own there. What it plans does reach the JVM: its partitions, pickled. Each partition
carries the filters its task sends (``reader.ReadPartition``), so ``explain`` plans the query,
reads the partitions back from each scan and prints, after Spark's plan, the stream, the offsets
and the stage-1 values and SQL text that go to the broker (a super stream's scan: a line per
partition stream).
"""

from __future__ import annotations

import pickle

__all__ = ["explain", "broker_requests"]

_SOURCE = "amqp-stream"


def broker_requests(df) -> list[str]:
    """One line per ``amqp-stream`` batch scan of ``df``'s plan: offsets, partitions, filters.
    Planning a scan asks the broker for the stream's bounds, as running the query would."""
    if df.isStreaming:
        raise ValueError("explain() of a streaming DataFrame: a streaming read sends only the "
                         "filterValues/sqlFilter options given to it (Spark pushes no filters there)")
    lines = []
    leaves = df._jdf.queryExecution().sparkPlan().collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if leaf.getClass().getSimpleName() != "BatchScanExec" or leaf.table().name() != _SOURCE:
            continue
        inputs = leaf.inputPartitions()
        parts = [pickle.loads(bytes(inputs.apply(j).pickedPartition())) for j in range(inputs.size())]
        described = " | ".join(sorted({p.pushdown.describe() for p in parts}))
        streams = list(dict.fromkeys(getattr(p, "stream", None) for p in parts))  # a super stream's
        for stream in streams:
            mine = [p for p in parts if getattr(p, "stream", None) == stream]
            start, end = min(p.start for p in mine), max(p.end for p in mine)
            where = f"{stream} " if stream is not None else ""
            lines.append(f"{_SOURCE}: {where}offsets [{start}, {end}) in {len(mine)} partition(s); {described}")
    return lines


def explain(df, mode: str = "simple") -> str:
    """Spark's ``explain`` text in ``mode``, followed by what each scan sends to the broker
    (printed, and returned)."""
    jvm = df.sparkSession._jvm
    text = jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), mode)
    text = text.rstrip("\n") + "\n\n== Sent to the broker (amqp-stream) ==\n" + "\n".join(broker_requests(df)) + "\n"
    print(text)
    return text
