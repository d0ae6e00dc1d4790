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

import itertools
import operator
import os
from typing import Callable, Iterable, Sequence

import bloom

from storage.config import FsyncPolicy, StreamConfig
from storage.derived import Bounds, Wanted
from storage.errors import StorageError, StreamClosedError
from storage.format import SEGMENT_HEADER_BYTES, SubBatchEntry
from storage.offsets import OffsetSpec
from storage.reader import Reader
from storage.recovery import SegmentInfo, recover
from storage.tracking import U64_MAX, tracking_id
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


def _ascending(values: Sequence[int]) -> bool:
    """Strictly ascending (in C, no Python code per value)."""
    return len(values) < 2 or all(map(operator.lt, values, itertools.islice(values, 1, None)))


def _check_u64(value: int, what: str) -> None:
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise StorageError(f"an {what} is an integer in 0..2^64-1, not {value!r}")


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
                     records: int | None = None, *,
                     writer: tuple[str | bytes, int] | None = None,
                     sequences: Sequence[int] | None = None) -> int:
        """Queue many records at once; returns the first offset (they get consecutive offsets).
        ``on_durable(last_offset, error)`` is called once, when all of them are durable.

        Some bodies may be ``storage.format.SubBatchEntry``s (a client's sub-entry batch, stored
        as it came: one entry of ``entry.records`` records); then ``records`` must be the
        number of offsets all of them take.

        ``writer=(reference, sequence)``: a named publisher's batch, ``sequence`` the last
        publishing id in it. The batch is written in one chunk (so it must fit one:
        ``max_chunk_entries`` entries, ``max_chunk_bytes`` bytes with 4 per entry) whose trailer
        records the sequence; ``sequence`` must be above ``query_sequence(reference)``
        (drop what is not above it before calling: that is deduplication). With
        ``sequences``, the publishing id of each body (ascending, the last one ``sequence``),
        the batch may span chunks of any size, as osiris writes them: the trailer of each
        records the id of the batch's last body in it."""
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
        if writer is None:
            return self._writer.append_batch(bodies, filter_values, on_durable, records=records)
        reference, sequence = writer
        ref = tracking_id(reference, "publisher reference")
        _check_u64(sequence, "publishing id")
        cfg = self.config
        if sequences is not None:
            if len(sequences) != n or not n or sequences[-1] != sequence:
                raise StorageError("sequences: one publishing id per body, the last one the "
                                   "writer's sequence")
            if not _ascending(sequences):
                raise StorageError("sequences must be ascending")
            _check_u64(sequences[0], "publishing id")  # ascending up to ``sequence``: all are
        elif not n or n > cfg.max_chunk_entries or (
                n > 1 and sum(map(len, bodies)) + 4 * n > cfg.max_chunk_bytes):
            raise StorageError(f"a publisher's batch is 1..{cfg.max_chunk_entries} records and "
                               f"at most {cfg.max_chunk_bytes} bytes (one chunk)")
        return self._writer.append_batch(bodies, filter_values, on_durable, (ref, sequence),
                                         records=records, sequences=sequences)

    def notify_durable(self, on_durable: DurableCallback) -> None:
        """``on_durable(last offset, error)`` once everything appended so far is durable (from
        the writer thread; at once, from this one, when nothing is waiting for the disk). For a
        caller that confirms something it did not append (a deduplicated message) no sooner
        than what it appended before."""
        self._writer.notify_durable(on_durable)

    def append_deduplicated(self, reference: str | bytes, bodies: Sequence[bytes],
                            publishing_ids: Sequence[int],
                            filter_values: Sequence[FilterValue] | None = None,
                            on_durable: DurableCallback | None = None) -> list[int]:
        """A named publisher's messages, deduplicated as RabbitMQ does: those whose publishing
        id is above the last one stored for ``reference`` (any id, 0 too, when none is: as in
        osiris) and above every id before them here are appended, in one batch with their ids
        (``append_batch(..., writer=, sequences=)``: chunks cut as for any append, each
        trailer holding the last id in it, as osiris's); the others are dropped.
        ``on_durable(offset, error)`` runs once what was kept, and everything appended before
        it, is durable (also when nothing was kept: then confirm the duplicates). Returns the
        indices of the messages kept.

        A body may be a ``SubBatchEntry`` (a client's sub-entry batch: one publishing id for
        its records, as RabbitMQ deduplicates them); the records each batch takes are counted
        here."""
        n = len(bodies)
        if len(publishing_ids) != n or (filter_values is not None and len(filter_values) != n):
            raise StorageError("publishing_ids and filter_values must have one entry per body")
        key = tracking_id(reference, "publisher reference")
        self._writer.check_tracking()
        last = self._writer.sequences.get(key, -1)  # as osiris: an unknown one takes any id
        keep: list[int] = []
        if n and publishing_ids[0] > last and _ascending(publishing_ids):
            keep = list(range(n))  # the common case, checked in C: all kept
        else:
            for i, pid in enumerate(publishing_ids):
                if pid > last:
                    last = pid
                    keep.append(i)
        if not keep:
            if on_durable is not None:
                self.notify_durable(on_durable)
            return keep
        if len(keep) < n:
            bodies = [bodies[i] for i in keep]
            if filter_values is not None:
                filter_values = [filter_values[i] for i in keep]
        ids = [publishing_ids[i] for i in keep] if len(keep) < n else list(publishing_ids)
        records = sum(x.records if type(x) is SubBatchEntry else 1 for x in bodies)
        # one batch: the writer cuts it into chunks, each trailer holding its last id here
        self.append_batch(bodies, filter_values, on_durable,
                          records if records != len(bodies) else None,
                          writer=(reference, ids[-1]), sequences=ids)
        return keep

    # -- tracking ------------------------------------------------------------------------------
    def store_offset(self, name: str | bytes, offset: int,
                     on_durable: DurableCallback | None = None) -> None:
        """Store consumer ``name``'s offset (a tracking delta chunk, queued like an append;
        it takes an offset of its own). ``query_offset`` answers it at once; ``on_durable(
        offset, error)`` is called once it is durable per the fsync policy."""
        _check_u64(offset, "offset")
        self._writer.store_offset(tracking_id(name, "consumer name"), offset, on_durable)

    def query_offset(self, name: str | bytes) -> int | None:
        """The offset last stored for consumer ``name``; None when none is."""
        key = tracking_id(name, "consumer name")
        self._writer.check_tracking()
        return self._writer.offsets.get(key)

    def query_sequence(self, reference: str | bytes) -> int:
        """The last publishing id appended for publisher ``reference``; 0 when unknown."""
        key = tracking_id(reference, "publisher reference")
        self._writer.check_tracking()
        return self._writer.sequences.get(key, 0)

    def tracking(self) -> tuple[dict[bytes, int], dict[bytes, int]]:
        """``(offsets, sequences)``: copies of every consumer name's stored offset and every
        publisher reference's last publishing id (for listings)."""
        w = self._writer
        w.check_tracking()
        with w.lock:
            return dict(w.offsets), dict(w.sequences)

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

    def appended_end(self) -> int | None:
        """The offset after the last record appended so far, committed or still queued
        (tracking chunks queued after it do not count)."""
        return self._writer.user_next

    def add_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` is called from the writer thread whenever the committed end moves."""
        self._writer.add_listener(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        self._writer.remove_listener(fn)

    def wait_beyond(self, offset: int, timeout: float | None) -> bool:
        return self._writer.wait_beyond(offset, timeout)

    def reader(self, spec: OffsetSpec, filter_values: Iterable[str | bytes] = (),
               match_unfiltered: bool = False, derived: Wanted | None = None,
               needles: Sequence[Sequence[bytes]] = (), bounds: Bounds | None = None) -> Reader:
        """``derived``, ``needles`` and ``bounds``: see ``Reader`` (what the caller's filter
        requires)."""
        return Reader(self, spec, filter_values, match_unfiltered,
                      filter_size_hint=self.config.filter_size or bloom.MIN_SIZE,
                      derived=derived, needles=needles, bounds=bounds)

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
