"""Offset tracking and deduplication over AMQP 1.0 (an extension; RabbitMQ offers both on the
stream protocol only), on the stream's own tracking state (``storage.tracking``).

Why: a consumer that restarts should resume where it stopped, and a publisher that retries
after a lost connection should not store its messages twice. The names also ride in link
addresses because some clients (RabbitMQ's official Python AMQP 1.0 client) let a user set the
address but not the attach properties.

Publishers: a publisher link that names itself (the attach property ``PUBLISHER_REFERENCE``,
1..255 bytes of UTF-8, or the target address ``/queues/<stream>/publishers/<reference>``) and
numbers its messages (the message annotation ``PUBLISHING_ID``, a ulong, strictly increasing)
gets what the stream protocol gives a named producer: a message whose id is not above the last
one stored for that reference on that stream is accepted and not stored. The check runs when a
reactor turn's messages are handed to storage (``Publisher``'s flush) with
``Stream.append_deduplicated``: against the stream's last stored id (the state as appended, so
messages of earlier turns still on their way to the disk count), the kept ones written with
their reference and last id in their chunk's trailer. The duplicates are settled with their
turn's batch (accepted once it is durable; when a turn holds nothing else, once everything
appended before is durable): never sooner than the message they duplicate.

Consumers: a consumer link that names itself (the attach property ``CONSUMER_NAME``, or the
source address ``/queues/<stream>/consumers/<name>``) starts
after the offset stored for that name, when one is (else where its source filter says), and
stores the highest offset the client settled with ``accepted`` (what it sent, on a pre-settled
link): every ``StorePolicy.every`` such settlements, ``StorePolicy.interval_ms`` after a
settlement moved it (one timer on the event loop, armed only then), and when the link goes
(detach, connection loss) (``ConsumerOffsets``). The broker's settings
``offset_store_every`` and ``offset_store_interval_ms`` are the policy. Offsets can also be
read and stored through the management node (``management``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from storage import OffsetSpec, StorageError

from amqp_stream.amqp import addresses
from amqp_stream.errors import BadRequest, InternalError
from amqp_stream.wire import MessageFormatError, MessageView

__all__ = ["PUBLISHER_REFERENCE", "PUBLISHING_ID", "CONSUMER_NAME", "StorePolicy",
           "publisher_reference", "consumer_name", "publishing_id", "ConsumerOffsets",
           "resume_offset", "listing"]

PUBLISHER_REFERENCE = "x-publisher-reference"  # attach property (symbol key, string value)
PUBLISHING_ID = "x-publishing-id"  # message annotation (symbol key, ulong value)
CONSUMER_NAME = "x-consumer-name"  # attach property (symbol key, string value)
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


def _named(properties: dict | None, address: str | None, key: str,
           kind: str) -> tuple[str | None, str | None]:
    """``(name, address of the stream)`` from a link's attach properties and its address: the
    address ``/queues/<s>/<consumers|publishers>/<name>`` names the link too (for clients that
    cannot set attach properties) and stands for ``/queues/<s>``; names given both ways must
    agree. Other addresses come back as they are."""
    name = _name(properties, key)
    if address is None or not address.startswith("/queues/") or address.count("/") != 4:
        return name, address
    try:
        parsed = addresses.parse(address)
    except addresses.AddressError:
        return name, address  # the caller's parse says what is wrong with it
    if parsed.kind != kind:
        return name, address
    named = _name({key: parsed.key}, key)
    if name is not None and name != named:
        raise BadRequest(f"the address names {named!r}, the attach property {key} {name!r}")
    return named, addresses.queue_address(parsed.name)


def publisher_reference(properties: dict | None,
                        address: str | None = None) -> tuple[str | None, str | None]:
    """``(reference, target address)`` of a publisher link (None: an unnamed link): the attach
    property ``PUBLISHER_REFERENCE`` or the target ``/queues/<s>/publishers/<reference>``."""
    return _named(properties, address, PUBLISHER_REFERENCE, "queue_publisher")


def consumer_name(properties: dict | None,
                  address: str | None = None) -> tuple[str | None, str | None]:
    """``(name, source address)`` of a consumer link (None: an unnamed link): the attach
    property ``CONSUMER_NAME`` or the source ``/queues/<s>/consumers/<name>``."""
    return _named(properties, address, CONSUMER_NAME, "queue_consumer")


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


@dataclass(frozen=True)
class StorePolicy:
    """When a named consumer's offset is stored: every ``every`` accepted settlements, and
    ``interval_ms`` after a settlement moved it (0 turns either off; detach always stores).
    ``call_later(seconds, fn)`` (the event loop's) runs the timer; None: no timer."""

    every: int = 10_000  # as RabbitMQ's Go stream client's automatic offset tracking
    interval_ms: int = 5000
    call_later: Callable[[float, Callable[[], None]], Any] | None = None


def resume_offset(stream: Any, spec: OffsetSpec) -> int:
    """The offset a consumer starting at ``spec`` reads first, resolved as the stream is now:
    ``first`` the first offset kept, ``last`` the last chunk's, ``next`` the committed end,
    an offset itself (within first..end), a timestamp the first chunk written at or after it
    (storage's reader decides, as for a link's start)."""
    if spec.kind == "offset":
        return min(max(int(spec.value), stream.first_offset), stream.next_offset)
    reader = stream.reader(spec)
    try:
        return int(reader.position)
    finally:
        reader.close()


def listing(stream: Any) -> dict[str, dict[str, int]]:
    """A stream's tracking state for a listing: ``{"offsets": {consumer name: stored offset},
    "sequences": {publisher reference: last publishing id}}`` (names as UTF-8 text; a name
    written by another broker that is not UTF-8 shows with replacement characters)."""
    offsets, sequences = stream.tracking()
    return {"offsets": {k.decode("utf-8", "replace"): v for k, v in sorted(offsets.items())},
            "sequences": {k.decode("utf-8", "replace"): v for k, v in sorted(sequences.items())}}


class ConsumerOffsets:
    """A named consumer link's offset: where it starts, and storing what the client accepted.

    The link's delivery tags are numbers (``Consumer``); ``sent`` maps each unsettled one to the
    offset it carried, until the client settles it."""

    __slots__ = ("stream", "name", "sent", "accepted", "stored", "count", "policy", "timer",
                 "closed")

    def __init__(self, stream: Any, name: str, policy: StorePolicy | None = None,
                 query: bool = True) -> None:
        """``stream``: where the offset is read and stored (storage's ``Stream``, or on a
        cluster node that does not lead the stream its ``ForwardEntry``, which stores on
        the leader); ``query`` False: the stored offset comes later (``learned``)."""
        self.stream = stream
        self.name = name
        self.policy = policy or StorePolicy()
        self.sent: dict[int, int] = {}
        self.stored: int | None = None
        if query:
            try:
                self.stored = stream.query_offset(name)
            except StorageError as exc:  # the stream's writer failed: try again later
                raise InternalError(f"cannot read the offset of consumer {name!r}: "
                                    f"{exc}") from None
        self.accepted = -1 if self.stored is None else self.stored
        self.count = 0
        self.timer: Any = None
        self.closed = False

    def learned(self, stored: int | None) -> None:
        """The stored offset, answered after the attach (by the leader, elsewhere), before
        anything was delivered."""
        self.stored = stored
        self.accepted = -1 if stored is None else stored

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
        policy = self.policy
        if policy.every and self.count >= policy.every:
            self.store()
        elif (self.timer is None and policy.interval_ms and policy.call_later is not None
              and not self.closed and (self.stored is None or self.accepted > self.stored)):
            self.timer = policy.call_later(policy.interval_ms / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if not self.closed:
            self.store()

    def close(self, store: bool = True) -> None:
        """The link goes: store what moved (not when its stream was deleted), no timer after."""
        self.closed = True
        if store:
            self.store()
        elif self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def store(self) -> None:
        """Store the highest accepted offset, if it moved."""
        self.count = 0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.accepted >= 0 and (self.stored is None or self.accepted > self.stored):
            try:
                self.stream.store_offset(self.name, self.accepted)
                self.stored = self.accepted
            except StorageError as exc:  # the stream failed or closed: kept for the next try
                log.warning("storing the offset of consumer %r: %s", self.name, exc)
