"""Link plumbing shared by management, publishers and consumers: addresses, link options, the
receiving handler that decodes and settles deliveries.

Strategy: a link's handler only records (decoded messages, the detach condition); the blocking
caller that drives the event loop looks at the record and raises. Nothing here blocks.
"""

from __future__ import annotations

import urllib.parse
from collections import deque
from typing import Any

from proton import Delivery, Endpoint, Handler, Link, Message, ProtonException
from proton.reactor import LinkOption

from amqp_stream.client.errors import ConsumerError


def path_segment(text: str) -> str:
    """``text`` percent-encoded as one path segment (``[A-Za-z0-9-._~]`` kept)."""
    return urllib.parse.quote(text, safe="")


def queue_address(stream: str) -> str:
    """``/queues/<name>`` with the name percent-encoded."""
    return "/queues/" + path_segment(stream)


def exchange_address(exchange: str, routing_key: str = "") -> str:
    """``/exchanges/<x>/<key>``, or ``/exchanges/<x>`` for the empty key (RabbitMQ's v2
    addresses), each part percent-encoded."""
    address = "/exchanges/" + path_segment(exchange)
    return address + "/" + path_segment(routing_key) if routing_key else address


def _condition_text(cond: Any) -> str:
    if cond is None:
        return "no error condition"
    return f"{cond.name}: {cond.description}" if getattr(cond, "description", None) else str(cond.name)


class _LinkOpts(LinkOption):
    """Settle modes, link properties and (for consumers) the source filter set."""

    def __init__(self, *, snd_settle: int | None = None, properties: dict | None = None,
                 target: str | None = None, source_filter: dict | None = None):
        self.snd_settle, self.properties = snd_settle, properties
        self.target, self.source_filter = target, source_filter

    def apply(self, link: Link) -> None:
        if self.snd_settle is not None:
            link.snd_settle_mode = self.snd_settle
        link.rcv_settle_mode = Link.RCV_FIRST
        if self.properties:
            link.properties = self.properties
        if self.target is not None:
            link.target.address = self.target
        if self.source_filter:
            link.source.filter.put_dict(self.source_filter)


class _Collector(Handler):
    """Link handler of a receiver: decodes and settles each complete delivery (or leaves that to
    the caller), notes errors."""

    def __init__(self, client: Any, settle: bool = True):
        super().__init__()
        self.client = client
        self.settle = settle  # False: the caller accepts each delivery once it is done with it
        self.items: deque[tuple[Message, Delivery]] = deque()
        self.error: str | None = None
        self.condition: str | None = None

    def on_delivery(self, event: Any) -> None:
        d = event.delivery
        link = d.link
        if not link.is_receiver or not d.readable or d.partial:
            return
        data = link.recv(d.pending)
        link.advance()
        msg = Message()
        try:
            msg.decode(data)
        except ProtonException as exc:
            d.update(Delivery.REJECTED)
            d.settle()
            self.error = f"undecodable message: {exc}"
            return
        if self.settle or d.settled:
            if not d.settled:
                d.update(Delivery.ACCEPTED)
            d.settle()
        self.items.append((msg, d))

    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        cond = link.remote_condition
        self.condition = getattr(cond, "name", None)
        self.error = f"the broker detached {link.name}: {_condition_text(cond)}"
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def raise_error(self) -> None:
        if self.error and not self.items:
            raise ConsumerError(self.error, self.condition)
