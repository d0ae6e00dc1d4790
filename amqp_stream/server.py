"""The broker process: a Qpid Proton container serving AMQP 1.0 on one event loop.

Strategy: this module is the thin adapter between proton's events and the rules that live in
pure modules (``addresses``, ``source_filters``, ``management``, ``credit``) and the link objects
(``publishing.Publisher``, ``consuming.Consumer``). Everything that touches proton happens on the
event loop thread. Storage works on its own writer threads: their ``on_durable`` callbacks and
"committed end moved" notifications are posted to a ``Mailbox`` that wakes the loop through a
proton ``EventInjector`` (one event per batch of posts, not per message).

Deliveries (a publisher's transfers, a consumer's settlements) skip proton's Python ``Event``
objects: ``event_shortcut`` hands them to ``_take_delivery`` as C pointers, the bulk of the
events a busy broker sees. Everything else arrives as proton's usual handler calls.

Every callback is guarded: an exception while handling one connection's event is logged and
closes that connection with ``amqp:internal-error``; the broker keeps serving everyone else.

Shutdown (SIGTERM/SIGINT): stop accepting, let the writers finish what is queued (``close`` on
every stream flushes and fsyncs), settle what became durable, close the connections, exit 0.
"""

from __future__ import annotations

import collections
import functools
import gc
import logging
import os
import signal
import socket
import sys
import time
from typing import Any, Callable

from cproton import pn_delivery_link, pn_delivery_settle, pn_delivery_settled, pn_link_is_sender
from proton import Condition, Data, Delivery, Endpoint, Message, Terminus, symbol
from proton.reactor import ApplicationEvent, Container, EventInjector

from amqp_stream import __version__, addresses, datadir, event_shortcut, management
from amqp_stream.config import BrokerConfig
from amqp_stream.consuming import Consumer
from amqp_stream.credit import PublisherCredit
from amqp_stream.metrics import Metrics
from amqp_stream.publishing import Publisher
from amqp_stream.source_filters import FILTER_CAPABILITIES, AttachRefused, echo_map, parse_source_filters
from amqp_stream.streams import Registry

__all__ = ["Broker", "Mailbox", "read_filter_entries", "vhost_of", "SERVER_PROPERTIES"]

log = logging.getLogger("amqp_stream.server")

# What RabbitMQ's official clients check before they talk to a broker (see amqp-interface.md).
RABBITMQ_VERSION = "4.2.0"
SERVER_PROPERTIES = {
    symbol("product"): "RabbitMQ",
    symbol("version"): RABBITMQ_VERSION,
    symbol("platform"): f"Python {sys.version.split()[0]} (amqp-stream {__version__})",
    symbol("amqp-stream-version"): __version__,
}
CONNECTION_CAPABILITIES = [symbol("LINK_PAIR_V1_0"), symbol("ANONYMOUS-RELAY"), *FILTER_CAPABILITIES]
MANAGEMENT_CREDIT = 64
LOCAL_ACTIVE = Endpoint.LOCAL_ACTIVE
LOCAL_CLOSED = Endpoint.LOCAL_CLOSED


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


class Mailbox:
    """Thread-safe hand-over to the event loop: ``post(fn, *args)`` from any thread; the loop
    runs them in order in ``drain()``. One injected event per batch."""

    def __init__(self, injector: EventInjector):
        self.injector = injector
        self.calls: collections.deque = collections.deque()
        self.signalled = False

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        self.calls.append((fn, args))  # append first, then look at the flag (see drain)
        if not self.signalled:
            self.signalled = True
            self.injector.trigger(ApplicationEvent("amqs_mailbox"))

    def drain(self) -> None:
        self.signalled = False
        calls = self.calls
        while calls:
            fn, args = calls.popleft()
            try:
                fn(*args)
            except Exception:
                log.exception("mailbox call %r failed", fn)


def guarded(method: Callable) -> Callable:
    """Isolate a connection's failure from everyone else's."""

    @functools.wraps(method)
    def wrapper(self: "Broker", event: Any) -> None:
        try:
            method(self, event)
        except Exception as exc:
            log.exception("error handling %s", event.type)
            fail_connection(getattr(event, "connection", None), exc)

    return wrapper


