"""A publisher link (our receiver): raw transfer bytes in, stored records and outcomes out.

Strategy: no ``proton.Message`` on this path. The transfer's bytes are read as they arrive
(``link.recv``), delivery annotations are cut out (``sqlfilter.message``), the filter value is
read from the message annotations, and the bytes go to the stream's writer thread
(``stream.append_batch``, once per reactor turn for all the messages of that turn: the
server calls ``flush`` when the loop is quiet). The writer's ``on_durable`` callback runs on its
own thread, so it only posts to the broker's mailbox; the settlement (``accepted``, or
``rejected`` with a condition) of the whole batch happens back on the event loop. Credit follows ``amqp_stream.credit.PublisherCredit``.
Pre-settled transfers are appended and forgotten.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from typing import Any, Callable

from proton import Condition, Delivery

from amqp_stream.credit import PublisherCredit
from sqlfilter import MessageFormatError
from sqlfilter import message as message_bytes

__all__ = ["Publisher"]

log = logging.getLogger(__name__)

# batches waiting for the disk: key -> (publisher, unsettled deliveries); event loop only
_batches: dict[int, tuple["Publisher", list]] = {}
_batch_keys = itertools.count()


def _batch_durable(key: int, error: Exception | None) -> None:
    """On the event loop: a batch handed to storage is durable (or failed)."""
    publisher, deliveries = _batches.pop(key)
    publisher._durable(deliveries, error)


class StreamGone(Exception):
    """The stream of a publisher was deleted."""


ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED


class Publisher:
    def __init__(self, link: Any, entry: Any, credit: PublisherCredit, max_message_size: int,
                 post: Callable[..., None], mark_dirty: Callable[["Publisher"], None],
                 lookup: Callable[[str], Any] | None = None):
        self.link = link
        # streams.StreamEntry; None for the anonymous terminus (a null target address), where
        # each message's ``to`` (/queues/<name>) picks the stream through ``lookup``
        self.entry = entry
        self.lookup = lookup
        self.credit = credit
        self.max_message_size = max_message_size
        self.post = post  # thread-safe: run fn(*args) on the event loop
        self.mark_dirty = mark_dirty  # ask for ``flush`` at the end of this reactor turn
        self.closed = False
        # the batch being formed, per stream: name -> [entry, bodies, values, unsettled deliveries]
        self.batches: dict[str, list] = {}

    def start(self) -> None:
        self.link.flow(self.credit.initial())

    def reject(self, delivery: Any, condition: str, description: str) -> None:
        delivery.local.condition = Condition(condition, description)
        delivery.update(REJECTED)
        delivery.settle()
        log.info("rejected a message on %r: %s %s",
                 self.entry.name if self.entry else "(anonymous terminus)", condition, description)

    def on_delivery(self, delivery: Any) -> None:
        link = self.link
        if delivery.aborted:
            delivery.settle()
            link.advance()
            return
        if not delivery.readable:
            # an update of a delivery already read (e.g. the client settled it first): the
            # outcome still comes from the writer; nothing to read
            return
        if delivery.partial:
            self._partial(delivery)
            return
        chunk = link.recv(delivery.pending) or b""
        buffered = getattr(delivery, "buffered", None)
        if buffered is not None:
            buffered += chunk
            data = bytes(buffered)
            oversize = len(data) > self.max_message_size or getattr(delivery, "oversize", False)
            delivery.buffered = None
        else:
            data = chunk
            oversize = len(data) > self.max_message_size
        link.advance()
        presettled = delivery.settled
        self.credit.received(presettled)
        if presettled:
            delivery.settle()
            self._append(None, data)
        elif oversize:
            self.credit.confirmed()
            self.reject(delivery, "amqp:link:message-size-exceeded",
                        f"message larger than the maximum of {self.max_message_size} bytes")
        else:
            self._append(delivery, data)
        self.top_up()

    def _partial(self, delivery: Any) -> None:
        buffered = getattr(delivery, "buffered", None)
        if buffered is None:
            buffered = bytearray()
            delivery.buffered = buffered
            delivery.oversize = False
        data = self.link.recv(delivery.pending) or b""
        if delivery.oversize or len(buffered) + len(data) > self.max_message_size:
            delivery.oversize = True
            buffered.clear()  # keep reading, keep nothing
        else:
            buffered += data

    def _append(self, delivery: Any | None, data: bytes) -> None:
        """Check one message and queue it for this turn's batch (see ``flush``)."""
        try:
            if not data:
                raise MessageFormatError("empty transfer")
            message_bytes.split_sections(data)  # the framing of every section is sound
            body = message_bytes.strip_delivery_annotations(data)
        except (MessageFormatError, ValueError, IndexError) as exc:
            self._refuse(delivery, "amqp:decode-error", f"not an AMQP 1.0 message: {exc}")
            return
        try:
            value = message_bytes.filter_value(body)
        except (MessageFormatError, ValueError) as exc:
            self._refuse(delivery, "amqp:invalid-field", f"x-stream-filter-value must be a string: {exc}")
            return
        entry = self.entry
        if entry is None:
            entry = self._route(delivery, body)
            if entry is None:
                return
        batch = self.batches.get(entry.name)
        if batch is None:
            if not self.batches:
                self.mark_dirty(self)
            batch = self.batches[entry.name] = [entry, [], [], []]
        batch[1].append(body)
        batch[2].append(value)
        if delivery is not None:
            batch[3].append(delivery)

    def _refuse(self, delivery: Any | None, condition: str, description: str) -> None:
        if delivery is not None:
            self.credit.confirmed()
            self.reject(delivery, condition, description)
        else:
            log.info("dropped a pre-settled message: %s %s", condition, description)

    def _route(self, delivery: Any | None, body: bytes) -> Any:
        """The anonymous terminus: the stream named by the message's ``to``."""
        from amqp_stream import addresses
        try:
            to = message_bytes.MessageView.from_bytes(body).properties.get("to")
        except (MessageFormatError, ValueError) as exc:
            self._refuse(delivery, "amqp:decode-error", f"cannot read the properties: {exc}")
            return None
        if not isinstance(to, str):
            self._refuse(delivery, "amqp:invalid-field", "a message on the anonymous terminus needs "
                                                         "to = /queues/<stream>")
            return None
        try:
            name = addresses.publish_stream(to)
        except addresses.PublishRefused as exc:
            self._refuse(delivery, exc.condition, exc.description)
            return None
        entry = self.lookup(name) if self.lookup else None
        if entry is None:
            self._refuse(delivery, "amqp:not-found", f"no stream '{name}'")
        return entry

    def flush(self) -> None:
        """Hand this turn's messages to the writer thread, one ``append_batch`` per stream; one
        ``on_durable`` callback settles a whole batch (called once per reactor turn)."""
        batches = self.batches
        if not batches:
            return
        self.batches = {}
        for entry, bodies, values, waiting in batches.values():
            self._flush_one(entry, bodies, values, waiting)

    def _flush_one(self, entry: Any, bodies: list, values: list, waiting: list) -> None:
        callback = None
        key = -1
        if waiting:
            # The callback runs on the writer thread and is dropped there: it must hold no
            # proton object (a wrapper freed on that thread would decref a C object while the
            # event loop uses proton). It holds a number; the loop maps it back.
            key = next(_batch_keys)
            _batches[key] = (self, waiting)
            post = self.post

            def callback(offset: int, error: Exception | None, key: int = key) -> None:
                post(_batch_durable, key, error)
        try:
            if entry.deleted:
                raise StreamGone(f"stream '{entry.name}' was deleted")
            entry.stream.append_batch(bodies, values, on_durable=callback)
        except Exception as exc:  # storage refused (closed, writer failed, disk full)
            condition = (("amqp:resource-deleted", str(exc)) if isinstance(exc, StreamGone)
                         else storage_condition(exc))
            _batches.pop(key, None)
            self.credit.confirmed(len(waiting))
            for delivery in waiting:
                if not self.closed:
                    self.reject(delivery, *condition)
                else:
                    delivery.settle()
            if len(waiting) < len(bodies):
                log.warning("dropped %d pre-settled messages: %s", len(bodies) - len(waiting), exc)
            self.top_up()
            return
        m = entry.metrics
        if m is not None:
            m.published_messages.inc(len(bodies))
            m.published_bytes.inc(sum(map(len, bodies)))

    def _durable(self, deliveries: list, error: Exception | None) -> None:
        """On the event loop: the writer thread says a batch is durable (or failed)."""
        self.credit.confirmed(len(deliveries))
        if self.closed:
            for delivery in deliveries:
                delivery.settle()
            return
        if error is None:
            for delivery in deliveries:
                delivery.update(ACCEPTED)
                delivery.settle()
        else:
            condition = storage_condition(error)
            for delivery in deliveries:
                self.reject(delivery, *condition)
        self.top_up()

    def top_up(self) -> None:
        if self.closed:
            return
        more = self.credit.top_up(self.link.credit)
        if more:
            self.link.flow(more)


def storage_condition(exc: BaseException) -> tuple[str, str]:
    """The AMQP error condition for a storage failure."""
    full = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in full:
            return "amqp:resource-limit-exceeded", f"disk full: {exc}"
        cause = cause.__cause__ or cause.__context__
    # storage wraps the OSError in its own error with the text only
    text = str(exc)
    if any(os.strerror(code) in text for code in full):
        return "amqp:resource-limit-exceeded", f"disk full: {exc}"
    return "amqp:internal-error", f"the message could not be stored: {exc}"
