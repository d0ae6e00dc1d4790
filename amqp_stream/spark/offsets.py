"""Offset planning: turn offset options and the stream's [first, next) into read ranges.

Pure functions, no I/O: the reader asks the broker for ``first_offset``/``next_offset`` once
(``Client.info``) and these decide what each Spark partition reads. A range is half-open
``[start, end)``; a partition stops at the first message at or past ``end``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

__all__ = ["OffsetRange", "resolve", "split"]


@dataclass
class OffsetRange(InputPartition):
    start: int
    end: int

    def __init__(self, start: int, end: int):  # InputPartition defines its own __init__
        self.start, self.end = start, end


def resolve(spec: str | int, first: int, next_: int, *, what: str = "offset") -> int:
    """``first``/``earliest`` -> first, ``last``/``latest``/``next`` -> next, an integer as is
    (clamped to [first, next])."""
    text = str(spec).strip().lower()
    if text in ("first", "earliest"):
        return first
    if text in ("latest", "next", "last"):
        return next_
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} must be first, latest or an offset, got {spec!r}") from None
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return min(max(value, first), next_)


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
