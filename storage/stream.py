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

import bisect
import heapq
import logging
import itertools
import operator
import os
import threading
import time
from typing import Callable, Iterable, Sequence

import bloom

from storage.config import FsyncPolicy, StreamConfig
from storage.derived import Bounds, Wanted
from storage.errors import StorageError, StreamClosedError
from storage.files import create_segment, lock_directory
from storage.format import (SEGMENT_HEADER_BYTES, EntryRun, EntrySpans, PublishingIds,
                            SubBatchEntry, TextValues, run_entries)
from storage.offsets import OffsetSpec
from storage.reader import Columns, Reader
from storage.recovery import SegmentInfo, recover
from storage.tracking import U64_MAX, tracking_id
from storage.writer import DurableCallback, FilterValue, Writer

__all__ = ["Stream", "DurableCallback", "LocalView"]

log = logging.getLogger(__name__)

_VALUE_TYPES = frozenset({str, bytes, bytearray, type(None)})
_ONE_VALUE = frozenset({str, bytes, bytearray})


def _bad_value(value: FilterValue) -> bool:
    """Not a record's filter value: one str/bytes, a tuple of them (several values), or None."""
    if type(value) in _VALUE_TYPES:
        return False
    return type(value) is not tuple or not all(type(v) in _ONE_VALUE for v in value)


def _check_values(values: Sequence[FilterValue]) -> None:
    """StorageError unless every one of a batch's filter values is a record's (``_bad_value``):
    one pass over their types in C, the slow look only when some is not a plain value; none
    for ``TextValues``, whose maker vouches for them."""
    if type(values) is not TextValues and not set(map(type, values)) <= _VALUE_TYPES \
            and any(map(_bad_value, values)):
        raise StorageError("filter values are str, bytes, a tuple of them, or None")


MAX_RECORD_BYTES = 0x7FFFFFFF - 4  # a simple entry's length is 31 bits; the data section u32


def _ascending(values: Sequence[int]) -> bool:
    """Strictly ascending (in C, no Python code per value)."""
    return len(values) < 2 or all(map(operator.lt, values, itertools.islice(values, 1, None)))


