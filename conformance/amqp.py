"""A small blocking AMQP 1.0 client for the conformance suite, built on Qpid Proton only.

Why a client of its own: the suite must be pointable at any broker (this project's, RabbitMQ
4.2, ...), so it may not use the project's client or internals. Everything here is plain
Proton: `proton.utils.BlockingConnection` drives the reactor, and the suite keeps direct hold
of the raw links so a test can control credit exactly (`flow`, `drain`), read the attach reply
(`echo`: the source filter the broker put in place), and see each delivery's arrival order.

Filters are built as `(key, proton.Described)` entries so a test can choose symbol or ulong
descriptors, key names, order and duplicates freely; the echo is decoded in wire order.
"""

from __future__ import annotations

import collections
import itertools
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import quote

from proton import (Data, Delivery, Described, Endpoint, Link, Message, SSLDomain, symbol,
                    ulong)
from proton.handlers import MessagingHandler
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached

__all__ = [
    "Client", "Consumer", "Publisher", "Response", "Entry", "address", "offset_spec",
    "stream_filter", "match_unfiltered", "properties_filter", "app_properties_filter",
    "sql_filter", "OFFSET_KEY", "FILTER_KEY", "MATCH_UNFILTERED_KEY", "SQL_KEY",
    "PROPERTIES_CODE", "APP_PROPERTIES_CODE", "SQL_CODE", "LinkDetached",
]

OFFSET_KEY = "rabbitmq:stream-offset-spec"
FILTER_KEY = "rabbitmq:stream-filter"
MATCH_UNFILTERED_KEY = "rabbitmq:stream-match-unfiltered"
SQL_KEY = "sql-filter"
PROPERTIES_CODE = 0x173      # amqp:properties-filter (filtex §4.2.4)
APP_PROPERTIES_CODE = 0x174  # amqp:application-properties-filter (filtex §4.2.5)
SQL_CODE = 0x120             # amqp:sql-filter (filtex §6)

Entry = tuple[str, Described]
_names = itertools.count()


def address(stream: str) -> str:
    """The AMQP address of a stream: `/queues/<percent-encoded name>` (RabbitMQ v2 addresses)."""
    return "/queues/" + quote(stream, safe="-._~")


# -- source filter entries -------------------------------------------------------------------

def _described(descriptor: str | int, value: Any) -> Described:
    return Described(ulong(descriptor) if isinstance(descriptor, int) else symbol(descriptor), value)


def offset_spec(value: Any, key: str = OFFSET_KEY, as_symbol: bool = True) -> Entry:
    """`first`/`last`/`next` (a symbol unless `as_symbol` is false), an interval string, an
    integer of any AMQP width, or a timestamp."""
    if as_symbol and value in ("first", "last", "next"):
        value = symbol(value)
    return key, _described("rabbitmq:stream-offset-spec", value)


def stream_filter(values: str | Sequence[str], key: str = FILTER_KEY) -> Entry:
    return key, _described("rabbitmq:stream-filter", values if isinstance(values, str) else list(values))


def match_unfiltered(flag: bool = True, key: str = MATCH_UNFILTERED_KEY) -> Entry:
    return key, _described("rabbitmq:stream-match-unfiltered", flag)


def properties_filter(fields: dict, key: str = "properties-filter", code: bool = False) -> Entry:
    value = {symbol(k): v for k, v in fields.items()}
    return key, _described(PROPERTIES_CODE if code else "amqp:properties-filter", value)


def app_properties_filter(props: dict, key: str = "application-properties-filter",
                          code: bool = False) -> Entry:
    return key, _described(APP_PROPERTIES_CODE if code else "amqp:application-properties-filter", props)


def sql_filter(text: str, key: str = SQL_KEY, code: bool = False) -> Entry:
    return key, _described(SQL_CODE if code else "amqp:sql-filter", text)


class _SourceFilter(LinkOption):
    def __init__(self, entries: Sequence[Entry]):
        self.entries = entries

    def apply(self, link: Link) -> None:
        data = link.source.filter
        data.put_map()
        data.enter()
        for key, value in self.entries:
            data.put_symbol(symbol(key))
            data.put_object(value)
        data.exit()


