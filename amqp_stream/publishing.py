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
                 post: Callable[..., None], mark_dirty: Callable[["Publisher"], None]):
        self.link = link
        self.entry = entry  # streams.StreamEntry, None once the stream is deleted
        self.credit = credit
        self.max_message_size = max_message_size
        self.post = post  # thread-safe: run fn(*args) on the event loop
        self.mark_dirty = mark_dirty  # ask for ``flush`` at the end of this reactor turn
        self.closed = False
        self.bodies: list[bytes] = []
        self.values: list[str | None] = []
        self.waiting: list[Any] = []  # unsettled deliveries of the batch being formed

    def start(self) -> None:
        self.link.flow(self.credit.initial())

    def reject(self, delivery: Any, condition: str, description: str) -> None:
        delivery.local.condition = Condition(condition, description)
        delivery.update(REJECTED)
        delivery.settle()
        log.info("rejected a message on %r: %s %s", self.entry.name if self.entry else None,
                 condition, description)

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
        entry = self.entry
        if entry is None:
            if delivery is not None:
                self.credit.confirmed()
                self.reject(delivery, "amqp:resource-deleted", "the stream was deleted")
            return
        try:
            if not data:
                raise MessageFormatError("empty transfer")
            message_bytes.split_sections(data)  # the framing of every section is sound
            body = message_bytes.strip_delivery_annotations(data)
        except (MessageFormatError, ValueError, IndexError) as exc:
            if delivery is not None:
                self.credit.confirmed()
                self.reject(delivery, "amqp:decode-error", f"not an AMQP 1.0 message: {exc}")
            return
        try:
            value = message_bytes.filter_value(body)
        except (MessageFormatError, ValueError) as exc:
            if delivery is not None:
                self.credit.confirmed()
                self.reject(delivery, "amqp:invalid-field",
                            f"x-stream-filter-value must be a string: {exc}")
            return
        if not self.bodies:
            self.mark_dirty(self)
        self.bodies.append(body)
        self.values.append(value)
        if delivery is not None:
            self.waiting.append(delivery)

    def flush(self) -> None:
        """Hand this turn's messages to the writer thread in one ``append_batch``; one
        ``on_durable`` callback settles them all (called once per reactor turn)."""
        bodies, values, waiting = self.bodies, self.values, self.waiting
        if not bodies:
            return
        self.bodies, self.values, self.waiting = [], [], []
        entry = self.entry
        callback = None
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
            if entry is None:
                raise StreamGone("the stream was deleted")
            entry.stream.append_batch(bodies, values, on_durable=callback)
        except Exception as exc:  # storage refused (closed, writer failed, disk full)
            condition = (("amqp:resource-deleted", str(exc)) if isinstance(exc, StreamGone)
                         else storage_condition(exc))
            if waiting:
                _batches.pop(key, None)
            self.credit.confirmed(len(waiting))
            for delivery in waiting:
                if not self.closed:
                    self.reject(delivery, *condition)
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
        if self.closed or self.entry is None:
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
