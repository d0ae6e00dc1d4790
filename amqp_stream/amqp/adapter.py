"""The AMQP 1.0 adapter: proton's engine events in, core calls and link objects out.

Strategy: every AMQP connection's proton ``Connection`` reports to one shared ``Collector``;
``process`` drains it after any input, timer or mailbox batch. Events are dispatched on their C
type through a table, and most are dropped without building a Python ``Event``: deliveries
(the bulk of a busy broker's events) go to ``_delivery`` as C pointers, ``PN_TRANSPORT`` only
marks its connection for writing, and only the endpoint events this broker acts on get proton
wrappers. Then every marked connection writes what it has.

State lives in objects of ours keyed by C pointers (``ConnState`` by connection, link objects
by link): proton builds a new Python wrapper for every event, so attributes set on a wrapper
(kept in the C object's record, a reference cycle proton's objects never release) and identity
checks between wrappers are both wrong.

Failure isolation: an exception while handling one event closes that event's connection with
``amqp:internal-error``; everyone else is served.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from typing import Any, Callable

from cproton_ffi import ffi, lib
from proton import (Collector, Condition, Connection, Data, Delivery, Endpoint, Link, Message, Session,
                    Terminus, Transport, symbol)

from amqp_stream import __version__
from amqp_stream.amqp import addresses, management
from amqp_stream.amqp.connection import AmqpConnection
from amqp_stream.amqp.consuming import Consumer
from amqp_stream.amqp.credit import PublisherCredit
from amqp_stream.amqp.tracking import StorePolicy, consumer_name, publisher_reference
from amqp_stream.amqp.publishing import Publisher, check_exchange_target
from amqp_stream.amqp.source_filters import FILTER_CAPABILITIES, echo_map, parse_source_filters
from amqp_stream.amqp.tags import tag_number
from amqp_stream.core import Core
from amqp_stream.errors import BadRequest, BrokerError, DecodeError, NotImplementedByBroker, ShuttingDown
from amqp_stream.loop import EventLoop
from amqp_stream.memory import TrimLater
from amqp_stream.users import READ, WRITE

__all__ = ["Adapter", "SERVER_PROPERTIES", "read_filter_entries", "vhost_of"]

log = logging.getLogger("amqp_stream.amqp")

# What RabbitMQ's official clients check before they talk to a broker (see amqp-interface.md).
RABBITMQ_VERSION = "4.2.0"
SERVER_PROPERTIES = {
    symbol("product"): "RabbitMQ",
    symbol("version"): RABBITMQ_VERSION,
    symbol("platform"): f"Python {sys.version.split()[0]} (amqp-stream {__version__})",
    symbol("amqp-stream-version"): __version__,
}
CONNECTION_CAPABILITIES = [symbol("LINK_PAIR_V1_0"), symbol("ANONYMOUS-RELAY"), *FILTER_CAPABILITIES]
DEFAULT_EXCHANGE = "amq.default"  # the default exchange's name in permission checks
MANAGEMENT_CREDIT = 64
MAX_MANAGEMENT_REQUEST = 1 << 20
LOCAL_ACTIVE = Endpoint.LOCAL_ACTIVE
LOCAL_CLOSED = Endpoint.LOCAL_CLOSED

_peek = lib.pn_collector_peek
_pop = lib.pn_collector_pop
_type = lib.pn_event_type
_ev_delivery = lib.pn_event_delivery
_ev_transport = lib.pn_event_transport
_ev_connection = lib.pn_event_connection
_ev_link = lib.pn_event_link
_ev_session = lib.pn_event_session
PN_DELIVERY = lib.PN_DELIVERY
PN_TRANSPORT = lib.PN_TRANSPORT


def vhost_of(hostname: str | None) -> str:
    """The virtual host named by the open frame's ``hostname`` (``vhost:<name>``, else ``/``)."""
    if hostname and hostname.startswith("vhost:"):
        return hostname[len("vhost:"):] or "/"
    return "/"