class _LinkSettings(LinkOption):
    def __init__(self, snd_settle_mode: int | None = None, rcv_settle_mode: int | None = None,
                 properties: dict | None = None, target: str | None = None):
        self.snd, self.rcv, self.properties = snd_settle_mode, rcv_settle_mode, properties
        self.target = target

    def apply(self, link: Link) -> None:
        if self.target is not None:
            link.target.address = self.target
        if self.snd is not None:
            link.snd_settle_mode = self.snd
        if self.rcv is not None:
            link.rcv_settle_mode = self.rcv
        if self.properties is not None:
            link.properties = self.properties


def decode_filter_map(data: Data) -> list[tuple[Any, Any]] | None:
    """A terminus filter field in wire order: None when null/absent, else (key, value) pairs."""
    data.rewind()
    kind = data.next()
    if kind is None or kind == Data.NULL:
        return None
    if kind != Data.MAP:
        raise AssertionError(f"filter field is not a map but type {kind}")
    data.enter()
    pairs = []
    while data.next() is not None:
        key = data.get_object()
        data.next()
        pairs.append((key, data.get_object()))
    data.exit()
    return pairs


# -- links -------------------------------------------------------------------------------------

class _Inbox(MessagingHandler):
    """Collects deliveries in arrival order; never grants credit on its own (prefetch 0)."""

    def __init__(self, conn: "Client"):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.conn = conn
        self.items: list[tuple[int, Message, Delivery]] = []

    def on_message(self, event) -> None:
        self.items.append((next(self.conn.arrivals), event.message, event.delivery))
        self.conn.blocking.container.yield_()

    def on_link_error(self, event) -> None:
        if event.link.state & Endpoint.LOCAL_ACTIVE:
            event.link.close()
            if not self.conn.blocking.closing:
                raise LinkDetached(event.link)


@dataclass
class Received:
    """One delivery: the decoded message, its arrival number on the connection, the offset."""
    message: Message
    arrival: int
    delivery: Delivery

    @property
    def offset(self) -> int | None:
        ann = self.message.annotations or {}
        return ann.get("x-stream-offset")

    @property
    def props(self) -> dict:
        return self.message.properties or {}


class Consumer:
    """A receiving link with manual credit. `echo` is the source filter of the attach reply."""

    def __init__(self, client: "Client", link: Link, inbox: _Inbox):
        self.client, self.link, self.inbox = client, link, inbox

    @property
    def echo(self) -> list[tuple[Any, Any]] | None:
        return decode_filter_map(self.link.remote_source.filter)

    @property
    def echo_keys(self) -> list[str] | None:
        pairs = self.echo
        return None if pairs is None else [str(k) for k, _ in pairs]

    def flow(self, credit: int) -> None:
        self.link.flow(credit)
        self.client.pump()

    def _take(self, settle: int | None = Delivery.ACCEPTED) -> list[Received]:
        out = []
        for arrival, message, delivery in self.inbox.items:
            if settle is not None and not delivery.settled:
                delivery.update(settle)
                delivery.settle()
            out.append(Received(message, arrival, delivery))
        self.inbox.items.clear()
        return out

    def receive(self, count: int, timeout: float = 10.0, settle: int | None = Delivery.ACCEPTED
                ) -> list[Received]:
        """Wait until `count` deliveries have arrived (granting no credit) and return them all."""
        self.client.wait(lambda: len(self.inbox.items) >= count, timeout,
                         f"{count} deliveries on {self.link.name}, have {len(self.inbox.items)}")
        return self._take(settle)

    def take(self, settle: int | None = Delivery.ACCEPTED) -> list[Received]:
        """Whatever has arrived so far."""
        self.client.pump()
        return self._take(settle)

    def drain(self, credit: int = 0, timeout: float = 20.0) -> list[Received]:
        """Add `credit` and drain: wait for the flow that ends the drain; return what arrived."""
        self.link.drain(credit)
        self.client.wait(lambda: not self.link.draining() and self.link.credit == 0, timeout,
                         f"drain to finish on {self.link.name}")
        self.link.drain_mode = False
        return self._take()

    def read_all(self, credit: int = 100_000, timeout: float = 30.0) -> list[Received]:
        """Everything the link offers up to the end of the stream (drain with plenty of credit)."""
        return self.drain(credit, timeout)

    def close(self) -> None:
        try:
            self.link.close()
            self.client.wait(lambda: not (self.link.state & Endpoint.REMOTE_ACTIVE), 10, "detach")
        except LinkDetached:
            pass


