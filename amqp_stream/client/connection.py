"""A connection and the management requests: ``connect``, ``Client``, ``TlsOptions``.

Strategy: one ``proton.utils.BlockingConnection`` per ``Client``; every public operation takes
the client's lock and drives the proton event loop in the calling thread until its condition
holds (``connection.wait``). No background thread, so nothing races proton's non thread-safe
objects; several threads may share a client (operations are serialised), and a Spark task simply
opens its own client. Management is HTTP over AMQP on ``/management`` (a sender and a receiver
named alike, link property ``paired = true``), as RabbitMQ 4.2 and ``amqp-interface.md`` describe.
"""

from __future__ import annotations

import itertools
import threading
import urllib.parse
import uuid
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Iterable, Mapping, Sequence

from proton import (Connection, Described, Endpoint, Link, Message, ProtonException, SSLDomain, SSLException,
                    Timeout, symbol)
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender, LinkDetached

from amqp_stream.client.consumer import Consumer, build_filters
from amqp_stream.client.errors import ClientError, ManagementError, StreamNotFound
from amqp_stream.client.links import _Collector, _condition_text, _LinkOpts, path_segment, queue_address
from amqp_stream.client.publisher import Publisher

__all__ = ["TlsOptions", "Client", "connect", "check_url", "safe_url"]


@dataclass(frozen=True)
class TlsOptions:
    """TLS settings for ``amqps://`` URLs (proton ``SSLDomain``). Without ``key_file`` the
    client key is read from ``cert_file`` (one PEM holding both), as Python's ``ssl`` does."""

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
        if self.key_file and not self.cert_file:
            raise ClientError(f"a TLS key file ({self.key_file}) needs its certificate file")
        if self.cert_file:
            # proton hands a missing key file to OpenSSL as NULL, which crashes the process
            key_file = self.key_file or self.cert_file
            try:
                d.set_credentials(self.cert_file, key_file, self.key_password)
            except SSLException as exc:
                raise ClientError(f"cannot use the TLS certificate {self.cert_file} with the key in "
                                  f"{key_file}: {exc}") from exc
        d.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if self.verify else SSLDomain.ANONYMOUS_PEER,
                                  self.ca_file if self.verify else None)
        return d


_container_lock = threading.Lock()


def _no_ssl_config() -> None:
    from proton import SSLUnavailable
    raise SSLUnavailable("not made: this client gives each amqps:// connection its own domain")


