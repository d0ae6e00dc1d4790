"""The settings of one stream log, in one frozen object the writer and readers share.

Defaults follow osiris where it has one (segment size 500 MB, 256,000 chunks per segment,
8192 entries per chunk); the durability policy is ours (osiris relies on replication instead).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Sequence

import bloom

from storage.errors import StorageError

__all__ = ["FsyncPolicy", "StreamConfig"]

MAX_SEGMENT_BYTES_LIMIT = 3_000_000_000  # RabbitMQ's cap; positions are u32


class FsyncPolicy(str, enum.Enum):
    """When a written chunk counts as durable (and is confirmed, and visible to readers).

    ``always``: after an fsync of the segment (one fsync covers everything written since the
    last); ``interval``: after the write, with an fsync at most every ``fsync_interval_ms``;
    ``never``: after the write, the OS decides when pages reach the disk."""

    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True)
class StreamConfig:
    max_segment_bytes: int = 500_000_000
    max_segment_chunks: int = 256_000
    max_chunk_entries: int = 8192
    # the entries a chunk may take after the writer went idle; the limit doubles after each
    # full chunk up to ``max_chunk_entries`` and halves when a chunk empties the queue, as
    # osiris's batches (gen_batch_server: 32 to 8192); ``max_chunk_entries`` or above: chunks
    # cut by size alone
    min_chunk_entries: int = 32
    max_chunk_bytes: int = 8 * 1024 * 1024
    filter_size: int = bloom.DEFAULT_SIZE
    filter_scheme: int = int(bloom.Scheme.MMH3)
    fsync: FsyncPolicy = FsyncPolicy.INTERVAL
    fsync_interval_ms: int = 200
    retention_bytes: int | None = None
    retention_age_ms: int | None = None
    epoch: int = 1
    # publisher references a tracking snapshot keeps (the most recently written ones); osiris's
    # ``max_sequences`` is 255: ours is larger so that, e.g., a Spark job's many partitions keep
    # their deduplication across a segment rollover
    tracking_max_sequences: int = 4096
    # broker-derived filter keys (``storage.derived``): the names of the indexed keys (written
    # in each segment's sidecar) and the function that gives a chunk's tokens for them
    # (``storage.derived.Derive``)
    derived_keys: tuple[str, ...] = ()
    derive: Callable[[bytes, Sequence[tuple[int, int]]], list[tuple[list[int], list[bytes | None]]]] | None = \
        field(default=None, compare=False)
    # and, for the skip table's bounds, the key (its place in ``derived_keys``) and number a
    # token holds, None for a token of another value (``storage.derived.Number``); without
    # it a row bounds nothing
    derive_number: Callable[[bytes], tuple[int, float] | None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsync", FsyncPolicy(self.fsync))
        if not 0 < self.max_segment_bytes <= MAX_SEGMENT_BYTES_LIMIT:
            raise StorageError(f"max_segment_bytes must be 1..{MAX_SEGMENT_BYTES_LIMIT}")
        if self.max_segment_chunks < 1:
            raise StorageError("max_segment_chunks must be >= 1")
        if not 1 <= self.max_chunk_entries <= 0xFFFF:
            raise StorageError("max_chunk_entries must be 1..65535 (u16 entry count)")
        if self.min_chunk_entries < 1:
            raise StorageError("min_chunk_entries must be >= 1")
        if self.max_chunk_bytes < 1:
            raise StorageError("max_chunk_bytes must be >= 1")
        if self.filter_size and not bloom.MIN_SIZE <= self.filter_size <= bloom.MAX_SIZE:
            raise StorageError(f"filter_size must be 0 (no filters) or "
                               f"{bloom.MIN_SIZE}..{bloom.MAX_SIZE}")
        if self.tracking_max_sequences < 0:
            raise StorageError("tracking_max_sequences must be >= 0")
        if bool(self.derived_keys) != (self.derive is not None):
            raise StorageError("derived_keys and derive go together")
        if any(not k or "\n" in k for k in self.derived_keys):
            raise StorageError("derived key names must be non-empty, without a newline")
        object.__setattr__(self, "derived_keys", tuple(self.derived_keys))
        if self.fsync_interval_ms < 0:
            raise StorageError("fsync_interval_ms must be >= 0")