class Publisher:
    """A sending link; `send` pipelines messages and returns each remote outcome in order."""

    def __init__(self, client: "Client", link: Link):
        self.client, self.link = client, link

    def send(self, messages: Iterable[Message], timeout: float = 30.0, window: int = 500
             ) -> list[Delivery]:
        settled_mode = self.link.snd_settle_mode == Link.SND_SETTLED
        pending: list[Delivery] = []
        in_flight: collections.deque[Delivery] = collections.deque()
        for message in messages:
            while in_flight and in_flight[0].settled:
                in_flight.popleft()
            if len(in_flight) >= window:
                self.client.wait(lambda: in_flight[0].settled, timeout, "publish window")
            self.client.wait(lambda: self.link.credit > 0, timeout, "credit to publish")
            delivery = self.link.send(message)
            pending.append(delivery)
            if settled_mode:
                delivery.settle()
            else:
                in_flight.append(delivery)
        if settled_mode:
            self.client.wait(lambda: self.link.queued == 0, timeout, "pre-settled sends to leave")
        else:
            self.client.wait(lambda: all(d.settled for d in pending), timeout,
                             "publish outcomes")
            for d in pending:
                d.settle()
        return pending

    def send_each(self, messages: Iterable[Message], timeout: float = 30.0) -> list[Delivery]:
        """One at a time, each waiting for its outcome: each message lands in a chunk of its own."""
        out = []
        for m in messages:
            out.extend(self.send([m], timeout))
        return out

    def close(self) -> None:
        try:
            self.link.close()
            self.client.wait(lambda: not (self.link.state & Endpoint.REMOTE_ACTIVE), 10, "detach")
        except LinkDetached:
            pass


@dataclass
class Response:
    status: int
    body: Any
    message: Message


