"""The stream-protocol adapter: RabbitMQ's stream protocol (port 5552) on the broker's core.

Strategy: parallel to ``amqp_stream.amqp.adapter``. ``amqp_stream.streamproto`` owns the rules
of the conversation (handshake order, frame limits, what may be sent when); each connection is
a ``StreamConnection`` that feeds it and passes every frame to ``handle``, which answers from
the core: streams (Create, Delete, Metadata, StreamStats), publishers
(``amqp_stream.stream_listener.publishing``) and subscriptions (``amqp_stream.stream_listener.consuming``).
Refusals are ``BrokerError``s, answered with their ``stream_code``; a bug while handling one
frame closes that connection only (the loop's ``failed``).

Answers as RabbitMQ 4.2 gives them: PeerProperties says product ``RabbitMQ`` and the version
the AMQP listener announces (the Node client enables filtering from 3.13.0 on); Open answers
with the advertised host and port; Metadata names this broker as the leader of every stream
that exists; a deleted stream's publishers and subscriptions are dropped and their connection
gets a MetadataUpdate (``STREAM_NOT_AVAILABLE``). Stored offsets and publisher sequences
(StoreOffset, QueryOffset, QueryPublisherSequence, DeclarePublisher's reference) are
``amqp_stream.stream_listener.tracking``'s; a named publisher's messages are deduplicated by
``amqp_stream.stream_listener.publishing``. Super streams (CreateSuperStream, DeleteSuperStream,
Route, Partitions) are ``amqp_stream.stream_listener.super_streams``'; single active
consumer (Subscribe properties, ConsumerUpdate) is ``amqp_stream.stream_listener.single_active``'.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any, Callable

from amqp_stream import __version__
from amqp_stream.amqp.adapter import RABBITMQ_VERSION
from amqp_stream.arguments import from_stream_protocol, validate
from amqp_stream.core import Core
from amqp_stream.errors import BadRequest, BrokerError, Forbidden, NotFound, PreconditionFailed
from amqp_stream.loop import EventLoop
from amqp_stream.stream_listener import single_active, subscription_filters, super_streams, tracking
from amqp_stream.stream_listener.auth import Authenticator
from amqp_stream.stream_listener.connection import LargeFrames, StreamConnection
from amqp_stream.stream_listener.senders import Senders, sender_threads
from amqp_stream.stream_listener.consuming import Subscription
from amqp_stream.stream_listener.publishing import StreamPublisher
from amqp_stream.stream_listener.tls import TlsStreamConnection, server_context
from amqp_stream.streamproto import COMMAND_VERSIONS, Key, OffsetType, ResponseCode, ServerConnection, State
from amqp_stream.streamproto import frames as f
from amqp_stream.users import CONFIGURE, READ, WRITE
from storage import OffsetSpec, StorageError

__all__ = ["StreamAdapter", "SERVER_PROPERTIES"]

log = logging.getLogger("amqp_stream.stream_listener")

SERVER_PROPERTIES = {
    "product": "RabbitMQ",
    "version": RABBITMQ_VERSION,
    "platform": f"Python {sys.version.split()[0]} (amqp-stream {__version__})",
    "amqp-stream-version": __version__,
}


class StreamAdapter:
    def __init__(self, core: Core, eloop: EventLoop, security: Any):
        self.core = core
        self.eloop = eloop
        self.config = config = core.config
        self.store = getattr(security, "store", None)  # users and permissions (amqp_stream.users)
        self.auth = Authenticator(self.store, security)
        host = config.stream_advertised_host
        if not host:
            host = config.host if config.host not in ("", "0.0.0.0", "::") else socket.gethostname()
        self.advertised_host = host
        self.advertised_port = config.stream_advertised_port or config.stream_port
        self.tls_context = (server_context(config.tls_cert, config.tls_key)
                            if config.tls_cert and config.tls_key else None)
        self.advertised_tls_port = config.stream_tls_port
        self.connections: set[StreamConnection] = set()
        self.to_write: set[StreamConnection] = set()
        self.large_frames = LargeFrames()  # frames above frame_max being read, broker-wide
        threads = sender_threads(config.stream_send_threads)  # chunks sent off the loop
        self.senders = Senders(threads, eloop.mailbox.post) if threads else None
        self.counters = core.metrics.stream_protocol  # Prometheus series of this listener
        self.groups = single_active.Groups(core, self._restart)
        self._handlers: dict[type, Callable[[StreamConnection, Any], None]] = {
            f.PeerProperties: self._peer_properties,
            f.SaslHandshake: self._sasl_handshake,
            f.SaslAuthenticate: self._sasl_authenticate,
            f.Tune: self._nothing,
            f.Heartbeat: self._nothing,
            f.Open: self._open,
            f.Close: self._close,
            f.Response: self._response,
            f.ExchangeCommandVersions: self._exchange_command_versions,
            f.Create: self._create,
            f.Delete: self._delete,
            f.Metadata: self._metadata,
            f.StreamStats: self._stream_stats,
            f.DeclarePublisher: self._declare_publisher,
            f.DeletePublisher: self._delete_publisher,
            f.Publish: self._publish,
            f.QueryPublisherSequence: self._query_publisher_sequence,
            f.Subscribe: self._subscribe,
            f.Unsubscribe: self._unsubscribe,
            f.Credit: self._credit,
            f.StoreOffset: self._store_offset,
            f.QueryOffset: self._query_offset,
            f.ConsumerUpdateResponse: lambda conn, frame: self.groups.answer(conn, frame),
        }
        self._handlers.update(super_streams.handlers(core, self.allow))  # CreateSuperStream, Route, ...

    # -- connections -----------------------------------------------------------------------
    def accept(self, sock: socket.socket, peer: str) -> StreamConnection:
        """The plain listener's factory."""
        return self._added(StreamConnection(self.eloop, sock, peer, self, ServerConnection()), sock)

    def accept_tls(self, sock: socket.socket, peer: str) -> StreamConnection:
        """The TLS listener's factory."""
        assert self.tls_context is not None
        return self._added(TlsStreamConnection(self.eloop, sock, peer, self, ServerConnection(),
                                               context=self.tls_context), sock)

    def _added(self, conn: StreamConnection, sock: socket.socket) -> StreamConnection:
        try:
            conn.peer_address = sock.getpeername()
        except OSError:
            conn.peer_address = None
        self.connections.add(conn)
        self.counters["connections"].set(len(self.connections))
        return conn

    def removed(self, conn: StreamConnection) -> None:
        """The socket is closed: release everything of the connection."""
        self.connections.discard(conn)
        self.counters["connections"].set(len(self.connections))
        self.to_write.discard(conn)
        for pub in list(conn.publishers.values()):
            self._forget_publisher(conn, pub)
        for sub in list(conn.subscriptions.values()):
            self.drop_subscription(conn, sub)
        self.groups.forget(conn)
        if conn.opened:
            conn.opened = False
            self.core.metrics.connection_closed()
            log.info("stream connection %s closed", conn.peer)

    def process(self) -> None:
        """Turn hook: write what mailbox callbacks and wake-ups produced."""
        if self.to_write:
            conns, self.to_write = self.to_write, set()
            for conn in conns:
                conn.write()

    def close_all(self, reason: str) -> None:
        """Shutdown: a Close to every open connection, the others are just closed."""
        for conn in list(self.connections):
            if conn.closed:
                continue
            if conn.proto.state is State.OPEN:
                conn.send(f.Close(conn.proto.next_correlation_id(), ResponseCode.OK, reason))
                conn.linger()
                conn.write()
            else:
                conn.close()

    def dump_state(self) -> None:
        for conn in self.connections:
            log.warning("stream connection %s: state %s, %d pending bytes, publishers %s, "
                        "subscriptions %s, reading %s (throttled by %d), eof %s, finishing %s",
                        conn.peer, conn.proto.state.value, conn.pending,
                        sorted(conn.publishers), {i: (s.credit, s.waiting, s.next_offset)
                                                  for i, s in conn.subscriptions.items()},
                        conn.reading, len(conn.throttled), conn.eof, conn.finishing)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to this listener's counter ``name`` (``Metrics.stream_protocol``)."""
        self.counters[name].inc(n)

    def handle(self, conn: StreamConnection, frame: Any) -> None:
        handler = self._handlers.get(type(frame))
        if handler is None:  # a frame the codec lets through that we do not serve
            log.info("stream connection %s: %s not served", conn.peer, type(frame).__name__)
            try:
                conn.send(f.error_response(frame, ResponseCode.UNKNOWN_FRAME))
            except ValueError:
                pass
            return
        try:
            handler(conn, frame)
        except BrokerError as exc:
            log.info("stream connection %s: %s refused: %s", conn.peer, type(frame).__name__,
                     exc.description)
            conn.send(f.error_response(frame, exc.stream_code))

    # -- handshake -------------------------------------------------------------------------
    def _nothing(self, conn: StreamConnection, frame: Any) -> None:
        pass

    def _peer_properties(self, conn: StreamConnection, frame: f.PeerProperties) -> None:
        conn.send(f.PeerPropertiesResponse(frame.correlation_id, ResponseCode.OK, SERVER_PROPERTIES))

    def _sasl_handshake(self, conn: StreamConnection, frame: f.SaslHandshake) -> None:
        conn.send(f.SaslHandshakeResponse(frame.correlation_id, ResponseCode.OK,
                                          self.auth.mechanisms))

    def _sasl_authenticate(self, conn: StreamConnection, frame: f.SaslAuthenticate) -> None:
        code, user = self.auth.check(frame.mechanism, frame.data, conn.peer_address)
        if code not in (ResponseCode.OK, ResponseCode.SASL_CHALLENGE):
            log.info("stream connection %s: authentication failed (%s, code %d)", conn.peer,
                     frame.mechanism, code)
            self._refuse_later(conn, f.SaslAuthenticateResponse(frame.correlation_id, code))
            return
        if code == ResponseCode.OK:
            if conn.user is not None and user != conn.user:
                code = ResponseCode.SASL_CANNOT_CHANGE_USERNAME
            else:
                conn.user = user
                conn.anonymous = frame.mechanism == "ANONYMOUS"
        conn.send(f.SaslAuthenticateResponse(frame.correlation_id, code))

    def _refuse_later(self, conn: StreamConnection, answer: f.Frame) -> None:
        """RabbitMQ's silent close delay: a refused login (or vhost) is answered after
        ``auth_failure_delay`` seconds, the connection unread meanwhile, then closed (the
        answer ends the protocol state); a client that guesses passwords gets one guess per
        delay per connection."""
        delay = self.config.auth_failure_delay
        if delay <= 0:
            conn.send(answer)
            return
        conn.throttle(self, True)

        def answer_now() -> None:
            if not conn.closed:
                conn.send(answer)
                conn.write()

        conn.loop.call_later(delay, answer_now)

    def _open(self, conn: StreamConnection, frame: f.Open) -> None:
        if frame.virtual_host != "/":
            log.info("stream connection %s refused: vhost %r does not exist", conn.peer,
                     frame.virtual_host)
            self._refuse_later(conn, f.OpenResponse(frame.correlation_id,
                                                    ResponseCode.VHOST_ACCESS_FAILURE))
            return
        if self.store is not None and not self.store.may_use_vhost(self._who(conn), "/"):
            log.info("stream connection %s refused: user %r has no permissions on vhost '/'",
                     conn.peer, conn.user)
            self._refuse_later(conn, f.OpenResponse(frame.correlation_id,
                                                    ResponseCode.VHOST_ACCESS_FAILURE))
            return
        conn.send(f.OpenResponse(frame.correlation_id, ResponseCode.OK, {
            "advertised_host": self.advertised_host,
            "advertised_port": str(self._port_for(conn))}))
        conn.handshake_done()
        conn.opened = True
        conn.start_heartbeats()
        self.core.metrics.connection_opened()
        log.info("stream connection %s opened: user %s, client %s", conn.peer, conn.user,
                 conn.proto.client_properties.get("product", "?"))

    def _port_for(self, conn: StreamConnection) -> int:
        """The port to advertise: a TLS client is sent to the TLS port."""
        return self.advertised_tls_port if isinstance(conn, TlsStreamConnection) \
            else self.advertised_port

    def _close(self, conn: StreamConnection, frame: f.Close) -> None:
        log.info("stream connection %s: the client closes (%d %s)", conn.peer, frame.code,
                 frame.reason)
        conn.send(f.Response(Key.CLOSE, frame.correlation_id, ResponseCode.OK))

    def _response(self, conn: StreamConnection, frame: f.Response) -> None:
        if frame.command == Key.CLOSE:  # the answer to our Close
            conn.finish()

    def _exchange_command_versions(self, conn: StreamConnection,
                                   frame: f.ExchangeCommandVersions) -> None:
        conn.send(f.ExchangeCommandVersionsResponse(frame.correlation_id, ResponseCode.OK,
                                                    COMMAND_VERSIONS))

    # -- permissions -----------------------------------------------------------------------
    @staticmethod
    def _who(conn: StreamConnection) -> str | None:
        """The user whose permissions apply; None after ANONYMOUS (everything allowed)."""
        return None if conn.anonymous else conn.user

    def allow(self, conn: StreamConnection, what: str, resource: str) -> None:
        """``Forbidden`` (ACCESS_REFUSED) unless the connection's user may ``what``
        (``users.CONFIGURE``/``WRITE``/``READ``) the stream or exchange ``resource``."""
        if self.store is not None:
            self.store.check(self._who(conn), "/", what, resource)

    def allowed(self, conn: StreamConnection, what: str, resource: str) -> bool:
        try:
            self.allow(conn, what, resource)
        except Forbidden:
            return False
        return True

    # -- streams ---------------------------------------------------------------------------
    def _create(self, conn: StreamConnection, frame: f.Create) -> None:
        name = frame.stream
        if not name:
            raise BadRequest("a stream needs a name")
        self.allow(conn, CONFIGURE, name)
        if self.core.exists(name):
            conn.send(f.Response(Key.CREATE_STREAM, frame.correlation_id,
                                 ResponseCode.STREAM_ALREADY_EXISTS))
            return
        arguments = validate(from_stream_protocol(dict(frame.arguments)))
        self.core.declare(name, arguments)
        log.info("stream %r created by %s: %s", name, conn.peer, arguments)
        conn.send(f.Response(Key.CREATE_STREAM, frame.correlation_id, ResponseCode.OK))

    def _delete(self, conn: StreamConnection, frame: f.Delete) -> None:
        self.allow(conn, CONFIGURE, frame.stream)
        count = self.core.delete(frame.stream)
        if count is None:
            raise NotFound(f"no stream '{frame.stream}'")
        log.info("stream %r deleted by %s (%d messages)", frame.stream, conn.peer, count)
        conn.send(f.Response(Key.DELETE_STREAM, frame.correlation_id, ResponseCode.OK))

    def _metadata(self, conn: StreamConnection, frame: f.Metadata) -> None:
        if self.core.cluster is not None:
            conn.send(self._cluster_metadata(frame))
            return
        streams = []
        for name in frame.streams:
            if not (self.allowed(conn, READ, name) or self.allowed(conn, WRITE, name)):
                streams.append(f.StreamMetadata(name, ResponseCode.ACCESS_REFUSED, 0xFFFF, ()))
            elif self.core.exists(name):
                streams.append(f.StreamMetadata(name, ResponseCode.OK, 0, ()))
            else:
                streams.append(f.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST,
                                                0xFFFF, ()))
        brokers = ((f.Broker(0, self.advertised_host, self._port_for(conn)),)
                   if any(s.code == ResponseCode.OK for s in streams) else ())
        conn.send(f.MetadataResponse(frame.correlation_id, brokers, tuple(streams)))

    def _cluster_metadata(self, frame: f.Metadata) -> f.MetadataResponse:
        """As RabbitMQ's: each stream's leader and replicas among the endpoints of the live
        nodes that hold them (a leader that is down is 0xFFFF, its stream still OK)."""
        cluster = self.core.cluster
        for name in frame.streams:  # one this node does not know yet: asked of ZooKeeper
            if cluster.layout(name) is None:
                cluster.look_up(name)
        view = cluster.view
        brokers: dict[str, f.Broker] = {}

        def ref(node: str) -> int:
            if node not in brokers:
                n = view.nodes[node]
                brokers[node] = f.Broker(len(brokers), n.host, n.stream_port)
            return brokers[node].reference

        streams = []
        for name in frame.streams:
            layout = view.layouts.get(name)
            if layout is None:
                streams.append(f.StreamMetadata(name, ResponseCode.STREAM_DOES_NOT_EXIST,
                                                0xFFFF, ()))
                continue
            leader = ref(layout.leader) if layout.leader in view.nodes else 0xFFFF
            streams.append(f.StreamMetadata(name, ResponseCode.OK, leader, tuple(
                ref(m) for m in view.live_replicas(layout))))
        return f.MetadataResponse(frame.correlation_id, tuple(brokers.values()), tuple(streams))

    def layout_changed(self, name: str, before: Any, after: Any) -> None:
        """A cluster stream's leader moved (``after``) or it was deleted (None): as RabbitMQ
        when the member a publisher or subscription is attached to goes, they are dropped
        and their connection gets a MetadataUpdate, so the client asks Metadata again and
        reconnects. Publishers go to the leader, so all of them move; a subscription moves
        only off a node that was the leader and no longer is (elsewhere it reads the local
        replica, which stays)."""
        if before is None:  # a stream seen for the first time: nothing attached moves
            return
        if after is not None and after != before and after.leader == before.leader:
            return  # a member change raised the epoch: the leader carries on in place
        # after == before: this node begins handing its leadership over (publishers move)
        moved = RuntimeError(f"the leader of stream '{name}' moved")
        me = self.core.cluster.name
        subscriptions_move = after is None or (before is not None and before.leader == me
                                               and after.leader != me)
        for conn in list(self.connections):
            attachments: list[Any] = [p for p in conn.publishers.values() if p.entry.name == name]
            if subscriptions_move:
                attachments += [s for s in conn.subscriptions.values() if s.entry.name == name]
            for attachment in attachments:
                self._end_attachment(attachment, moved)

    def _stream_stats(self, conn: StreamConnection, frame: f.StreamStats) -> None:
        self.allow(conn, READ, frame.stream)
        stream = self.core.stream(frame.stream).stream
        empty = stream.next_offset <= stream.first_offset
        # osiris:get_stats' three (clients read each; rabbitmq-stream-js-client's suite expects
        # last_chunk_id): the last is the last chunk written here, committed or not
        stats = {"first_chunk_id": -1 if empty else stream.first_offset,
                 "committed_chunk_id": -1 if empty else stream.committed_chunk_id,
                 "last_chunk_id": stream.last_chunk_id}
        conn.send(f.StreamStatsResponse(frame.correlation_id, ResponseCode.OK, stats))

    # -- tracking --------------------------------------------------------------------------
    def _store_offset(self, conn: StreamConnection, frame: f.StoreOffset) -> None:
        """As RabbitMQ: free on a stream the connection consumes, else read is needed; a
        refused store has no answer (StoreOffset has none), only a log line."""
        if not any(s.entry.name == frame.stream for s in conn.subscriptions.values()) \
                and not self.allowed(conn, READ, frame.stream):
            log.warning("stream connection %s: user %r may not store an offset on %r",
                        conn.peer, conn.user, frame.stream)
            return
        leader = self._offsets_elsewhere(conn, frame.stream)
        if leader is not None:
            try:
                leader.store_offset(frame.reference, frame.offset)
            except StorageError as exc:
                log.info("stream connection %s: StoreOffset on %r ignored: %s", conn.peer,
                         frame.stream, exc)
            return
        tracking.store_offset(self.core.get(frame.stream), frame.reference, frame.offset,
                              conn.peer)

    def _query_offset(self, conn: StreamConnection, frame: f.QueryOffset) -> None:
        self.allow(conn, READ, frame.stream)
        leader = self._offsets_elsewhere(conn, frame.stream)
        if leader is not None:
            leader.query_offset(frame.reference, lambda offset, error: self._offset_answer(
                conn, frame.correlation_id, offset, error))
            return
        cluster = self.core.cluster
        if (cluster is not None and self._forwarded_here(conn)
                and cluster.layout(frame.stream) is not None
                and not cluster.forwarding.takes_appends(frame.stream)):
            # another node's forwarder, sent here as to the leader, and this node does not
            # lead it (yet: its log would refuse the store before this query): ask again
            conn.send(f.QueryOffsetResponse(frame.correlation_id,
                                            ResponseCode.STREAM_NOT_AVAILABLE, 0))
            return
        offset = tracking.query_offset(self.core.stream(frame.stream), frame.reference)
        self._offset_answer(conn, frame.correlation_id, offset, None)

    def _offset_answer(self, conn: StreamConnection, correlation_id: int, offset: int | None,
                       error: BrokerError | None) -> None:
        """QueryOffset's response (now, or from the leader's answer on the loop)."""
        if not conn.serving:
            return
        if error is not None:
            conn.send(f.QueryOffsetResponse(correlation_id, error.stream_code, 0))
        elif offset is None:
            conn.send(f.QueryOffsetResponse(correlation_id, ResponseCode.NO_OFFSET, 0))
        else:
            conn.send(f.QueryOffsetResponse(correlation_id, ResponseCode.OK, offset))
        self.to_write.add(conn)

    @staticmethod
    def _forwarded_here(conn: StreamConnection) -> bool:
        """On a cluster node: whether ``conn`` is another node's forwarder
        (``cluster.forwarder``; imported here only: a single node imports nothing of it)."""
        from amqp_stream.cluster.forwarder import FORWARDER_PRODUCT
        return conn.proto.client_properties.get("product") == FORWARDER_PRODUCT

    def _offsets_elsewhere(self, conn: StreamConnection, stream: str) -> Any:
        """Where ``stream``'s consumer offsets go when another node leads it, as RabbitMQ
        stores and reads them on the leader (``cluster.forwarder.ForwardEntry``); None on a
        single node, on the leader, and for a connection that is itself forwarded here."""
        if self.core.cluster is None or self._forwarded_here(conn):
            return None
        return self.core.offsets_elsewhere(stream)

    def _query_publisher_sequence(self, conn: StreamConnection,
                                  frame: f.QueryPublisherSequence) -> None:
        self.allow(conn, READ, frame.stream)
        sequence = tracking.query_sequence(self.core.stream(frame.stream), frame.reference)
        conn.send(f.QueryPublisherSequenceResponse(frame.correlation_id, ResponseCode.OK,
                                                   sequence))

    # -- publishers ------------------------------------------------------------------------
    def _declare_publisher(self, conn: StreamConnection, frame: f.DeclarePublisher) -> None:
        self.allow(conn, WRITE, frame.stream)
        if frame.publisher_id in conn.publishers:
            raise BadRequest(f"publisher {frame.publisher_id} exists")
        if frame.reference:
            tracking.check_reference(frame.reference)
            if any(p.reference == frame.reference and p.entry.name == frame.stream
                   for p in conn.publishers.values()):  # as RabbitMQ: one per connection
                raise PreconditionFailed(f"publisher reference {frame.reference!r} is taken "
                                         f"on {frame.stream!r}")
        entry = self.core.stream(frame.stream)
        config = self.config
        pub = StreamPublisher(conn, frame.publisher_id, frame.reference, entry,
                              self.core.publish_budget, config.max_unconfirmed_bytes,
                              config.max_message_size, self.core.mailbox.post,
                              self.core.mark_dirty, self._end_attachment)
        conn.publishers[frame.publisher_id] = pub
        self.core.attach_publisher(entry, pub)
        conn.send(f.Response(Key.DECLARE_PUBLISHER, frame.correlation_id, ResponseCode.OK))
        log.info("stream publisher %d of %s -> %r%s", frame.publisher_id, conn.peer, entry.name,
                 f" as {frame.reference!r}" if frame.reference else "")

    def _delete_publisher(self, conn: StreamConnection, frame: f.DeletePublisher) -> None:
        pub = conn.publishers.get(frame.publisher_id)
        if pub is None:
            code = ResponseCode.PUBLISHER_DOES_NOT_EXIST
        else:
            self._forget_publisher(conn, pub)
            code = ResponseCode.OK
        conn.send(f.Response(Key.DELETE_PUBLISHER, frame.correlation_id, code))

    def _forget_publisher(self, conn: StreamConnection, pub: StreamPublisher) -> None:
        if conn.publishers.get(pub.id) is pub:
            del conn.publishers[pub.id]
        if conn.last_publishers.get(pub.entry.name) is pub:
            del conn.last_publishers[pub.entry.name]
        if not pub.closed:
            if pub.throttled:
                pub.throttled = False
                conn.throttle(pub, False)
            pub.close()
            self.core.detach_publisher(pub.entry, pub)

    def _publish(self, conn: StreamConnection, frame: f.Publish) -> None:
        pub = conn.publishers.get(frame.publisher_id)
        if pub is None:
            conn.send(f.PublishError(frame.publisher_id, tuple(
                (m[0], ResponseCode.PUBLISHER_DOES_NOT_EXIST) for m in frame.messages)))
            self.count("publish_errors", len(frame.messages))
            self.core.metrics.stream_error(ResponseCode.PUBLISHER_DOES_NOT_EXIST)
            return
        self.core.metrics.received("stream", len(frame.messages), len(frame.messages))
        last = conn.last_publishers.setdefault(pub.entry.name, pub)
        if last is not pub:
            # a publisher's frames of a turn go to storage as one append at its end: the last
            # other publisher's to the same stream first, so one connection's frames to a
            # stream are stored in the order they came (RabbitMQ writes each frame in turn)
            if last.bodies:
                last.flush()
            conn.last_publishers[pub.entry.name] = pub
        pub.publish(frame.messages)

    # -- subscriptions ---------------------------------------------------------------------
    def _subscribe(self, conn: StreamConnection, frame: f.Subscribe) -> None:
        corr = frame.correlation_id
        if frame.subscription_id in conn.subscriptions:
            conn.send(f.Response(Key.SUBSCRIBE, corr, ResponseCode.SUBSCRIPTION_ID_ALREADY_EXISTS))
            return
        self.allow(conn, READ, frame.stream)
        sac = single_active.wanted(frame.properties)
        entry = self.core.stream(frame.stream)
        filters = subscription_filters.parse(frame.properties)
        spec, start = _offset_spec(frame.offset_spec)
        reader = entry.reader(spec, filters.values, filters.match_unfiltered, filters.compiled)
        sub = Subscription(conn, frame.subscription_id, entry, reader, frame.credit, start,
                           filters.match, self._end_attachment)
        sub.filters = filters
        sub.properties = dict(frame.properties)
        sub.end_offset = filters.end_offset
        notices = []
        if sac is not None:
            try:
                notices = self.groups.join(sub, *sac, frame.offset_spec)
            except BrokerError:
                sub.close()
                raise
        conn.subscriptions[frame.subscription_id] = sub
        self.core.attach_consumer(entry, sub)
        conn.send(f.Response(Key.SUBSCRIBE, corr, ResponseCode.OK))
        self.groups.send(notices)
        log.info("stream subscription %d of %s <- %r from %s%s%s", frame.subscription_id,
                 conn.peer, entry.name, frame.offset_spec,
                 f" filter {filters.values}" if filters.values else "",
                 f" stage 2: {filters.stage2}" if filters.stage2 else "")
        sub.pump()

    def _unsubscribe(self, conn: StreamConnection, frame: f.Unsubscribe) -> None:
        sub = conn.subscriptions.get(frame.subscription_id)
        if sub is None:
            code = ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST
        else:
            self.drop_subscription(conn, sub)
            code = ResponseCode.OK
        conn.send(f.Response(Key.UNSUBSCRIBE, frame.correlation_id, code))

    def drop_subscription(self, conn: StreamConnection, sub: Subscription) -> None:
        if conn.subscriptions.get(sub.id) is sub:
            del conn.subscriptions[sub.id]
        if not sub.closed:
            sub.close()
            self.core.detach_consumer(sub.entry, sub)
            self.groups.leave(sub)

    def _restart(self, sub: Subscription, offset_spec: Any) -> None:
        """A single active consumer answered its ConsumerUpdate: deliver from its offset."""
        spec, start = _offset_spec(offset_spec)
        filters = sub.filters
        sub.restart(sub.entry.reader(spec, filters.values, filters.match_unfiltered,
                                     filters.compiled), start)

    def _credit(self, conn: StreamConnection, frame: f.Credit) -> None:
        sub = conn.subscriptions.get(frame.subscription_id)
        if sub is None:
            conn.send(f.CreditResponse(ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST,
                                       frame.subscription_id))
            return
        sub.add_credit(frame.credit)

    # -- the core ends attachments ---------------------------------------------------------
    def _end_attachment(self, attachment: Any, error: Exception) -> None:
        """A publisher's or subscription's stream was deleted: drop it; once its connection
        has nothing left on that stream, tell the client (MetadataUpdate), after the frame
        being handled is answered: when that connection deleted the stream itself, RabbitMQ
        sends the Delete's answer first (rstream handles MetadataUpdate in its reading loop
        after a random sleep of up to 2 s, which held a later answer past its timeout)."""
        conn = attachment.conn
        if isinstance(attachment, Subscription):
            self.drop_subscription(conn, attachment)
        else:
            self._forget_publisher(conn, attachment)
        name = attachment.entry.name
        if not conn.serving:
            return
        if any(a.entry.name == name for a in (*conn.publishers.values(),
                                              *conn.subscriptions.values())):
            return
        conn.loop.call_soon(self._metadata_update, conn, name)

    def _metadata_update(self, conn: StreamConnection, name: str) -> None:
        if conn.serving:
            conn.send(f.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, name))
            conn.write()


def _offset_spec(spec: Any) -> tuple[OffsetSpec, int]:
    """The storage offset spec for a Subscribe's, and the first offset stage 2 may send."""
    kind = spec.type
    if kind == OffsetType.FIRST:
        return OffsetSpec.first(), 0
    if kind == OffsetType.LAST:
        return OffsetSpec.last(), 0
    if kind == OffsetType.NEXT:
        return OffsetSpec.next(), 0
    if kind == OffsetType.OFFSET:
        return OffsetSpec.offset(spec.value), spec.value
    return OffsetSpec.timestamp(spec.value), 0
