"""A stream's writer: the append queue and the thread that turns it into durable chunks.

Strategy:
- ``append`` only takes a lock, hands out the next offset and queues the body; it never does
  I/O. One writer thread per stream takes everything waiting, cuts it into chunks (as osiris's
  gen_batch_server sizes its batches: ``min_chunk_entries`` after idle, doubling after each
  full chunk up to ``max_chunk_entries``, halving when a chunk empties the queue; about
  ``max_chunk_bytes`` bytes each; the end of a long run of one filter value ends a chunk; a
  client's frame of at least ``min_chunk_entries`` messages shares no chunk with another
  unless the writer is behind, ``FRAMES_APART_MAX``; these rules are ``storage.chunking``'s),
  builds each chunk's filter with ``bloom.build``, and writes a group of chunks with one
  ``os.writev`` on the segment and one ``os.write`` on the index (segment first). Chunk size
  never changes durability: a group is one write and one fsync however many chunks it holds.
  Then it makes the group as durable as the
  policy says (``always``: ``fdatasync`` the segment; ``interval``: an fsync if the last one is
  older than the interval; ``never``: nothing), moves the committed end, then calls the
  listeners and the ``on_durable`` callbacks, all from the writer thread. So a record is
  readable in this process before its callback runs: whoever is told "durable" can read it.
- Readers in this process never look past the committed end, so they never see a chunk before
  it counts as written, nor a partly written one.
- Rollover happens before a chunk when the segment has reached its maximum bytes or chunks; the
  new files are named after the chunk id and the directory is fsynced (unless ``never``).
  Retention runs after each rollover (and at open, called by ``Stream.open``): whole segments,
  oldest first, index before segment, never the newest.
- Tracking (``storage.tracking``) goes through the same queue. ``store_offset`` puts the
  consumer offset into a tracking delta chunk reserved in the queue (it takes the next offset;
  the offsets stored until the writer takes it join the same chunk). A named publisher's batch
  goes in chunks whose trailers hold its reference and the last publishing id in each (with
  the id of every body, ``sequences``; without, in one chunk). When a
  segment is full and there is state, a tracking snapshot takes the next offset and becomes the
  new segment's first chunk; retention runs only once it is written. The state as appended
  (``offsets``, ``sequences``) answers queries at once; ``written`` is the state as written,
  kept by the writer thread for snapshots; after a write error both are reloaded from disk.
- A write error fails the stream for a while, not for good: the segment and index are cut back
  to where the group began, every waiting callback gets the error, and the writer reopens its
  files running recovery as at open (a torn tail is cut; the committed log is never shortened).
  ``append`` raises ``StreamClosedError`` until a backoff (``RETRY_MIN_S``, doubling up to
  ``RETRY_MAX_S``) has passed; the next append after it is tried for real, so a disk that is
  still full costs one failed write per backoff, not a spin, and one with space again works
  without reopening the stream. Readers keep their place: the committed end only moves forward.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from bisect import bisect_right
from typing import Callable, Sequence, Union

from storage.config import FsyncPolicy, StreamConfig
from storage import skiptable
from storage.chunking import (
    FRAMES_APART_MAX,
    PARTS_MAX,
    ChunkData,
    Entries,
    FilterValue,
    chunk_filter,
    joined,
    list_cutters,
    nbytes,
    run_cut,
    trailing_run,
)
from storage.crc import crc32
from storage.derived import BlockRow, create_sidecar, derived_path, encode_entry, repair
from storage.errors import CorruptionError, StaleEpochError, StorageError, StreamClosedError
from storage.files import (
    IOV_MAX,
    create_segment,
    index_count,
    index_path,
    read_index_record,
    segment_path,
    truncate_quietly,
    writev_all,
)
from storage.format import (
    CHUNK_HEADER_BYTES,
    CHUNK_TRACKING_DELTA,
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    FLAG_SIMPLE_ENTRIES,
    INDEX_HEADER_BYTES,
    INDEX_RECORD,
    INDEX_RECORD_BYTES,
    SEGMENT_HEADER_BYTES,
    TRACKING_OFFSET,
    TRACKING_SEQUENCE,
    TRACKING_TYPE_TIMESTAMP,
    SubBatchEntry,
    EntryRun,
    EntrySpans,
    ChunkHeader,
    TrackingRecord,
    data_entries,
    decode_header,
    decode_tracking,
    encode_chunk,
    encode_entries,
    encode_mixed_entries,
    encode_tracking,
)
from storage.recovery import SegmentInfo, last_chunk_id, last_record, recover
from storage.retention import segments_to_drop
from storage.tracking import load

__all__ = ["Writer", "DurableCallback", "FilterValue", "RETRY_MIN_S", "RETRY_MAX_S"]

log = logging.getLogger(__name__)

DurableCallback = Callable[[int, "Exception | None"], None]
_GROUP_BYTES = 4 << 20  # bytes written per writev group before committing
# a full segment waits for its tracking snapshot's offset (see ``_write_all``) up to this size;
# beyond it, it rolls over at once and the snapshot follows later in the new segment
_HARD_SEGMENT_BYTES = 0xF000_0000
_pack_index = INDEX_RECORD.pack
RETRY_MIN_S = 0.2  # after a write error, appends are refused this long (doubling per failure)
RETRY_MAX_S = 5.0


class Writer:
    """The append queue and writer thread of one open stream directory (``Stream`` owns it).

    ``end`` is the committed end (exclusive) and ``starts`` the first offsets of the kept
    segments; both are replaced, never mutated, so readers on other threads may read them."""

    def __init__(self, directory: str, config: StreamConfig, segments: list[SegmentInfo]) -> None:
        self.directory = directory
        self.config = config
        self._infos = segments
        self.starts: tuple[int, ...] = tuple(s.start for s in segments)
        last = segments[-1]
        self.end = last.end
        # the id of the last committed chunk (-1: none); set after ``end``, so a reader on
        # another thread may see it lag ``end`` but never lead it
        last_rec = last_record(directory, segments)
        self.committed_chunk_id = last_rec.chunk_id if last_rec is not None else -1
        # the epoch the next chunks are written under (a cluster leader's, ``set_epoch``), and
        # the epoch of the last chunk in the log: a replicated chunk may not go below it
        self.last_epoch = last_rec.epoch if last_rec is not None else 0
        self.epoch = max(config.epoch, self.last_epoch)
        self._raw_unsynced = False  # replicated chunks written but not fsynced (``interval``)
        self.follower = False  # a cluster replica's log: appends refused (``set_follower``)
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._commit_cond = threading.Condition(threading.Lock())
        self._bodies: list[bytes] = []
        self._values: list[FilterValue] = []
        self._callbacks: list[tuple[int, DurableCallback]] = []
        self.next = last.end  # next offset to hand out
        self.user_next = last.end  # the offset after the last record appended (not tracking)
        self._extra = 0  # records queued beyond one per entry (sub-batch entries)
        self._spread = 0  # entries queued beyond one per item of ``_bodies`` (``EntryRun``s)
        self._runs = False  # the queue holds ``EntryRun`` items
        self._batched = False  # the queue holds SubBatchEntry items
        self._closing = False
        self.error: Exception | None = None
        self._refused = False  # closing or failed: one flag for the append hot path
        self._idle = False
        self._listeners: tuple[Callable[[], None], ...] = ()
        self._last_ts = last.last_timestamp or 0
        self._sfd = os.open(segment_path(directory, last.start), os.O_WRONLY | os.O_APPEND)
        self._ifd = os.open(index_path(directory, last.start), os.O_WRONLY | os.O_APPEND)
        # broker-derived keys (``storage.derived``): the last segment's sidecar, its size, and
        # the token digests seen lately
        self._dfd = -1
        self._dsize = 0
        self._table: skiptable.TableWriter | None = None  # the sidecar's skip table
        self._dcache: dict = {}
        if config.derived_keys:
            repair(directory, self.starts)
            skiptable.remove_orphans(directory, self.starts)
            self._open_sidecar(last.start)
        self._unsynced = False
        self._last_sync = time.monotonic()
        self._pending_failed: list[tuple[int, DurableCallback]] = []
        # after a write error (see the module docstring): when appends may be tried again, the
        # next backoff, and whether the files still need reopening (recovery failed too)
        self._retry_at = 0.0
        self._backoff = RETRY_MIN_S
        self._reopen_pending = False
        self._reopen_requested = False
        # tracking (see the module docstring): the queue's reserved tracking chunks by offset
        # (their ``_bodies`` slots hold b""), the offsets stored since the queued delta chunk
        # was reserved, named publishers' batches; the state as
        # appended (what queries answer) and, on the writer thread, the state as written
        self._marks: dict[int, int] = {}
        self._delta_at: int | None = None
        self._delta: dict[bytes, int] = {}
        self._delta_ts: dict[bytes, int] = {}  # timestamp records for the same delta chunk
        self._writer_batches: list[_Batch] = []
        self._snapshot_at: int | None = None
        self._retention_due = False
        self._snapshot_only = False
        # chunking (the writer thread's): the entries the next chunk may take, as osiris's
        # gen_batch_server sizes its batches (see ``_write_all``), and the filter value of the
        # last entries written with the length of their run (up to ``RUN_CUT_MIN``)
        self._chunk_entries = min(config.min_chunk_entries, config.max_chunk_entries)
        self._tail: tuple[FilterValue, int] = (None, 0)
        # the queue's client frames of at least ``min_chunk_entries`` messages, as (first, end)
        # places in ``_bodies``: each gets chunks of its own (see ``_frame_cut``)
        self._frames: list[tuple[int, int]] = []
        # places in ``_bodies`` where a chunk must end (``break_chunk``)
        self._breaks: list[int] = []
        self.written = load(directory, last.start, last.tracking)
        self.offsets: dict[bytes, int] = dict(self.written.offsets)
        self.sequences: dict[bytes, int] = {k: v for k, (_, v) in self.written.sequences.items()}
        self.thread = threading.Thread(target=self._run, name=f"stream-writer:{directory}",
                                       daemon=True)
        self.thread.start()

    # -- the queue (called by Stream on the appending threads) ---------------------------------
    def append(self, body: bytes, filter_value: FilterValue,
               on_durable: DurableCallback | None) -> int:
        lock = self.lock
        lock.acquire()  # not ``with``: this is the per-record hot path; nothing below raises
        if self._refused and not self._may_retry():
            lock.release()
            raise self._refusal()
        offset = self.next
        self.next = self.user_next = offset + 1
        self._bodies.append(body)
        self._values.append(filter_value)
        if on_durable is not None:
            self._callbacks.append((offset, on_durable))
        if self._idle:
            self._idle = False
            self._wake.notify()
        lock.release()
        return offset

    def append_batch(self, bodies: Sequence[bytes | EntryRun | EntrySpans],
                     filter_values: Sequence[FilterValue] | None,
                     on_durable: DurableCallback | None,
                     writer: tuple[bytes, int] | None = None, records: int | None = None,
                     sequences: Sequence[int] | None = None,
                     frames: Sequence[int] | None = None, entries: int | None = None) -> int:
        """``writer``: a named publisher's (reference, last publishing id) for the chunk's
        trailer; ``records``: the offsets ``bodies`` take when some are ``SubBatchEntry``s;
        ``sequences``: the publishing id of each body (then the batch may span chunks, each
        trailer holding the id of its last body there; without them it stays in one chunk);
        ``frames``: where each client frame starts in ``bodies`` (ascending, 0 first);
        ``entries``: some bodies are ``EntryRun``s, and the entries all take (each run its
        ``count``; places, ``sequences`` and filter values then count entries)."""
        count = len(bodies) if entries is None else entries
        n = count if records is None else records
        with self.lock:
            if self._refused and not self._may_retry():
                raise self._refusal()
            first = self.next
            if writer is not None:
                ref, seq = writer
                last = self.sequences.get(ref)
                if last is not None and seq <= last:
                    raise StorageError(f"publishing id {seq} of {ref!r} is not above the last "
                                       f"one stored ({last})")
                self.sequences[ref] = seq
                self._writer_batches.append(_Batch(first, first + n - 1, ref, seq,
                                                   len(self._bodies) + self._spread, count,
                                                   sequences))
            self.next = self.user_next = first + n
            if records is not None:
                self._extra += records - count
                self._batched = True
            if frames is not None:
                self._add_frames(frames, count)
            if entries is not None:
                self._spread += entries - len(bodies)
                self._runs = True
            self._bodies.extend(bodies)  # type: ignore[arg-type]
            if filter_values is None:
                self._values.extend(itertools.repeat(None, count))
            else:
                self._values.extend(filter_values)
            if on_durable is not None and n:
                self._callbacks.append((first + n - 1, on_durable))
            if self._idle and n:
                self._idle = False
                self._wake.notify()
            return first

    def _add_frames(self, frames: Sequence[int], count: int) -> None:
        """Holding ``lock``, before the ``count`` bodies of ``frames`` are queued: note those
        frames that hold at least ``min_chunk_entries`` messages."""
        least = self.config.min_chunk_entries
        base = len(self._bodies) + self._spread
        ends = itertools.chain(itertools.islice(frames, 1, None), (count,))
        self._frames.extend((base + a, base + b) for a, b in zip(frames, ends, strict=True)
                            if b - a >= least)

    def break_chunk(self) -> int | None:
        """The offset after everything appended, where a chunk will end (what is queued now is
        not written in one chunk with what comes after); None when all of it is committed. For a
        reader at ``next`` made while appends wait for the writer: it starts there, at a chunk
        boundary, once they are committed (see ``Reader``)."""
        with self.lock:
            if self.next == self.end:  # nothing queued or being written
                return None
            n = len(self._bodies) + self._spread  # (none: the batch in hand ends a chunk anyway)
            if n and (not self._breaks or self._breaks[-1] != n):
                self._breaks.append(n)
            return self.next

    def store_offset(self, name: bytes, offset: int,
                     on_durable: DurableCallback | None) -> None:
        """Queue a consumer offset: into the delta chunk reserved in the queue, reserving one
        (it takes the next offset) when there is none."""
        with self.lock:
            if self._refused and not self._may_retry():
                raise self._refusal()
            if self._delta_at is None:
                self._delta_at = self._reserve(CHUNK_TRACKING_DELTA)
            self._delta[name] = offset
            self.offsets[name] = offset
            if on_durable is not None:  # called once everything queued so far is durable
                self._callbacks.append((self.next - 1, on_durable))
            if self._idle:
                self._idle = False
                self._wake.notify()

    def store_timestamp(self, name: bytes, timestamp: int) -> None:
        """Queue a timestamp record (tracking type 2) into the delta chunk reserved in the
        queue, as ``store_offset`` does for an offset (a leader's first chunk of its epoch)."""
        with self.lock:
            if self._refused and not self._may_retry():
                raise self._refusal()
            if self._delta_at is None:
                self._delta_at = self._reserve(CHUNK_TRACKING_DELTA)
            self._delta_ts[name] = timestamp
            if self._idle:
                self._idle = False
                self._wake.notify()

    def notify_durable(self, on_durable: DurableCallback) -> None:
        """``on_durable(last offset, error)`` once everything queued so far is durable (at once,
        on this thread, when nothing is waiting for the disk)."""
        with self.lock:
            if self._refused and not self._may_retry():
                raise self._refusal()
            if self.next > self.end:
                self._callbacks.append((self.next - 1, on_durable))
                if self._idle:
                    self._idle = False
                    self._wake.notify()
                return
        _call(on_durable, self.end - 1, None)

    # -- replicated chunks (a cluster replica; see ``Stream.append_chunks``) --------------------
    def set_follower(self, follower: bool) -> None:
        with self.lock:
            self.follower = follower
            self._refused = follower or self._closing or self.error is not None

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the chunks written from now on (never below the last one written)."""
        with self.lock:
            if epoch < self.last_epoch:
                raise StorageError(f"epoch {epoch} is older than the log's last chunk's "
                                   f"({self.last_epoch})")
            self.epoch = epoch

    def append_chunks(self, chunks: Sequence[tuple[bytes | memoryview, bool]]) -> int:
        """Write whole chunks exactly as given; returns the new committed end. Each chunk must
        start at the next offset, carry an epoch no older than the last one written, and pass
        the header and data CRC checks (all are checked before any is written). ``True``
        beside a chunk: it is the first of a segment where it comes from, so the segments
        here split where they split there and both logs are the same files. One ``writev``
        per segment, durable per the policy, then committed. Runs on the caller's thread,
        which must be the log's only appender (nothing may be queued)."""
        if not chunks:
            return self.end
        with self.lock:
            if self._closing or (self.error is not None and not self._may_retry()
                                 and self.error is not None):
                raise self._refusal()
            if self.next != self.end or self._bodies:
                raise StorageError("chunks are appended as given only while nothing else is "
                                   "queued")
        checked = _check_chunks(chunks, self.directory, self.end, self.last_epoch)
        expect, epoch = checked[-1][2].next_offset, checked[-1][2].epoch
        info = self._infos[-1]
        iov: list[bytes | memoryview] = []
        idx: list[bytes] = []
        # broker-derived keys: each chunk's sidecar entry and skip-table rows, built here from
        # its data section as the leader's writer built them from the bodies (same deriver)
        dents: list[bytes] = []
        trows: list[bytes] = []
        dpend = 0
        last_id = self.committed_chunk_id
        try:
            for chunk, first, h, records in checked:
                if first and info.chunks:
                    self._write_raw(iov, idx, dents, trows)
                    iov, idx, dents, trows, dpend = [], [], [], [], 0
                    info = self._rollover(h.chunk_id)
                if self.config.derive is not None:
                    dpend += self._derive_raw(chunk, h, info, dpend, dents, trows)
                idx.append(_pack_index(h.chunk_id, h.timestamp, h.epoch, info.size, h.type))
                iov.append(chunk)
                info.size += h.size
                info.chunks += 1
                info.end = h.next_offset
                info.last_timestamp = h.timestamp
                last_id = h.chunk_id
                if records is not None:
                    self._apply_tracking(h, records)
            self._write_raw(iov, idx, dents, trows)
        except Exception as exc:
            self._fail(exc)
            self._reopen()
            raise
        with self.lock:
            self.next = self.user_next = expect
            self.last_epoch = epoch
            self.epoch = max(self.epoch, epoch)
            self._last_ts = max(self._last_ts, checked[-1][2].timestamp)
        self._commit(expect, last_id)
        return expect

    def _derive_raw(self, chunk: bytes | memoryview, h: ChunkHeader, info: SegmentInfo,
                    dpend: int, dents: list[bytes], trows: list[bytes]) -> int:
        """A replicated chunk's sidecar entry (user chunks) and skip-table rows, as
        ``_write_all`` makes them, into ``dents`` / ``trows``; returns the entry's bytes.
        ``info``: the segment it goes into, before the chunk is counted there."""
        if h.type != CHUNK_USER:  # a tracking chunk: a row nothing matches
            trows.append(skiptable.rows_of(info.chunks, 0, h.chunk_id, None,
                                           len(self.config.derived_keys)))
            return 0
        at = CHUNK_HEADER_BYTES + h.filter_size
        data = bytes(chunk[at:at + h.data_length])
        return self._derived_entry(h.chunk_id, info, h.records, h.filter_size, data,
                                   data_entries(data, h.entries), dpend, dents, trows)

    def _write_raw(self, iov: list[bytes | memoryview], idx: list[bytes],
                   dents: list[bytes], trows: list[bytes]) -> None:
        """Segment, then the derived sidecar and skip table, then index, then durable per
        policy (replicated chunks)."""
        if not iov:
            return
        writev_all(self._sfd, iov)  # type: ignore[arg-type]
        self._write_derived(dents, trows)
        writev_all(self._ifd, [b"".join(idx)])
        policy = self.config.fsync
        if policy == FsyncPolicy.ALWAYS or (
                policy == FsyncPolicy.INTERVAL and
                time.monotonic() - self._last_sync >= self.config.fsync_interval_ms / 1000.0):
            self._sync()
            self._raw_unsynced = False
        elif policy == FsyncPolicy.INTERVAL:
            self._raw_unsynced = True

    def sync_raw(self) -> None:
        """fsync replicated chunks left unsynced (``interval``: the replica calls it when idle;
        on the appending thread)."""
        if self._raw_unsynced:
            self._sync()
            self._raw_unsynced = False

    def _apply_tracking(self, h: ChunkHeader, records: list[TrackingRecord]) -> None:
        """A replicated chunk's tracking: into the state as written and as appended."""
        written = self.written
        if h.type == CHUNK_TRACKING_SNAPSHOT:
            written.reset(records)
        else:
            written.apply(h.chunk_id, records)
        with self.lock:
            self.offsets = dict(written.offsets)
            self.sequences = {k: v for k, (_, v) in written.sequences.items()}

    def _reserve(self, kind: int) -> int:
        """Holding ``lock``: the next offset, for a tracking chunk of type ``kind``."""
        at = self.next
        self.next = at + 1
        self._marks[at] = kind
        self._bodies.append(b"")
        self._values.append(None)
        return at

    def check_tracking(self) -> None:
        """Raise while the state as appended may be ahead of the disk: after a write error,
        until the writer has reopened its files and reloaded the state."""
        if self._reopen_pending:
            raise self._refusal()

    def _refusal(self) -> StreamClosedError:
        if self.follower and not self._closing and self.error is None:
            return StreamClosedError(f"stream {self.directory} is a replica: it takes chunks "
                                     f"from its leader only")
        err = StreamClosedError(f"stream {self.directory} is closed"
                                + (f": {self.error}" if self.error else ""))
        err.__cause__ = self.error
        return err

    def _may_retry(self) -> bool:
        """Holding ``lock``, with appends refused: True (and appends taken again) when the
        refusal is a write error whose backoff has passed and whose files were reopened."""
        if self._closing or self.error is None:
            return False
        now = time.monotonic()
        if now < self._retry_at:
            return False
        if self._reopen_pending:  # recovery failed after the error: the writer tries again
            self._retry_at = now + self._next_backoff()
            self._reopen_requested = True
            self._wake.notify()
            return False
        log.info("stream %s: taking appends again after a write error", self.directory)
        self.error = None
        self._refused = self.follower
        return not self.follower

    def _next_backoff(self) -> float:
        backoff = self._backoff
        self._backoff = min(RETRY_MAX_S, backoff * 2)
        return backoff

    # -- waiting and listening -----------------------------------------------------------------
    def add_listener(self, fn: Callable[[], None]) -> None:
        with self.lock:
            self._listeners = self._listeners + (fn,)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        with self.lock:
            self._listeners = tuple(f for f in self._listeners if f is not fn)

    def wait_beyond(self, offset: int, timeout: float | None) -> bool:
        with self._commit_cond:
            return self._commit_cond.wait_for(
                lambda: self.end > offset or not self.thread.is_alive(), timeout) \
                and self.end > offset

    def wait_committed(self, target: int, timeout: float | None) -> None:
        """Until the committed end reaches ``target``, the stream fails, or the writer stops."""
        with self._commit_cond:
            self._commit_cond.wait_for(lambda: self.end >= target or self.error is not None
                                       or not self.thread.is_alive(), timeout)

    def close(self) -> None:
        """Write what is queued, fsync, stop the thread, close the files."""
        with self.lock:
            self._closing = True
            self._refused = True
            self._wake.notify()
        self.thread.join()
        if self._raw_unsynced and self._sfd >= 0:
            try:
                self.sync_raw()
            except OSError:
                log.exception("stream %s: fsync at close", self.directory)
        for fd in (self._sfd, self._ifd, self._dfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._sfd = self._ifd = self._dfd = -1
        self._close_table()

    def _open_sidecar(self, start: int) -> None:
        if self._dfd >= 0:
            os.close(self._dfd)
            self._dfd = -1
        self._dfd = create_sidecar(self.directory, start, self.config.derived_keys)
        self._dsize = os.fstat(self._dfd).st_size
        self._close_table()
        ifd = os.open(index_path(self.directory, start), os.O_RDONLY)
        try:
            n = index_count(ifd)
            last = read_index_record(ifd, n - 1) if n else None
        finally:
            os.close(ifd)
        self._table = skiptable.TableWriter.open(self.directory, start, self.config.derived_keys,
                                                 n, last.chunk_id if last is not None else None,
                                                 self._dsize)

    def _close_table(self) -> None:
        if self._table is not None:
            self._table.close()
            self._table = None

    # -- the writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.config
        interval = cfg.fsync_interval_ms / 1000.0
        while True:
            with self.lock:
                while (not self._bodies and not self._callbacks and not self._closing
                       and not self._reopen_requested):
                    if self._unsynced and cfg.fsync == FsyncPolicy.INTERVAL:
                        due = self._last_sync + interval - time.monotonic()
                        if due <= 0:
                            break
                        self._idle = True
                        self._wake.wait(due)
                    else:
                        self._idle = True
                        self._wake.wait()
                self._idle = False
                taken, values, callbacks = self._bodies, self._values, self._callbacks
                self._bodies, self._values, self._callbacks = [], [], []
                first = self.next - len(taken) - self._spread - self._extra
                bodies: Sequence[bytes] | Entries = Entries(taken) if self._runs else taken
                self._spread, self._runs = 0, False
                batched, self._extra, self._batched = self._batched, 0, False
                batch = _Tracking(self._marks, self._delta, self._writer_batches,
                                  self._delta_ts)
                frames, self._frames = self._frames, []
                breaks, self._breaks = self._breaks, []
                self._marks, self._delta, self._writer_batches = {}, {}, []
                self._delta_ts = {}
                self._delta_at = None
                closing = self._closing
                reopen, self._reopen_requested = self._reopen_requested, False
            if reopen and not closing and not bodies:  # appends are refused until it worked
                self._reopen()
                continue
            try:
                if bodies:
                    self._write_all(first, bodies, values, callbacks, batch, batched, frames,
                                    breaks)
                elif callbacks:  # notify_durable while a taken batch was being written
                    for offset, cb in callbacks:
                        _call(cb, offset, None)
                    self._backoff = RETRY_MIN_S
                if self._unsynced and (closing or (cfg.fsync == FsyncPolicy.INTERVAL and
                                                   time.monotonic() - self._last_sync >= interval)):
                    self._sync()
            except Exception as exc:  # noqa: BLE001 - every failure must reach the callbacks
                self._fail(exc)
                if closing:
                    return
                self._reopen()
                continue
            if closing:
                with self.lock:
                    if not self._bodies:
                        break
        with self._commit_cond:
            self._commit_cond.notify_all()

    def _sync(self) -> None:
        os.fdatasync(self._sfd)
        self._unsynced = False
        self._last_sync = time.monotonic()

    def _fail(self, exc: Exception) -> None:
        log.error("stream %s: writer failed: %s", self.directory, exc)
        err = exc
        if not isinstance(exc, StorageError):
            err = StorageError(f"write failed: {exc}")
            err.__cause__ = exc  # the OSError (ENOSPC, EFBIG...) for callers that map it
        with self.lock:
            self.error = err
            self._refused = True
            self._reopen_pending = True
            self._retry_at = time.monotonic() + self._next_backoff()
            pending = list(self._pending_failed) + self._callbacks
            self._callbacks, self._bodies, self._values = [], [], []
            self._spread, self._runs, self._extra, self._batched = 0, False, 0, False
            self._frames, self._breaks = [], []
            self._marks, self._delta, self._writer_batches = {}, {}, []
            self._delta_ts = {}
            self._delta_at = self._snapshot_at = None
        self._pending_failed = []
        for offset, cb in pending:
            _call(cb, offset, err)
        with self._commit_cond:
            self._commit_cond.notify_all()

    def _reopen(self) -> None:
        """After a write error: close the files and run recovery as ``open`` does (cutting a
        torn tail; a chunk that was written whole but whose group failed afterwards, e.g. in
        ``fdatasync``, is kept, as after a crash, and becomes readable), then reopen the last
        segment for appends. Runs on the writer thread while appends are refused, so nothing
        is queued. If it fails, ``_reopen_pending`` stays set and the next retry tries again."""
        for fd in (self._sfd, self._ifd, self._dfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._sfd = self._ifd = self._dfd = -1
        self._close_table()
        self._unsynced = False
        try:
            segments = recover(self.directory)
            if not segments:
                create_segment(self.directory, self.end, self.config.fsync != FsyncPolicy.NEVER)
                segments = [SegmentInfo(self.end, SEGMENT_HEADER_BYTES, 0, self.end, None)]
            last = segments[-1]
            if last.end < self.end:
                raise CorruptionError(segment_path(self.directory, last.start), last.size,
                                      f"recovery after a write error ends the log at {last.end}, "
                                      f"before the committed end {self.end}")
            sfd = os.open(segment_path(self.directory, last.start), os.O_WRONLY | os.O_APPEND)
            ifd = -1
            try:
                ifd = os.open(index_path(self.directory, last.start), os.O_WRONLY | os.O_APPEND)
                os.fdatasync(sfd)  # what recovery kept is on disk before anything follows it
            except BaseException:
                for fd in (sfd, ifd):
                    if fd >= 0:
                        os.close(fd)
                raise
        except Exception as exc:  # noqa: BLE001 - the stream stays failed; retried later
            log.error("stream %s: reopening after a write error failed: %s", self.directory, exc)
            return
        try:
            written = load(self.directory, last.start, last.tracking)
            if self.config.derived_keys:
                repair(self.directory, [s.start for s in segments])
                skiptable.remove_orphans(self.directory, [s.start for s in segments])
                self._open_sidecar(last.start)
        except Exception as exc:  # noqa: BLE001 - the stream stays failed; retried later
            log.error("stream %s: reloading tracking after a write error failed: %s",
                      self.directory, exc)
            for fd in (sfd, ifd):
                os.close(fd)
            return
        self._sfd, self._ifd = sfd, ifd
        self._last_ts = max(self._last_ts, last.last_timestamp or 0)
        self.written = written
        with self.lock:
            self.offsets = dict(written.offsets)
            self.sequences = {k: v for k, (_, v) in written.sequences.items()}
            self._infos = segments
            self.starts = tuple(s.start for s in segments)
            self.next = self.user_next = last.end  # nothing is queued: appends were refused
            self._reopen_pending = False
        if last.end > self.end:
            self._commit(last.end, last_chunk_id(self.directory, segments))
        log.info("stream %s: files reopened after a write error (end %d)", self.directory,
                 last.end)

    def _write_all(self, first: int, bodies: Sequence[bytes] | Entries,
                   values: list[FilterValue],
                   callbacks: list[tuple[int, DurableCallback]],
                   batch: _Tracking, batched: bool = False,
                   frames: Sequence[tuple[int, int]] = (), breaks: Sequence[int] = ()) -> None:
        """Write ``bodies`` (offsets ``first ..``) as chunks, committing group by group.

        Tracking: a reserved offset becomes its delta or snapshot chunk; a publisher's batch
        given with the id of each body may span chunks, the trailer of each holding the id of
        its last body there; one without is never split (``Stream.append_batch`` checks it
        fits one) and its sequence goes in the trailer of its chunk. When the segment is full and
        there is tracking state, the rollover waits for a snapshot offset (reserved at the end
        of the queue) so that the snapshot is the new segment's first chunk; meanwhile the
        full segment takes what is queued before it (up to ``_HARD_SEGMENT_BYTES``).
        Retention waits until the snapshot is written. ``batched``: some bodies are
        ``SubBatchEntry``s, written as they are, taking ``records`` offsets each (offsets and
        bodies then differ: ``off`` is the offset of body ``i``). ``frames``: the client
        frames that get chunks of their own, as ``(first, end)`` places in ``bodies``;
        ``breaks``: places in ``bodies`` where a chunk ends (``break_chunk``). ``bodies`` is
        an ``Entries`` when the queue held ``EntryRun``s: its data sections are cut from the
        runs' bytes (``span``, ``fit``), the same bytes as those of a body per record."""
        cfg = self.config
        max_bytes = cfg.max_chunk_bytes
        fsize, scheme = cfg.filter_size, cfg.filter_scheme
        derive = cfg.derive
        total = len(bodies)
        if total > FRAMES_APART_MAX:  # a writer this far behind cuts by the limits alone
            frames = ()
        marks = sorted(batch.marks)
        mark_i = 0
        wbs = batch.writers
        wb_i = 0
        # the batches that stay in one chunk (no publishing id per body), in offset order
        fixed = [b for b in wbs if b.ids is None]
        fx_i = 0
        fr_i = br_i = 0
        written = self.written
        i = 0
        off = first  # the offset of body i
        last_id = self.committed_chunk_id
        span: Callable[[int, int], ChunkData]
        fit: Callable[[int, int, int], int]
        if isinstance(bodies, Entries):
            span, fit = bodies.span, bodies.fit
        else:
            span, fit = list_cutters(bodies, encode_mixed_entries if batched else encode_entries)
        cb_i = 0
        self._pending_failed = callbacks
        info = self._infos[-1]
        while i < total:
            # one group: chunks up to _GROUP_BYTES / IOV_MAX buffers
            iov: list[bytes | bytearray | memoryview] = []
            idx: list[bytes] = []
            dents: list[bytes] = []
            trows: list[bytes] = []  # the skip table's rows of the group's chunks
            dpend = 0  # bytes of ``dents``: where the next entry lands in the sidecar
            group_start_size = info.size
            dstart_size = self._dsize
            tstart = self._table_state()
            idx_start_size = INDEX_HEADER_BYTES + INDEX_RECORD_BYTES * info.chunks
            ts = max(time.time_ns() // 1_000_000, self._last_ts)
            self._last_ts = ts
            group_bytes = 0
            while (i < total and group_bytes < _GROUP_BYTES
                   and len(iov) < IOV_MAX - 3 - PARTS_MAX):
                chunk_id = off
                kind = CHUNK_USER
                if mark_i < len(marks) and marks[mark_i] == chunk_id:
                    kind = batch.marks[chunk_id]
                    mark_i += 1
                if self._full(info):
                    if (kind != CHUNK_TRACKING_SNAPSHOT and self._snapshot_at is None
                            and not written.empty):
                        with self.lock:
                            self._snapshot_at = self._reserve(CHUNK_TRACKING_SNAPSHOT)
                    if (kind == CHUNK_TRACKING_SNAPSHOT or self._snapshot_at is None
                            or info.size >= _HARD_SEGMENT_BYTES):
                        self._write_group(iov, idx, dents, trows)
                        iov, idx, dents, trows, dpend = [], [], [], [], 0
                        info = self._rollover(chunk_id, retain=self._snapshot_at is None)
                        group_start_size, idx_start_size = info.size, INDEX_HEADER_BYTES
                        dstart_size = self._dsize
                        tstart = self._table_state()
                trailer = b""
                filt = None
                data: ChunkData
                if kind != CHUNK_USER:
                    data = self._tracking_data(kind, chunk_id, batch)
                    n = recs = 1
                else:
                    limit = self._chunk_entries
                    n = min(total - i, limit)
                    while fr_i < len(frames) and frames[fr_i][1] <= i:
                        fr_i += 1
                    if fr_i < len(frames):  # a large client frame: chunks of its own
                        a, b = frames[fr_i]
                        n = min(n, b - i if a <= i else a - i)
                    while br_i < len(breaks) and breaks[br_i] <= i:
                        br_i += 1
                    if br_i < len(breaks):
                        n = min(n, breaks[br_i] - i)
                    while fx_i < len(fixed) and fixed[fx_i].last < off:
                        fx_i += 1
                    fb = fixed[fx_i] if fx_i < len(fixed) else None
                    if fb is not None and fb.first == off:  # it fits one (Stream checks)
                        n = max(n, fb.count)
                    if fsize and not batched and n > 1 and (fb is None or fb.first >= off + n):
                        n = run_cut(values, i, n, self._tail)  # bursts of a value: own chunks
                    # the offset of each candidate entry and the one after (sub-batch entries
                    # take several); ``ends[k]``: the offset after the first k entries
                    ends: Sequence[int]
                    if batched:
                        ends = list(itertools.accumulate(
                            (b.records if type(b) is SubBatchEntry else 1
                             for b in bodies[i:i + n]), initial=off))
                    else:
                        ends = range(off, off + n + 1)
                    if mark_i < len(marks):  # a reserved tracking offset ends the chunk
                        n = bisect_right(ends, marks[mark_i]) - 1
                    data = span(i, n)
                    cut = n
                    if nbytes(data) > max_bytes and n > 1:  # rare: fewer entries fit the byte bound
                        cut = fit(i, n, max_bytes)
                    if fb is not None:  # a batch without ids stays in one chunk
                        j = fx_i
                        while j < len(fixed) and fixed[j].last < ends[cut]:
                            j += 1
                        if j < len(fixed) and off < fixed[j].first < ends[cut]:
                            cut = bisect_right(ends, fixed[j].first) - 1
                    if cut != n:
                        n = cut
                        data = span(i, n)
                    recs = ends[n] - off
                    if fsize:
                        chunk_values = values[i:i + n]
                        if any(chunk_values):
                            filt = chunk_filter(chunk_values, fsize, scheme)
                    if wb_i < len(wbs) and wbs[wb_i].first < off + recs:
                        trailer, wb_i = self._trailer(chunk_id, wbs, wb_i, off + recs, i + n)
                    self._size_next(n, limit, total - i - n == len(marks) - mark_i)
                    self._tail = (trailing_run(values, i, i + n, self._tail)
                                 if fsize and not batched else (None, 0))
                # what lets a reader drop a chunk by its bytes without walking its entries
                flags = FLAG_SIMPLE_ENTRIES if kind == CHUNK_USER and (not batched or not any(
                    type(b) is SubBatchEntry for b in bodies[i:i + n])) else 0
                if filt is not None:
                    bufs = encode_chunk(chunk_id, ts, data, n, recs, epoch=self.epoch,
                                        filter_bits=filt.bits, filter_scheme=filt.scheme,
                                        filter_param=filt.param, trailer=trailer, flags=flags)
                    csize = CHUNK_HEADER_BYTES + len(filt.bits) + nbytes(data) + len(trailer)
                else:
                    bufs = encode_chunk(chunk_id, ts, data, n, recs, epoch=self.epoch,
                                        chunk_type=kind, trailer=trailer, flags=flags)
                    csize = CHUNK_HEADER_BYTES + nbytes(data) + len(trailer)
                if derive is not None:  # its sidecar entry and skip-table rows
                    if kind == CHUNK_USER:
                        dpend += self._derived_entry(
                            chunk_id, info, recs, len(filt.bits) if filt is not None else 0,
                            joined(data), bodies[i:i + n], dpend, dents, trows)
                    else:  # a tracking chunk: a row nothing matches
                        trows.append(skiptable.rows_of(info.chunks, 0, chunk_id, None,
                                                       len(cfg.derived_keys)))
                self._snapshot_only = kind == CHUNK_TRACKING_SNAPSHOT and not info.chunks
                idx.append(_pack_index(chunk_id, ts, self.epoch, info.size, kind))
                iov.extend(bufs)
                info.size += csize
                info.chunks += 1
                info.end = chunk_id + recs
                info.last_timestamp = ts
                group_bytes += csize
                i += n
                off += recs
                last_id = chunk_id
            try:
                self._write_group(iov, idx, dents, trows)
            except Exception:
                self._rollback_group(group_start_size, idx_start_size, dstart_size, tstart)
                raise
            cb_i = self._settle_group(off, last_id, callbacks, cb_i)
        self._pending_failed = []
        if self._full(info) and self._snapshot_at is None and not written.empty:
            # the next chunk rolls over: its snapshot takes the next offset now, so that it
            # comes before whatever is appended next (osiris writes it before the next write)
            with self.lock:
                self._snapshot_at = self._reserve(CHUNK_TRACKING_SNAPSHOT)

    def _tracking_data(self, kind: int, chunk_id: int, batch: _Tracking) -> bytes:
        """The data section of the tracking chunk of type ``kind`` reserved at ``chunk_id``: the
        batch's delta (offsets and timestamps stored since it was reserved), or the snapshot of
        the state as written; into the state as written."""
        if kind == CHUNK_TRACKING_DELTA:
            records = [TrackingRecord(TRACKING_OFFSET, k, v) for k, v in batch.delta.items()]
            records += [TrackingRecord(TRACKING_TYPE_TIMESTAMP, k, v)
                        for k, v in batch.timestamps.items()]
            self.written.apply(chunk_id, records)
            return encode_entries([encode_tracking(records)])
        return encode_entries([encode_tracking(self._snapshot_records())])

    def _trailer(self, chunk_id: int, wbs: list[_Batch], wb_i: int, end: int,
                 last_body: int) -> tuple[bytes, int]:
        """The trailer of the user chunk at ``chunk_id`` (offsets up to ``end``, bodies up to
        ``last_body``) that holds named publishers' batches from ``wbs[wb_i]`` on: each
        publisher's last publishing id in it, into the state as written; and the first batch
        that goes on after this chunk."""
        seqs: dict[bytes, int] = {}
        while wb_i < len(wbs) and wbs[wb_i].last < end:
            seqs[wbs[wb_i].ref] = wbs[wb_i].seq
            wb_i += 1
        wb = wbs[wb_i] if wb_i < len(wbs) else None
        if wb is not None and wb.ids is not None and wb.first < end:
            # a batch going on in the next chunk: the id of its last body here, as osiris's
            # trailer has it (what a crash after this chunk keeps)
            seqs[wb.ref] = wb.ids[last_body - 1 - wb.body]
        records = [TrackingRecord(TRACKING_SEQUENCE, k, v) for k, v in seqs.items()]
        self.written.apply(chunk_id, records)
        return encode_tracking(records), wb_i

    def _derived_entry(self, chunk_id: int, info: SegmentInfo, records: int, filter_size: int,
                       data: bytes, bodies: Sequence[bytes], dpend: int, dents: list[bytes],
                       trows: list[bytes]) -> int:
        """A user chunk's sidecar entry and skip-table rows (broker-derived keys) into
        ``dents`` / ``trows``; returns the entry's bytes. ``info``: the segment it goes into,
        before the chunk is counted there; ``dpend``: the bytes of the group's entries before
        it. The writer's chunks and replicated ones (``_derive_raw``) get them alike."""
        cfg = self.config
        keys = len(cfg.derived_keys)
        assert cfg.derive is not None
        blocks: list[BlockRow] = []
        entry = encode_entry(chunk_id, info.size, records, filter_size, data, bodies, cfg.derive,
                             self._dcache, blocks, skiptable.ROW_BLOOM_BYTES, cfg.derive_number,
                             keys)
        dents.append(entry)
        trows.append(skiptable.rows_of(info.chunks, self._dsize + dpend, chunk_id, blocks, keys))
        return len(entry)

    def _rollback_group(self, segment_size: int, index_size: int, derived_size: int,
                        table: tuple[int, int, int] | None) -> None:
        """After a group's write failed: the segment, index, sidecar and skip table cut back to
        where the group began (as far as they go; the reopen's recovery does the rest)."""
        truncate_quietly(self._sfd, segment_size)
        truncate_quietly(self._ifd, index_size)
        if self._dfd >= 0:
            truncate_quietly(self._dfd, derived_size)
            self._dsize = derived_size
        if self._table is not None and table is not None:
            try:
                self._table.rollback(table)
            except OSError:
                self._close_table()  # reopened (and checked) with the files

    def _settle_group(self, end: int, last_id: int, callbacks: list[tuple[int, DurableCallback]],
                      cb_i: int) -> int:
        """After a group is written (up to offset ``end``, last chunk ``last_id``): durable per
        policy, retention once a snapshot is written, commit, then the callbacks from
        ``cb_i`` on of what is now durable; returns the index of the first callback left."""
        cfg = self.config
        if cfg.fsync == FsyncPolicy.ALWAYS:
            self._sync()
        else:
            self._unsynced = True
            if (cfg.fsync == FsyncPolicy.INTERVAL
                    and time.monotonic() - self._last_sync >= cfg.fsync_interval_ms / 1000.0):
                self._sync()
        if self._retention_due and self._snapshot_at is None:
            # the snapshot is written: older segments may go, once it is on disk
            if self._unsynced and cfg.fsync != FsyncPolicy.NEVER:
                self._sync()
            self._retention_due = False
            with self.lock:
                self.apply_retention()
        self.last_epoch = self.epoch
        self._commit(end, last_id)
        j = cb_i
        while j < len(callbacks) and callbacks[j][0] < end:
            j += 1
        for offset, cb in callbacks[cb_i:j]:
            _call(cb, offset, None)
        self._pending_failed = callbacks[j:]
        return j

    def _size_next(self, n: int, limit: int, dry: bool) -> None:
        """After a user chunk of ``n`` entries that could take ``limit``: the next one may take
        twice as many when this one was full, half as many (not below ``min_chunk_entries``)
        when it took the last of the queue (``dry``), as gen_batch_server sizes osiris's
        batches (min 32, max 8192 casts): a burst from idle becomes chunks of 32, 64, 128 ...
        entries, a steady load as large ones as ``max_chunk_entries`` allows."""
        cfg = self.config
        if n >= limit:
            self._chunk_entries = min(limit * 2, cfg.max_chunk_entries)
        elif dry:
            self._chunk_entries = max(limit // 2, min(cfg.min_chunk_entries,
                                                      cfg.max_chunk_entries))

    def _full(self, info: SegmentInfo) -> bool:
        """The next chunk goes to a new segment (a segment holding only its snapshot takes one
        more chunk, whatever the snapshot's size, so snapshots never follow each other)."""
        cfg = self.config
        return bool(info.chunks) and not self._snapshot_only and (
            info.size >= cfg.max_segment_bytes or info.chunks >= cfg.max_segment_chunks)

    def _snapshot_records(self) -> list[TrackingRecord]:
        """The snapshot of the state as written (trimmed as osiris trims it); what the trim
        drops is dropped from the state as appended too, unless appended again since."""
        written = self.written
        offsets, sequences = written.offsets, written.sequences
        first_ts = 0
        if written.timestamps:
            ifd = os.open(index_path(self.directory, self.starts[0]), os.O_RDONLY)
            try:
                rec = read_index_record(ifd, 0)
            finally:
                os.close(ifd)
            first_ts = rec.timestamp if rec is not None else 0
        records = written.snapshot(self.starts[0], first_ts, self.config.tracking_max_sequences)
        self._snapshot_at = None
        self._retention_due = True
        if len(offsets) != len(written.offsets) or len(sequences) != len(written.sequences):
            with self.lock:
                for k, v in offsets.items():
                    if k not in written.offsets and self.offsets.get(k) == v:
                        del self.offsets[k]
                for k, (_, seq) in sequences.items():
                    if k not in written.sequences and self.sequences.get(k) == seq:
                        del self.sequences[k]
        return records

    def _table_state(self) -> tuple[int, int, int] | None:
        return self._table.state if self._table is not None else None

    def _write_group(self, iov: list[bytes | bytearray | memoryview], idx: list[bytes], dents: list[bytes],
                     trows: list[bytes]) -> None:
        """Segment, then the derived sidecar and its skip table, then the index: a reader
        that sees an index record finds the chunk, its sidecar entry and its rows."""
        if not iov:
            return
        self._unsynced = True
        writev_all(self._sfd, iov)
        self._write_derived(dents, trows)
        writev_all(self._ifd, [b"".join(idx)])

    def _write_derived(self, dents: list[bytes], trows: list[bytes]) -> None:
        if dents and self._dfd >= 0:
            writev_all(self._dfd, dents)
            self._dsize += sum(map(len, dents))
        if trows and self._table is not None:
            self._table.append(trows, self._dsize)

    def _commit(self, end: int, chunk_id: int) -> None:
        self.end = end
        self.committed_chunk_id = chunk_id
        for fn in self._listeners:
            try:
                fn()
            except Exception:
                log.exception("stream listener failed")
        with self._commit_cond:
            self._commit_cond.notify_all()

    def _rollover(self, start: int, retain: bool = True) -> SegmentInfo:
        if self.config.fsync != FsyncPolicy.NEVER and self._unsynced:
            self._sync()
        os.close(self._sfd)
        os.close(self._ifd)
        self._sfd = self._ifd = -1
        create_segment(self.directory, start, self.config.fsync != FsyncPolicy.NEVER)
        self._sfd = os.open(segment_path(self.directory, start), os.O_WRONLY | os.O_APPEND)
        self._ifd = os.open(index_path(self.directory, start), os.O_WRONLY | os.O_APPEND)
        if self.config.derived_keys:
            self._open_sidecar(start)
        info = SegmentInfo(start, SEGMENT_HEADER_BYTES, 0, start, None)
        with self.lock:
            self._infos.append(info)
            self.starts = self.starts + (start,)
            if retain:
                self.apply_retention()
            else:
                self._retention_due = True
        return info

    def apply_retention(self) -> None:
        """Delete whole old segments per the retention settings (called holding ``lock``)."""
        cfg = self.config
        infos = self._infos
        drop = segments_to_drop(infos, cfg.retention_bytes, cfg.retention_age_ms,
                                time.time_ns() // 1_000_000)
        if not drop:
            return
        for info in infos[:drop]:
            for path in (index_path(self.directory, info.start),
                         segment_path(self.directory, info.start),
                         derived_path(self.directory, info.start),
                         skiptable.skip_path(self.directory, info.start)):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        del infos[:drop]
        self.starts = tuple(s.start for s in infos)


class _Batch:
    """A named publisher's batch in the queue: its offsets ``first``..``last``, ``reference``
    and last publishing id ``seq``; ``body``, ``count``: where its bodies sit in the queue and
    how many; ``ids``: the publishing id of each body (None: the batch stays in one chunk)."""

    __slots__ = ("first", "last", "ref", "seq", "body", "count", "ids")

    def __init__(self, first: int, last: int, ref: bytes, seq: int, body: int, count: int,
                 ids: Sequence[int] | None) -> None:
        self.first, self.last, self.ref, self.seq = first, last, ref, seq
        self.body, self.count, self.ids = body, count, ids


class _Tracking:
    """The tracking part of one batch taken from the queue (see ``Writer.__init__``)."""

    __slots__ = ("delta", "marks", "writers", "timestamps")

    def __init__(self, marks: dict[int, int], delta: dict[bytes, int],
                 writers: list[_Batch], timestamps: dict[bytes, int]) -> None:
        self.marks = marks
        self.delta = delta
        self.writers = writers
        self.timestamps = timestamps


#: a replicated chunk as checked: its bytes, whether it begins a segment, its header, and its
#: tracking records (a tracking chunk's, or a user chunk's trailer's; None: none)
_Checked = tuple[Union[bytes, memoryview], bool, ChunkHeader, Union[list[TrackingRecord], None]]


def _check_chunks(chunks: Sequence[tuple[bytes | memoryview, bool]], directory: str, expect: int,
                  epoch: int) -> list[_Checked]:
    """The checks of ``Writer.append_chunks``, all before anything is written: each chunk whole,
    starting at ``expect`` (the first; the others where the one before ends), of an epoch no
    older than ``epoch`` (or the one before's), its data section's CRC right, a tracking
    chunk one simple entry; with its tracking records decoded."""
    checked: list[_Checked] = []
    for chunk, first in chunks:
        h = decode_header(chunk, path=directory, position=0)
        if len(chunk) != h.size:
            raise StorageError(f"chunk {h.chunk_id}: {len(chunk)} bytes given, its header "
                               f"says {h.size}")
        if h.chunk_id != expect:
            raise StorageError(f"chunk {h.chunk_id} does not start at the next offset "
                               f"{expect}")
        if h.epoch < epoch:
            raise StaleEpochError(f"chunk {h.chunk_id} of epoch {h.epoch} is older than "
                                  f"the log's last epoch {epoch}")
        at = CHUNK_HEADER_BYTES + h.filter_size
        data = chunk[at:at + h.data_length]
        if crc32(data) != h.crc:
            raise StorageError(f"chunk {h.chunk_id}: CRC mismatch in the data section")
        records: list[TrackingRecord] | None = None
        if h.type != CHUNK_USER:
            if len(data) < 4 or 4 + int.from_bytes(data[:4], "big") != len(data):
                raise StorageError(f"tracking chunk {h.chunk_id} holds one simple entry")
            records = decode_tracking(data[4:], snapshot=h.type == CHUNK_TRACKING_SNAPSHOT)
        elif h.trailer_length:
            records = decode_tracking(chunk[at + h.data_length:])
        checked.append((chunk, first, h, records))
        expect, epoch = h.next_offset, h.epoch
    return checked


def _call(cb: DurableCallback, offset: int, error: Exception | None) -> None:
    try:
        cb(offset, error)
    except Exception:
        log.exception("on_durable callback failed")