class Client:
    """One connection. All waits raise `proton.Timeout` after their timeout."""

    def __init__(self, url: str, user: str | None = None, password: str | None = None,
                 ssl_domain: SSLDomain | None = None, timeout: float = 20.0):
        kwargs: dict[str, Any] = {}
        if user:
            kwargs.update(user=user, password=password or "", allowed_mechs="PLAIN")
        else:
            kwargs.update(allowed_mechs="ANONYMOUS")
        self.blocking = BlockingConnection(url, timeout=timeout, ssl_domain=ssl_domain,
                                           sasl_enabled=True, **kwargs)
        self.arrivals = itertools.count()
        self._management: tuple[Link, Link, _Inbox] | None = None

    @property
    def connection(self):
        return self.blocking.conn

    def wait(self, condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
        self.blocking.wait(condition, timeout=timeout, msg=what)

    def pump(self, seconds: float = 0.0) -> None:
        """Process I/O for a moment without waiting for anything in particular."""
        deadline = time.monotonic() + seconds
        self.blocking.container.timeout = min(seconds, 0.05) or 0.0
        passes = 0
        try:
            # at least two passes: proton's Python reactor does socket I/O on the
            # REACTOR_QUIESCED event that a first pass may only queue
            while passes < 2 or time.monotonic() < deadline:
                self.blocking.container.process()
                passes += 1
        finally:
            self.blocking.container.timeout = self.blocking.timeout

    # -- links --
    def consumer(self, address: str, filters: Sequence[Entry] | None = None, credit: int = 0,
                 name: str | None = None, properties: dict | None = None,
                 settled: bool = False) -> Consumer:
        """Attach a receiver (raises `LinkDetached` when the broker refuses it); `properties`:
        the attach's link properties; `settled`: ask for pre-settled deliveries."""
        inbox = _Inbox(self)
        mode = Link.SND_SETTLED if settled else Link.SND_UNSETTLED
        options: list[LinkOption] = [_LinkSettings(mode, Link.RCV_FIRST, properties)]
        if filters is not None:
            options.append(_SourceFilter(filters))
        name = name or f"conformance-receiver-{next(_names)}"
        link = self.blocking.container.create_receiver(self.connection, address, name=name,
                                                       handler=inbox, options=options)
        self.wait(lambda: link.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED),
                  10, f"attach reply for {address}")
        if link.remote_source.address != address:
            # refused: null source, then a detach with the error (wait for it)
            self.wait(lambda: link.state & Endpoint.REMOTE_CLOSED, 10, "detach after refusal")
        consumer = Consumer(self, link, inbox)
        if credit:
            consumer.flow(credit)
        return consumer

    def publisher(self, address: str, settled: bool = False, name: str | None = None,
                  properties: dict | None = None) -> Publisher:
        name = name or f"conformance-sender-{next(_names)}"
        mode = Link.SND_SETTLED if settled else Link.SND_UNSETTLED
        link = self.blocking.container.create_sender(
            self.connection, address, name=name, options=[_LinkSettings(mode, Link.RCV_FIRST, properties)])
        self.wait(lambda: link.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED),
                  10, f"attach reply for {address}")
        if link.remote_target.address != address:
            self.wait(lambda: link.state & Endpoint.REMOTE_CLOSED, 10, "detach after refusal")
        return Publisher(self, link)

    def publish(self, stream: str, messages: Iterable[Message], each: bool = False) -> list[Delivery]:
        """Publish to a stream on a fresh link and return the deliveries with their outcomes."""
        pub = self.publisher(address(stream))
        try:
            return pub.send_each(messages) if each else pub.send(messages)
        finally:
            pub.close()

    def read(self, stream: str, filters: Sequence[Entry] | None = None) -> list[Received]:
        """Attach with `filters` (offset `first` unless one is given), read to the end, detach."""
        filters = list(filters or [])
        if not any(v.descriptor == symbol("rabbitmq:stream-offset-spec") for _, v in filters):
            filters.insert(0, offset_spec("first"))
        c = self.consumer(address(stream), filters)
        try:
            return c.read_all()
        finally:
            c.close()

    # -- management node --
    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Response:
        """An HTTP-over-AMQP request to `/management` (RabbitMQ's management v2 protocol)."""
        if self._management is None:
            props = {symbol("paired"): True}
            name = f"management-link-pair-{next(_names)}"
            sender = self.blocking.container.create_sender(
                self.connection, "/management", name=name,
                options=[_LinkSettings(Link.SND_SETTLED, Link.RCV_FIRST, props)])
            inbox = _Inbox(self)
            receiver = self.blocking.container.create_receiver(
                self.connection, "/management", name=name, handler=inbox,
                options=[_LinkSettings(Link.SND_SETTLED, Link.RCV_FIRST, props, "/management")])
            self.wait(lambda: sender.state & Endpoint.REMOTE_ACTIVE and receiver.state & Endpoint.REMOTE_ACTIVE,
                      timeout, "management links")
            receiver.flow(100)
            self._management = (sender, receiver, inbox)
        sender, receiver, inbox = self._management
        msg_id = str(uuid.uuid4())
        self.wait(lambda: sender.credit > 0, timeout, "management credit")
        sender.send(Message(id=msg_id, address=path, subject=method, reply_to="$me", body=body,
                            inferred=False, durable=False))
        self.wait(lambda: any(m.correlation_id == msg_id for _, m, _ in inbox.items), timeout,
                  f"management response to {method} {path}")
        found = next(item for item in inbox.items if item[1].correlation_id == msg_id)
        inbox.items.remove(found)
        _, reply, delivery = found
        delivery.settle()
        receiver.flow(1)
        return Response(int(reply.subject), reply.body, reply)

    def declare(self, stream: str, arguments: dict | None = None, **fields: Any) -> Response:
        args = {"x-queue-type": "stream", **(arguments or {})}
        body = {"durable": True, "exclusive": False, "auto_delete": False, "arguments": args}
        body.update(fields)
        return self.request("PUT", address(stream), body)

    def delete(self, stream: str) -> Response:
        return self.request("DELETE", address(stream))

    def info(self, stream: str) -> Response:
        return self.request("GET", address(stream))

    def close(self) -> None:
        try:
            self.blocking.close()
        except Exception:  # noqa: BLE001 - closing after a test failure must not hide it
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
