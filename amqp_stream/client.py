"""A small blocking AMQP 1.0 client for our own tools (CLI, Spark data source, tests, benchmarks).

Strategy: one ``proton.utils.BlockingConnection`` per ``Client``; every public operation takes
the client's lock and drives the proton event loop in the calling thread until its condition
holds (``connection.wait``). No background thread, so nothing races proton's non thread-safe
objects; several threads may share a client (operations are serialised), and a Spark task simply
opens its own client.

- Management is HTTP over AMQP on ``/management`` (a sender and a receiver named alike,
  link property ``paired = true``), as RabbitMQ 4.2 and ``amqp-interface.md`` describe.
- ``Publisher`` keeps a bounded window of unsettled deliveries: ``publish`` only blocks when the
  window is full. Outcomes are collected in publish order; ``flush`` waits for all of them and
  raises ``PublishError`` if any was not accepted. Connection loss and timeouts also raise
  ``PublishError``, naming how many messages are unconfirmed (an at-least-once caller retries
  them all). ``presettled=True`` sends fire-and-forget.
- ``Consumer`` attaches ``/queues/<name>`` with the stream source filters as described values,
  reads back the filter set the broker echoed (``accepted_filters``, ``missing_filters``) and
  manages credit itself: ``receive`` keeps a window of credit open, ``drain`` asks the broker to
  use up the credit now, which is how ``read_available`` detects the current end of the stream.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import threading
import urllib.parse
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from proton import (Delivery, Described, Endpoint, Handler, Link, Message, ProtonException,
                    SSLDomain, Timeout, symbol, timestamp)
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender, LinkDetached

__all__ = [
    "ClientError", "ManagementError", "StreamNotFound", "PublishError", "ConsumerError",
    "TlsOptions", "Client", "connect", "Publisher", "Outcome", "Consumer", "StreamMessage",
    "queue_address", "build_message", "build_filters", "offset_value", "PROPERTY_NAMES", "OFFSET_SPEC", "STREAM_FILTER", "MATCH_UNFILTERED",
    "SQL_FILTER", "PROPERTIES_FILTER", "APPLICATION_PROPERTIES_FILTER", "FILTER_VALUE",
    "STREAM_OFFSET",
]

# Filter keys and descriptors (amqp-interface.md "Consuming"); keys are the conventional ones.
OFFSET_SPEC = "rabbitmq:stream-offset-spec"
STREAM_FILTER = "rabbitmq:stream-filter"
MATCH_UNFILTERED = "rabbitmq:stream-match-unfiltered"
SQL_FILTER = "amqp:sql-filter"
PROPERTIES_FILTER = "amqp:properties-filter"
APPLICATION_PROPERTIES_FILTER = "amqp:application-properties-filter"
_SQL_FILTER_KEY = "sql-filter"
# Message annotations.
FILTER_VALUE = "x-stream-filter-value"
STREAM_OFFSET = "x-stream-offset"
CHUNK_TIMESTAMP = "x-stream-chunk-timestamp"

# AMQP properties by their SQL/snake name -> proton.Message attribute.
PROPERTY_NAMES: dict[str, str] = {
    "message_id": "id", "user_id": "user_id", "to": "address", "subject": "subject",
    "reply_to": "reply_to", "correlation_id": "correlation_id", "content_type": "content_type",
    "content_encoding": "content_encoding", "absolute_expiry_time": "expiry_time",
    "creation_time": "creation_time", "group_id": "group_id", "group_sequence": "group_sequence",
    "reply_to_group_id": "reply_to_group_id",
}
_TIME_PROPERTIES = {"absolute_expiry_time", "creation_time"}
_ZERO_IS_ABSENT = {"absolute_expiry_time", "creation_time", "group_sequence"}


class ClientError(Exception):
    """Root of this module's errors. ``condition`` is the AMQP error condition when one came."""

    def __init__(self, message: str, condition: str | None = None):
        super().__init__(message)
        self.condition = condition