def _container(container_id: str) -> Any:
    """A proton ``Container`` without the default TLS settings its constructor makes.

    Why: proton's ``Container()`` makes an ``SSLConfig``, two OpenSSL contexts (client and
    server), ~40 ms of CPU, for every connection, plain ones too: in a Spark write, the planner's
    connection and each task's. This client never uses them: an ``amqps://`` connection gets its
    own domain (``TlsOptions.domain``), and proton takes a given domain before the container's
    (``connector.ssl_domain = ssl_domain or (self.ssl and self.ssl.client)``). The constructor
    looks ``SSLConfig`` up when it runs; it is swapped for one that says TLS is unavailable
    (proton's own way to a container without it: ``ssl`` None) while this container is made."""
    from proton import _reactor
    from proton.reactor import Container
    if not hasattr(_reactor, "SSLConfig"):  # another proton: its own constructor, TLS contexts and all
        return Container(container_id=container_id)
    with _container_lock:
        made = _reactor.SSLConfig
        _reactor.SSLConfig = _no_ssl_config  # type: ignore[misc, assignment]
        try:
            return Container(container_id=container_id)
        finally:
            _reactor.SSLConfig = made  # type: ignore[misc]


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
        check_url(url)
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
            tls = tls or TlsOptions()
            ssl = tls.domain()
            if tls.peer_name:  # the name for SNI and for the certificate check, not the URL host
                kwargs["sni"] = tls.peer_name
        self.conn: BlockingConnection | None  # None once closed (``live`` says so)
        try:
            self.conn = BlockingConnection(url, timeout=timeout, ssl_domain=ssl, heartbeat=heartbeat,
                                           container=_container(self._id), **kwargs)
        except (ProtonException, OSError) as exc:
            raise ClientError(f"cannot connect to {safe_url(url)}: {exc}{_sasl_hint(exc, user)}",
                              getattr(exc, "condition", None)) from exc
        engine = self.engine()
        if engine.state & Endpoint.REMOTE_CLOSED:
            cond = engine.remote_condition
            raise ClientError(f"{safe_url(url)} closed the connection: {_condition_text(cond)}",
                              getattr(cond, "name", None))

    # -- plumbing ------------------------------------------------------------------------------
    def _name(self, kind: str) -> str:
        return f"{kind}-{next(self._names)}-{uuid.uuid4().hex[:8]}"

    def live(self) -> BlockingConnection:
        """The connection, open: ``ClientError`` once ``close`` or ``abort`` dropped it, rather
        than an ``AttributeError`` from inside an operation."""
        conn = self.conn
        if conn is None or conn.conn is None:
            raise ClientError(f"the client of {safe_url(self.url)} is closed")
        return conn

    def engine(self) -> Connection:
        """The open connection's engine object (``live().conn``)."""
        engine = self.live().conn
        assert engine is not None  # live() checked it
        return engine

    def wait(self, condition: Callable[[], Any], timeout: float | None = None, what: str = "") -> None:
        """Drive the event loop until ``condition()``; ``ClientError`` on timeout or loss."""
        try:
            self.live().wait(condition, timeout=self.timeout if timeout is None else timeout, msg=what)
        except Timeout as exc:
            raise ClientError(f"timed out after {self.timeout if timeout is None else timeout}s: {what}") from exc
        except LinkDetached as exc:
            raise ClientError(str(exc), exc.condition) from exc
        except ProtonException as exc:
            raise ClientError(f"connection to {safe_url(self.url)} lost: {exc}",
                              getattr(exc, "condition", None)) from exc

    def pump(self) -> None:
        """Process whatever events are ready without blocking (keeps heartbeats flowing)."""
        with self.lock:
            self.wait(lambda: True, 0.0, "pump")

    @property
    def closed(self) -> bool:
        conn = self.conn
        c = conn.conn if conn is not None else None
        return conn is None or c is None or bool(c.state & (Endpoint.LOCAL_CLOSED | Endpoint.REMOTE_CLOSED)) \
            or bool(conn.disconnected)

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                try:
                    self.conn.close()
                except Exception:  # closing a broken connection: nothing more to do
                    pass
                self.conn = None
                self._mgmt = None

    def abort(self) -> None:
        """Drop the connection at once: close its socket, with no closing handshake.

        Why: an interrupt (Ctrl-C) can land inside proton's engine and leave it unable to finish
        a handshake (its selector may have lost the socket), so a graceful close would wait out
        the time-outs of every link and of the connection. The broker sees the socket closed and
        cleans up as for any vanished client. The client cannot be used afterwards."""
        with self.lock:
            conn, self.conn = self.conn, None
            self._mgmt = None
            if conn is None:
                return
            try:
                transport = conn.conn.transport if conn.conn is not None else None
                selectable = transport._selectable if transport is not None else None
            except Exception:  # the engine's state after an interrupt is not to be trusted
                selectable = None
            if selectable is not None:
                selectable.close()

    def __enter__(self) -> "Client":
        return self

    def leave(self, exc_type: type | None, close: Callable[[], None]) -> None:
        """How a ``with`` block of this client or of one of its links ends: ``close`` as
        usual, but the whole connection is aborted after an interrupt (see ``abort``)."""
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.abort()
        else:
            close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.leave(exc_type, self.close)

    # -- management ----------------------------------------------------------------------------
    def _management(self) -> tuple[BlockingSender, BlockingReceiver, _Collector]:
        if self._mgmt is None:
            name = self._name("management")
            props = {symbol("paired"): True}
            conn = self.live()
            try:
                sender = conn.create_sender(
                    "/management", name=name, options=_LinkOpts(snd_settle=Link.SND_SETTLED, properties=props))
                collector = _Collector(self)
                receiver_link = conn.container.create_receiver(
                    self.engine(), "/management", name=name, handler=collector,
                    options=_LinkOpts(snd_settle=Link.SND_SETTLED, properties=props, target="/management"))
                receiver = BlockingReceiver(conn, receiver_link, None, credit=0)
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
            status = int(reply.subject or "")  # no subject: malformed like any other
        except (TypeError, ValueError):
            raise ManagementError(f"{method} {path}: malformed answer subject {reply.subject!r}", 0,
                                  reply.body) from None
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

    def publisher_sequence(self, stream: str, reference: str) -> int:
        """The last publishing id the broker stored for ``reference`` on ``stream`` (0 when none)."""
        path = f"{queue_address(stream)}/sequences/{path_segment(reference)}"
        return int(self.request("GET", path, None, ok=(200,))[1]["sequence"])

    def stored_offset(self, stream: str, name: str) -> int | None:
        """The offset stored for consumer ``name`` on ``stream``, None when none is (a missing
        stream raises ``StreamNotFound`` all the same)."""
        status, body = self.request("GET", f"{queue_address(stream)}/offsets/{path_segment(name)}", None, ok=(200, 404))
        if status == 404:
            if not self.exists(stream):
                raise StreamNotFound(f"stream {stream!r} not found", 404, body)
            return None
        return int(body["offset"])

    def store_offset(self, stream: str, name: str, offset: int) -> None:
        """Store ``offset`` (the last one processed) for consumer ``name`` on ``stream``."""
        self.request("PUT", f"{queue_address(stream)}/offsets/{path_segment(name)}", {"offset": offset}, ok=(200,))

    # -- links -----------------------------------------------------------------------------------
    def publisher(self, stream: str, *, window: int = 256, presettled: bool = False,
                  timeout: float | None = None, reference: str | None = None) -> "Publisher":
        """A publisher to ``/queues/<stream>`` with at most ``window`` unsettled messages; with a
        ``reference``, a named publisher the broker deduplicates (see ``Publisher``)."""
        return Publisher(self, stream, window=window, presettled=presettled, timeout=timeout,
                         reference=reference)

    def exchange_publisher(self, exchange: str, routing_key: str = "", *, window: int = 256,
                           timeout: float | None = None) -> "Publisher":
        """A publisher to ``/exchanges/<exchange>/<routing_key>``: each message goes to every
        stream the exchange routes it to; one routed nowhere is released (not accepted)."""
        return Publisher(self, exchange, window=window, timeout=timeout, routing_key=routing_key)

    def consumer(self, stream: str, *, offset: Any = "first", filter_values: str | Sequence[str] | None = None,
                 match_unfiltered: bool = False, sql: str | None = None,
                 properties: Mapping[str, Any] | None = None,
                 application_properties: Mapping[str, Any] | None = None,
                 credit: int = 256, extra_filters: Mapping[str, Described] | None = None,
                 name: str | None = None, consumer_name: str | None = None) -> "Consumer":
        """A consumer of ``/queues/<stream>`` (see ``Consumer``; ``consumer_name``: a named
        consumer, which resumes where that name stopped and accepts each message itself)."""
        filters = build_filters(offset=offset, filter_values=filter_values, match_unfiltered=match_unfiltered,
                                sql=sql, properties=properties, application_properties=application_properties)
        if extra_filters:
            filters.update({symbol(k): v for k, v in extra_filters.items()})
        return Consumer(self, stream, filters, credit=credit, name=name, consumer_name=consumer_name)


def check_url(url: str) -> None:
    """``ClientError`` for a URL of another protocol (``http://...``): proton would try it as
    AMQP. A URL without a scheme (``host:port``) is AMQP."""
    scheme = url.partition("://")[0].lower() if "://" in url else "amqp"
    if scheme not in ("amqp", "amqps"):
        raise ClientError(f"{safe_url(url)} is not an AMQP URL: use amqp:// or amqps://")


def _sasl_hint(exc: BaseException, user: str | None) -> str:
    """What ``Authentication failed [mech=none]`` means: no mechanism both sides allow."""
    if "mech=none" not in str(exc):
        return ""
    if user is not None:
        return (" (the broker offers no mechanism this client allows: a user was given, so only "
                "PLAIN; a broker that offers only ANONYMOUS wants no user)")
    return " (the broker does not offer ANONYMOUS: give a user and password for PLAIN)"


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url
