"""Offset tracking and deduplication over AMQP 1.0 (an extension; RabbitMQ offers both on the
stream protocol only), on the stream's own tracking state (``storage.tracking``).

Why: a consumer that restarts should resume where it stopped, and a publisher that retries
after a lost connection should not store its messages twice.

Publishers: a publisher link that names itself (the attach property ``PUBLISHER_REFERENCE``,
1..255 bytes of UTF-8) and numbers its messages (the message annotation ``PUBLISHING_ID``, a
ulong, strictly increasing) gets what the stream protocol gives a named producer: a message
whose id is not above the last one stored for that reference on that stream is accepted and
not stored. The check runs when a reactor turn's messages are handed to storage
(``Publisher``'s flush) with ``Stream.append_deduplicated``: against the stream's last stored
id (the state as appended, so messages of earlier turns still on their way to the disk
count), the kept ones written with their reference and last id in their chunk's trailer. The
duplicates are settled with their turn's batch (accepted once it is durable; when a turn holds
nothing else, once everything appended before is durable): never sooner than the message they
duplicate.

Consumers: a consumer link that names itself (the attach property ``CONSUMER_NAME``) starts
after the offset stored for that name, when one is (else where its source filter says), and
stores the highest offset the client settled with ``accepted`` (what it sent, on a pre-settled
link) every ``STORE_EVERY`` such settlements and when the link goes (``ConsumerOffsets``).
Offsets can also be read and stored through the management node (``management``).
"""

from __future__ import annotations

import logging
from typing import Any

from storage import OffsetSpec, StorageError

from amqp_stream.errors import BadRequest, InternalError
from amqp_stream.wire import MessageFormatError, MessageView

__all__ = ["PUBLISHER_REFERENCE", "PUBLISHING_ID", "CONSUMER_NAME", "STORE_EVERY",
           "publisher_reference", "consumer_name", "publishing_id", "ConsumerOffsets"]

PUBLISHER_REFERENCE = "x-publisher-reference"  # attach property (symbol key, string value)
PUBLISHING_ID = "x-publishing-id"  # message annotation (symbol key, ulong value)
CONSUMER_NAME = "x-consumer-name"  # attach property (symbol key, string value)
STORE_EVERY = 100  # accepted settlements between two stores of a named consumer's offset
_U64_MAX = (1 << 64) - 1

log = logging.getLogger(__name__)


def _name(properties: dict | None, key: str) -> str | None:
    if not properties:
        return None
    value = properties.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value.encode("utf-8")) <= 255:
        raise BadRequest(f"{key} is a string of 1..255 bytes (UTF-8)")
    return str(value)


def publisher_reference(properties: dict | None) -> str | None:
    """The publisher reference among a link's attach properties (None: an unnamed link)."""
    return _name(properties, PUBLISHER_REFERENCE)


def consumer_name(properties: dict | None) -> str | None:
    """The consumer name among a link's attach properties (None: an unnamed link)."""
    return _name(properties, CONSUMER_NAME)


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


class ConsumerOffsets:
    """A named consumer link's offset: where it starts, and storing what the client accepted.

    The link's delivery tags are numbers (``Consumer``); ``sent`` maps each unsettled one to the
    offset it carried, until the client settles it."""

    __slots__ = ("stream", "name", "sent", "accepted", "stored", "count")

    def __init__(self, stream: Any, name: str) -> None:
        self.stream = stream
        self.name = name
        self.sent: dict[int, int] = {}
        try:
            self.stored = stream.query_offset(name)
        except StorageError as exc:  # the stream's writer failed: try again later
            raise InternalError(f"cannot read the offset of consumer {name!r}: {exc}") from None
        self.accepted = -1 if self.stored is None else self.stored
        self.count = 0

    def start(self, default: Any) -> Any:
        """The reader's start: after the stored offset, else ``default`` (the link's own)."""
        return default if self.stored is None else OffsetSpec.offset(self.stored + 1)

    def settled(self, tag: int, accepted: bool) -> None:
        offset = self.sent.pop(tag, None)
        if offset is not None and accepted:
            self.delivered(offset)

    def delivered(self, offset: int) -> None:
        """``offset`` was accepted (or sent pre-settled)."""
        if offset > self.accepted:
            self.accepted = offset
        self.count += 1
        if self.count >= STORE_EVERY:
            self.store()

    def store(self) -> None:
        """Store the highest accepted offset, if it moved (called at detach too)."""
        self.count = 0
        if self.accepted >= 0 and (self.stored is None or self.accepted > self.stored):
            try:
                self.stream.store_offset(self.name, self.accepted)
                self.stored = self.accepted
            except StorageError as exc:  # the stream failed or closed: kept for the next try
                log.warning("storing the offset of consumer %r: %s", self.name, exc)
