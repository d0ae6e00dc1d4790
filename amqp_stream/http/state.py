"""What the HTTP handlers see of the broker: the core and both protocol adapters, and each open
connection of either protocol as one plain record (``Conn``).

Why a record: RabbitMQ lists AMQP and stream connections side by side under one name scheme
(``"peer_host:peer_port -> host:port"``); the shapes (``connections``, ``streams``) are then
pure functions of records, and closing one (``close``) is the only place that knows which
adapter owns it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from aiohttp import web
from proton import Endpoint

from amqp_stream.config import BrokerConfig
from amqp_stream.http.errors import not_found
from amqp_stream.http.rates import Rates, all_counts
from amqp_stream.http.users import Users
from amqp_stream.loop import peer_name

__all__ = ["BrokerState", "Conn", "STATE", "VHOST", "CLOSED_BY_MANAGEMENT", "json_value"]

VHOST = "/"  # the broker's only virtual host
CLOSED_BY_MANAGEMENT = "Closed via management plugin"  # RabbitMQ's reason, word for word


@dataclass
class Conn:
    """One open connection, either protocol, as plain values (``obj`` is the adapter's)."""

    name: str
    protocol: str  # "AMQP 1-0" or "stream", as RabbitMQ names them
    user: str
    host: str
    port: int
    peer_host: str
    peer_port: int
    ssl: bool
    client_properties: dict[str, Any]
    frame_max: int
    timeout: int  # heartbeat (stream) or idle timeout (AMQP), seconds
    connected_at: int  # ms since the epoch (the socket's accept)
    channels: int  # AMQP 1.0: sessions begun and not ended (RabbitMQ 4); stream: 0
    channel_max: int
    recv_oct: int  # bytes read from the socket, TLS records included
    send_oct: int
    recv_cnt: int  # recv calls that read something
    send_cnt: int  # send and sendfile calls
    send_pend: int  # bytes queued for the socket, not yet taken (stream only; AMQP: 0)
    obj: Any = field(repr=False, default=None)
    ssl_protocol: str = ""  # RabbitMQ's: "tlsv1.3"; "" without TLS (rabbit_ssl:info's '')

    @classmethod
    def of(cls, io: Any, send_pend: int, **fields: Any) -> "Conn":
        """A record with the socket statistics and TLS version of ``io``
        (``loop.SocketConnection``; ``tls_version`` where the connection has TLS)."""
        tls_version = getattr(io, "tls_version", None)
        return cls(connected_at=io.connected_at, recv_oct=io.bytes_in, send_oct=io.bytes_out,
                   recv_cnt=io.reads, send_cnt=io.writes, send_pend=send_pend, obj=io,
                   ssl_protocol=tls_version().lower() if tls_version else "", **fields)


def _address(addr: Any) -> tuple[str, int]:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return str(addr[0]), int(addr[1])
    return str(addr), 0


def _ends(sock: Any) -> tuple[tuple[str, int], tuple[str, int], str] | None:
    """(local, peer, RabbitMQ's connection name) of an open socket; None once it is closed."""
    try:
        local, peer = sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    return _address(local), _address(peer), f"{peer_name(peer)} -> {peer_name(local)}"


class BrokerState:
    """The broker as the handlers read it. ``amqp`` and ``streams`` are the two adapters."""

    def __init__(self, config: BrokerConfig, core: Any, amqp: Any, streams: Any,
                 node: str, listeners: list[dict[str, Any]], store: Any):
        self.config = config
        self.core = core
        self.amqp = amqp
        self.streams = streams
        self.node = node
        self.listeners = listeners  # RabbitMQ's overview "listeners", filled by the server
        self.users = Users(store)
        self.started = time.time()
        self.rates = Rates()
        self.octet_rates = Rates()  # connections' recv_oct and send_oct, by connection name

    def check_vhost(self, vhost: str) -> None:
        """404 for any vhost but ``/`` (this broker has no other)."""
        if vhost != VHOST:
            raise not_found(f"vhost '{vhost}' does not exist (this broker has only '/')")

    def message_stats(self) -> dict[str, dict[str, Any]]:
        """RabbitMQ's ``message_stats`` of the overview (key ``""``) and of each stream."""
        return self.rates.read(all_counts(self.core))

    def octet_stats(self) -> dict[str, dict[str, Any]]:
        """Each open connection's ``recv_oct`` and ``send_oct`` with RabbitMQ's
        ``_details.rate`` (its ``coarse_conn_stats``), by connection name: every connection is
        sampled, whoever asks, so that a filtered listing leaves no gap in the others'."""
        return self.octet_rates.read({c.name: {"recv_oct": c.recv_oct, "send_oct": c.send_oct}
                                      for c in self.connections()})

    # -- connections -----------------------------------------------------------------------
    def connections(self) -> Iterator[Conn]:
        yield from self._amqp_connections()
        yield from self.stream_connections()

    def _amqp_connections(self) -> Iterator[Conn]:
        ssl = self.amqp.ssl_domain is not None
        for state in list(self.amqp.states.values()):
            io = state.io
            if not state.opened or io.closed or io.connection is None:
                continue
            ends = _ends(io.sock)
            if ends is None:
                continue
            (host, port), (peer_host, peer_port), name = ends
            conn, transport = io.connection, io.transport
            try:
                user = transport.user if transport is not None else None
                props = {str(k): json_value(v) for k, v in (conn.remote_properties or {}).items()}
                container = conn.remote_container
                frame_max = int(transport.remote_max_frame_size or 0) if transport else 0
                timeout = int(transport.idle_timeout or 0) if transport else 0
                channel_max = (min(transport.channel_max, transport.remote_channel_max)
                               if transport else 0)
                sessions = _sessions(conn)
            except Exception:  # proton objects of a connection going away
                continue
            if container:
                props.setdefault("container_id", str(container))
            # send_pend 0: asking proton (pn_transport_pending) would make it produce output
            yield Conn.of(io, 0, name=name, protocol="AMQP 1-0",
                          user=user or "anonymous", host=host, port=port, peer_host=peer_host,
                          peer_port=peer_port, ssl=ssl, client_properties=props,
                          frame_max=frame_max, timeout=timeout, channels=sessions,
                          channel_max=channel_max)

    def stream_connections(self) -> Iterator[Conn]:
        for conn in list(self.streams.connections):
            if not conn.opened or conn.closed:
                continue
            ends = _ends(conn.sock)
            if ends is None:
                continue
            (host, port), (peer_host, peer_port), name = ends
            proto = conn.proto
            # rabbit_stream_reader: channels and channel_max are 0
            yield Conn.of(conn, conn.pending, name=name, protocol="stream",
                          user=conn.user or "anonymous", host=host, port=port,
                          peer_host=peer_host, peer_port=peer_port,
                          ssl=type(conn).__name__.startswith("Tls"),
                          client_properties=dict(proto.client_properties),
                          frame_max=int(proto.frame_max), timeout=int(proto.heartbeat),
                          channels=0, channel_max=0)

    def connection(self, name: str) -> Conn | None:
        return next((c for c in self.connections() if c.name == name), None)

    def close(self, conn: Conn, reason: str = CLOSED_BY_MANAGEMENT) -> None:
        """Close ``conn`` as RabbitMQ's DELETE does: AMQP with ``amqp:connection:forced`` and
        RabbitMQ's reason; a stream connection's socket at once, without a Close frame
        (``rabbit_stream_reader`` stops on the management's shutdown; the Node client takes a
        Close from the server for an unknown response)."""
        if conn.protocol == "stream":
            conn.obj.close()
        else:
            self.amqp.close_one(conn.obj, "amqp:connection:forced", reason)

    def close_user(self, user: str) -> None:
        """Close every open connection of ``user``, both protocols', as RabbitMQ's
        ``rabbit_connection_tracking`` does on ``user_deleted`` (the HTTP DELETE of a user and
        the broker's reload of a users file that no longer has it)."""
        for conn in [c for c in self.connections() if c.user == user]:
            self.close(conn, f"user '{user}' is deleted")

    # -- attachments -----------------------------------------------------------------------
    def amqp_consumers(self) -> Iterator[tuple[Conn, Any]]:
        from amqp_stream.amqp.consuming import Consumer

        for conn in self._amqp_connections():
            state = self.amqp.states.get(conn.obj.cimp)
            for link in list(state.links.values()) if state is not None else ():
                if isinstance(link, Consumer) and not link.closed:
                    yield conn, link

    def stream_subscriptions(self) -> Iterator[tuple[Conn, Any]]:
        for conn in self.stream_connections():
            for sub in list(conn.obj.subscriptions.values()):
                if not sub.closed:
                    yield conn, sub

    def stream_publishers(self) -> Iterator[tuple[Conn, Any]]:
        for conn in self.stream_connections():
            for pub in list(conn.obj.publishers.values()):
                if not pub.closed:
                    yield conn, pub


STATE = web.AppKey("state", BrokerState)


def _sessions(conn: Any) -> int:
    """Sessions the peer began and has not ended (``rabbit_amqp_reader``'s channels)."""
    mask = Endpoint.REMOTE_ACTIVE
    n, session = 0, conn.session_head(mask)
    while session is not None:
        n += 1
        session = session.next(mask)
    return n


def json_value(value: Any) -> Any:
    """An AMQP property value as JSON can hold it (proton's symbols, binaries, maps)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return str(value)
