"""Publishing a task's Arrow batches over RabbitMQ's stream protocol (option ``streamUrl``).

Why: over AMQP 1.0 every message is a transfer and a disposition, each an event through
proton's Python binding on both sides (~80 µs of the task's CPU a message, and as much of the
broker's). The stream protocol carries many messages in one Publish frame and confirms them
in one PublishConfirm; the messages are the same AMQP bytes (``ArrowEncoder``), with the filter
value also in the frame (Publish v2, as RabbitMQ's clients send it) so the broker need not
read it out of each message.

Exactly once works as over AMQP: the frame's publishing ids are the numbering's, and the
publisher is declared with the numbering's reference, so the broker drops what an earlier
attempt stored (RabbitMQ's own deduplication on this protocol). At most ``WINDOW_BYTES`` of
frames (or ``window`` messages, when more) are unconfirmed; a PublishError frame, a lost
connection or a timeout fails the task.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Iterator

from amqp_stream import client as amqp
from amqp_stream.client.stream import StreamClient
from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.framing import FRAME_MESSAGES, Frame, batch_frames, entry_frames
from amqp_stream.spark.numbering import Numbering
from amqp_stream.spark.options import OptionError
from amqp_stream.spark.row_concat import as_array
from amqp_stream.spark.super_stream import KeyRouter, route_indices

__all__ = ["publish_over_stream", "publish_routed", "Numbered", "FRAME_MESSAGES", "merged"]

_PUBLISHER_ID = 1
#: Publish frames' bytes unconfirmed at most (or ``window`` messages, when that is more). Why
#: not ten frames (~2.3 MB of the bench's rows), as before: the task then waited while the
#: broker wrote and fsynced each group (up to 4 MiB), where it could encode the next batch; and
#: not more: two tasks' frames in flight then outgrew the broker's kept frame buffers (32 MiB,
#: ``streamproto.connection.FRAMES_KEPT_BYTES``), each frame past them fresh memory, page faults
#: on this VM (``bench/RESULTS.md``, "The Spark sink's window")
WINDOW_BYTES = 8 << 20
#: Spark's batches (10,000 rows by default) are encoded this many rows at a time at least: the
#: kernels' fixed cost a batch (~1 ms of numpy and Arrow calls) is then paid half as often
MERGE_ROWS = 20_000


def publish_over_stream(opts, encoder: ArrowEncoder, numbered: "Numbered", where: str) -> int:
    """Publish ``numbered`` (Arrow batches, each with the publishing id of its first row) over the
    stream protocol at ``opts.stream_url``; returns how many were published once all are
    confirmed. Raises ``PublishError``."""
    with _Sender(opts, encoder, where) as sender:
        sender.declare(_PUBLISHER_ID, opts.stream, numbered.reference)
        for batch, first in merged(numbered, MERGE_ROWS):
            sender.send(_PUBLISHER_ID, batch, first)
        return sender.finish()


def merged(numbered: Iterable[tuple[Any, int]], rows: int) -> Iterator[tuple[Any, int]]:
    """``numbered``'s batches joined into batches of at least ``rows`` rows (the last may be
    fewer), each with the publishing id of its first row; only batches whose ids follow on
    are joined, so every row keeps its id."""
    import pyarrow as pa  # type: ignore[import-untyped]
    held: list[Any] = []
    start = count = 0
    for batch, first in numbered:
        if held and first != start + count:
            yield _joined(pa, held), start
            held = []
        if not held:
            start, count = first, 0
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield _joined(pa, held), start
            held = []
    if held:
        yield _joined(pa, held), start


def _joined(pa: Any, batches: list[Any]) -> Any:
    if len(batches) == 1:
        return batches[0]
    if hasattr(pa, "concat_batches"):
        return pa.concat_batches(batches)
    # pyarrow before 19 (setup.cfg takes 15): the same rows through a table of one chunk
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def publish_routed(opts, encoder: ArrowEncoder, batches: Iterable, partitions: list[str],
                   numbering: Numbering | None, where: str) -> tuple[int, int]:
    """Publish Arrow ``batches`` to a super stream's ``partitions``, each row to the partition its
    ``routingKeyColumn`` hashes to, or with ``routingType=key`` to every partition the broker's
    Route gives for it (``super_stream``), over one connection with a publisher per partition.
    Exactly once per partition: every partition stream has a publisher under the
    numbering's reference, and a partition's rows are numbered in the order they come, so the
    n-th row routed to a partition has the same id in every attempt. Returns (published, skipped)."""
    column = opts.routing_key_column
    if column is None:
        raise OptionError("writing to a super stream needs option routingKeyColumn (the column whose value "
                          "routes each row to a partition)")
    with _Sender(opts, encoder, where) as sender:
        targets = []
        for i, stream in enumerate(partitions):
            stored = sender.stored(stream, numbering.reference) if numbering is not None else 0
            sender.declare(i + 1, stream, numbering.reference if numbering is not None else None)
            targets.append(Numbered((), numbering, stored))
        router = (KeyRouter(sender.client, opts.super_stream, partitions, column)
                  if opts.routing_type == "key" else None)
        for batch in batches:
            if not batch.num_rows:
                continue
            keys = batch.column(batch.schema.get_field_index(column)).to_pylist()
            buckets: dict[int, list[int]] = {}
            if router is None:
                for n, index in enumerate(route_indices(keys, len(partitions), opts.routing_hash, column)):
                    buckets.setdefault(index, []).append(n)
            else:
                for n, indices in enumerate(router.indices(keys)):
                    for index in indices:
                        buckets.setdefault(index, []).append(n)
            for index, rows in sorted(buckets.items()):
                part = batch if len(rows) == batch.num_rows else batch.take(rows)
                taken = targets[index].take(part)
                if taken is not None:
                    sender.send(index + 1, *taken)
        sender.finish()
    return sum(t.published for t in targets), sum(t.skipped for t in targets)


class _Sender:
    """One stream-protocol connection publishing Arrow batches: Publish frames of at most
    ``FRAME_MESSAGES`` messages and ``frame_max`` bytes, at most ``WINDOW_BYTES`` of them (or
    ``window`` messages) unconfirmed, every PublishError frame counted as a failure."""

    def __init__(self, opts, encoder: ArrowEncoder, where: str):
        self.opts, self.encoder, self.where, self.streams = opts, encoder, where, opts.stream
        try:
            self.client = StreamClient(opts.stream_url, user=opts.user, password=opts.password, timeout=opts.timeout)
        except amqp.ClientError as exc:
            raise amqp.PublishError(f"{where}: cannot publish to stream {opts.stream!r} at {opts.stream_url}: "
                                    f"{exc}") from exc
        self.sent = 0
        self.limit = (self.client.frame_max or 1 << 20) - 64
        self.window = opts.window
        # the frames sent and not yet confirmed: (messages sent up to its end, its bytes). Confirms
        # are counted, not matched: frames count as confirmed in the order they went (a super
        # stream's publishers may be confirmed out of order; the bound is then off by a frame)
        self.flight: deque[tuple[int, int]] = deque()
        self.flight_bytes = 0

    def __enter__(self) -> "_Sender":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        self.client.close()
        if isinstance(exc, amqp.ClientError) and not isinstance(exc, amqp.PublishError):
            confirmed = self.client.confirmed
            raise amqp.PublishError(
                f"{self.where}: publishing to stream {self.streams!r} over the stream protocol failed: {exc}; "
                f"{self.sent - confirmed} message(s) unconfirmed, {confirmed} confirmed", (),
                max(0, self.sent - confirmed), None) from exc

    def stored(self, stream: str, reference: str) -> int:
        return self.client.publisher_sequence(stream, reference)

    def declare(self, publisher_id: int, stream: str, reference: str | None) -> None:
        self.client.declare_publisher(publisher_id, stream, reference or "")

    def send(self, publisher_id: int, batch, first: int) -> None:
        self.send_frames(self.frames(publisher_id, batch, first))

    def send_frames(self, frames: Iterable[tuple[Frame, int]]) -> None:
        """Send ``frames`` (each with its message count), as many together as the window lets
        go (one ``sendmsg``), waiting while it is full."""
        client = self.client
        parts: list[bytes | memoryview] = []
        queued = 0
        for frame, count in frames:
            size = sum(memoryview(p).nbytes for p in frame)
            if self._full(queued + count, size):
                if parts:  # what is queued goes first: its confirms make the room
                    client.send_parts(parts)
                    self.sent += queued
                    parts, queued = [], 0
                while self._full(count, size):
                    _pump(client, self.opts.timeout, self.sent)
            parts.extend(frame)
            queued += count
            self.flight.append((self.sent + queued, size))
            self.flight_bytes += size
        if parts:
            client.send_parts(parts)
            self.sent += queued

    def _full(self, count: int, size: int) -> bool:
        """Whether ``count`` messages (past those sent) and a frame of ``size`` bytes more would
        overfill the window (never when nothing is in flight)."""
        done = self.client.confirmed + self.client.errors
        while self.flight and self.flight[0][0] <= done:
            self.flight_bytes -= self.flight.popleft()[1]
        return (bool(self.flight) and self.flight_bytes + size > WINDOW_BYTES
                and self.sent - done + count > self.window)

    def frames(self, publisher_id: int, batch, first: int) -> Iterable[tuple[Frame, int]]:
        """The Publish frames of ``batch`` (its first row with publishing id ``first``): built a
        batch at a time where the kernels wrote its messages, else message by message."""
        encoder = self.encoder
        messages = encoder.encode_pieces(batch)
        if messages is None:
            return entry_frames(encoder.encode(batch), encoder.filter_values(batch), first, self.limit, publisher_id)
        index = encoder.plan.filter_index
        frames = batch_frames(messages, None if index is None else batch.column(index), first, self.limit,
                              publisher_id)
        if frames is not None:
            return frames
        return entry_frames(as_array(messages).to_pylist(), encoder.filter_values(batch), first, self.limit,
                            publisher_id)

    def finish(self) -> int:
        """Wait for every confirm; the count sent (PublishError when the broker refused any)."""
        client = self.client
        while client.confirmed + client.errors < self.sent:
            _pump(client, self.opts.timeout, self.sent)
        if client.errors:
            raise amqp.PublishError(f"{self.where}: {client.errors} of {self.sent} message(s) to stream "
                                    f"{self.streams!r} refused by the broker (PublishError frames)", (), 0, None)
        return self.sent


def _pump(client: StreamClient, timeout: float, sent: int) -> None:
    if not client.pump(timeout):
        raise amqp.ClientError(f"no confirm in {timeout:.0f} s ({client.confirmed} of {sent} confirmed)")


class Numbered:
    """Batches with the publishing id of each one's first row, skipping what the broker has
    (``stored``: the last id stored for the numbering's reference; 0 without a numbering)."""

    def __init__(self, batches: Iterable, numbering: Numbering | None, stored: int):
        self.batches, self.numbering, self.stored = batches, numbering, stored
        self.reference = numbering.reference if numbering is not None else None
        self.published = self.skipped = 0

    def __iter__(self) -> Iterator[tuple[object, int]]:
        for batch in self.batches:
            taken = self.take(batch)
            if taken is not None:
                yield taken

    def take(self, batch) -> tuple[object, int] | None:
        """The next ``batch`` of this numbering with the id of its first row to publish, less
        the rows the broker has; None when it has them all."""
        rows = batch.num_rows
        next_id = self.published + self.skipped + 1
        if self.numbering is not None:
            position = self.published + self.skipped
            next_id = self.numbering.publishing_id(position)
            if rows:
                self.numbering.publishing_id(position + rows - 1)  # the limit, checked once a batch
            drop = max(0, min(rows, self.stored - next_id + 1))
            if drop:
                self.skipped += drop
                batch, rows, next_id = batch.slice(drop), rows - drop, next_id + drop
        if not rows:
            return None
        self.published += rows
        return batch, next_id
