"""Publishing a task's Arrow batches over RabbitMQ's stream protocol (option ``streamUrl``).

Why: over AMQP 1.0 every message is a transfer and a disposition, each an event through
proton's Python binding on both sides (~80 µs of the task's CPU a message, and as much of the
broker's). The stream protocol carries many messages in one Publish frame and confirms them
in one PublishConfirm; the messages are the same AMQP bytes (``ArrowEncoder``), with the filter
value also in the frame (Publish v2, as RabbitMQ's clients send it) so the broker need not
read it out of each message.

Exactly once works as over AMQP: the frame's publishing ids are the numbering's, and the
publisher is declared with the numbering's reference, so the broker drops what an earlier
attempt stored (RabbitMQ's own deduplication on this protocol). At most ``window`` messages
are unconfirmed; a PublishError frame, a lost connection or a timeout fails the task.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from amqp_stream import client as amqp
from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.numbering import Numbering

__all__ = ["publish_over_stream", "Numbered", "FRAME_MESSAGES"]

FRAME_MESSAGES = 1000  # messages in one Publish frame at most (and fewer when frame_max says so)
_PUBLISHER_ID = 1


def publish_over_stream(opts, encoder: ArrowEncoder, numbered: "Numbered", where: str) -> int:
    """Publish ``numbered`` (Arrow batches, each with the publishing id of its first row) over the
    stream protocol at ``opts.stream_url``; returns how many were published once all are
    confirmed. Raises ``PublishError``."""
    try:
        client = StreamClient(opts.stream_url, user=opts.user, password=opts.password, timeout=opts.timeout)
    except amqp.ClientError as exc:
        raise amqp.PublishError(f"{where}: cannot publish to stream {opts.stream!r} at {opts.stream_url}: {exc}") from exc
    sent = 0
    try:
        client.declare_publisher(_PUBLISHER_ID, opts.stream, numbered.reference or "")
        limit = (client.frame_max or 1 << 20) - 64
        window = max(opts.window, 2 * FRAME_MESSAGES)
        for batch, first in numbered:
            datas = encoder.encode(batch)
            values = encoder.filter_values(batch)
            for frame, count in _frames(datas, values, first, limit):
                while sent - client.confirmed - client.errors > window - count:
                    _pump(client, opts.timeout, sent)
                client.send(frame)
                sent += count
        while client.confirmed + client.errors < sent:
            _pump(client, opts.timeout, sent)
        if client.errors:
            raise amqp.PublishError(f"{client.errors} of {sent} message(s) to stream {opts.stream!r} refused by the "
                                    f"broker (PublishError frames)", (), 0, None)
        return sent
    except amqp.ClientError as exc:
        raise amqp.PublishError(f"{where}: publishing to stream {opts.stream!r} over the stream protocol failed: "
                                f"{exc}; {sent - client.confirmed} message(s) unconfirmed, {client.confirmed} "
                                "confirmed", (), max(0, sent - client.confirmed), None) from exc
    finally:
        client.close()


def _pump(client: StreamClient, timeout: float, sent: int) -> None:
    if not client.pump(timeout):
        raise amqp.ClientError(f"no confirm in {timeout:.0f} s ({client.confirmed} of {sent} confirmed)")


def _frames(datas: list[bytes], values: list[str | None] | None, first: int, limit: int
            ) -> Iterable[tuple[bytes, int]]:
    """Publish frames of at most ``FRAME_MESSAGES`` messages and ``limit`` bytes each."""
    batch: list[tuple[int, str | None, bytes]] = []
    size = 0
    for i, data in enumerate(datas):
        value = values[i] if values is not None else None
        entry = 14 + len(data) + (len(value.encode()) if value else 0)
        if batch and (len(batch) >= FRAME_MESSAGES or size + entry > limit):
            yield publish_frame(_PUBLISHER_ID, batch), len(batch)
            batch, size = [], 0
        batch.append((first + i, value, data))
        size += entry
    if batch:
        yield publish_frame(_PUBLISHER_ID, batch), len(batch)


class Numbered:
    """Batches with the publishing id of each one's first row, skipping what the broker has
    (``stored``: the last id stored for the numbering's reference; 0 without a numbering)."""

    def __init__(self, batches: Iterable, numbering: Numbering | None, stored: int):
        self.batches, self.numbering, self.stored = batches, numbering, stored
        self.reference = numbering.reference if numbering is not None else None
        self.published = self.skipped = 0

    def __iter__(self) -> Iterator[tuple[object, int]]:
        next_id = 1
        for batch in self.batches:
            rows = batch.num_rows
            if self.numbering is not None:
                position = self.published + self.skipped
                next_id = self.numbering.publishing_id(position)
                if rows:
                    self.numbering.publishing_id(position + rows - 1)  # the limit, checked once a batch
                drop = max(0, min(rows, self.stored - next_id + 1))
                if drop:
                    self.skipped += drop
                    batch, rows, next_id = batch.slice(drop), rows - drop, next_id + drop
            if rows:
                yield batch, next_id
                self.published += rows
                next_id += rows
