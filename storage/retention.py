"""Which old segments retention deletes: a pure decision, so it can be tested on its own.

Rules (``design/storage-format.md``, "Writing"): whole segments, oldest first, never the newest;
by bytes, keep the newest segments whose sizes fit in ``retention_bytes``, the newest counted as
empty (as osiris decides at the roll, when it is: a decision that depends on how far the newest
segment has filled by the time it runs would drop different segments on a leader, which decides
after writing a group of chunks, and its replicas, which decide at the roll); by age, delete a
segment whose last chunk is older than ``now - retention_age_ms``. When both are set, the one
that deletes more wins. The caller deletes index before segment.
"""

from __future__ import annotations

from typing import Sequence

from storage.recovery import SegmentInfo

__all__ = ["segments_to_drop"]


def segments_to_drop(segments: Sequence[SegmentInfo], retention_bytes: int | None,
                     retention_age_ms: int | None, now_ms: int) -> int:
    """How many of the oldest ``segments`` (oldest first) to delete."""
    last = len(segments) - 1
    drop = 0
    if retention_bytes is not None:
        kept = 0
        for k in range(last, -1, -1):
            kept += segments[k].size if k < last else 0
            if kept > retention_bytes and k < last:
                drop = k + 1
                break
    if retention_age_ms is not None:
        cutoff = now_ms - retention_age_ms
        k = 0
        while k < last and (segments[k].last_timestamp or 0) < cutoff:
            k += 1
        drop = max(drop, k)
    return drop
