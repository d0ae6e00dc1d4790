"""The storage package's exceptions: one root, ``StorageError``, so callers can catch everything
this package raises with one clause; ``CorruptionError`` names the file and byte position of data
that failed a check (bad magic, CRC mismatch, impossible length) so an operator can find it."""

from __future__ import annotations

__all__ = ["StorageError", "CorruptionError", "StreamClosedError", "StaleEpochError"]


class StorageError(Exception):
    """Root of every error raised by ``storage``."""


class CorruptionError(StorageError):
    """Bytes on disk that fail a check; never served to a reader."""

    def __init__(self, path: str, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt data at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class StreamClosedError(StorageError):
    """The stream was closed, or its writer failed, and takes no more appends."""


class StaleEpochError(StorageError):
    """A replicated chunk of an epoch older than the log's last one: a deposed leader's,
    refused so that it can get nothing committed (cluster fencing)."""