def read_filter_entries(data: Data) -> list[tuple[Any, Any]] | None:
    """The (key, value) pairs of a source's filter field in wire order; None when absent.
    A filter field that is not a map comes back as one entry with a ``None`` key."""
    data.rewind()
    if data.next() is None:
        return None
    if data.type() != Data.MAP:
        return [(None, data.get_object())]
    count = data.get_map()
    data.enter()
    entries = []
    try:
        for _ in range(count // 2):
            data.next()
            key = data.get_object()
            data.next()
            value = data.get_object()
            entries.append((key, value))
    finally:
        data.exit()
    return entries


def _text(get: Callable[[], Any]) -> str:
    """A peer-supplied name for a log line, read by ``get``: never fails (proton raises on
    invalid UTF-8 in names and container ids)."""
    try:
        return repr(get())
    except Exception:
        return "<not UTF-8>"


def _name_of(link: Any) -> str:
    """A link's name for a log line (proton raises on names that are not UTF-8)."""
    try:
        return repr(link.name)
    except Exception:
        return "<not UTF-8>"


def _link_name(ptr: Any) -> bytes:
    """A link's name as the bytes on the wire (any bytes: never fails)."""
    name = lib.pn_link_name(ptr)
    return ffi.string(name) if name else b""


class ManagementLink:
    """One side of a ``/management`` link pair (ours: requests come in on a receiver, replies
    go out on a sender)."""

    __slots__ = ("link", "name", "session", "sender", "closed", "partial")

    def __init__(self, link: Any, session: Any, sender: bool):
        self.link = link
        self.name = _link_name(link._impl)
        self.session = session  # the session's C pointer
        self.sender = sender
        self.closed = False
        self.partial: dict[Any, bytearray] = {}  # delivery pointer -> request bytes so far

    def end(self, error: Exception) -> None:
        self.closed = True


class ConnState:
    """What this broker knows of one AMQP connection."""

    __slots__ = ("io", "name", "opened", "links", "blocked", "user")

    def __init__(self, io: AmqpConnection):
        self.io = io
        self.name = io.peer
        self.opened = False
        self.user: str | None = None  # whose permissions apply; None: ANONYMOUS (all allowed)
        self.links: dict[Any, Any] = {}  # link pointer -> Publisher | Consumer | ManagementLink
        self.blocked: set[Consumer] = set()  # consumers waiting for the socket to take more


class Adapter:
    def __init__(self, core: Core, eloop: EventLoop, security: Any, container_id: str,
                 idle_timeout: float):
        self.core = core
        self.eloop = eloop
        self.config = core.config
        self.security = security
        self.store = getattr(security, "store", None)  # users and permissions (amqp_stream.users)
        self.container_id = container_id
        self.idle_timeout = idle_timeout
        self.collector = Collector()
        self._collector = self.collector._impl
        self.states: dict[Any, ConnState] = {}  # connection pointer -> state
        self.by_transport: dict[Any, AmqpConnection] = {}
        self.links: dict[Any, Any] = {}  # link pointer -> link object, every connection's
        self.to_write: set[AmqpConnection] = set()
        self.processing = False
        self.trim = TrimLater(lambda delay, fn: eloop.loop.call_later(delay, fn))
        self.ssl_domain = getattr(security, "ssl_domain", None)
        self.store_policy = StorePolicy(self.config.offset_store_every,
                                        self.config.offset_store_interval_ms,
                                        lambda delay, fn: eloop.loop.call_later(delay, fn))
        self._handlers: dict[int, Callable[[Any], None]] = {
            lib.PN_CONNECTION_REMOTE_OPEN: self._connection_remote_open,
            lib.PN_CONNECTION_REMOTE_CLOSE: self._connection_remote_close,
            lib.PN_SESSION_REMOTE_OPEN: self._session_remote_open,
            lib.PN_SESSION_REMOTE_CLOSE: self._session_remote_close,
            lib.PN_LINK_REMOTE_OPEN: self._link_remote_open,
            lib.PN_LINK_REMOTE_CLOSE: self._link_remote_close,
            lib.PN_LINK_REMOTE_DETACH: self._link_remote_close,
            lib.PN_LINK_FLOW: self._link_flow,
            lib.PN_TRANSPORT_ERROR: self._transport_error,
            lib.PN_TRANSPORT_CLOSED: self._transport_closed,
        }

    # -- connections -----------------------------------------------------------------------
    def accept(self, sock: socket.socket, peer: str) -> AmqpConnection:
        """The listener's factory: a new AMQP connection on ``sock``."""
        io = AmqpConnection(self.eloop, sock, peer, self)
        if self.ssl_domain is not None:
            io.set_ssl(self.ssl_domain)
        return io

    def configure(self, transport: Transport) -> None:
        if self.security is not None:
            self.security.configure(transport)
        else:
            transport.sasl().allowed_mechs("ANONYMOUS")
        if self.idle_timeout > 0:
            transport.idle_timeout = self.idle_timeout

    def added(self, io: AmqpConnection) -> None:
        self.by_transport[io.timp] = io
        self.states[io.cimp] = ConnState(io)

    def removed(self, io: AmqpConnection) -> None:
        """The socket is closed: forget everything of this connection."""
        self.by_transport.pop(io.timp, None)
        self.to_write.discard(io)
        state = self.states.pop(io.cimp, None)
        if state is not None:
            self.trim.request()  # what its engine held goes back to the system, not only to malloc
            self._forget_connection(state)

    def wants_write(self, io: AmqpConnection) -> None:
        self.to_write.add(io)

    def drained(self, io: AmqpConnection) -> None:
        """``io``'s socket took everything: blocked consumers go on."""
        state = self.states.get(io.cimp)
        if state is not None and state.blocked:
            self._unblock(state)

    def failed(self, io: AmqpConnection, exc: Exception) -> None:
        """A bug while handling ``io``: close it with ``amqp:internal-error``; if even that
        fails, drop the socket."""
        self.failed_later(io, exc)
        self.process()

    def close_all(self, condition: str, description: str) -> None:
        for state in list(self.states.values()):
            self._close(state.io, condition, description)
        self.process()

    def close_one(self, io: AmqpConnection, condition: str, description: str) -> None:
        """Close ``io`` with an error condition (the HTTP API's DELETE)."""
        self._close(io, condition, description)
        self.process()

    def _close(self, io: AmqpConnection, condition: str, description: str) -> None:
        conn = io.connection
        if conn is not None and not conn.state & LOCAL_CLOSED:
            try:
                conn.condition = Condition(condition, description)
                conn.close()
            except Exception:
                log.exception("closing connection %s", io.peer)
        self.to_write.add(io)

    def dump_state(self) -> None:
        """Every link's flow-control state, for operators chasing a stall (SIGUSR1)."""
        for state in self.states.values():
            for obj in state.links.values():
                if isinstance(obj, Publisher):
                    log.warning("state: %s publisher %s credit=%d unconfirmed=%d closed=%s",
                                state.name, _name_of(obj.link), obj.link.credit,
                                obj.credit.unconfirmed, obj.closed)
                elif isinstance(obj, Consumer):
                    log.warning("state: %s consumer %s credit=%d waiting=%s scheduled=%s "
                                "blocked=%s", state.name, _name_of(obj.link),
                                obj.link.credit, obj.waiting, obj.scheduled, obj in state.blocked)

    # -- the event pump --------------------------------------------------------------------
    def process(self) -> None:
        """Handle every collected event, then write every connection that has output."""
        if self.processing:
            return
        self.processing = True
        try:
            self._drain()
            to_write = self.to_write
            while to_write:
                io = to_write.pop()
                io.write()
                if not io.writing and not io.closed:
                    state = self.states.get(io.cimp)
                    if state is not None and state.blocked:
                        self._unblock(state)
                if to_write or _peek(self._collector):
                    self._drain()
        finally:
            self.processing = False

    def _drain(self) -> None:
        col = self._collector
        handlers = self._handlers
        by_transport = self.by_transport
        to_write = self.to_write
        while True:
            event = _peek(col)
            if not event:
                return
            kind = _type(event)
            try:
                if kind == PN_DELIVERY:
                    self._delivery(_ev_delivery(event))
                elif kind == PN_TRANSPORT:
                    io = by_transport.get(_ev_transport(event))
                    if io is not None:
                        to_write.add(io)
                else:
                    handler = handlers.get(kind)
                    if handler is not None:
                        handler(event)
            except Exception as exc:
                log.exception("error handling a proton event (type %d)", kind)
                io = by_transport.get(_ev_transport(event))
                if io is not None:
                    self.failed_later(io, exc)
            finally:
                _pop(col)

    def failed_later(self, io: AmqpConnection, exc: Exception) -> None:
        """``failed`` without writing now (from inside ``process``)."""
        conn = io.connection
        try:
            if conn is not None and not conn.state & LOCAL_CLOSED:
                conn.condition = Condition("amqp:internal-error", f"{type(exc).__name__}: {exc}")
                conn.close()
            self.to_write.add(io)
        except Exception:
            log.exception("closing connection %s after an error", io.peer)
            io.close()

    def _state(self, event: Any) -> ConnState | None:
        return self.states.get(_ev_connection(event))

    # -- connection and session events -----------------------------------------------------
    def _connection_remote_open(self, event: Any) -> None:
        state = self._state(event)
        conn = Connection.wrap(_ev_connection(event))
        if state is None or conn.state & LOCAL_ACTIVE:
            return
        state.io.handshake_done()
        conn.container = self.container_id
        conn.properties = SERVER_PROPERTIES
        conn.offered_capabilities = CONNECTION_CAPABILITIES
        try:
            vhost = vhost_of(conn.remote_hostname)
        except UnicodeDecodeError:
            vhost = "<not UTF-8>"
        try:
            transport = Transport.wrap(_ev_transport(event))
            user = transport.user if transport is not None else None
            mech = transport.sasl().mech if transport is not None else None
        except Exception:
            user = mech = None
        # a client that skipped SASL got in only where ANONYMOUS is offered: it is anonymous
        state.user = user if mech and mech != "ANONYMOUS" else None
        if vhost != "/":
            log.info("connection %s refused: vhost %s does not exist (this broker has only '/')",
                     state.name, _text(lambda: vhost))
            self._refuse_connection(state.io)
            return
        if self.store is not None and not self.store.may_use_vhost(state.user, vhost):
            log.info("connection %s refused: user %s has no permissions on vhost %s",
                     state.name, _text(lambda: user), _text(lambda: vhost))
            self._refuse_connection(state.io)
            return
        conn.open()
        if self.core.stopping:
            conn.condition = Condition(ShuttingDown.condition, "broker shutting down")
            conn.close()
            return
        state.opened = True
        self.core.metrics.connection_opened()
        log.info("connection %s opened: container %s, user %s, hostname %s", state.name,
                 _text(lambda: conn.remote_container), _text(lambda: user),
                 _text(lambda: conn.remote_hostname))

    def _refuse_connection(self, io: AmqpConnection) -> None:
        """Refuse a connection at its open as RabbitMQ 4.x does for a vhost it does not have
        (``rabbit_amqp_reader``: an error before the connection is running is only logged):
        no open and no close frame, the socket closed after ``auth_failure_delay`` seconds
        (RabbitMQ's silent close delay), unread meanwhile. An open followed by a close is what
        the official clients take for a dropped connection and reconnect to, again and again;
        a socket closed during the handshake is an error they raise at once."""
        io.pause_reading()
        self.eloop.loop.call_later(max(0.0, self.config.auth_failure_delay), io.close)

    def _connection_remote_close(self, event: Any) -> None:
        state = self._state(event)
        if state is not None:
            self._forget_links(state)
        conn = Connection.wrap(_ev_connection(event))
        if not conn.state & LOCAL_CLOSED:
            conn.close()

    def _session_remote_open(self, event: Any) -> None:
        session = Session.wrap(_ev_session(event))
        if not session.state & LOCAL_ACTIVE:
            session.open()

    def _session_remote_close(self, event: Any) -> None:
        state = self._state(event)
        session_ptr = _ev_session(event)
        if state is not None:
            for ptr in list(state.links):
                if lib.pn_link_session(ptr) == session_ptr:
                    self._forget_link(state, ptr)
        session = Session.wrap(session_ptr)
        if not session.state & LOCAL_CLOSED:
            session.close()

    def _transport_error(self, event: Any) -> None:
        transport = Transport.wrap(_ev_transport(event))
        cond = transport.condition if transport is not None else None
        io = self.by_transport.get(_ev_transport(event))
        # a connection that never sent a byte (a port probe) is not worth an INFO line
        level = logging.INFO if io is None or io.bytes_in else logging.DEBUG
        log.log(level, "connection %s: transport error: %s", io.peer if io else "?",
                f"{cond.name}: {cond.description}" if cond else "?")

    def _transport_closed(self, event: Any) -> None:
        io = self.by_transport.get(_ev_transport(event))
        if io is not None:
            state = self.states.get(io.cimp)
            if state is not None:
                self._forget_links(state)
            self.to_write.add(io)  # its write() sees the closed head and closes the socket

    def _forget_connection(self, state: ConnState) -> None:
        self._forget_links(state)
        if state.opened:
            state.opened = False
            self.core.metrics.connection_closed()
            log.info("connection %s closed", state.name)

    def _forget_links(self, state: ConnState) -> None:
        for ptr in list(state.links):
            self._forget_link(state, ptr)
        state.blocked.clear()

    # -- links -----------------------------------------------------------------------------
    def _link_remote_open(self, event: Any) -> None:
        state = self._state(event)
        link = Link.wrap(_ev_link(event))
        if link.state & LOCAL_ACTIVE:
            return
        if state is None or self.core.stopping:
            self._refuse(link, ShuttingDown("broker shutting down"))
            return
        if not link.is_receiver:
            # a sending link (a consumer, a management reply link) sends as its receiver asked
            # (RabbitMQ does the same): one that asked for pre-settled deliveries never settles
            # them, and unsettled ones would stay in the engine until the link ends
            link.snd_settle_mode = link.remote_snd_settle_mode
        try:
            if link.is_receiver:
                self._attach_publisher(state, link)
            else:
                self._attach_consumer(state, link)
        except BrokerError as exc:
            self._refuse(link, exc)

    def _refuse(self, link: Any, error: BrokerError) -> None:
        """Attach with a null source (consumer) or target (publisher), then detach with the
        error's condition."""
        if link.is_receiver:
            link.source.copy(link.remote_source)
            link.target.type = Terminus.UNSPECIFIED
        else:
            link.target.copy(link.remote_target)
            link.source.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = Condition(error.condition, error.description)
        link.close()
        log.info("link %s refused: %s %s", _name_of(link), error.condition, error.description)

    def allow(self, state: ConnState, what: str, resource: str) -> None:
        """``Forbidden`` (``amqp:unauthorized-access``, 403 on the management node) unless the
        connection's user may ``what`` (configure/write/read) the stream or exchange
        ``resource`` (``rabbit_amqp_session:check_resource_access``)."""
        if self.store is not None:
            self.store.check(state.user, "/", what, resource)

    def _register(self, state: ConnState, link: Any, obj: Any) -> None:
        ptr = link._impl
        state.links[ptr] = obj
        self.links[ptr] = obj

    def _attach_management(self, state: ConnState, link: Any) -> None:
        """One side of a ``/management`` link pair: attached as asked."""
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()
        self._register(state, link, ManagementLink(link, lib.pn_link_session(link._impl),
                                                   sender=not link.is_receiver))

    def _attach_publisher(self, state: ConnState, link: Any) -> None:
        address = link.remote_target.address
        if address == addresses.MANAGEMENT:
            self._attach_management(state, link)
            link.flow(MANAGEMENT_CREDIT)
            return
        reference, stream_address = publisher_reference(link.remote_properties, address)
        entry = target = None
        if address is not None:  # None: the anonymous terminus, each message's ``to`` decides
            target = addresses.publish_target(stream_address)
            if target.stream is not None:
                entry = self.core.publish_entry(target.stream)
                target = None
            else:
                check_exchange_target(self.core.definitions, target.exchange)
        # RabbitMQ checks write on the exchange a message goes through: amq.default for
        # /queues/<q> and the anonymous terminus (whose messages' ``to`` naming an exchange are
        # checked one by one: ``may_write``), the exchange itself for /exchanges/<x>
        self.allow(state, WRITE, target.exchange if target is not None else DEFAULT_EXCHANGE)
        link.target.copy(link.remote_target)
        link.source.copy(link.remote_source)
        link.max_message_size = self.config.max_message_size
        link.open()
        credit = PublisherCredit(self.config.publisher_credit, self.config.max_unconfirmed,
                                 self.config.max_unconfirmed_bytes, self.core.publish_budget)
        publisher = Publisher(link, entry, credit, self.config.max_message_size,
                              self.core.mailbox.post, self.core.mark_dirty, lookup=self.core.publish_lookup,
                              end=lambda error: self._end_link(state, link._impl, error),
                              throttle=state.io.throttle,
                              reference=reference, target=target,
                              definitions=self.core.definitions,
                              may_write=lambda exchange: self.allow(state, WRITE, exchange))
        publisher.on_unroutable = self.core.metrics.unroutable
        self._register(state, link, publisher)
        self.core.attach_publisher(entry, publisher)
        publisher.start()
        log.info("publisher attached: %s link %s -> %s%s", state.name, _name_of(link),
                 f"stream {entry.name!r}" if entry else (
                     f"exchange {target.exchange!r}" if target else "the anonymous terminus"),
                 f", publisher reference {reference!r}" if reference else "")

    def _attach_consumer(self, state: ConnState, link: Any) -> None:
        address = link.remote_source.address
        if address == addresses.MANAGEMENT:
            self._attach_management(state, link)
            return
        name, stream_address = consumer_name(link.remote_properties, address)
        parsed = addresses.parse(stream_address)
        if parsed.kind != "queue":
            error = NotImplementedByBroker if parsed.kind == "exchange" else BadRequest
            raise error(f"cannot consume from {address!r}: consume from /queues/<stream>")
        self.allow(state, READ, parsed.name)
        entry = self.core.consume_entry(parsed.name)
        try:
            entries = read_filter_entries(link.remote_source.filter)
        except Exception as exc:
            raise DecodeError(f"cannot read the source filter: {exc}") from None
        filters = parse_source_filters(entries, now_ms=int(time.time() * 1000))
        for key, reason in filters.dropped:
            log.warning("consumer %s link %s on %r: filter %r left out: %s", state.name,
                        _name_of(link), entry.name, key, reason)
        link.source.copy(link.remote_source)
        link.source.address = address
        link.source.filter.clear()
        if filters.echo is not None:
            link.source.filter.put_object(echo_map(filters.echo))
        caps = link.source.capabilities
        caps.clear()
        caps.put_array(False, Data.SYMBOL)
        caps.enter()
        for cap in FILTER_CAPABILITIES:
            caps.put_symbol(cap)
        caps.exit()
        link.target.copy(link.remote_target)
        consumer = Consumer(link, entry, filters, self._schedule_turn,
                            end=lambda error: self._end_link(state, link._impl, error),
                            name=name, store_policy=self.store_policy,
                            offsets_at=self.core.offsets_elsewhere(parsed.name)
                            if name is not None else None)
        link.open()
        self._register(state, link, consumer)
        consumer.conn = state
        self.core.attach_consumer(entry, consumer)
        log.info("consumer attached: %s link %s <- stream %r: %s%s", state.name, _name_of(link),
                 entry.name, filters.describe(), f", consumer name {name!r}" if name else "")
        consumer.pump()

    def _schedule_turn(self, consumer: Consumer, blocked: bool) -> None:
        """Another turn for ``consumer``: once its connection's socket took what waits
        (``blocked``), else after the events already waiting."""
        if blocked:
            state = consumer.conn
            if state is not None:
                state.blocked.add(consumer)
                return
        self.eloop.loop.call_soon(self._turn, consumer)

    def _turn(self, consumer: Consumer) -> None:
        consumer.pump()
        self.process()

    def _unblock(self, state: ConnState) -> None:
        blocked = list(state.blocked)
        state.blocked.clear()
        for consumer in blocked:
            consumer.scheduled = False
            self.eloop.loop.call_soon(self._turn, consumer)

    def _link_flow(self, event: Any) -> None:
        obj = self.links.get(_ev_link(event))
        if isinstance(obj, Consumer) and not obj.scheduled:
            obj.pump()

    def _end_link(self, state: ConnState, ptr: Any, error: BrokerError) -> None:
        """The core ends a link (its stream was deleted): detach it with the error."""
        self._forget_link(state, ptr)
        link = Link.wrap(ptr)
        if not link.state & LOCAL_CLOSED:
            link.condition = Condition(error.condition, error.description)
            link.close()
        self.to_write.add(state.io)

    def _forget_link(self, state: ConnState, ptr: Any) -> None:
        obj = state.links.pop(ptr, None)
        self.links.pop(ptr, None)
        if obj is None:
            return
        if isinstance(obj, Consumer):
            if not obj.closed:
                obj.close()
                state.blocked.discard(obj)
                self.core.detach_consumer(obj.entry, obj)
                log.info("consumer detached: %s link %s from stream %r", state.name,
                         _name_of(obj.link), obj.entry.name)
        elif isinstance(obj, Publisher):
            if obj in state.io.throttled:
                state.io.throttle(obj, False)
            if not obj.closed:
                obj.close()
                self.core.detach_publisher(obj.entry, obj)
                log.info("publisher detached: %s link %s", state.name, _name_of(obj.link))
        else:
            obj.closed = True

    def _link_remote_close(self, event: Any) -> None:
        ptr = _ev_link(event)
        state = self._state(event)
        if state is not None:
            self._forget_link(state, ptr)
        link = Link.wrap(ptr)
        if not link.state & LOCAL_CLOSED:
            if lib.pn_event_type(event) == lib.PN_LINK_REMOTE_DETACH:
                link.detach()
            else:
                link.close()
        link.free()  # the name may be attached again at once

    # -- deliveries ------------------------------------------------------------------------
    def _delivery(self, impl: Any) -> None:
        """A ``PN_DELIVERY`` as its C pointer: a publisher's transfer, a consumer's outcome or
        a management request."""
        link_ptr = lib.pn_delivery_link(impl)
        if lib.pn_link_is_sender(link_ptr):
            # a consumer's (or the management node's) outcome: nothing to do for a stream but
            # to forget the delivery once the client settled it (and for a named consumer, to
            # note what it accepted)
            if lib.pn_delivery_settled(impl):
                obj = self.links.get(link_ptr)
                if isinstance(obj, Consumer) and obj.offsets is not None:
                    number = tag_number(lib.pn_delivery_tag(impl))
                    if number is not None:
                        obj.offsets.settled(number, lib.pn_delivery_remote_state(impl)
                                            == lib.PN_ACCEPTED)
                lib.pn_delivery_settle(impl)
            return
        obj = self.links.get(link_ptr)
        if isinstance(obj, Publisher):
            obj.on_delivery(impl)
        elif isinstance(obj, ManagementLink):
            state = self.states.get(lib.pn_session_connection(lib.pn_link_session(link_ptr)))
            if state is not None:
                self._management_request(state, obj, Delivery.wrap(impl))
        else:  # a link being set up or torn down: read and forget
            delivery = Delivery.wrap(impl)
            link = delivery.link
            link.recv(delivery.pending)
            link.advance()
            delivery.settle()

    def _management_request(self, state: ConnState, mlink: ManagementLink, delivery: Any) -> None:
        if not delivery.readable:
            return
        link = mlink.link
        key = delivery._impl
        chunk = link.recv(delivery.pending) or b""
        buffered: bytearray | None  # the request so far: bytes of earlier transfers
        if delivery.partial:
            buffered = mlink.partial.setdefault(key, bytearray())
            buffered += chunk
            if len(buffered) > MAX_MANAGEMENT_REQUEST:
                mlink.partial.pop(key, None)
                link.condition = Condition("amqp:link:message-size-exceeded",
                                           "management request too large")
                link.close()
            return
        buffered = mlink.partial.pop(key, None)
        data = bytes(buffered) + chunk if buffered is not None else chunk
        link.advance()
        msg = Message()
        try:
            msg.decode(data)
        except Exception as exc:
            delivery.local.condition = Condition("amqp:decode-error", f"not an AMQP message: {exc}")
            delivery.update(Delivery.REJECTED)
            delivery.settle()
            link.flow(1)
            return
        response = management.handle(msg.subject, msg.address, msg.body, self.core,
                                     lambda what, name: self.allow(state, what, name))
        log.info("management %s %s -> %d", _text(lambda: msg.subject), _text(lambda: msg.address), response.status)
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        link.flow(1)
        sender = self._reply_link(state, mlink)
        if sender is None:
            log.warning("management reply dropped: no open /management receiver link on the session")
            return
        reply = Message(correlation_id=msg.id, subject=str(response.status),
                        properties={"http:response": "1.1"}, body=response.body,
                        address=msg.reply_to)
        out = sender.send(reply)
        if sender.snd_settle_mode == Link.SND_SETTLED:
            out.settle()

    def _reply_link(self, state: ConnState, request: ManagementLink) -> Any:
        """The open ``/management`` sender of the request's session with the request link's
        name (RabbitMQ's link pair), else the one attached last."""
        last = None
        for obj in state.links.values():
            if (isinstance(obj, ManagementLink) and obj.sender and not obj.closed
                    and obj.session == request.session):
                if obj.name == request.name:
                    return obj.link
                last = obj.link
        return last
