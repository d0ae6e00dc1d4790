"""Offset planning: turn offset options and the stream's [first, next) into read ranges.

Pure functions, no I/O: the reader asks the broker for ``first_offset``/``next_offset`` once
(``Client.info``) and these decide what each Spark partition reads. A range is half-open
``[start, end)``; a partition stops at the first message at or past ``end``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from storage import OffsetSpec, StorageError

__all__ = ["OffsetRange", "resolve", "split"]


@dataclass
class OffsetRange(InputPartition):
    start: int
    end: int

    def __init__(self, start: int, end: int):  # InputPartition defines its own __init__
        self.start, self.end = start, end


# Spark's names for the ends of a stream, in storage's offset-spec words (``last`` resolves to the
# end, like ``latest``: a batch query reads up to what is there)
_SPARK_NAMES = {"earliest": "first", "latest": "next", "last": "next"}


def resolve(spec: str | int, first: int, next_: int, *, what: str = "offset") -> int:
    """``first``/``earliest`` -> first, ``last``/``latest``/``next`` -> next, an offset as is
    (clamped to [first, next]); parsed by storage's ``OffsetSpec.parse``."""
    text = str(spec).strip().lower()
    try:
        parsed = OffsetSpec.parse(_SPARK_NAMES.get(text, text))
    except StorageError:
        parsed = None
    if parsed is None or parsed.kind not in ("first", "next", "offset"):
        raise ValueError(f"{what} must be first, latest or an offset (>= 0), got {spec!r}")
    if parsed.kind == "first":
        return first
    if parsed.kind == "next":
        return next_
    return min(max(parsed.value, first), next_)


def split(start: int, end: int, *, num_partitions: int | None = None,
          max_records: int = 100_000) -> list[OffsetRange]:
    """Split ``[start, end)`` into contiguous ranges; no empty range unless the whole is empty
    (then one empty range, so a batch read still has a partition and returns no rows)."""
    total = max(end - start, 0)
    if total == 0:
        return [OffsetRange(start, start)]
    n = num_partitions if num_partitions else math.ceil(total / max(max_records, 1))
    n = max(1, min(n, total))
    step, extra = divmod(total, n)
    ranges, pos = [], start
    for i in range(n):
        size = step + (1 if i < extra else 0)
        ranges.append(OffsetRange(pos, pos + size))
        pos += size
    return ranges
