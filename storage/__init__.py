"""The stream log: RabbitMQ's segment/index/chunk format on disk, a writer with group commit and
a durability policy, readers with offset specs and stage-1 chunk skipping, recovery, retention.

Format: ``storage.format`` (and ``../shared/design/storage-format.md``). Entry point:
``Stream.open(directory, StreamConfig(...))``; ``open_reader(directory, spec)`` reads a directory
from its files alone (another process may be writing it). Consumer offsets and publisher
sequences live in the stream too (``Stream.store_offset``/``query_offset``,
``append_batch(..., writer=)``/``query_sequence``; ``storage.tracking``).
"""

from storage.config import FsyncPolicy, StreamConfig
from storage.errors import CorruptionError, StorageError, StreamClosedError
from storage.offsets import TIMESTAMP_FROM_MS, OffsetSpec, parse_interval_ms
from storage.reader import (
    SCAN_PAUSED,
    ChunkLocation,
    DirectorySource,
    ReadChunk,
    Reader,
    ReaderStats,
    ScanPaused,
    open_reader,
)
from storage.recovery import SegmentInfo, recover
from storage.stream import DurableCallback, Stream

__all__ = [
    "ChunkLocation",
    "CorruptionError",
    "DirectorySource",
    "DurableCallback",
    "FsyncPolicy",
    "OffsetSpec",
    "ReadChunk",
    "Reader",
    "ReaderStats",
    "SCAN_PAUSED",
    "ScanPaused",
    "SegmentInfo",
    "StorageError",
    "Stream",
    "StreamClosedError",
    "StreamConfig",
    "TIMESTAMP_FROM_MS",
    "open_reader",
    "parse_interval_ms",
    "recover",
]