def fail_connection(conn: Any, exc: Exception) -> None:
    """Close ``conn`` (if any) with ``amqp:internal-error`` naming ``exc``."""
    if conn is None:
        return
    try:
        conn.condition = Condition("amqp:internal-error", f"{type(exc).__name__}: {exc}")
        conn.close()
    except Exception:
        log.exception("closing a failed connection")


class _Task:
    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        try:
            self.fn()
        except Exception:
            log.exception("scheduled task failed")


class _ConnState:
    def __init__(self, name: str):
        self.name = name
        self.links: set = set()


class _MgmtIn:
    """The management node's receiving side (the client's request sender)."""

    def __init__(self, link: Any):
        self.link = link
        self.closed = False


class _MgmtOut:
    def __init__(self, link: Any):
        self.link = link
        self.closed = False


class Broker:
    """One broker process. ``run()`` serves until SIGTERM/SIGINT and returns the exit code."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.metrics = Metrics()
        self.security = self._prepare_security()
        self.container_id = config.container_id or f"amqp-stream@{socket.gethostname()}"
        self.container: Container | None = None
        self.acceptor = None
        self.injector: EventInjector | None = None
        self.mailbox: Mailbox | None = None
        self.registry = Registry(config, self._on_moved)
        self.connections: dict[Any, _ConnState] = {}
        self.moved: collections.deque = collections.deque()
        self.dirty: list[Publisher] = []  # publishers with messages to hand to storage
        # publisher links by their C pointer: a delivery finds its publisher without building
        # a ``Link`` wrapper (~3 µs a message); entries leave in ``_forget_link``
        self.publishers: dict[Any, Publisher] = {}
        self.stop_requested = False
        self.stopping = False
        self.ticks = 0
        self.listen_error: OSError | None = None
        self.dump_requested = False

    def _prepare_security(self) -> Any:
        try:
            from amqp_stream import security
        except ImportError:
            return None
        return security.prepare(self.config)

    # -- process ---------------------------------------------------------------------------
    def run(self) -> int:
        logging.basicConfig(level=self.config.log_level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        data_dir = os.path.abspath(self.config.data_dir)
        self.data_lock = datadir.acquire(data_dir)  # held for the life of the process
        if self.data_lock is None:
            return 2
        names = self.registry.open_all()
        for name in names:
            self.registry.entries[name].metrics = self.metrics.for_stream(name)
        self.metrics.streams.set(len(names))
        log.info("amqp-stream %s: %d streams recovered from %s", __version__, len(names), data_dir)
        if self.security is not None:
            describe = getattr(self.security, "describe", None)
            if describe:
                log.info("security: %s", describe())
        try:
            self.metrics.serve(self.config.host, self.config.metrics_port)
        except OSError as exc:
            log.error("cannot serve metrics on %s:%d: %s", self.config.host,
                      self.config.metrics_port, exc.strerror or exc)
            self.registry.close_all()
            return 1
        self.container = Container(self)
        self.container.container_id = self.container_id
        event_shortcut.install(self.container, self._take_delivery)
        # Cyclic garbage is collected on this thread only (see _tick): a proton wrapper freed by
        # a collection that happens to run on a storage writer thread would touch proton off
        # the event loop.
        gc.disable()
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_dump_signal)
        try:
            self.container.run()
        finally:
            self.registry.close_all()
            if self.security is not None and hasattr(self.security, "close"):
                self.security.close()
        if self.listen_error is not None:
            log.error("cannot listen on %s:%d: %s", self.config.host, self.config.port,
                      self.listen_error.strerror or self.listen_error)
            return 1
        log.info("stopped")
        return 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = True  # the loop's tick picks it up (no proton calls from here)

    def _on_dump_signal(self, signum: int, frame: Any) -> None:
        self.dump_requested = True

    def dump_state(self) -> None:
        """SIGUSR1: log every link's flow-control state (for operators chasing a stall)."""
        for conn, state in self.connections.items():
            for link in state.links:
                obj = getattr(link, "amqs", None)
                if isinstance(obj, Publisher):
                    log.warning("state: %s publisher %r credit=%d unconfirmed=%d batch=%d closed=%s",
                                state.name, link.name, link.credit, obj.credit.unconfirmed,
                                sum(len(b[1]) for b in obj.batches.values()), obj.closed)
                elif isinstance(obj, Consumer):
                    log.warning("state: %s consumer %r credit=%d waiting=%s scheduled=%s drain=%s "
                                "queued=%d", state.name, link.name, link.credit, obj.waiting,
                                obj.scheduled, link.drain_mode, link.queued)
        log.warning("state: mailbox signalled=%s calls=%d dirty=%d", self.mailbox.signalled,
                    len(self.mailbox.calls), len(self.dirty))

    def _tick(self) -> None:
        self.ticks += 1
        gc.collect(2 if self.ticks % 50 == 0 else 0)
        if self.dump_requested:
            self.dump_requested = False
            self.dump_state()
        if self.stop_requested and not self.stopping:
            self.shutdown()
        elif not self.stopping:
            self.container.schedule(0.2, _Task(self._tick))

    def shutdown(self) -> None:
        self.stopping = True
        log.info("shutting down: no new connections, settling what is durable")
        if self.acceptor is not None:
            self.acceptor.close()
        self.flush_publishers()
        self.registry.close_all()  # writers finish and fsync what is queued
        self.mailbox.drain()  # settle what became durable
        for conn in list(self.connections):
            try:
                conn.condition = Condition("amqp:connection:forced", "broker shutting down")
                conn.close()
            except Exception:
                log.exception("closing a connection at shutdown")
        self.injector.close()
        self.container.schedule(0.5, _Task(self.container.stop))

    # -- reactor events --------------------------------------------------------------------
    def on_reactor_init(self, event: Any) -> None:
        host, port = self.config.host, self.config.port
        ssl_domain = getattr(self.security, "ssl_domain", None)
        scheme = "amqps" if ssl_domain else "amqp"
        try:
            self.acceptor = self.container.listen(f"{scheme}://{host}:{port}", ssl_domain=ssl_domain)
        except OSError as exc:
            self.listen_error = exc
            self.container.stop()
            return
        self.injector = EventInjector()
        self.container.selectable(self.injector)
        self.mailbox = Mailbox(self.injector)
        self.container.schedule(0.2, _Task(self._tick))
        log.info("listening on %s://%s:%d as %s", scheme, host, port, self.container_id)

    def on_reactor_quiesced(self, event: Any) -> None:
        """The loop has nothing else to do right now: hand this turn's messages to storage."""
        self.flush_publishers()

    def flush_publishers(self) -> None:
        dirty = self.dirty
        while dirty:
            publisher = dirty.pop()
            try:
                publisher.flush()
            except Exception:
                log.exception("flushing a publisher")

    def on_amqs_mailbox(self, event: Any) -> None:
        self.mailbox.drain()
        moved = self.moved
        if moved:
            names = set()
            while moved:
                names.add(moved.popleft())
            for name in names:
                entry = self.registry.get(name)
                if entry is not None:
                    for consumer in list(entry.consumers):
                        consumer.wake()

    def _on_moved(self, name: str) -> None:
        """From a writer thread: the committed end of ``name`` moved."""
        self.moved.append(name)
        mailbox = self.mailbox
        if mailbox is not None and not mailbox.signalled:
            mailbox.signalled = True
            mailbox.injector.trigger(ApplicationEvent("amqs_mailbox"))

    @guarded
    def on_connection_bound(self, event: Any) -> None:
        transport = event.transport
        if self.security is not None:
            self.security.configure(transport)
        else:
            sasl = transport.sasl()
            sasl.allowed_mechs("ANONYMOUS")

    @guarded
    def on_connection_remote_open(self, event: Any) -> None:
        conn = event.connection
        if conn.state & LOCAL_ACTIVE:
            return
        peer = getattr(conn, "url", None)
        name = f"{peer}" if peer else "?"
        state = _ConnState(name)
        conn.amqs = state
        self.connections[conn] = state
        self.metrics.connections.set(len(self.connections))
        conn.container = self.container_id
        conn.properties = SERVER_PROPERTIES
        conn.offered_capabilities = CONNECTION_CAPABILITIES
        vhost = vhost_of(conn.remote_hostname)
        user = None
        try:
            user = event.transport.user
        except Exception:
            pass
        conn.open()
        if self.stopping:
            conn.condition = Condition("amqp:connection:forced", "broker shutting down")
            conn.close()
            return
        if vhost != "/":
            log.info("connection %s refused: vhost %r does not exist", name, vhost)
            conn.condition = Condition("amqp:not-found", f"virtual host '{vhost}' does not exist "
                                                         f"(this broker has only '/')")
            conn.close()
            return
        log.info("connection %s opened: container %r, user %r, hostname %r", name,
                 conn.remote_container, user, conn.remote_hostname)

    @guarded
    def on_session_remote_open(self, event: Any) -> None:
        session = event.session
        if not session.state & LOCAL_ACTIVE:
            session.open()

    @guarded
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if link.state & LOCAL_ACTIVE:
            return
        conn_state = getattr(link.connection, "amqs", None)
        if conn_state is None or self.stopping:
            self._refuse(link, "amqp:connection:forced", "broker shutting down")
            return
        if link.is_receiver:
            self._attach_publisher(link, conn_state)
        else:
            self._attach_consumer(link, conn_state)

    def _refuse(self, link: Any, condition: str, description: str) -> None:
        """Attach with a null source (consumer) or target (publisher), then detach with an error."""
        if link.is_receiver:
            link.source.copy(link.remote_source)
            link.target.type = Terminus.UNSPECIFIED
        else:
            link.target.copy(link.remote_target)
            link.source.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = Condition(condition, description)
        link.close()
        log.info("link %r refused: %s %s", link.name, condition, description)

    def _attach_publisher(self, link: Any, conn_state: _ConnState) -> None:
        address = link.remote_target.address
        if address == addresses.MANAGEMENT:
            link.target.copy(link.remote_target)
            link.source.copy(link.remote_source)
            link.open()
            link.amqs = _MgmtIn(link)
            conn_state.links.add(link)
            link.flow(MANAGEMENT_CREDIT)
            return
        if address is None:  # the anonymous terminus: each message's ``to`` names the stream
            self._open_publisher(link, conn_state, None)
            return
        try:
            name = addresses.publish_stream(address)
        except addresses.PublishRefused as exc:
            self._refuse(link, exc.condition, exc.description)
            return
        entry = self.registry.get(name)
        if entry is None:
            self._refuse(link, "amqp:not-found", f"no stream '{name}' (declare it first)")
            return
        self._open_publisher(link, conn_state, entry)

    def _open_publisher(self, link: Any, conn_state: _ConnState, entry: Any) -> None:
        link.target.copy(link.remote_target)
        link.source.copy(link.remote_source)
        link.max_message_size = self.config.max_message_size
        link.open()
        publisher = Publisher(link, entry, PublisherCredit(self.config.publisher_credit,
                                                           self.config.max_unconfirmed),
                              self.config.max_message_size, self.mailbox.post, self.dirty.append,
                              lookup=self.registry.get)
        link.amqs = publisher
        self.publishers[link._impl] = publisher
        conn_state.links.add(link)
        if entry is not None:
            entry.publishers.add(publisher)
        self.metrics.publishers.inc()
        publisher.start()
        log.info("publisher attached: %s link %r -> %s", conn_state.name, link.name,
                 f"stream {entry.name!r}" if entry else "the anonymous terminus")

    def _attach_consumer(self, link: Any, conn_state: _ConnState) -> None:
        address = link.remote_source.address
        if address == addresses.MANAGEMENT:
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            link.open()
            link.amqs = _MgmtOut(link)
            conn_state.links.add(link)
            session = link.session
            pairs = getattr(session, "amqs_mgmt", None)
            if pairs is None:
                pairs = {}
                session.amqs_mgmt = pairs
            pairs[link.name] = link
            return
        try:
            parsed = addresses.parse(address)
        except addresses.AddressError as exc:
            self._refuse(link, "amqp:invalid-field", str(exc))
            return
        if parsed.kind != "queue":
            self._refuse(link, "amqp:not-implemented" if parsed.kind == "exchange" else "amqp:invalid-field",
                         f"cannot consume from {address!r}: consume from /queues/<stream>")
            return
        entry = self.registry.get(parsed.name)
        if entry is None:
            self._refuse(link, "amqp:not-found", f"no stream '{parsed.name}'")
            return
        try:
            entries = read_filter_entries(link.remote_source.filter)
        except Exception as exc:
            self._refuse(link, "amqp:decode-error", f"cannot read the source filter: {exc}")
            return
        try:
            filters = parse_source_filters(entries, now_ms=int(time.time() * 1000))
        except AttachRefused as exc:
            self._refuse(link, exc.condition, exc.description)
            return
        for key, reason in filters.dropped:
            log.warning("consumer %s link %r on %r: filter %r left out: %s", conn_state.name,
                        link.name, entry.name, key, reason)
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
        consumer = Consumer(link, entry, filters, self._schedule_turn)
        link.open()
        link.amqs = consumer
        conn_state.links.add(link)
        entry.consumers.add(consumer)
        self.metrics.consumers.inc()
        log.info("consumer attached: %s link %r <- stream %r: %s", conn_state.name, link.name,
                 entry.name, filters.describe())
        consumer.pump()

    def _schedule_turn(self, consumer: Consumer, later: bool) -> None:
        self.container.schedule(0.002 if later else 0, _Task(consumer.pump))

    @guarded
    def on_link_flow(self, event: Any) -> None:
        link = event.link
        state = getattr(link, "amqs", None)
        if isinstance(state, Consumer) and not state.scheduled:
            state.pump()

    def _take_delivery(self, impl: Any) -> bool:
        """A ``PN_DELIVERY`` as its C pointer (``event_shortcut``): True when handled here; the
        management node's requests go on as proton events (``on_delivery``)."""
        link_impl = pn_delivery_link(impl)
        if pn_link_is_sender(link_impl):
            # a consumer's (or the management node's) outcome: nothing to do for a stream but
            # to forget the delivery once the client settled it
            if pn_delivery_settled(impl):
                pn_delivery_settle(impl)
            return True
        publisher = self.publishers.get(link_impl)
        if publisher is None:
            return False
        try:
            publisher.on_delivery(impl)
        except Exception as exc:  # as ``guarded``: this connection fails, no one else
            log.exception("error handling a delivery")
            fail_connection(publisher.link.connection, exc)
        return True

    @guarded
    def on_delivery(self, event: Any) -> None:
        """Deliveries ``_take_delivery`` left: management requests, and links being set up."""
        delivery = event.delivery
        link = delivery.link
        state = getattr(link, "amqs", None)
        if isinstance(state, _MgmtIn):
            self._management_request(link, delivery)
        else:
            link.recv(delivery.pending)
            link.advance()
            delivery.settle()

    def _management_request(self, link: Any, delivery: Any) -> None:
        if not delivery.readable:
            return
        if delivery.partial:
            buffered = getattr(delivery, "buffered", None)
            if buffered is None:
                buffered = bytearray()
                delivery.buffered = buffered
            buffered += link.recv(delivery.pending) or b""
            if len(buffered) > 1 << 20:
                link.condition = Condition("amqp:link:message-size-exceeded",
                                           "management request too large")
                link.close()
            return
        data = link.recv(delivery.pending) or b""
        buffered = getattr(delivery, "buffered", None)
        if buffered is not None:
            data = bytes(buffered) + data
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
        response = management.handle(msg.subject, msg.address, msg.body, self)
        log.info("management %s %s -> %d", msg.subject, msg.address, response.status)
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        link.flow(1)
        pairs = getattr(link.session, "amqs_mgmt", {}) or {}
        sender = pairs.get(link.name) or next(iter(pairs.values()), None)
        if sender is None or sender.state & LOCAL_CLOSED:
            log.warning("management reply dropped: no /management receiver link on the session")
            return
        reply = Message(correlation_id=msg.id, subject=str(response.status),
                        properties={"http:response": "1.1"}, body=response.body,
                        address=msg.reply_to)
        delivery_out = sender.send(reply)
        if sender.snd_settle_mode == 1:
            delivery_out.settle()

    # -- management.Streams ----------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return self.registry.exists(name)

    def arguments(self, name: str) -> dict:
        return self.registry.arguments(name)

    def create(self, name: str, arguments: dict) -> None:
        entry = self.registry.create(name, arguments)
        entry.metrics = self.metrics.for_stream(name)
        self.metrics.streams.set(len(self.registry.entries))

    def info(self, name: str) -> dict:
        return self.registry.info(name)

    def delete(self, name: str) -> int | None:
        entry = self.registry.get(name)
        if entry is None:
            return None
        self.flush_publishers()
        for consumer in list(entry.consumers):
            self._detach(consumer.link, "amqp:resource-deleted", f"stream '{name}' was deleted")
        for publisher in list(entry.publishers):
            self._detach(publisher.link, "amqp:resource-deleted", f"stream '{name}' was deleted")
        count = self.registry.delete(name)
        self.mailbox.drain()  # settle (reject) what the closed writer failed
        self.metrics.forget(name)
        self.metrics.streams.set(len(self.registry.entries))
        return count

    def _detach(self, link: Any, condition: str, description: str) -> None:
        self._forget_link(link)
        if not link.state & LOCAL_CLOSED:
            link.condition = Condition(condition, description)
            link.close()

    # -- closing ---------------------------------------------------------------------------
    def _forget_link(self, link: Any) -> None:
        state = getattr(link, "amqs", None)
        if state is None or getattr(state, "closed", False):
            return
        if isinstance(state, Consumer):
            state.close()
            state.entry.consumers.discard(state)
            self.metrics.consumers.dec()
            log.info("consumer detached: link %r from stream %r", link.name, state.entry.name)
        elif isinstance(state, Publisher):
            state.closed = True
            self.publishers.pop(link._impl, None)
            if state.entry is not None:
                state.entry.publishers.discard(state)
            self.metrics.publishers.dec()
            log.info("publisher detached: link %r", link.name)
        else:
            state.closed = True
            pairs = getattr(link.session, "amqs_mgmt", None)
            if pairs and pairs.get(link.name) is link:
                del pairs[link.name]

    @guarded
    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        self._forget_link(link)
        if not link.state & LOCAL_CLOSED:
            link.close()
        link.free()  # the name may be attached again at once

    @guarded
    def on_link_remote_detach(self, event: Any) -> None:
        link = event.link
        self._forget_link(link)
        if not link.state & LOCAL_CLOSED:
            link.detach()
        link.free()

    @guarded
    def on_session_remote_close(self, event: Any) -> None:
        session = event.session
        conn_state = getattr(session.connection, "amqs", None)
        if conn_state is not None:
            for link in list(conn_state.links):
                if link.session == session:
                    self._forget_link(link)
                    conn_state.links.discard(link)
        if not session.state & LOCAL_CLOSED:
            session.close()

    @guarded
    def on_connection_remote_close(self, event: Any) -> None:
        conn = event.connection
        self._forget_connection(conn)
        if not conn.state & LOCAL_CLOSED:
            conn.close()

    def _forget_connection(self, conn: Any) -> None:
        state = self.connections.pop(conn, None)
        if state is None:
            return
        for link in list(state.links):
            self._forget_link(link)
        state.links.clear()
        self.metrics.connections.set(len(self.connections))
        log.info("connection %s closed", state.name)

    @guarded
    def on_transport_error(self, event: Any) -> None:
        cond = event.transport.condition
        log.info("transport error: %s", f"{cond.name}: {cond.description}" if cond else "?")

    @guarded
    def on_transport_closed(self, event: Any) -> None:
        conn = event.connection
        if conn is not None:
            self._forget_connection(conn)

    def on_unhandled(self, method: str, *args: Any) -> None:
        pass
