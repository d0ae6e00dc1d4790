"""A stream-protocol subscription: chunks out under credit, straight from the segment files.

Strategy: RabbitMQ's way. The reader (``storage.Reader.read_location``) decides stage 1 from
the chunk's header and Bloom bytes and says where the chunk lies; the subscription writes the
Deliver frame's head and the chunk's 48-byte header (as on disk, but for the bytes osiris
reserves, which go out as zeros: ``_RESERVED``) and hands the data section to
``os.sendfile`` (``StreamConnection.queue_file``). No message is parsed; the Bloom bytes and
the trailer are not sent (the header still gives their sizes, as RabbitMQ's does). Records
below the requested offset in the first chunk are the client's to drop, as with RabbitMQ.

One credit is one chunk. Consecutive stored chunks that are there to read now go out joined
into one (``stream_join_bytes``, 1 MiB by default, and within the client's frame max): their
data sections one after the other, ``sendfile``d each, under a header of their own with the
entry and record counts added and the CRC combined from theirs (``storage.crc``, nothing
read). A client's cost is per chunk and per credit (a credit then brings ~3.5x the bytes), and
so is the loop's. Stored chunks join only if their offsets follow on (stage 1 skipped none
between them), their epochs agree and their entries fit the header's 16 bits; a joined chunk
begins where a stored one does, so offsets are as before. A subscription with stage-1 filter
values gets its chunks as stored: clients post-filter a chunk at a time, and rstream's stops
at the first record its decoder fails on, so a chunk holding two of its ``send_batch``es
loses the second's matches (its ``test_consume_filtering``). Only a chunk is held over to the
next Deliver (``held``), never "at the end", which the stream may outgrow before the next
credit. A turn ends when the credit is used up, at the committed end (the
core's ``wake()`` resumes it when the stream grows), when the socket is behind (``MAX_PENDING``
queued bytes: the connection's ``drained()`` resumes it), after ``CHUNKS_PER_TURN`` chunks or
a sliced stage-1 scan (``SCAN_BUDGET`` chunks passed over; the next turn comes after the events
already waiting, so other connections are served in between).

Stage 2 (an extension: ``sql-filter`` in the Subscribe properties, see docs/stream-protocol.md)
needs the messages: the data section is read (CRC-checked), each record is matched with the
compiled filter, and each run of consecutive matching records goes out as a chunk of its own,
rebuilt with that run's first offset, entry and record counts and CRC (one credit each), so
the offsets a client computes from chunk headers stay right. Values in round robin make one
chunk per match, and a client grants credit a chunk at a time (ten ahead by default in rstream
and the Java client): so once the credit is used up the subscription goes on scanning in later
loop turns (``_prefetch``, up to ``RUNS_AHEAD`` stored chunks or ``RUNS_AHEAD_BYTES``; a turn
scans up to ``PREFETCH_RECORDS`` records, several small chunks), and the next Credit finds its
chunks ready. Consecutive stored chunks are read at once where they can be (``Reader.read_span``:
one ``preadv``, each chunk checked as ``read_location`` checks it and against its CRC; the
first that does not hold is left to ``read_location``, which names the damage as before) and
their records matched as one run of columns (``Reader.span_matches``): the ~1,000-record
chunks a publisher the writer keeps up with leaves then share what a chunk cost on its own
(two ``pread``s, the columns' numpy calls: ~20 µs). A stored chunk's rebuilt chunks are kept
as their Deliver frames, back to back in one buffer (``_Frames``; one-record chunks of
columns' matches packed with one ``struct`` call each, ``_ones``; a span's in one buffer, each
with its own stored chunk's timestamp and epoch), so a grant sends a slice of it: one copy,
one write, no Python per chunk (a v2 frame's committed chunk id is written as built, and
again when it is sent only if the stream's moved meanwhile). ``RUNS_AHEAD`` counts such
buffers: a span's is one, as a stored chunk's. With broker-derived filter keys
(``amqp_stream.derived_keys``) the reader skips chunks whose index rules out the filter's
required values and may name the blocks of a chunk that can match (``ChunkLocation.blocks``):
only those are read (each checked against its own CRC; a mismatch reads the chunk whole).

With ``end-offset`` (an extension, see ``subscription_filters``) the subscription stops once
its reader's position reaches that offset: one empty chunk with the end offset as its id goes
out (it takes a credit as any chunk does), then nothing more.

Deliver v2 carries the stream's committed chunk id (``Stream.committed_chunk_id``), never less
than the delivered chunk's own id.
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import logging
import operator
import os
import struct
from typing import TYPE_CHECKING, Any, Callable, Sequence

from amqp_stream.stream_listener.connection import MAX_PENDING
from amqp_stream.streamproto import ResponseCode
from amqp_stream.streamproto import frames as f
from amqp_stream.streamproto.constants import Key
from amqp_stream.streamproto.traffic import DELIVER_HEAD_V1, DELIVER_HEAD_V2
from storage.crc import crc32, crc32_combine
from storage.errors import CorruptionError
from storage.format import (CHUNK_HEADER, CHUNK_MAGIC_VERSION, CHUNK_USER, HEADER_FILTER_SCHEME_AT,
                            HEADER_FLAGS_AT, SIMPLE_ENTRY, decode_records, encode_chunk,
                            encode_entries)
from storage.reader import SCAN_PAUSED, ChunkLocation, Matches, Span

if TYPE_CHECKING:
    from amqp_stream.stream_listener.connection import StreamConnection

__all__ = ["Subscription", "SCAN_BUDGET", "CHUNKS_PER_TURN"]

log = logging.getLogger("amqp_stream.stream_listener")

SCAN_BUDGET = 1000  # chunks a stage-1 scan may pass over per turn (see amqp.consuming)
CHUNKS_PER_TURN = 64
RUNS_AHEAD = 1024  # stage 2: stored chunks (or spans) whose matches are kept ready for credit
RUNS_AHEAD_BYTES = 1 << 20  # ... and their bytes at most (past it, one stored chunk's or span's more)
PREFETCH_RECORDS = 8192  # stage 2: stored records one prefetch turn scans (a chunk at least)
# Header bytes 45-47 are osiris's Reserved:24 (zero from RabbitMQ; rstream's test_deliver
# checks it); this log keeps its filter scheme and flags there. They stay off the wire.
_OURS_AT = HEADER_FILTER_SCHEME_AT
_RESERVED = bytes(CHUNK_HEADER.size - _OURS_AT)
_pack_len = SIMPLE_ENTRY.pack
_EPOCH = slice(16, 24)  # the epoch's bytes in a chunk header
_DELIVER_HEAD_MAX = 4 + 2 + 2 + 1 + 8  # a Deliver v2: size, key, version, subscription, committed id
_NOTHING = object()  # no reader result held over (``Subscription.held``)
_OFFSET = operator.itemgetter(0)  # a record's offset
_TIMESTAMP_AT = 8  # a chunk header's timestamp, then its epoch, chunk id and CRC
_STAMPS = struct.Struct(">qQQI")
_COMMITTED = struct.Struct(">Q")  # a Deliver v2's committed chunk id, at byte 9 of its frame
#: a Deliver v1 / v2 of a one-record chunk before the record's body: the frame's head, the
#: chunk's header (its last bytes zero: ``_RESERVED``), the entry's size
_ONE = {v: struct.Struct(head.format + CHUNK_HEADER.format[1:] + "I")
        for v, head in ((1, DELIVER_HEAD_V1), (2, DELIVER_HEAD_V2))}


@functools.lru_cache(maxsize=64)
def _one_record(before: int, after: int, size: int) -> struct.Struct:
    """A one-record chunk's frame (``Subscription._ones``): the ``before`` bytes of its
    template, the timestamp, epoch, chunk id and CRC, the ``after`` bytes, the body of
    ``size`` bytes."""
    return struct.Struct(f">{before}s{_STAMPS.format[1:]}{after}s{size}s")


class _Frames:
    """Stage 2: the Deliver frames of one stored chunk's runs of matches, back to back in
    one buffer; ``ends``: where each ends, ``records``: the records through each, ``at``: the
    next to send. A v2 frame's committed chunk id is the stream's when it was built
    (``committed``), written again when it is sent if the stream's has moved since."""

    __slots__ = ("buf", "ends", "records", "at", "head", "v2", "committed")

    def __init__(self, buf: bytearray, ends: list[int], records: list[int], head: int,
                 committed: int) -> None:
        self.buf, self.ends, self.records, self.at, self.head = buf, ends, records, 0, head
        self.v2 = head == DELIVER_HEAD_V2.size
        self.committed = committed


