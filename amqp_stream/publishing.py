"""A publisher link (our receiver): raw transfer bytes in, stored records and outcomes out.

Strategy: no ``proton.Message`` on this path. The transfer's bytes are read as they arrive
(``link.recv``), delivery annotations are cut out (``sqlfilter.message``), the filter value is
read from the message annotations, and the bytes go to the stream's writer thread
(``stream.append``). The writer's ``on_durable`` callback runs on its own thread, so it only
posts to the broker's mailbox; the settlement (``accepted``, or ``rejected`` with a condition)
happens back on the event loop. Credit follows ``amqp_stream.credit.PublisherCredit``.
Pre-settled transfers are appended and forgotten.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Any, Callable

from proton import Condition, Delivery

from amqp_stream.credit import PublisherCredit
from sqlfilter import MessageFormatError
from sqlfilter import message as message_bytes

__all__ = ["Publisher"]

log = logging.getLogger(__name__)

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED


class Publisher:
    def __init__(self, link: Any, entry: Any, credit: PublisherCredit, max_message_size: int,
                 post: Callable[..., None], metrics: Any):
        self.link = link
        self.entry = entry  # streams.StreamEntry, None once the stream is deleted
        self.credit = credit
        self.max_message_size = max_message_size
        self.post = post  # thread-safe: run fn(*args) on the event loop
        self.metrics = metrics
        self.closed = False

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
            self._append(None, data)
            delivery.settle()
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
        callback = None
        if delivery is not None:
            post = self.post
            done = self._durable

            def callback(offset: int, error: Exception | None, delivery=delivery) -> None:
                post(done, delivery, error)
        try:
            entry.stream.append(body, value, on_durable=callback)
        except Exception as exc:  # storage refused (closed, writer failed, disk full)
            if delivery is not None:
                self.credit.confirmed()
                self.reject(delivery, *storage_condition(exc))
            else:
                log.warning("dropped a pre-settled message for %r: %s", entry.name, exc)
            return
        m = entry.metrics
        m.published_messages.inc()
        m.published_bytes.inc(len(body))

    def _durable(self, delivery: Any, error: Exception | None) -> None:
        """On the event loop: the writer thread says the message is durable (or failed)."""
        self.credit.confirmed()
        if self.closed:
            delivery.settle()
            return
        if error is None:
            delivery.update(ACCEPTED)
            delivery.settle()
        else:
            self.reject(delivery, *storage_condition(error))
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