class ManagementError(ClientError):
    """The management node answered with an error status."""

    def __init__(self, message: str, status: int, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


class StreamNotFound(ManagementError):
    """The stream does not exist (404, or a link refused with ``amqp:not-found``)."""


class PublishError(ClientError):
    """Not every published message was accepted: rejected, released, connection lost, timeout.

    ``outcomes`` holds the outcomes known when it was raised; ``unconfirmed`` counts messages
    whose fate is unknown (they may or may not be stored).
    """

    def __init__(self, message: str, outcomes: Sequence["Outcome"] = (), unconfirmed: int = 0,
                 condition: str | None = None):
        super().__init__(message, condition)
        self.outcomes = list(outcomes)
        self.unconfirmed = unconfirmed


class ConsumerError(ClientError):
    """The consumer link was refused or closed, or the connection was lost while consuming."""


@dataclass(frozen=True)
class TlsOptions:
    """TLS settings for ``amqps://`` URLs (proton ``SSLDomain``)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    verify: bool = True          # check the broker's certificate and host name
    peer_name: str | None = None  # SNI / name to check, default the URL host

    def domain(self) -> SSLDomain:
        d = SSLDomain(SSLDomain.MODE_CLIENT)
        if self.ca_file:
            d.set_trusted_ca_db(self.ca_file)
        if self.cert_file:
            d.set_credentials(self.cert_file, self.key_file, self.key_password)
        d.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if self.verify else SSLDomain.ANONYMOUS_PEER,
                                  self.ca_file if self.verify else None)
        return d


def queue_address(stream: str) -> str:
    """``/queues/<name>`` with the name percent-encoded (``[A-Za-z0-9-._~]`` kept)."""
    return "/queues/" + urllib.parse.quote(stream, safe="")


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


# ---------------------------------------------------------------------------------------------
# connection and management


def connect(url: str, *, user: str | None = None, password: str | None = None,
            tls: TlsOptions | None = None, timeout: float = 30.0, container_id: str | None = None,
            heartbeat: float | None = None, virtual_host: str | None = None) -> "Client":
    """Open a connection. ``amqps://`` URLs use ``tls`` (default: system CAs, verify the peer).

    Raises ``ClientError`` when the broker cannot be reached or refuses the connection.
    """
    return Client(url, user=user, password=password, tls=tls, timeout=timeout,
                  container_id=container_id, heartbeat=heartbeat, virtual_host=virtual_host)


class Client:
    """One AMQP connection with management requests and factories for publishers/consumers."""

    def __init__(self, url: str, *, user: str | None = None, password: str | None = None,
                 tls: TlsOptions | None = None, timeout: float = 30.0,
                 container_id: str | None = None, heartbeat: float | None = None,
                 virtual_host: str | None = None):
        self.url = url
        self.timeout = timeout
        self.lock = threading.RLock()
        self._mgmt: tuple[BlockingSender, BlockingReceiver, _Collector] | None = None
        self._names = itertools.count()
        self._id = container_id or f"amqp-stream-client-{uuid.uuid4()}"
        kwargs: dict[str, Any] = {}
        if user is not None:
            kwargs.update(user=user, password=password or "", allowed_mechs="PLAIN",
                          allow_insecure_mechs=True)
        if virtual_host:
            kwargs["virtual_host"] = virtual_host
        ssl = None
        if url.startswith("amqps://"):
            ssl = (tls or TlsOptions()).domain()
        try:
            from proton.reactor import Container
            self.conn = BlockingConnection(url, timeout=timeout, ssl_domain=ssl, heartbeat=heartbeat,
                                           container=Container(container_id=self._id), **kwargs)
        except (ProtonException, OSError) as exc:
            raise ClientError(f"cannot connect to {_safe_url(url)}: {exc}",
                              getattr(exc, "condition", None)) from exc
        if self.conn.conn.state & Endpoint.REMOTE_CLOSED:
            cond = self.conn.conn.remote_condition
            raise ClientError(f"{_safe_url(url)} closed the connection: {_condition_text(cond)}",
                              getattr(cond, "name", None))

    # -- plumbing ------------------------------------------------------------------------------
    def _name(self, kind: str) -> str:
        return f"{kind}-{next(self._names)}-{uuid.uuid4().hex[:8]}"

    def wait(self, condition, timeout: float | None = None, what: str = "") -> None:
        """Drive the event loop until ``condition()``; ``ClientError`` on timeout or loss."""
        try:
            self.conn.wait(condition, timeout=self.timeout if timeout is None else timeout, msg=what)
        except Timeout as exc:
            raise ClientError(f"timed out after {self.timeout if timeout is None else timeout}s: {what}") from exc
        except LinkDetached as exc:
            raise ClientError(str(exc), exc.condition) from exc
        except ProtonException as exc:
            raise ClientError(f"connection to {_safe_url(self.url)} lost: {exc}",
                              getattr(exc, "condition", None)) from exc

    def pump(self) -> None:
        """Process whatever events are ready without blocking (keeps heartbeats flowing)."""
        with self.lock:
            self.wait(lambda: True, 0.0, "pump")

    @property
    def closed(self) -> bool:
        c = self.conn.conn if self.conn is not None else None
        return c is None or bool(c.state & (Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_CLOSED)) or bool(self.conn.disconnected)

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                try:
                    self.conn.close()
                except Exception:  # closing a broken connection: nothing more to do
                    pass
                self.conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- management ----------------------------------------------------------------------------
    def _management(self):
        if self._mgmt is None:
            name = self._name("management")
            props = {symbol("paired"): True}
            try:
                sender = self.conn.create_sender(
                    "/management", name=name, options=_LinkOpts(snd_settle=Link.SND_SETTLED, properties=props))
                collector = _Collector(self)
                receiver_link = self.conn.container.create_receiver(
                    self.conn.conn, "/management", name=name, handler=collector,
                    options=_LinkOpts(snd_settle=Link.SND_SETTLED, properties=props, target="/management"))
                receiver = BlockingReceiver(self.conn, receiver_link, None, credit=0)
            except LinkDetached as exc:
                raise ClientError(f"management node refused: {exc}", exc.condition) from exc
            except ProtonException as exc:
                raise ClientError(f"management node: {exc}") from exc
            receiver_link.flow(10)
            self._mgmt = (sender, receiver, collector)
        return self._mgmt

    def request(self, method: str, path: str, body: Any = None,
                ok: Iterable[int] = (200, 201, 204)) -> tuple[int, Any]:
        """One management request; returns ``(status, body)`` or raises ``ManagementError``."""
        with self.lock:
            sender, receiver, collector = self._management()
            mid = str(uuid.uuid4())
            msg = Message(id=mid, address=path, subject=method, reply_to="$me", body=body, inferred=False)
            try:
                sender.link.send(msg)
            except ProtonException as exc:
                raise ClientError(f"management request {method} {path}: {exc}") from exc
            self.wait(lambda: any(m.correlation_id == mid for m, _ in collector.items) or collector.error,
                      what=f"management {method} {path}")
            collector.raise_error()
            reply = next(m for m, _ in collector.items if m.correlation_id == mid)
            collector.items = deque((m, d) for m, d in collector.items if m.correlation_id != mid)
            receiver.link.flow(1)
        try:
            status = int(reply.subject)
        except (TypeError, ValueError):
            raise ManagementError(f"{method} {path}: malformed answer subject {reply.subject!r}", 0, reply.body)
        if status not in tuple(ok):
            cls = StreamNotFound if status == 404 else ManagementError
            raise cls(f"{method} {path}: {status} {reply.body!r}", status, reply.body)
        return status, reply.body

    def declare(self, stream: str, arguments: Mapping[str, Any] | None = None) -> dict:
        """Create the stream (``x-queue-type = stream`` added); 200/201 both succeed.

        Returns the queue info map. ``ManagementError`` (409) if it exists with other arguments.
        """
        args = {"x-queue-type": "stream"}
        args.update(arguments or {})
        body = {"durable": True, "exclusive": False, "auto_delete": False, "arguments": args}
        return self.request("PUT", queue_address(stream), body, ok=(200, 201))[1]

    def delete(self, stream: str) -> int:
        """Delete the stream; returns the number of messages it held (0 when missing)."""
        body = self.request("DELETE", queue_address(stream), None, ok=(200,))[1]
        return int((body or {}).get("message_count", 0))

    def info(self, stream: str) -> dict:
        """The queue info map, incl. ``first_offset`` and ``next_offset``; ``StreamNotFound``."""
        return self.request("GET", queue_address(stream), None, ok=(200,))[1]

    def exists(self, stream: str) -> bool:
        try:
            self.info(stream)
            return True
        except StreamNotFound:
            return False

    # -- links -----------------------------------------------------------------------------------
    def publisher(self, stream: str, *, window: int = 256, presettled: bool = False,
                  timeout: float | None = None) -> "Publisher":
        """A publisher to ``/queues/<stream>`` with at most ``window`` unsettled messages."""
        return Publisher(self, stream, window=window, presettled=presettled, timeout=timeout)

    def consumer(self, stream: str, *, offset: Any = "first", filter_values: str | Sequence[str] | None = None,
                 match_unfiltered: bool = False, sql: str | None = None,
                 properties: Mapping[str, Any] | None = None,
                 application_properties: Mapping[str, Any] | None = None,
                 credit: int = 256, extra_filters: Mapping[str, Described] | None = None,
                 name: str | None = None) -> "Consumer":
        """A consumer of ``/queues/<stream>`` (see ``Consumer``)."""
        filters = build_filters(offset=offset, filter_values=filter_values, match_unfiltered=match_unfiltered,
                                sql=sql, properties=properties, application_properties=application_properties)
        if extra_filters:
            filters.update({symbol(k): v for k, v in extra_filters.items()})
        return Consumer(self, stream, filters, credit=credit, name=name)


def _safe_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url


# ---------------------------------------------------------------------------------------------
# publishing


@dataclass(frozen=True)
class Outcome:
    """The broker's answer to one published message: ``state`` is accepted/rejected/released/
    modified (or ``presettled``); ``seq`` the publish sequence number within the publisher."""

    seq: int
    state: str
    condition: str | None = None
    message_id: Any = None

    @property
    def accepted(self) -> bool:
        return self.state in ("accepted", "presettled")


_STATES = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
           Delivery.RELEASED: "released", Delivery.MODIFIED: "modified"}


def build_message(body: Any, *, properties: Mapping[str, Any] | None = None,
                  application_properties: Mapping[str, Any] | None = None,
                  filter_value: str | None = None, message_id: Any = None,
                  annotations: Mapping[str, Any] | None = None, durable: bool | None = None) -> Message:
    """A ``proton.Message``: ``bytes`` bodies go in a data section, anything else in amqp-value.

    ``properties`` use the snake names of ``PROPERTY_NAMES``; time properties take a
    ``datetime`` or seconds since the epoch.
    """
    msg = Message(body=body, inferred=isinstance(body, (bytes, bytearray, memoryview)))
    if isinstance(body, (bytearray, memoryview)):
        msg.body = bytes(body)
    for key, value in (properties or {}).items():
        attr = PROPERTY_NAMES.get(key)
        if attr is None:
            raise ValueError(f"unknown AMQP property {key!r}; known: {', '.join(PROPERTY_NAMES)}")
        if value is None:
            continue
        if key in _TIME_PROPERTIES and isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            value = value.timestamp()
        setattr(msg, attr, value)
    if message_id is not None:
        msg.id = message_id
    if application_properties:
        msg.properties = dict(application_properties)
    ann = {symbol(k): v for k, v in (annotations or {}).items()}
    if filter_value is not None:
        ann[symbol(FILTER_VALUE)] = str(filter_value)
    if ann:
        msg.annotations = ann
    if durable is not None:
        msg.durable = durable
    return msg


class Publisher:
    """Publishes to one stream with a bounded window of unsettled deliveries.

    ``publish`` returns the message's sequence number (0, 1, ...); it blocks only while
    ``window`` messages are unsettled. ``flush`` waits until every message has an outcome and
    returns the outcomes since the previous flush, raising ``PublishError`` if any was not
    accepted. With ``presettled`` the broker sends no outcomes; ``flush`` then only makes sure
    the bytes were written to the socket.
    """

    def __init__(self, client: Client, stream: str, *, window: int = 256, presettled: bool = False,
                 timeout: float | None = None):
        if window < 1:
            raise ValueError("window must be >= 1")
        self.client, self.stream, self.window, self.presettled = client, stream, window, presettled
        self.timeout = client.timeout if timeout is None else timeout
        self.address = queue_address(stream)
        self._seq = 0
        self._pending: deque[tuple[int, Delivery, Any]] = deque()
        self._done: list[Outcome] = []
        self.accepted = 0
        self.failed: list[Outcome] = []
        with client.lock:
            try:
                # Own handler: a detach of this link is noted here and raised by this
                # publisher, not by whatever else the connection is waiting for.
                self._watch = _Collector(client)
                self._sender = client.conn.create_sender(
                    self.address, name=client._name("publisher"), handler=self._watch,
                    options=_LinkOpts(snd_settle=Link.SND_SETTLED if presettled else Link.SND_UNSETTLED))
            except LinkDetached as exc:
                cls = StreamNotFound if exc.condition == "amqp:not-found" else PublishError
                raise (cls(f"cannot publish to stream {stream!r}: {exc}", 404) if cls is StreamNotFound
                       else PublishError(f"cannot publish to stream {stream!r}: {exc}", condition=exc.condition)) from exc
            except ProtonException as exc:
                raise PublishError(f"cannot publish to stream {stream!r}: {exc}") from exc
        self.link = self._sender.link

    @property
    def unsettled(self) -> int:
        return len(self._pending)

    def publish(self, body: Any, *, properties: Mapping[str, Any] | None = None,
                application_properties: Mapping[str, Any] | None = None,
                filter_value: str | None = None, message_id: Any = None,
                annotations: Mapping[str, Any] | None = None) -> int:
        """Build and send one message (see ``build_message``); returns its sequence number."""
        return self.send(build_message(body, properties=properties, application_properties=application_properties,
                                       filter_value=filter_value, message_id=message_id, annotations=annotations))

    def send(self, message: Message) -> int:
        """Send a prepared ``proton.Message``; returns its sequence number."""
        with self.client.lock:
            if len(self._pending) >= self.window:
                self._wait(lambda: self._collect() < self.window, "publish window")
            self._check_link()
            seq = self._seq
            self._seq += 1
            try:
                delivery = self.link.send(message)
            except ProtonException as exc:
                raise self._lost(str(exc))
            if self.presettled:
                self._done.append(Outcome(seq, "presettled", message_id=message.id))
                self.accepted += 1
            else:
                self._pending.append((seq, delivery, message.id))
            return seq

    def _collect(self) -> int:
        """Move deliveries that have an outcome (in publish order) from pending to done."""
        pending = self._pending
        while pending:
            seq, d, mid = pending[0]
            state = d.remote_state
            if not (d.settled or state in _STATES):
                break
            pending.popleft()
            name = _STATES.get(state, "accepted" if d.settled and state == 0 else f"state-{state}")
            cond = None
            if name != "accepted":
                cond = _condition_text(d.remote.condition) if d.remote.condition else None
            out = Outcome(seq, name, cond, mid)
            if name == "accepted":
                self.accepted += 1
            else:
                self.failed.append(out)
            self._done.append(out)
            d.settle()
        return len(pending)

    def _check_link(self) -> None:
        if self.link.state & Endpoint.REMOTE_CLOSED:
            raise self._lost(f"the broker detached the publisher: {_condition_text(self.link.remote_condition)}",
                             getattr(self.link.remote_condition, "name", None))

    def _lost(self, why: str, condition: str | None = None) -> PublishError:
        return PublishError(f"publishing to stream {self.stream!r} failed: {why}; {len(self._pending)} message(s) "
                            f"unconfirmed, {self.accepted} accepted", self._done, len(self._pending), condition)

    def _wait(self, cond, what: str) -> None:
        try:
            self.client.wait(lambda: cond() or bool(self.link.state & Endpoint.REMOTE_CLOSED),
                             self.timeout, what)
        except ClientError as exc:
            raise self._lost(str(exc), exc.condition) from exc
        self._collect()
        self._check_link()

    def flush(self, *, check: bool = True) -> list[Outcome]:
        """Wait for the outcome of every message sent; return those since the last flush.

        Raises ``PublishError`` (with all outcomes) if ``check`` and any message was not accepted.
        """
        with self.client.lock:
            if self.presettled:
                # Nothing to wait for but the socket: let the loop write what is buffered.
                transport = self.client.conn.conn.transport
                self._wait(lambda: self.link.queued == 0 and (transport is None or transport.pending() <= 0),
                           "writing pre-settled messages")
            elif self._pending:
                self._wait(lambda: self._collect() == 0, "outcomes")
            done, self._done = self._done, []
        bad = [o for o in done if not o.accepted]
        if check and bad:
            first = bad[0]
            raise PublishError(f"{len(bad)} of {len(done)} message(s) to stream {self.stream!r} not accepted; "
                               f"first: #{first.seq} {first.state} ({first.condition or 'no condition'})",
                               done, 0, first.condition)
        return done

    wait = flush

    def close(self) -> None:
        with self.client.lock:
            try:
                if not (self.link.state & Endpoint.LOCAL_CLOSED):
                    self._sender.close()
            except Exception:
                pass

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# consuming


def _described(name: str, value: Any) -> Described:
    return Described(symbol(name), value)


def offset_value(offset: Any) -> Any:
    """An offset spec as sent: ``first``/``last``/``next``/interval string, int, datetime."""
    if isinstance(offset, bool):
        raise ValueError("offset must be first/last/next, an interval, an int or a datetime")
    if isinstance(offset, int):
        if offset < 0:
            raise ValueError("offset must be >= 0")
        return offset
    if isinstance(offset, _dt.datetime):
        if offset.tzinfo is None:
            offset = offset.replace(tzinfo=_dt.timezone.utc)
        return timestamp(int(offset.timestamp() * 1000))
    if isinstance(offset, str):
        text = offset.strip()
        return int(text) if text.isdigit() else text
    raise ValueError(f"unsupported offset spec {offset!r}")


def build_filters(*, offset: Any = "first", filter_values: str | Sequence[str] | None = None,
                  match_unfiltered: bool = False, sql: str | None = None,
                  properties: Mapping[str, Any] | None = None,
                  application_properties: Mapping[str, Any] | None = None) -> dict:
    """The source filter map (symbol key -> described value) for a stream consumer."""
    f: dict = {}
    if offset is not None:
        f[symbol(OFFSET_SPEC)] = _described(OFFSET_SPEC, offset_value(offset))
    if filter_values is not None:
        values = [filter_values] if isinstance(filter_values, str) else [str(v) for v in filter_values]
        if values:
            f[symbol(STREAM_FILTER)] = _described(STREAM_FILTER, values[0] if len(values) == 1 else values)
    if match_unfiltered:
        f[symbol(MATCH_UNFILTERED)] = _described(MATCH_UNFILTERED, True)
    if sql is not None and (properties or application_properties):
        raise ValueError("a link has one kind of stage-2 filter: SQL or property filters, not both")
    if sql is not None:
        f[symbol(_SQL_FILTER_KEY)] = _described(SQL_FILTER, sql)
    if properties:
        f[symbol(PROPERTIES_FILTER)] = _described(
            PROPERTIES_FILTER, {symbol(k.replace("_", "-")): v for k, v in properties.items()})
    if application_properties:
        f[symbol(APPLICATION_PROPERTIES_FILTER)] = _described(
            APPLICATION_PROPERTIES_FILTER, dict(application_properties))
    return f


@dataclass
class StreamMessage:
    """A delivered message: ``offset`` from ``x-stream-offset``, the sections decoded."""

    offset: int | None
    body: Any
    filter_value: str | None = None
    properties: dict = field(default_factory=dict)
    application_properties: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    message: Message | None = None

    @property
    def chunk_timestamp(self) -> int | None:
        """``x-stream-chunk-timestamp`` (ms) when the broker adds it; otherwise None."""
        v = self.annotations.get(CHUNK_TIMESTAMP)
        return int(v) if v is not None else None

    @classmethod
    def from_message(cls, msg: Message) -> "StreamMessage":
        ann = {str(k): v for k, v in (msg.annotations or {}).items()}
        props = {}
        for key, attr in PROPERTY_NAMES.items():
            v = getattr(msg, attr)
            # proton reports absent fields as empty/zero values (and content types as 'None')
            if v is None or v == "" or v == b"" or (v == 0 and key in _ZERO_IS_ABSENT):
                continue
            if key in ("content_type", "content_encoding") and str(v) == "None":
                continue
            props[key] = bytes(v) if isinstance(v, memoryview) else v
        off = ann.get(STREAM_OFFSET)
        fv = ann.get(FILTER_VALUE)
        body = msg.body
        if isinstance(body, memoryview):
            body = bytes(body)
        return cls(offset=int(off) if off is not None else None, body=body,
                   filter_value=str(fv) if fv is not None else None, properties=props,
                   application_properties=dict(msg.properties or {}), annotations=ann, message=msg)


class _Collector(Handler):
    """Link handler of a receiver: decodes and settles each complete delivery, notes errors."""

    def __init__(self, client: Client):
        super().__init__()
        self.client = client
        self.items: deque[tuple[Message, Delivery]] = deque()
        self.error: str | None = None
        self.condition: str | None = None

    def on_delivery(self, event) -> None:
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
        if not d.settled:
            d.update(Delivery.ACCEPTED)
        d.settle()
        self.items.append((msg, d))

    def on_link_remote_close(self, event) -> None:
        link = event.link
        cond = link.remote_condition
        self.condition = getattr(cond, "name", None)
        self.error = f"the broker detached {link.name}: {_condition_text(cond)}"
        if link.state & Endpoint.LOCAL_ACTIVE:
            link.close()

    def raise_error(self) -> None:
        if self.error and not self.items:
            raise ConsumerError(self.error, self.condition)


class Consumer:
    """A stream consumer with explicit credit.

    ``accepted_filters`` is the filter map the broker echoed (``None`` when it echoed none);
    ``missing_filters`` the keys asked for but left out, so a tool can warn or detach.
    ``receive(timeout)`` returns the next ``StreamMessage`` or ``None`` on timeout, keeping up to
    ``credit`` messages in flight. ``read_available()`` yields what is committed now and stops
    at the current end of the stream (found with drain).
    """

    def __init__(self, client: Client, stream: str, filters: dict, *, credit: int = 256,
                 name: str | None = None):
        if credit < 1:
            raise ValueError("credit must be >= 1")
        self.client, self.stream, self.credit = client, stream, credit
        self.address = queue_address(stream)
        self.requested_filters = filters
        self._handler = _Collector(client)
        with client.lock:
            link = client.conn.container.create_receiver(
                client.conn.conn, self.address, name=name or client._name("consumer"), handler=self._handler,
                options=_LinkOpts(snd_settle=Link.SND_UNSETTLED, source_filter=filters or None))
            try:
                self._receiver = BlockingReceiver(client.conn, link, None, credit=0)
            except LinkDetached as exc:
                self._refused(str(exc), exc.condition)
            except ProtonException as exc:
                # the broker attached with a null source and may detach with a condition
                try:
                    client.conn.wait(lambda: link.state & Endpoint.REMOTE_CLOSED, timeout=2)
                except ProtonException:
                    pass
                cond = link.remote_condition
                self._refused(f"{exc} ({_condition_text(cond)})", getattr(cond, "name", None))
            self.link = link
            self.accepted_filters = self._echoed()

    def _refused(self, why: str, condition: str | None):
        if condition == "amqp:not-found":
            raise StreamNotFound(f"stream {self.stream!r} not found: {why}", 404)
        raise ConsumerError(f"cannot consume stream {self.stream!r}: {why}", condition)

    def _echoed(self) -> dict | None:
        data = self.link.remote_source.filter
        data.rewind()
        if data.next() is None:
            return None
        obj = data.get_object()
        return dict(obj) if isinstance(obj, dict) else None

    @property
    def missing_filters(self) -> list[str]:
        """Filter keys the broker did not put in place (compared with what was asked)."""
        got = {str(k) for k in (self.accepted_filters or {})}
        return [str(k) for k in self.requested_filters if str(k) not in got]

    def _top_up(self) -> None:
        outstanding = self.link.credit + len(self._handler.items)
        if outstanding <= self.credit // 2:
            self.link.flow(self.credit - outstanding)

    def _pop(self) -> StreamMessage:
        msg, _ = self._handler.items.popleft()
        return StreamMessage.from_message(msg)

    def receive(self, timeout: float | None = None) -> StreamMessage | None:
        """The next message, or ``None`` after ``timeout`` seconds (default: the client's)."""
        with self.client.lock:
            h = self._handler
            if not h.items:
                h.raise_error()
                self._top_up()
                try:
                    self.client.conn.wait(lambda: bool(h.items) or h.error is not None,
                                          timeout=self.client.timeout if timeout is None else timeout)
                except Timeout:
                    return None
                except ProtonException as exc:
                    raise ConsumerError(f"consuming stream {self.stream!r}: {exc}",
                                        getattr(exc, "condition", None)) from exc
                h.raise_error()
            m = self._pop()
            self._top_up()
            return m

    def drain(self, timeout: float | None = None) -> int:
        """Ask the broker to use up the credit now (at most ``credit``); returns how many
        messages are buffered afterwards. 0 means the end of the stream was reached."""
        with self.client.lock:
            h = self._handler
            want = max(self.credit - self.link.credit - len(h.items), 0)
            self.link.drain(want)
            try:
                self.client.wait(lambda: self.link.credit == 0 or h.error is not None, timeout,
                                 f"drain of {self.stream!r}")
            except ClientError as exc:
                raise ConsumerError(f"consuming stream {self.stream!r}: {exc}", exc.condition) from exc
            finally:
                self.link.drain_mode = False
            h.raise_error()
            return len(h.items)

    def read_available(self, end: int | None = None, timeout: float | None = None) -> Iterator[StreamMessage]:
        """Yield messages until the current end of the stream (or the first offset >= ``end``).

        The lock is not held while the caller works on a yielded message.
        """
        items = self._handler.items
        while True:
            with self.client.lock:
                if not items and self.drain(timeout) == 0:
                    return
                batch = [self._pop() for _ in range(len(items))]
            for m in batch:
                if end is not None and m.offset is not None and m.offset >= end:
                    return
                yield m

    def close(self) -> None:
        with self.client.lock:
            try:
                if not (self.link.state & Endpoint.LOCAL_CLOSED):
                    self._receiver.close()
            except Exception:
                pass

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
