"""Deduplication for AMQP 1.0 publishers (an extension; RabbitMQ offers it on the stream
protocol only): RabbitMQ's rule, on the stream's own publisher sequences.

Why: a publisher that retries after a lost connection would store its messages twice. A
publisher link that names itself (the attach property ``PUBLISHER_REFERENCE``, 1..255 bytes of
UTF-8) and numbers its messages (the message annotation ``PUBLISHING_ID``, a ulong, strictly
increasing) gets what the stream protocol gives a named producer: a message whose id is not
above the last one stored for that reference on that stream is accepted and not stored.

Strategy: the check runs when a reactor turn's messages are handed to storage (``Publisher``'s
flush), against ``Stream.query_sequence`` (the state as appended, so messages of earlier turns
still on their way to the disk count), and the kept ones go to ``Stream.append_batch`` with
``writer=(reference, last id)``, cut to fit one chunk each, so the sequence lands in the
trailer of the chunk that holds them (``storage.tracking``). The duplicates are settled with
their turn's batch (accepted once it is durable), or, when a turn holds nothing else, once
everything appended before is durable (``Stream.notify_durable``): never sooner than the
message they duplicate.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from amqp_stream.errors import BadRequest
from amqp_stream.wire import MessageFormatError, MessageView

__all__ = ["PUBLISHER_REFERENCE", "PUBLISHING_ID", "publisher_reference", "publishing_id",
           "append_deduplicated"]

PUBLISHER_REFERENCE = "x-publisher-reference"  # attach property (symbol key, string value)
PUBLISHING_ID = "x-publishing-id"  # message annotation (symbol key, ulong value)
_U64_MAX = (1 << 64) - 1


def publisher_reference(properties: dict | None) -> str | None:
    """The publisher reference among a link's attach properties (None: an unnamed link)."""
    if not properties:
        return None
    value = properties.get(PUBLISHER_REFERENCE)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value.encode("utf-8")) <= 255:
        raise BadRequest(f"{PUBLISHER_REFERENCE} is a string of 1..255 bytes (UTF-8)")
    return str(value)


def publishing_id(body: bytes) -> int:
    """A named publisher's message's ``x-publishing-id``; ``BadRequest`` when it has none."""
    try:
        value = MessageView.from_bytes(body).message_annotations.get(PUBLISHING_ID)
    except (MessageFormatError, ValueError) as exc:
        raise BadRequest(f"cannot read the message annotations: {exc}") from None
    if type(value) is bool or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise BadRequest(f"a message of a publisher with a {PUBLISHER_REFERENCE} needs the "
                         f"message annotation {PUBLISHING_ID} (a ulong)")
    return int(value)


def append_deduplicated(stream: Any, reference: str, bodies: Sequence[bytes],
                        values: Sequence[Any], pids: Sequence[int],
                        on_durable: Callable[[int, Exception | None], None]) -> list[bytes]:
    """Append the messages whose publishing id is above the last one stored (and above those
    before them in this batch); ``on_durable`` once they, and everything before them, are
    durable. Returns the bodies kept. Storage errors propagate."""
    last = stream.query_sequence(reference)
    keep_bodies: list[bytes] = []
    keep_values: list[Any] = []
    keep_pids: list[int] = []
    for body, value, pid in zip(bodies, values, pids):
        if pid > last:
            last = pid
            keep_bodies.append(body)
            keep_values.append(value)
            keep_pids.append(pid)
    if not keep_bodies:
        stream.notify_durable(on_durable)
        return keep_bodies
    cfg = stream.config
    start, size = 0, 0
    cuts = []
    for i, body in enumerate(keep_bodies):  # one chunk each: entries and bytes bounded
        size += len(body) + 4
        if i > start and (i - start >= cfg.max_chunk_entries or size > cfg.max_chunk_bytes):
            cuts.append((start, i))
            start, size = i, len(body) + 4
    cuts.append((start, len(keep_bodies)))
    for k, (a, b) in enumerate(cuts):
        stream.append_batch(keep_bodies[a:b], keep_values[a:b],
                            on_durable=on_durable if k == len(cuts) - 1 else None,
                            writer=(reference, keep_pids[b - 1]))
    return keep_bodies
