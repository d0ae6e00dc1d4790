"""A stream-protocol publisher: Publish frames in, records to storage, confirms out.

Strategy: as ``amqp_stream.amqp.publishing`` does it. The messages of a Publish frame (AMQP 1.0
encoded already, as RabbitMQ's clients send them) are stored as they come, with Publish v2's
filter value as the record's stage-1 value, so AMQP consumers see them and filter on them like
messages published over AMQP with ``x-stream-filter-value``. A frame of messages of one size
(``streamproto.PackedEntries``) is taken whole: storage gets it as one ``EntryRun`` (the
frame's bytes; the writer drops the ids as it copies each chunk's part) and its ids go to the
confirm as the frame's bytes, so no object is made per message. A frame of messages of varying
sizes (``streamproto.SpannedEntries``: v1 without sub-entry batches, v2 whose filter values have
one length: the Spark sink's) is walked once by the decoder and stored as one ``EntrySpans``,
its values one list, its ids gathered by numpy as the confirm holds them. A named publisher's
runs go to storage whole too: its ids are the turn's confirm bytes (``PublishingIds``: no int
per message), checked ascending by numpy once a turn (deduplication keeps all then). The bytes
stored and the confirms are those of the walk (``tests/stream/test_publish_packed.py``,
``test_publish_spanned.py``). The messages of one loop turn go
to the writer in one ``append_batch`` (``flush``, called by the core once per turn: group
commit across connections), with where each frame starts (a large frame gets chunks of its
own, see ``docs/storage.md``, "Chunk sizes"); the writer's ``on_durable`` callback only posts to the mailbox,
and back on the loop the batch's publishing ids go out in one PublishConfirm (or a
PublishError with ``INTERNAL_ERROR`` when storage failed).

A sub-entry batch is stored as it came, as one entry of its records
(``storage.format.SubBatchEntry``), compressed or not, as RabbitMQ stores it; its publishing
id is confirmed once the chunk is durable. It is opened once first
(``storage.format.decode_records``: none, gzip, and the codecs whose library is installed), so
that every reader of the stream can open it too; a batch that cannot be opened, or whose
record count is wrong, gets a PublishError (``PRECONDITION_FAILED``).

A publisher declared with a reference (a named producer) is deduplicated as RabbitMQ does it
(``Stream.append_deduplicated``): a message whose publishing id is not above the last one
stored for that reference on that stream (by any connection, before a restart too; with
nothing stored any id goes, 0 too), or not above an id before it in the same turn, is confirmed
and not stored, once what was appended before it is durable: never sooner than the message it
repeats. The kept ones go in chunks whose trailer
holds the reference and their last id. A sub-entry batch counts as one message with its
publishing id, kept or dropped whole (osiris's sequence is per write, as for RabbitMQ).

Memory: the bytes of unconfirmed messages count against the publisher's
``max_unconfirmed_bytes`` and the broker's ``publish_budget``; over either, the connection is
not read (``throttle``) until the disk has caught up, as RabbitMQ blocks a publisher's socket.
"""

from __future__ import annotations

import itertools
import logging
import struct
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from amqp_stream.core import ByteBudget
from amqp_stream.streamproto import (
    PackedEntries, PublishConfirm, PublishError, ResponseCode, SpannedEntries,
)
from storage.format import PublishingIds, SubBatchEntry, TextValues, decode_records

if TYPE_CHECKING:
    from amqp_stream.stream_listener.connection import StreamConnection

__all__ = ["StreamPublisher"]

log = logging.getLogger("amqp_stream.stream_listener")

# batches waiting for the disk: key -> (publisher, publishing ids as a PublishConfirm holds
# them, bytes held); loop only
_batches: dict[int, tuple["StreamPublisher", bytes, int]] = {}
_keys = itertools.count()
_IDS = np.dtype(">u8")  # a publishing id as a PublishConfirm holds it


def _durable(key: int, error: Exception | None) -> None:
    publisher, ids, held = _batches.pop(key)
    publisher.durable(ids, error, held)