def _check_frames(frames: Sequence[int] | None, n: int) -> None:
    if frames is not None and (not frames or frames[0] != 0 or frames[-1] >= max(n, 1)
                               or not _ascending(frames)):
        raise StorageError("frames: where each frame starts in bodies, ascending from 0")


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
        # a replicated stream's commit (``gate_commit``): None, the local durable end is the
        # commit; else the cluster's commit end, which bounds readers and holds confirms
        self._gate: int | None = None
        self._gate_chunk = -1
        self._gate_lock = threading.Lock()
        self._held: list[tuple[int, int, DurableCallback]] = []  # a heap by offset
        self._held_n = itertools.count()

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
        return self._writer.append(body, filter_value, self._hold(on_durable))

    def append_batch(self, bodies: Sequence[bytes],
                     filter_values: Sequence[FilterValue] | None = None,
                     on_durable: DurableCallback | None = None,
                     records: int | None = None, *,
                     writer: tuple[str | bytes, int] | None = None,
                     sequences: Sequence[int] | None = None,
                     frames: Sequence[int] | None = None, entries: int | None = None) -> int:
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
        records the id of the batch's last body in it.

        ``frames``: the batch holds several client frames (a stream publisher's Publish frames
        of one loop turn), starting at these places in ``bodies`` (ascending, 0 first). A
        frame of at least ``min_chunk_entries`` messages shares no chunk with another frame,
        as its messages reach osiris's writer together when it keeps up (cut by the chunk
        limits only), unless the writer takes more than ``storage.chunking.FRAMES_APART_MAX``
        entries at once (it is behind: cut across frames); without ``frames``, chunks are cut
        anywhere.

        ``entries``: some bodies are ``storage.format.EntryRun``s (a client frame's records of
        one size, left in the frame's bytes: no object per record), and the number of entries
        all of them take, a run its ``count``; ``filter_values``, ``frames`` and ``records``
        then count entries, not items. The chunks, indexes and callbacks are those of the same
        records given one body each."""
        if entries is not None:
            return self._append_runs(bodies, filter_values, on_durable, records, entries,  # type: ignore[arg-type]
                                     writer, frames, sequences)
        n = len(bodies)
        if filter_values is not None and len(filter_values) != n:
            raise StorageError("filter_values must have one entry per body")
        _check_frames(frames, n)
        if n and max(map(len, bodies)) > MAX_RECORD_BYTES:
            raise StorageError(f"a record is at most {MAX_RECORD_BYTES} bytes")
        if filter_values is not None:
            _check_values(filter_values)
        if records is not None:
            expected = sum(b.records if type(b) is SubBatchEntry else 1 for b in bodies)
            if records != expected:
                raise StorageError(f"records = {records}, the bodies hold {expected}")
        on_durable = self._hold(on_durable)
        if writer is None:
            return self._writer.append_batch(bodies, filter_values, on_durable, records=records,
                                             frames=frames)
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
                                         records=records, sequences=sequences, frames=frames)

    def _append_runs(self, items: Sequence[bytes | EntryRun | EntrySpans],
                     filter_values: Sequence[FilterValue] | None,
                     on_durable: DurableCallback | None, records: int | None, entries: int,
                     writer: tuple[str | bytes, int] | None, frames: Sequence[int] | None,
                     sequences: Sequence[int] | None = None, ascending: bool = False) -> int:
        """``append_batch`` with ``EntryRun`` / ``EntrySpans`` items: the same checks, per
        item, not per record. A named publisher's batch (``writer``) comes with ``sequences``,
        one publishing id per entry (``ascending``: the caller checked that they are)."""
        counted = largest = extra = 0
        for x in items:
            if isinstance(x, EntryRun):
                counted += x.count
                largest = max(largest, x.size)
            elif isinstance(x, EntrySpans):
                counted += x.count
                total = x.records_bytes()  # all its records
                largest = max(largest, total if total <= MAX_RECORD_BYTES else x.largest())
            else:
                counted += 1
                largest = max(largest, len(x))
                if type(x) is SubBatchEntry:
                    extra += x.records - 1
        if counted != entries:
            raise StorageError(f"entries = {entries}, the items hold {counted}")
        if largest > MAX_RECORD_BYTES:
            raise StorageError(f"a record is at most {MAX_RECORD_BYTES} bytes")
        if records is not None and records != entries + extra:
            raise StorageError(f"records = {records}, the bodies hold {entries + extra}")
        if filter_values is not None:
            if len(filter_values) != entries:
                raise StorageError("filter_values must have one entry per record")
            _check_values(filter_values)
        _check_frames(frames, entries)
        ref_seq: tuple[bytes, int] | None = None
        if writer is not None:
            reference, sequence = writer
            if sequences is None or len(sequences) != entries or not entries \
                    or sequences[-1] != sequence or not (ascending or _ascending(sequences)):
                raise StorageError("a named publisher's entries come with one publishing id "
                                   "each, ascending, the last one the writer's sequence")
            _check_u64(sequences[0], "publishing id")
            _check_u64(sequence, "publishing id")
            ref_seq = (tracking_id(reference, "publisher reference"), sequence)
        return self._writer.append_batch(items, filter_values, self._hold(on_durable),
                                         ref_seq, records=records, sequences=sequences,
                                         frames=frames, entries=entries)

    def notify_durable(self, on_durable: DurableCallback) -> None:
        """``on_durable(last offset, error)`` once everything appended so far is durable (from
        the writer thread; at once, from this one, when nothing is waiting for the disk). For a
        caller that confirms something it did not append (a deduplicated message) no sooner
        than what it appended before."""
        held = self._hold(on_durable)
        assert held is not None
        self._writer.notify_durable(held)

    def append_deduplicated(self, reference: str | bytes, bodies: Sequence[bytes],
                            publishing_ids: Sequence[int],
                            filter_values: Sequence[FilterValue] | None = None,
                            on_durable: DurableCallback | None = None,
                            frames: Sequence[int] | None = None,
                            entries: int | None = None, ascending: bool = False) -> list[int]:
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
        here. ``frames``: as for ``append_batch``, places in ``bodies``.

        ``entries``: some bodies are ``EntryRun``s or ``EntrySpans`` (a client frame's records
        left in its bytes), and the entries all take; ``publishing_ids``, ``filter_values``,
        ``frames`` and the indices returned then count entries. When all are kept (a
        publisher's ids ascending from above the last stored: checked in C) the runs go to
        the writer whole; otherwise they are taken apart first (the rare path).
        ``ascending``: the caller checked that ``publishing_ids`` are strictly ascending (a
        ``PublishingIds``, checked by numpy: no int per id)."""
        n = len(bodies) if entries is None else entries
        if len(publishing_ids) != n or (filter_values is not None and len(filter_values) != n):
            raise StorageError("publishing_ids and filter_values must have one entry per body")
        key = tracking_id(reference, "publisher reference")
        self._writer.check_tracking()
        last = self._writer.sequences.get(key, -1)  # as osiris: an unknown one takes any id
        keep: list[int] = []
        if n and publishing_ids[0] > last and (ascending or _ascending(publishing_ids)):
            if entries is not None:  # the common case, checked in C: all kept, runs whole
                ids = (publishing_ids if type(publishing_ids) in (list, PublishingIds)
                       else list(publishing_ids))
                records = entries + sum(x.records - 1 for x in bodies if type(x) is SubBatchEntry)
                self._append_runs(bodies, filter_values, on_durable,
                                  records if records != entries else None, entries,
                                  (reference, ids[-1]), frames, ids, ascending=True)
                return list(range(n))
            keep = list(range(n))  # the common case, checked in C: all kept
        else:
            for i, pid in enumerate(publishing_ids):
                if pid > last:
                    last = pid
                    keep.append(i)
        if entries is not None:
            bodies = run_entries(bodies)  # one body per entry, as the indices count
        if not keep:
            if on_durable is not None:
                self.notify_durable(on_durable)
            return keep
        if len(keep) < n:
            bodies = [bodies[i] for i in keep]
            if filter_values is not None:
                filter_values = [filter_values[i] for i in keep]
            if frames is not None:  # where each frame's first kept body now is
                frames = sorted({k for k in (bisect.bisect_left(keep, f) for f in frames)
                                 if k < len(keep)})
        ids = [publishing_ids[i] for i in keep] if len(keep) < n else list(publishing_ids)
        records = sum(x.records if type(x) is SubBatchEntry else 1 for x in bodies)
        # one batch: the writer cuts it into chunks, each trailer holding its last id here
        self.append_batch(bodies, filter_values, on_durable,
                          records if records != len(bodies) else None,
                          writer=(reference, ids[-1]), sequences=ids, frames=frames)
        return keep

    # -- tracking ------------------------------------------------------------------------------
    def store_offset(self, name: str | bytes, offset: int,
                     on_durable: DurableCallback | None = None) -> None:
        """Store consumer ``name``'s offset (a tracking delta chunk, queued like an append;
        it takes an offset of its own). ``query_offset`` answers it at once; ``on_durable(
        offset, error)`` is called once it is durable per the fsync policy."""
        _check_u64(offset, "offset")
        self._writer.store_offset(tracking_id(name, "consumer name"), offset,
                                  self._hold(on_durable))

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
        return self.committed_end() - 1

    @property
    def next_offset(self) -> int:
        """The committed end: the offset a reader at ``next`` starts from."""
        return self.committed_end()

    @property
    def committed_chunk_id(self) -> int:
        """The id (first offset) of the last committed chunk, -1 when there is none (RabbitMQ's
        committed chunk id: Deliver v2, StreamStats)."""
        w = self._writer
        gate = self._gate
        if gate is not None and gate < w.end:
            return self._gate_chunk
        return w.committed_chunk_id

    @property
    def first_offset(self) -> int:
        """The first offset still kept (= ``next_offset`` for an empty stream)."""
        return self._writer.starts[0]

    def segment_starts(self) -> Sequence[int]:
        return self._writer.starts

    def committed_end(self) -> int:
        end = self._writer.end
        gate = self._gate
        return end if gate is None or gate > end else gate

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
        if self._gate is None:
            return self._writer.wait_beyond(offset, timeout)
        w = self._writer
        with w._commit_cond:
            return w._commit_cond.wait_for(
                lambda: self.committed_end() > offset or not w.thread.is_alive(), timeout) \
                and self.committed_end() > offset

    def replication_reader(self, offset: int) -> Reader:
        """A reader of whole chunks (``Reader.read_raw``) from ``offset`` (a chunk boundary) up
        to the local end."""
        return Reader(self.local_view(), OffsetSpec.offset(offset))

    def reader(self, spec: OffsetSpec, filter_values: Iterable[str | bytes] = (),
               match_unfiltered: bool = False, derived: Wanted | None = None,
               needles: Sequence[Sequence[bytes]] = (), bounds: Bounds | None = None,
               columns: Columns | None = None) -> Reader:
        """``derived``, ``needles``, ``bounds`` and ``columns``: see ``Reader`` (what the caller's filter
        requires). ``next`` while appends are queued starts after them, where the writer ends
        a chunk for it (``Writer.break_chunk``): what the broker took before a subscription
        is not delivered to it, however late the writer thread writes it (osiris's ``next``
        is the log's tail, and its writer is as quick as a message to it)."""
        queued_end = self._writer.break_chunk() if spec.kind == "next" else None
        return Reader(self, spec, filter_values, match_unfiltered,
                      filter_size_hint=self.config.filter_size or bloom.MIN_SIZE,
                      derived=derived, needles=needles, bounds=bounds, queued_end=queued_end,
                      columns=columns)

    # -- replication (a cluster member: ``amqp_stream.cluster``) --------------------------------
    def gate_commit(self, end: int, chunk_id: int = -1) -> None:
        """From now on the commit is the cluster's: readers see, and ``on_durable`` callbacks
        hear of, only what lies below ``end`` (moved by ``set_commit``), whatever is durable
        here. Where the core asks "committed?", it gets the quorum's answer."""
        with self._gate_lock:
            self._gate = end
            self._gate_chunk = chunk_id

    def set_commit(self, end: int, chunk_id: int) -> None:
        """The cluster's commit end moved to ``end`` (``chunk_id``: the last chunk below it):
        held callbacks below it run, readers are told (the stream's listeners)."""
        with self._gate_lock:
            if self._gate is None or end <= self._gate:
                return
            self._gate, self._gate_chunk = end, chunk_id
            due = []
            held = self._held
            while held and held[0][0] < end:
                due.append(heapq.heappop(held))
        self._release(due)

    @property
    def commit_gate(self) -> int | None:
        """The cluster's commit end (None: not replicated, the local durable end commits)."""
        return self._gate

    def ungate(self) -> None:
        """The stream stops being replicated: the local durable end commits again. Held
        callbacks run (what they wait for is durable here: they were held after that)."""
        with self._gate_lock:
            if self._gate is None:
                return
            self._gate = None
            held, self._held = self._held, []
        self._release(sorted(held))

    def _release(self, due: list) -> None:
        """Run the held ``(offset, _, callback)``s (committed now), then wake the stream's
        listeners and waiters: the commit end moved."""
        for offset, _, cb in due:
            try:
                cb(offset, None)
            except Exception:
                log.exception("on_durable callback failed")
        w = self._writer
        for fn in w._listeners:
            try:
                fn()
            except Exception:
                log.exception("stream listener failed")
        with w._commit_cond:
            w._commit_cond.notify_all()

    def fail_held(self, error: Exception) -> int:
        """Give ``error`` to every callback held for the commit (this member stops leading:
        what it holds may never be committed, and a new leader confirms nothing it did not
        take itself); returns how many there were."""
        with self._gate_lock:
            held, self._held = self._held, []
        for offset, _, cb in sorted(held):
            try:
                cb(offset, error)
            except Exception:
                log.exception("on_durable callback failed")
        return len(held)

    def _hold(self, cb: DurableCallback | None) -> DurableCallback | None:
        """``cb`` held until the cluster's commit passes its offset (as it is when the stream
        is not replicated)."""
        if cb is None or self._gate is None:
            return cb

        def held(offset: int, error: Exception | None) -> None:
            if error is None:
                with self._gate_lock:
                    if self._gate is not None and self._gate <= offset:
                        heapq.heappush(self._held, (offset, next(self._held_n), cb))
                        return
            cb(offset, error)
        return held

    @property
    def local_end(self) -> int:
        """The end of what is durable here (the leader's own tail; beyond the commit)."""
        return self._writer.end

    @property
    def last_chunk_id(self) -> int:
        """The id of the last chunk durable here (-1: none)."""
        return self._writer.committed_chunk_id

    @property
    def last_epoch(self) -> int:
        """The epoch of the last chunk in the log (0: none)."""
        return self._writer.last_epoch

    def set_epoch(self, epoch: int) -> None:
        """Chunks written from now on carry ``epoch`` (a leader's; never below the last one)."""
        self._writer.set_epoch(epoch)

    def mark_epoch(self, name: bytes = b"leader-epoch") -> None:
        """Queue a tracking chunk holding one timestamp record (osiris's type 2: no consumer
        offset, no publisher sequence): the first chunk of a new leader's epoch, so that what
        older epochs left can be committed with it (Raft's no-op entry)."""
        self._writer.store_timestamp(name, time.time_ns() // 1_000_000)

    def set_follower(self, follower: bool) -> None:
        """A replica's log takes chunks only through ``append_chunks``: appends are refused."""
        self._writer.set_follower(follower)

    @property
    def follower(self) -> bool:
        """Appends refused (``set_follower``): a replica's log, or a leader handing over."""
        return self._writer.follower

    def append_chunks(self, chunks: Sequence[tuple[bytes | memoryview, bool]]) -> int:
        """Append whole chunks as another log holds them (see ``Writer.append_chunks``);
        returns the new local end. ``StaleEpochError`` for a chunk of an older epoch."""
        return self._writer.append_chunks(chunks)

    def sync(self) -> None:
        """fsync what ``append_chunks`` left unsynced (``interval``), on its thread."""
        self._writer.sync_raw()

    def truncate(self, end: int) -> int:
        """Cut the log back to ``end`` (at a chunk boundary at or below it; see
        ``storage.truncate``), for a member holding chunks the new leader does not have;
        returns the new end. The writer is stopped around it and started again (listeners,
        epoch and follower state kept). Nothing may be appending meanwhile."""
        from storage.truncate import truncate_log
        if end >= self._writer.end:
            return self._writer.end
        cut: list[int] = []
        self._restart_writer(lambda: cut.append(truncate_log(
            self.directory, end, self.config.fsync != FsyncPolicy.NEVER)))
        return cut[0]

    def reset(self, start: int) -> None:
        """Drop the whole log and go on empty from ``start`` (beyond its end: a member behind
        what its leader's retention kept; see ``storage.truncate.reset_log``). The writer is
        restarted as for ``truncate``; tracking state comes back with the leader's chunks (the
        first of its segment is a snapshot)."""
        from storage.truncate import reset_log
        self._restart_writer(lambda: reset_log(self.directory, start,
                                               self.config.fsync != FsyncPolicy.NEVER))

    def _restart_writer(self, change: Callable[[], object]) -> None:
        old = self._writer
        listeners, epoch, follower = old._listeners, old.epoch, old.follower
        old.close()
        change()
        segments = recover(self.directory)
        self._writer = Writer(self.directory, self.config, segments)
        self._writer._listeners = listeners
        self._writer.epoch = max(epoch, self._writer.last_epoch)
        self._writer.set_follower(follower)
        with old._commit_cond:
            old._commit_cond.notify_all()

    def epoch_at(self, chunk_id: int) -> tuple[int, int] | None:
        """``(epoch, next offset)`` of the chunk whose id is ``chunk_id``, None when this log
        holds no chunk with that id (the leader's side of the handshake)."""
        from storage.files import index_path, read_index_records
        starts = self._writer.starts
        k = bisect.bisect_right(starts, chunk_id) - 1
        if k < 0:
            return None
        fd = os.open(index_path(self.directory, starts[k]), os.O_RDONLY)
        try:
            records = read_index_records(fd)
        finally:
            os.close(fd)
        i = bisect.bisect_left([r.chunk_id for r in records], chunk_id)
        if i == len(records) or records[i].chunk_id != chunk_id:
            return None
        end = records[i + 1].chunk_id if i + 1 < len(records) else (
            starts[k + 1] if k + 1 < len(starts) else self._writer.end)
        return records[i].epoch, end

    def epoch_ends(self, limit: int = 64) -> list[tuple[int, int]]:
        """``(epoch, id of its last chunk here)`` for the newest ``limit`` epochs in the log,
        newest first (a replica's side of the handshake, as osiris's epoch offsets)."""
        from storage.files import index_path, read_index_records
        out: list[tuple[int, int]] = []
        for start in reversed(self._writer.starts):
            fd = os.open(index_path(self.directory, start), os.O_RDONLY)
            try:
                records = read_index_records(fd)
            finally:
                os.close(fd)
            for r in reversed(records):
                if not out or r.epoch < out[-1][0]:
                    out.append((r.epoch, r.chunk_id))
                    if len(out) >= limit:
                        return out
        return out

    def wait_change(self, position: int, commit: int, timeout: float | None) -> bool:
        """Block until the local end passes ``position`` or the cluster's commit is no longer
        ``commit`` (what a leader's replica feed waits for), or ``timeout`` seconds."""
        w = self._writer
        with w._commit_cond:
            return w._commit_cond.wait_for(
                lambda: w.end > position or (self._gate or 0) != commit
                or not w.thread.is_alive(), timeout)

    def local_view(self) -> LocalView:
        """This log as a reader source bounded by what is durable here, not by the cluster's
        commit: what the leader serves its replicas from."""
        return LocalView(self)

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


class LocalView:
    """A ``Stream`` as a reader's ``LogSource`` bounded by its local durable end."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.directory = stream.directory

    def segment_starts(self) -> Sequence[int]:
        return self.stream.segment_starts()

    def committed_end(self) -> int:
        return self.stream.local_end

    def appended_end(self) -> int | None:
        return self.stream.appended_end()

    def wait_beyond(self, offset: int, timeout: float | None) -> bool:
        return self.stream._writer.wait_beyond(offset, timeout)
