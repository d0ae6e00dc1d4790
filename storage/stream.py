"""One stream: its public face. ``Stream.open`` locks the directory, recovers it and starts the
writer (``storage.writer``: append queue, group commit, fsync policy, failure and reopen,
rollover, retention); ``Stream`` checks what callers append, hands it to the writer, and tells
readers how far the committed log goes.

Readers in this process never look past the committed end, so they never see a chunk before it
counts as written under the fsync policy, nor a partly written one. ``on_durable`` callbacks run
after the committed end has moved past their records: a record is readable no later than it is
confirmed.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence

import bloom

from storage.config import FsyncPolicy, StreamConfig
from storage.errors import StorageError, StreamClosedError
from storage.format import SEGMENT_HEADER_BYTES, SubBatchEntry
from storage.offsets import OffsetSpec
from storage.reader import Reader
from storage.recovery import SegmentInfo, recover
from storage.writer import DurableCallback, FilterValue, Writer, create_segment, lock_directory

__all__ = ["Stream", "DurableCallback"]

_VALUE_TYPES = frozenset({str, bytes, bytearray, type(None)})
_ONE_VALUE = frozenset({str, bytes, bytearray})


def _bad_value(value: FilterValue) -> bool:
    """Not a record's filter value: one str/bytes, a tuple of them (several values), or None."""
    if type(value) in _VALUE_TYPES:
        return False
    return type(value) is not tuple or not all(type(v) in _ONE_VALUE for v in value)
MAX_RECORD_BYTES = 0x7FFFFFFF - 4  # a simple entry's length is 31 bits; the data section u32


class Stream:
    """An open stream directory. Use ``Stream.open``; ``close()`` when done."""

    def __init__(self, directory: str, config: StreamConfig, segments: list[SegmentInfo],
                 lock_fd: int = -1) -> None:
        self.directory = directory
        self.config = config
        self._writer = Writer(directory, config, segments)
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, directory: str | os.PathLike[str], config: StreamConfig | None = None) -> Stream:
        """Open (creating if needed) and recover the stream in ``directory``."""
        directory = os.fspath(directory)
        config = config or StreamConfig()
        os.makedirs(directory, exist_ok=True)
        lock_fd = lock_directory(directory)
        try:
            segments = recover(directory)
            if not segments:
                create_segment(directory, 0, config.fsync != FsyncPolicy.NEVER)
                segments = [SegmentInfo(0, SEGMENT_HEADER_BYTES, 0, 0, None)]
            stream = cls(directory, config, segments, lock_fd)
        except BaseException:
            os.close(lock_fd)
            raise
        with stream._writer.lock:
            stream._writer.apply_retention()
        return stream

    # -- appending -----------------------------------------------------------------------------
    def append(self, body: bytes, filter_value: FilterValue = None,
               on_durable: DurableCallback | None = None) -> int:
        """Queue one record; returns its offset. ``on_durable(offset, error)`` is called from the
        writer thread once its chunk is durable per the policy (or failed)."""
        if len(body) > MAX_RECORD_BYTES:
            raise StorageError(f"a record is at most {MAX_RECORD_BYTES} bytes")
        if filter_value is not None and _bad_value(filter_value):
            raise StorageError(f"a filter value is str or bytes (or a tuple of them), "
                               f"not {type(filter_value).__name__}")
        return self._writer.append(body, filter_value, on_durable)

    def append_batch(self, bodies: Sequence[bytes],
                     filter_values: Sequence[FilterValue] | None = None,
                     on_durable: DurableCallback | None = None,
                     records: int | None = None) -> int:
        """Queue many records at once; returns the first offset (they get consecutive offsets).
        ``on_durable(last_offset, error)`` is called once, when all of them are durable.

        Some bodies may be ``storage.format.SubBatchEntry``s (a client's sub-entry batch, stored
        as it came: one entry of ``entry.records`` records); then ``records`` must be the
        number of offsets all of them take."""
        n = len(bodies)
        if filter_values is not None and len(filter_values) != n:
            raise StorageError("filter_values must have one entry per body")
        if n and max(map(len, bodies)) > MAX_RECORD_BYTES:
            raise StorageError(f"a record is at most {MAX_RECORD_BYTES} bytes")
        if filter_values is not None and not set(map(type, filter_values)) <= _VALUE_TYPES \
                and any(map(_bad_value, filter_values)):
            raise StorageError("filter values are str, bytes, a tuple of them, or None")
        if records is not None:
            expected = sum(b.records if type(b) is SubBatchEntry else 1 for b in bodies)
            if records != expected:
                raise StorageError(f"records = {records}, the bodies hold {expected}")
        return self._writer.append_batch(bodies, filter_values, on_durable, records)

    # -- state ---------------------------------------------------------------------------------
    @property
    def committed_offset(self) -> int:
        """The last committed offset, -1 when nothing is committed."""
        return self._writer.end - 1

    @property
    def next_offset(self) -> int:
        """The committed end: the offset a reader at ``next`` starts from."""
        return self._writer.end

    @property
    def committed_chunk_id(self) -> int:
        """The id (first offset) of the last committed chunk, -1 when there is none (RabbitMQ's
        committed chunk id: Deliver v2, StreamStats)."""
        return self._writer.committed_chunk_id

    @property
    def first_offset(self) -> int:
        """The first offset still kept (= ``next_offset`` for an empty stream)."""
        return self._writer.starts[0]

    def segment_starts(self) -> Sequence[int]:
        return self._writer.starts

    def committed_end(self) -> int | None:
        return self._writer.end

    def add_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` is called from the writer thread whenever the committed end moves."""
        self._writer.add_listener(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        self._writer.remove_listener(fn)

    def wait_beyond(self, offset: int, timeout: float | None) -> bool:
        return self._writer.wait_beyond(offset, timeout)

    def reader(self, spec: OffsetSpec, filter_values: Iterable[str | bytes] = (),
               match_unfiltered: bool = False) -> Reader:
        return Reader(self, spec, filter_values, match_unfiltered,
                      filter_size_hint=self.config.filter_size or bloom.MIN_SIZE)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything appended so far is committed (or the stream failed)."""
        writer = self._writer
        writer.wait_committed(writer.next, timeout)
        if writer.error is not None:
            raise StreamClosedError(str(writer.error)) from writer.error

    def close(self) -> None:
        """Write what is queued, fsync, stop the writer, close the files."""
        self._writer.close()
        if self._lock_fd >= 0:
            try:
                os.close(self._lock_fd)
            except OSError:
                pass
            self._lock_fd = -1

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