class StreamPublisher:
    protocol = "stream"  # RabbitMQ's metrics label (rabbitmq_global_publishers)

    def __init__(self, conn: StreamConnection, publisher_id: int, reference: str, entry: Any,
                 budget: ByteBudget, max_bytes: int, max_message_size: int,
                 post: Callable[..., None], mark_dirty: Callable[[Any], None],
                 end: Callable[["StreamPublisher", Exception], None]):
        self.conn = conn
        self.id = publisher_id
        self.reference = reference
        self.entry = entry
        self.budget = budget
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self.post = post
        self.mark_dirty = mark_dirty
        self._end = end
        self.closed = False
        self.held = 0  # bytes of messages not yet durable
        self.throttled = False
        self.bodies: list[Any] = []  # bodies, SubBatchEntrys and EntryRuns
        self.values = TextValues()  # one per entry (a run: one per message), str or None
        self.valued = False  # some value in ``values`` is not None
        self.confirm = bytearray()  # every publishing id of the turn, 8 bytes each
        self.entries = 0  # entries in ``bodies``, an EntryRun counting its messages
        self.runs = False  # ``bodies`` holds EntryRuns
        self.frames: list[int] = []  # where each Publish frame starts, in entries
        self.batch_bytes = 0  # bytes of the messages in ``bodies`` as they came
        self.extra = 0  # records in ``bodies`` beyond one per item (sub-entry batches)
        self.batched = False  # ``bodies`` holds SubBatchEntry items
        # rabbit_stream_reader's publisher counters (the HTTP API's published, confirmed,
        # errored), added once per frame or batch: messages received, confirmed, refused
        self.published = self.confirmed = self.errored = 0

    def end(self, error: Exception) -> None:
        """The core ends this publisher (its stream was deleted)."""
        self._end(self, error)

    def close(self) -> None:
        self.closed = True
        self.budget.waiting.pop(self, None)

    # -- in --------------------------------------------------------------------------------
    def publish(self, messages: tuple | PackedEntries | SpannedEntries) -> None:
        """A Publish frame's ``(publishing_id, filter_value, data, batch)`` entries."""
        bodies, values = self.bodies, self.values
        start = self.entries
        if type(messages) is PackedEntries and messages.size <= self.max_message_size:
            # messages of one size, none too large: no object per message
            count = messages.count
            bodies.append(messages.run())
            self.runs = True
            values += itertools.repeat(None, count)
            self.confirm += messages.id_bytes()
            self.entries += count
            self.published += count
            self._taken(start, count * messages.size)
            return
        if type(messages) is SpannedEntries and messages.fits(self.max_message_size):
            # messages of varying sizes, none too large: found by one walk, left in the frame
            count = messages.count
            spans = messages.run()
            bodies.append(spans)
            self.runs = True
            if messages.values is None:
                values += itertools.repeat(None, count)
            else:
                values += messages.values
                self.valued = True
            self.confirm += messages.id_bytes()
            self.entries += count
            self.published += count
            self._taken(start, spans.records_bytes())
            return
        errors: list[tuple[int, int]] = []
        ids: list[int] = []
        n = 0
        for publishing_id, value, data, batch in messages:
            if batch is None:
                if len(data) > self.max_message_size:
                    errors.append((publishing_id, ResponseCode.PRECONDITION_FAILED))
                    continue
                bodies.append(bytes(data))
                values.append(value)
                if value is not None:
                    self.valued = True
                n += len(data)
            else:
                entry = self._check_batch(data, batch)
                if entry is None:
                    errors.append((publishing_id, ResponseCode.PRECONDITION_FAILED))
                    continue
                bodies.append(entry)
                values.append(None)
                n += len(data)
                self.extra += entry.records - 1
                self.batched = True
            ids.append(publishing_id)
        if ids:
            self.confirm += struct.pack(f">{len(ids)}Q", *ids)
            self.entries += len(ids)
        self.published += len(messages)
        if errors:
            self.errored += len(errors)
            self.conn.send(PublishError(self.id, tuple(errors)))
            self.conn.adapter.count("publish_errors", len(errors))
        self._taken(start, n)

    def _taken(self, start: int, n: int) -> None:
        """``bodies`` holds the frame's messages from entry ``start`` on, ``n`` bytes: hold
        them."""
        if self.entries > start:
            if start == 0:
                self.mark_dirty(self)
            self.frames.append(start)
            self.held += n
            self.batch_bytes += n
            self.budget.take(n)
            if self.held >= self.max_bytes or self.budget.over:
                self._throttle()

    def _check_batch(self, data: Any, batch: tuple) -> SubBatchEntry | None:
        """The batch as an entry to store, once it is known to open into ``count`` records."""
        compression, count, uncompressed = batch
        entry = SubBatchEntry(compression, count, uncompressed, data)
        try:
            records = decode_records(entry, 0)
        except Exception as exc:  # each codec has its own errors; storage's for the rest
            log.info("stream publisher %s: a sub-entry batch refused: %s", self.conn.peer, exc)
            return None
        if not records or any(len(b) > self.max_message_size for _, b in records):
            return None
        return entry

    # -- to storage ------------------------------------------------------------------------
    def flush(self) -> None:
        bodies, values = self.bodies, self.values
        if not bodies:
            return
        frames, confirm, entries = self.frames, bytes(self.confirm), self.entries
        runs, valued = self.runs, self.valued
        self.bodies, self.values, self.frames = [], TextValues(), []
        self.confirm, self.entries, self.runs, self.valued = bytearray(), 0, False, False
        held, self.batch_bytes = self.batch_bytes, 0
        records = entries + self.extra if self.batched else None
        self.extra, self.batched = 0, False
        key = next(_keys)
        _batches[key] = (self, confirm, held)
        post = self.post

        def callback(offset: int, error: Exception | None, key: int = key) -> None:
            post(_durable, key, error)
        try:
            if self.reference:  # deduplication: the ids are the confirm's, checked at once
                ids = np.frombuffer(confirm, _IDS)
                self.entry.append(self.reference, bodies, PublishingIds(confirm),
                                  values if valued else None, callback, records, held, frames,
                                  entries if runs else None,
                                  ascending=bool((ids[1:] > ids[:-1]).all()))
            else:
                self.entry.append("", bodies, [], values if valued else None, callback,
                                  records, held, frames, entries if runs else None)
        except Exception as exc:  # storage refused (closed, writer failed, disk full)
            _batches.pop(key, None)
            self.durable(confirm, exc, held)

    def durable(self, ids: bytes, error: Exception | None, held: int) -> None:
        """On the loop: a batch is durable (or failed); ``ids``: its publishing ids, 8 bytes
        each."""
        self.held -= held
        self.budget.give(held)
        conn = self.conn
        count = len(ids) // 8
        if not self.closed and conn.serving and count:
            if error is None:
                conn.send(PublishConfirm(self.id, ids))
                self.confirmed += count
                conn.adapter.count("confirmed", count)
                conn.adapter.core.metrics.confirmed("stream", count)
            else:
                log.warning("stream publisher %s on %r: storing failed: %s", conn.peer,
                            self.entry.name, error)
                code = (ResponseCode.STREAM_DOES_NOT_EXIST if self.entry.deleted
                        else ResponseCode.INTERNAL_ERROR)
                conn.send(PublishError(self.id, tuple(
                    (i, code) for i in struct.unpack(f">{count}Q", ids))))
                self.errored += count
                conn.adapter.count("publish_errors", count)
            conn.adapter.to_write.add(conn)
        self._recheck()

    # -- flow ------------------------------------------------------------------------------
    def _throttle(self) -> None:
        if not self.throttled and not self.closed:
            self.throttled = True
            self.conn.throttle(self, True)
        if self.budget.over:
            self.budget.waiting[self] = self._recheck

    def _recheck(self) -> None:
        if not self.throttled:
            return
        if self.held < self.max_bytes and not self.budget.over:
            self.throttled = False
            self.conn.throttle(self, False)
        elif self.budget.over:
            self.budget.waiting[self] = self._recheck