class Subscription:
    protocol = "stream"  # RabbitMQ's metrics label (rabbitmq_global_consumers)

    @property
    def metrics_label(self) -> str:
        """The lag metric's ``consumer``: the connection's peer and the subscription id."""
        return f"{self.conn.peer}/{self.id}"

    def __init__(self, conn: StreamConnection, subscription_id: int, entry: Any, reader: Any,
                 credit: int, start: int, match: Callable[[bytes], bool] | None,
                 end: Callable[["Subscription", Exception], None]):
        self.conn = conn
        self.id = subscription_id
        self.entry = entry
        self.reader = reader
        self.credit = credit
        self.start = start  # records below it are not sent by stage 2
        self.match = match
        self._end = end
        self.runs: collections.deque[_Frames] = collections.deque()  # stage 2: the rebuilt
        # chunks' frames, those of one stored chunk each
        self.runs_bytes = 0  # their size together (frames not sent yet)
        self.prefetching = False  # a ``_prefetch`` is scheduled
        self.next_offset = int(reader.position)  # read by the metrics scrape (consumer lag)
        self.waiting = False
        self.scheduled = False
        self.closed = False
        self.active = True  # off for a single active consumer until it is told and answers
        self.filters: Any = None  # the parsed Subscribe filters (a reader is opened again)
        self.single_active: Any = None  # its group membership (stream_listener.single_active)
        self.properties: dict[str, str] = {}  # the Subscribe properties (the HTTP API lists them)
        self.end_offset: int | None = None  # ``end-offset``: stop there, saying so
        self.ended = False  # the end chunk went out
        self._stats = (0, 0, 0)
        self.sent_messages = self.sent_bytes = 0  # since it subscribed (the HTTP API's savings)
        self.join_bytes = int(getattr(conn.adapter.config, "stream_join_bytes", 0))
        self.held: Any = _NOTHING  # a chunk read past a joined one, sent next

    def end(self, error: Exception) -> None:
        """The core ends this subscription (its stream was deleted)."""
        self._end(self, error)

    def close(self) -> None:
        self.closed = True
        self._drop_runs()
        self.conn.blocked.discard(self)
        try:
            self.reader.close()
        except Exception:
            log.debug("closing a reader", exc_info=True)

    def restart(self, reader: Any, start: int) -> None:
        """Deliver from ``reader`` now (a single active consumer became active: RabbitMQ
        opens its reader at the offset the ConsumerUpdate answer gives)."""
        old, self.reader = self.reader, reader
        try:
            old.close()
        except Exception:
            log.debug("closing a reader", exc_info=True)
        self.start = start
        self.held = _NOTHING
        self.waiting = False
        self._stats = (0, 0, 0)  # the metrics count the new reader's work from its start
        self._drop_runs()
        self.next_offset = int(reader.position)
        self.active = True
        self.pump()

    def add_credit(self, credit: int) -> None:
        """A Credit frame: go on now, without writing: the connection writes once it has
        handled every frame of the read (``StreamConnection.received`` and ``process``), so
        the chunks of several Credit frames in one read (rstream grants one per chunk) go
        out in one write."""
        self.credit = min(self.credit + credit, 0xFFFF_FFFF)
        if not self.scheduled and self not in self.conn.blocked:
            self.pump(write=False)

    def wake(self) -> None:
        """The stream grew: go on if this subscription waited at its end (``waiting`` stays
        set until then, through turns that only send frames already made, so that those
        do not ask the reader again: a stage-2 consumer's prefetch stops at the end)."""
        if self.waiting and not self.closed:
            self.waiting = False
            if not self.scheduled:
                self.turn()

    def _turn(self) -> None:
        self.scheduled = False
        self.turn()

    def turn(self) -> None:
        """``pump`` from a callback of the loop or the core: a failure (a corrupt chunk, a
        bug) ends this connection only."""
        try:
            self.pump()
        except Exception as exc:
            log.exception("stream subscription %d of %s on %r failed", self.id, self.conn.peer,
                          self.entry.name)
            self.conn.failed(exc)

    def pump(self, write: bool = True) -> None:
        """Deliver what the credit allows now; ``write``: write it too (False: the caller
        writes once it is done)."""
        if self.closed or self.ended or not self.active or not self.conn.serving:
            return
        conn = self.conn
        sent = chunks = records = nbytes = 0
        read = False  # the reader was used (else its position and counts did not move)
        reader = self.reader
        proto = conn.proto
        stream = self.entry.stream
        v2 = proto.deliver_version == 2
        try:
            while self.credit > 0:
                if conn.closed:
                    return
                if conn.pending > MAX_PENDING:
                    conn.write()  # the socket may take it now; if not, drained() resumes us
                    if conn.closed:
                        return
                    if conn.pending > MAX_PENDING:
                        conn.blocked.add(self)
                        break
                if sent >= CHUNKS_PER_TURN:
                    self._again()
                    break
                if self.runs:  # as many as the credit and the turn allow, in one buffer
                    frames = self.runs[0]
                    at, ends = frames.at, frames.ends
                    k = min(len(ends) - at, self.credit, CHUNKS_PER_TURN - sent)
                    lo, hi = ends[at - 1] if at else 0, ends[at + k - 1]
                    buf = frames.buf
                    if frames.v2 and stream.committed_chunk_id != frames.committed:
                        committed = stream.committed_chunk_id
                        for start in itertools.chain((lo,), ends[at:at + k - 1]):
                            _COMMITTED.pack_into(buf, start + 9, committed)
                    conn.queue(memoryview(buf)[lo:hi])
                    recs = frames.records
                    records += recs[at + k - 1] - (recs[at - 1] if at else 0)
                    nbytes += hi - lo - k * frames.head
                    chunks += k
                    self.runs_bytes -= hi - lo
                    frames.at = at + k
                    if frames.at == len(ends):
                        self.runs.popleft()
                    self.credit -= k
                    sent += k
                    continue
                if self.end_offset is not None and reader.position >= self.end_offset:
                    self._send_end(v2)
                    sent += 1
                    break
                self.waiting = False
                read = True
                if self.match is not None and self.held is _NOTHING:  # (spans: as _prefetch)
                    span = reader.read_span(PREFETCH_RECORDS, self.end_offset)
                    if span is not None:
                        sent += self._add_span(span)
                        continue
                if self.held is not _NOTHING:
                    loc, self.held = self.held, _NOTHING
                else:
                    loc = reader.read_location(SCAN_BUDGET)
                if loc is SCAN_PAUSED:
                    self._again()
                    break
                if loc is None:
                    if self.end_offset is not None and reader.position >= self.end_offset:
                        continue  # the last chunks below the end were not ones to send (tracking)
                    self.waiting = True
                    break
                if self.match is not None:
                    if not self._add_runs(loc):
                        sent += 1  # nothing matched: it still counts towards the turn
                    continue
                committed = max(stream.committed_chunk_id, loc.chunk_id) if v2 else None
                if self.join_bytes > loc.length and not (self.filters and self.filters.values):
                    n, size = self._send_joined(loc, committed)
                    records += n
                    nbytes += size
                else:
                    conn.queue(proto.deliver_head(self.id, len(loc.header) + loc.length, committed))
                    conn.queue(memoryview(loc.header)[:_OURS_AT])
                    conn.queue(_RESERVED)
                    conn.queue_file(loc.fd, loc.position, loc.length)
                    records += loc.records
                    nbytes += len(loc.header) + loc.length
                self.credit -= 1
                sent += 1
                chunks += 1
        except CorruptionError as exc:
            self._damaged(exc)
        finally:
            if read:
                self.next_offset = int(reader.position)
            self._account(records, nbytes, chunks, read)
        if write:
            conn.write()
        if self.credit <= 0 and self.match is not None:
            self._prefetch_soon()

    def _damaged(self, exc: CorruptionError) -> None:
        """The reader met a chunk damaged on disk: what this turn queued before it (the chunks
        before the damage, a Subscribe's answer) goes out, then a Close with INTERNAL_ERROR
        giving the reason, and the connection ends. Why not ``conn.failed`` as for a bug: it
        drops the socket at once, so a consumer lost the intact chunks of the turn and
        learnt nothing of why (a chunk is read before the Subscribe's answer is written)."""
        log.error("stream subscription %d of %s on %r: %s", self.id, self.conn.peer,
                  self.entry.name, exc)
        self.ended = True  # (read no more)
        conn = self.conn
        if conn.serving:
            conn.send(f.Close(conn.proto.next_correlation_id(), ResponseCode.INTERNAL_ERROR,
                              str(exc)))
            conn.linger()

    def _send_joined(self, loc: ChunkLocation, committed: int | None) -> tuple[int, int]:
        """Queue the chunk at ``loc`` joined with the stored chunks that follow it now, up to
        ``join_bytes`` of data, as one Deliver; (records, bytes). A chunk read that does not
        join is held for the next Deliver (``held``)."""
        reader = self.reader
        end = self.end_offset
        limit = self.join_bytes
        frame_max = self.conn.proto.frame_max
        if frame_max > 0:  # a joined Deliver stays within the client's frame max
            limit = min(limit, frame_max - _DELIVER_HEAD_MAX - CHUNK_HEADER.size)
        ranges = [(os.dup(loc.fd), loc.position, loc.length)]  # the reader moves on: our own
        entries, records, length, crc = loc.entries, loc.records, loc.length, loc.crc
        epoch = loc.header[_EPOCH]
        following = loc.next_offset
        try:
            while end is None or reader.position < end:
                nxt = reader.read_location(SCAN_BUDGET)
                if type(nxt) is not ChunkLocation:
                    break  # the end or a paused scan: not kept (the stream may grow meanwhile)
                if (nxt.chunk_id != following or nxt.header[_EPOCH] != epoch
                        or entries + nxt.entries > 0xFFFF or length + nxt.length > limit):
                    self.held = nxt  # (a gap or no room: sent next)
                    break
                ranges.append((os.dup(nxt.fd), nxt.position, nxt.length))
                entries += nxt.entries
                records += nxt.records
                crc = crc32_combine(crc, nxt.crc, nxt.length)
                length += nxt.length
                following = nxt.next_offset
        except BaseException:
            for fd, _, _ in ranges:
                os.close(fd)
            raise
        conn = self.conn
        if len(ranges) == 1:
            header: Any = memoryview(loc.header)[:_OURS_AT]
        else:
            header = CHUNK_HEADER.pack(CHUNK_MAGIC_VERSION, CHUNK_USER, entries, records,
                                       loc.timestamp, int.from_bytes(epoch, "big"), loc.chunk_id,
                                       crc, length, 0, 0, 0, 0, 0)[:_OURS_AT]
        conn.queue(conn.proto.deliver_head(self.id, CHUNK_HEADER.size + length, committed))
        conn.queue(header)
        conn.queue(_RESERVED)
        for fd, position, size in ranges:
            conn.queue_owned(fd, position, size)
        return records, CHUNK_HEADER.size + length

    def _drop_runs(self) -> None:
        self.runs = collections.deque()
        self.runs_bytes = 0

    def _add_runs(self, loc: ChunkLocation) -> int:
        """Stage 2: queue the rebuilt chunks of the stored chunk at ``loc``; how many."""
        frames = self._rebuild(loc)
        if frames is None:
            return 0
        self.runs.append(frames)
        self.runs_bytes += len(frames.buf)
        return len(frames.ends)

    def _add_span(self, span: Span) -> int:
        """Stage 2: queue the rebuilt chunks of the stored chunks of ``span``: when the
        columns tell for them all at once and the matches make one-record chunks, their frames
        in one buffer (``_ones``); else chunk by chunk, as ``_add_runs`` (the same frames).
        How many stored chunks gave none (they count towards a turn's, as in ``pump``)."""
        committed = self.entry.stream.committed_chunk_id
        headers = span.headers
        found = self.reader.span_matches(span)
        if found is not None:
            frames = self._ones(found, committed, [(t[6] + t[3], t[4], t[5]) for t in headers])
            if frames is not None:
                self.runs.append(frames)
                self.runs_bytes += len(frames.buf)
                return 0
        at = none = 0
        for j, t in enumerate(headers):
            if found is not None:  # its share of the matches (a run across its end, say)
                lo, at = at, bisect.bisect_left(found, t[6] + t[3], at, key=_OFFSET)
                records: list[tuple[int, bytes]] = Matches(found[lo:at])
                looked = t[2]
            else:
                records, looked = self._chosen(span.section(j), t[6], t[2], t[13])
            frames = self._rebuilt(records, looked, t[4], t[5], committed)
            if frames is None:
                none += 1
            else:
                self.runs.append(frames)
                self.runs_bytes += len(frames.buf)
        return none

    def _prefetch_soon(self) -> None:
        if (not self.prefetching and not self.closed and not self.waiting
                and len(self.runs) < RUNS_AHEAD and self.runs_bytes < RUNS_AHEAD_BYTES):
            self.prefetching = True
            self.conn.loop.call_soon(self._prefetch)

    def _prefetch(self) -> None:
        """Stage 2 with the credit used up: rebuild the next stored chunks' matches now, so
        that the client's next credit finds them ready instead of waiting for a scan. One loop
        turn scans stored chunks up to ``PREFETCH_RECORDS`` records (one chunk at least), so
        that frames of every connection are served in between; small chunks (a loaded
        publisher's writer cuts ~1,000 records) then share a turn's fixed costs."""
        self.prefetching = False
        if (self.closed or self.ended or not self.active or not self.conn.serving
                or self.credit > 0 or self.scheduled):
            return  # (credit came: ``add_credit`` pumped; a turn is due: it goes on)
        reader = self.reader
        end = self.end_offset
        if end is not None and reader.position >= end:
            return
        scanned = 0
        loc: Any = _NOTHING  # (the last read_location's answer)
        try:
            while True:
                span = reader.read_span(PREFETCH_RECORDS - scanned, end)
                if span is not None:
                    self._add_span(span)
                    scanned += span.records
                else:
                    loc = reader.read_location(SCAN_BUDGET)
                    if loc is None or loc is SCAN_PAUSED:
                        break
                    self._add_runs(loc)
                    scanned += loc.records
                if (scanned >= PREFETCH_RECORDS or len(self.runs) >= RUNS_AHEAD
                        or self.runs_bytes >= RUNS_AHEAD_BYTES
                        or (end is not None and reader.position >= end)):
                    break
            self.next_offset = int(reader.position)
            self._account(0, 0, 0, True)  # (what the reader did: turns that send do not look)
            if loc is None:
                self.waiting = True  # ``wake`` resumes with a turn, which prefetches again
                return
        except CorruptionError as exc:
            self._damaged(exc)
            self.conn.write()
            return
        except Exception as exc:
            log.exception("stream subscription %d of %s on %r failed", self.id, self.conn.peer,
                          self.entry.name)
            self.conn.failed(exc)
            return
        self._prefetch_soon()

    def _send_end(self, v2: bool) -> None:
        """``end-offset`` reached: an empty chunk whose id is the end offset, the last one."""
        end = self.end_offset
        assert end is not None
        committed = max(self.entry.stream.committed_chunk_id, end) if v2 else None
        chunk = CHUNK_HEADER.pack(CHUNK_MAGIC_VERSION, CHUNK_USER, 0, 0, 0, 0, end, 0, 0, 0, 0, 0, 0, 0)
        self.conn.queue(self.conn.proto.deliver_head(self.id, len(chunk), committed))
        self.conn.queue(chunk)
        self.credit -= 1
        self.ended = True

    def _again(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.conn.loop.call_soon(self._turn)

    def _records(self, loc: ChunkLocation) -> tuple[list[tuple[int, bytes]], int]:
        """The chunk's records, or only those of its blocks that may match (``loc.blocks``),
        and, when they are the matches already (the records of a chunk of one layout are
        matched as columns, ``amqp_stream.columns``), how many records that decided; else 0."""
        if loc.blocks is not None:
            out: list[tuple[int, bytes]] = []
            chosen = True
            looked = 0
            for b in loc.blocks:
                part = self.reader.block_records(
                    os.pread(loc.fd, b.length, loc.position + b.offset), loc.chunk_id, b)
                if part is None:
                    break  # the index is stale or damaged: the chunk's own CRC decides
                out.extend(part)
                chosen = chosen and type(part) is Matches
                looked += b.entries
            else:
                return out, looked if chosen else 0
        data = os.pread(loc.fd, loc.length, loc.position)
        if len(data) != loc.length or crc32(data) != loc.crc:
            raise CorruptionError(f"stream {self.entry.name!r}", loc.position,
                                  f"chunk {loc.chunk_id}: CRC mismatch or short read")
        return self._chosen(data, loc.chunk_id, loc.entries, loc.header[HEADER_FLAGS_AT])

    def _chosen(self, data: bytes | memoryview, chunk_id: int, entries: int,
                flags: int) -> tuple[list[tuple[int, bytes]], int]:
        """``_records`` of a stored chunk's data section, read and checked: the matches when
        the columns can tell (and how many records they decided), else every record (a body
        ``bytes`` of its own: ``data`` may be the scratch buffer) and 0."""
        found = self.reader.candidates(data, chunk_id, entries, flags)
        if found is not None:
            return found, entries if type(found) is Matches else 0
        return decode_records(bytes(data), chunk_id, entries=entries), 0

    def _rebuild(self, loc: ChunkLocation) -> _Frames | None:
        """Stage 2: the runs of matching records of the chunk at ``loc``, as the frames of
        chunks (a run holds consecutive offsets only: records between blocks read are not
        there); None when none matched."""
        epoch = int.from_bytes(loc.header[_EPOCH], "big")
        committed = self.entry.stream.committed_chunk_id  # (v2: written as built)
        records, looked = self._records(loc)
        return self._rebuilt(records, looked, loc.timestamp, epoch, committed)

    def _rebuilt(self, records: list[tuple[int, bytes]], looked: int, timestamp: int, epoch: int,
                 committed: int) -> _Frames | None:
        """``_rebuild`` for the records of a stored chunk (``looked``: how many the columns
        decided, see ``_records``)."""
        match = self.match
        assert match is not None
        matched = looked > 0  # (the records the columns left out the reader counts as dropped)
        frames = self._ones(records, committed, ((1 << 64, timestamp, epoch),)) if matched else None
        if frames is not None:
            return frames
        out: list[tuple[int, bytes]] = []
        run: list[bytes] = []
        first = -1
        dropped = 0
        for offset, body in records:
            try:
                ok = offset >= self.start and (matched or match(body))
            except Exception:  # a record the filter cannot read: not a match
                ok = False
            if ok:
                if run and offset != first + len(run):  # a gap between blocks
                    out.append(self._chunk(first, timestamp, epoch, run))
                    run = []
                if not run:
                    first = offset
                run.append(body)
                continue
            dropped += 1
            if run:
                out.append(self._chunk(first, timestamp, epoch, run))
                run = []
        if run:
            out.append(self._chunk(first, timestamp, epoch, run))
        m = self.entry.metrics
        if m is not None and dropped:
            m.count_dropped(dropped)
        return self._framed(out, committed)

    def _ones(self, records: list[tuple[int, bytes]], committed: int,
              chunks: Sequence[tuple[int, int, int]]) -> _Frames | None:
        """The frames of one-record chunks, one per record, for matches chosen by columns
        that are apart (none below the start nor next to another: values in round robin) and
        of one size (a chunk's, or one block's); else None. ``chunks``: the stored chunks they
        come from, as (next offset, timestamp, epoch), in order (a span's, or one). The frame's
        head and the chunk's header from one template but for the timestamp, epoch, chunk id
        and CRC (the CRC of the body from that of its entry's size), packed with the body by
        one ``struct`` call a record; one join for them all."""
        if not records or records[0][0] < self.start:
            return None
        v = self.conn.proto.deliver_version
        one = _ONE[v]
        size = len(records[0][1])
        head = one.size - CHUNK_HEADER.size - 4  # the frame's head before the chunk
        frame = one.size + size
        template = one.pack(frame - 4, Key.DELIVER, v, self.id, *((committed,) if v == 2 else ()),
                            CHUNK_MAGIC_VERSION, CHUNK_USER, 1, 1, 0, 0, 0, 0,
                            size + 4, 0, 0, 0, 0, 0, size)
        at = head + _TIMESTAMP_AT
        before, after = template[:at], template[at + _STAMPS.size:]
        pack = _one_record(at, len(after), size).pack
        start = crc32(_pack_len(size))
        parts: list[bytes] = []
        add = parts.append
        last = records[0][0] - 2
        j = 0
        bound, timestamp, epoch = chunks[0]
        for offset, body in records:
            if offset - last < 2 or len(body) != size:
                return None
            last = offset
            while offset >= bound:
                j += 1
                bound, timestamp, epoch = chunks[j]
            add(pack(before, timestamp, epoch, offset, crc32(body, start), after, body))
        n = len(records)
        return _Frames(bytearray().join(parts), list(range(frame, frame * n + 1, frame)),
                       list(range(1, n + 1)), head, committed)

    def _framed(self, chunks: list[tuple[int, bytes]], committed: int) -> _Frames | None:
        """The frames of rebuilt chunks ((records, bytes) each)."""
        if not chunks:
            return None
        proto = self.conn.proto
        v2 = proto.deliver_version == 2
        parts = []
        ends, records = [], []
        end = total = 0
        for count, chunk in chunks:
            head = proto.deliver_head(self.id, len(chunk), committed if v2 else None)
            parts.append(head)
            parts.append(chunk)
            end += len(head) + len(chunk)
            total += count
            ends.append(end)
            records.append(total)
        return _Frames(bytearray().join(parts), ends, records, len(head), committed)

    @staticmethod
    def _chunk(first: int, timestamp: int, epoch: int, bodies: list[bytes]) -> tuple[int, bytes]:
        """(records, the chunk's bytes) for a run; one record (every match, when values come
        in round robin) without building a data section first."""
        if len(bodies) == 1:
            entry = _pack_len(len(bodies[0])) + bodies[0]
            return 1, CHUNK_HEADER.pack(CHUNK_MAGIC_VERSION, CHUNK_USER, 1, 1, timestamp, epoch,
                                        first, crc32(entry), len(entry), 0, 0, 0, 0, 0) + entry
        return len(bodies), b"".join(encode_chunk(first, timestamp, encode_entries(bodies),
                                                  len(bodies), len(bodies), epoch=epoch))

    def _account(self, records: int, nbytes: int, chunks: int, read: bool) -> None:
        """A turn's counts: this subscription's, the stream's and the listener's (plain ints
        until a scrape reads them: ``Metrics.fold``); ``read``: the reader was used, its
        counts are looked at too."""
        self.sent_messages += records
        self.sent_bytes += nbytes
        m = self.entry.metrics
        if m is not None:
            self._stats = m.count_turn(self._stats, self.reader.stats if read else None, records,
                                       nbytes, protocol="stream", chunks=chunks)
        elif chunks:
            self.conn.adapter.count("chunks", chunks)
            self.conn.adapter.count("bytes", nbytes)
