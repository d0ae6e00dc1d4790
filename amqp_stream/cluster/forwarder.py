"""AMQP 1.0 publishes to a stream this node does not lead, forwarded to its leader.

Why: a stream-protocol client goes to the leader itself (Metadata), an AMQP 1.0 client does
not: as in RabbitMQ 4, it publishes to any stream through any node. A publisher link on a
cluster node appends to a ``ForwardEntry`` instead of the stream's local entry. Each append
goes to this node's own log when this node leads the stream (and its leader role is applied);
otherwise to the stream's ``StreamForwarder``: a thread with one stream-protocol connection to
the leader (``amqp_stream.client.stream.StreamClient``, our own client), that publishes the
batch and calls the batch's ``on_durable`` once every message of it is confirmed. The leader
confirms only after its quorum commit, so an AMQP delivery is accepted only once a majority
of the stream's members holds it: never sooner than a publish made on the leader itself.

Deduplication, so a leader move loses and duplicates nothing:

- a link with a publisher reference (``amqp_stream.amqp.tracking``) is forwarded as a named
  producer of that reference with the messages' own publishing ids: the leader deduplicates
  it exactly as it would a publish made on it;
- every other link's messages go as this node's named producer of the stream
  (``FORWARD_REFERENCE`` + the node's name), numbered by the forwarder from the sequence the
  leader holds for it (``QueryPublisherSequence`` at connect), as RabbitMQ's stream queue
  client numbers its writes for osiris's deduplication.

When the leader goes (connection lost, ``MetadataUpdate``, the view names another leader, or
a PublishError while it steps down), the forwarder connects to the leader the view names next
and sends what is unconfirmed again, in order, under the same ids: the new leader drops what
it holds (its log holds every committed chunk, and the producers' sequences with them) and
confirms it. If no leader takes them within ``hold`` seconds they are answered ``Released``
(AMQP ``released``: nothing of it confirmed, the client may send it again), as RabbitMQ
releases a message whose queue went without confirming it. Order per link is kept: batches go
out in the order appended, are sent again in that order, and a link's appends go to the local
log only once nothing forwarded is unconfirmed.

Consumer offsets go the same way (``ForwardEntry.store_offset``, ``query_offset``): RabbitMQ
stores and reads a consumer's offset on the stream's leader (``rabbit_stream_reader``'s
``store_offset``/``query_offset`` call ``osiris:write_tracking``/``read_tracking`` on the
leader's writer), so a stream-protocol StoreOffset or QueryOffset on a node that does not lead
the stream, and a named AMQP consumer's offsets there, are sent to the leader over the stream's
forwarder connection, after its publishes, and follow it when it moves. A StoreOffset has no
answer, so the forwarder asks for the offset after it: a store is kept (the latest per consumer
name) until a leader answered that query, so one sent to a leader that died, or to a new leader
whose log does not take appends yet, goes again to the next; a query waits for a leader as a
publish does (``hold``). The forwarder's own connection is not forwarded again by the node it
reaches (``FORWARDER_PRODUCT``): a node that does not lead (or not yet) answers its query
``STREAM_NOT_AVAILABLE`` and the forwarder asks the leader the view names next, so two nodes
with different views cannot pass a request back and forth.

Memory: what is unconfirmed is bounded by the AMQP links' credit (their unconfirmed messages
and bytes), as for a local publish; the forwarder keeps the bytes until they are confirmed.
Offsets waiting for a leader are bounded by the consumers asking (one store kept per consumer
name, the latest; one query per waiting request).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from amqp_stream.client.errors import ClientError
from amqp_stream.cluster.wakeup import Wakeup
from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.errors import BrokerError, InternalError, NotFound, Released, ResourceDeleted
from amqp_stream.streamproto import ResponseCode
from storage.errors import StorageError, StreamClosedError
from storage.tracking import tracking_id

if TYPE_CHECKING:
    from amqp_stream.cluster.layout import Node
    from amqp_stream.cluster.node import ClusterNode
    from amqp_stream.core import Core

__all__ = ["Forwarding", "ForwardEntry", "StreamForwarder", "FORWARD_REFERENCE",
           "FORWARDER_PRODUCT"]

log = logging.getLogger(__name__)

FORWARD_REFERENCE = "amqp-forward:"  # + node name: the named producer of unnamed links
FORWARDER_PRODUCT = "amqp-stream forwarder"  # its connections' peer property ``product``
# PublishError codes that say "not the leader (any more)": send again to the next leader
_MOVED = {ResponseCode.STREAM_NOT_AVAILABLE, ResponseCode.INTERNAL_ERROR,
          ResponseCode.PUBLISHER_DOES_NOT_EXIST, ResponseCode.STREAM_DOES_NOT_EXIST}
_MAX_PUBLISHERS = 256  # a publisher id is one byte
_RETRY_S = 0.2  # between connection attempts while no leader answers
_FRAME_ROOM = 64  # a Publish frame's bytes beyond its messages' (size, key, version, ...)

OnDurable = Callable[[int, "Exception | None"], None]
OnOffset = Callable[["int | None", "BrokerError | None"], None]  # (stored offset, error)


class _Batch:
    """One AMQP link's append of a loop turn: settled as one (``on_durable``)."""

    __slots__ = ("on_durable", "left", "error")

    def __init__(self, on_durable: OnDurable, left: int):
        self.on_durable = on_durable
        self.left = left
        self.error: Exception | None = None


class _Producer:
    """A named producer on the leader: an AMQP link's reference, or this node's own."""

    def __init__(self, reference: str, internal: bool):
        self.reference = reference
        self.internal = internal
        self.publisher_id = -1  # on the current connection (-1: not declared there)
        self.next_id = 0  # internal: the next id to give (from the leader's sequence)
        # publishing id -> [(batch, filter value, body)], in the order sent
        self.inflight: dict[int, list[tuple[_Batch, str | None, bytes]]] = {}


class _Moved(Exception):
    """The connected node no longer leads the stream."""


class StreamForwarder:
    """One stream's forwarding to its leader: a thread and one connection (see the module)."""

    def __init__(self, stream: str, node_name: str, leader: Callable[[], "Node | None"],
                 user: str, password: str, hold: float):
        self.stream = stream
        self.leader = leader  # the live leader's node as the view names it, or None
        self.user, self.password = user, password
        self.hold = hold
        self.internal = FORWARD_REFERENCE + node_name
        self.lock = threading.Lock()
        self.queue: collections.deque[tuple[str | None, list, list, list, OnDurable]] = \
            collections.deque()
        self.outstanding = 0  # batches submitted and not yet answered (loop reads it)
        # consumer offsets for the leader: the latest store per consumer name, and queries
        # with their answers (both under ``lock``)
        self.stores: dict[str, int] = {}
        self.queries: collections.deque[tuple[str, OnOffset]] = collections.deque()
        self.closed = False
        self.ending: BrokerError | None = None  # what the batches left get when it closes
        self.client: StreamClient | None = None
        self.connected_to: str | None = None
        self.producers: dict[str, _Producer] = {}
        self.by_id: dict[int, _Producer] = {}
        self.stuck_since: float | None = None  # since when work waits for a leader
        self.again = False  # the leader refused as a non-leader: reconnect
        self.forwarded = self.resent = 0
        self.wakeup = Wakeup()
        self.thread = threading.Thread(target=self._run, name=f"forward-{stream}", daemon=True)

    # -- the loop's side -------------------------------------------------------------------
    def start(self) -> StreamForwarder:
        self.thread.start()
        return self

    def submit(self, reference: str | None, bodies: Sequence[bytes], ids: Sequence[int],
               values: Sequence[str | None], on_durable: OnDurable) -> None:
        """Queue one batch (its messages in order); ``on_durable(0, error)`` runs on this
        forwarder's thread once every message is confirmed (``error`` None) or not taken."""
        with self.lock:
            if self.closed:
                raise self.ending or Released(f"forwarding to the leader of '{self.stream}' "
                                              f"has stopped")
            self.queue.append((reference, list(bodies), list(ids), list(values), on_durable))
            self.outstanding += 1
        self.wakeup.wake()

    def store_offset(self, consumer: str, offset: int) -> None:
        """Store ``consumer``'s offset on the leader (no answer, as StoreOffset has none)."""
        with self.lock:
            if self.closed:
                log.info("offset %d of %r on %r not stored: forwarding has stopped", offset,
                         consumer, self.stream)
                return
            self.stores[consumer] = offset
        self.wakeup.wake()

    def query_offset(self, consumer: str, answer: OnOffset) -> None:
        """Ask the leader for ``consumer``'s stored offset; ``answer(offset or None, None)``
        runs on this forwarder's thread, ``answer(None, error)`` when no leader answered."""
        with self.lock:
            if self.closed:
                raise self.ending or Released(f"forwarding to the leader of '{self.stream}' "
                                              f"has stopped")
            self.queries.append((consumer, answer))
        self.wakeup.wake()

    def close(self, ending: BrokerError) -> None:
        """Stop; every batch not confirmed is answered with ``ending``."""
        with self.lock:
            if self.closed:
                return
            self.closed, self.ending = True, ending
        self.wakeup.wake()

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self.closed:
                try:
                    self._turn()
                except (ClientError, OSError, _Moved) as exc:
                    self._drop(exc)
                    self.wakeup.wait(None, _RETRY_S)  # not a tight loop against a refusing node
                self._expire()
        except Exception:  # a bug: say it, and answer what waits rather than hold it
            log.exception("forwarding to the leader of %r failed", self.stream)
            self.ending = Released(f"forwarding to the leader of '{self.stream}' failed")
            self.closed = True
        finally:
            self._drop(None)
            self._fail_all(self.ending or Released("forwarding stopped"))
            self.wakeup.close()

    def _has_work(self) -> bool:
        return (bool(self.queue or self.stores or self.queries)
                or any(p.inflight for p in self.producers.values()))

    def _turn(self) -> None:
        if self.client is None:
            if not self._has_work():
                self.wakeup.wait(None, 1.0)
                return
            if self.stuck_since is None:
                self.stuck_since = time.monotonic()
            if not self._connect():
                self.wakeup.wait(None, _RETRY_S)
                return
        client = self.client
        assert client is not None
        leader = self.leader()
        if leader is None or leader.name != self.connected_to:
            raise _Moved(f"the view names {leader.name if leader else 'no live leader'}")
        self._send_queued()
        self._send_offsets()
        self.wakeup.wait(client, 0.5)
        if self.stream in client.gone:
            raise _Moved("MetadataUpdate")
        if self.again:
            raise _Moved("a PublishError from a node that no longer leads")

    def _connect(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        url = f"rabbitmq-stream://{leader.host}:{leader.stream_port}"
        try:
            client = StreamClient(url, user=self.user, password=self.password, timeout=5.0,
                                  on_confirm=self._confirmed, on_error=self._refused,
                                  product=FORWARDER_PRODUCT)
        except (ClientError, OSError) as exc:
            log.debug("forwarding %r: cannot reach leader %s at %s: %s", self.stream,
                      leader.name, url, exc)
            return False
        self.client, self.connected_to, self.again = client, leader.name, False
        self.by_id.clear()
        log.info("forwarding AMQP publishes to %r to its leader %s (%s)", self.stream,
                 leader.name, url)
        for producer in list(self.producers.values()):  # what is unconfirmed goes again
            if producer.inflight:
                self._declare(producer)
                items = [(pid, value, body) for pid, entries in producer.inflight.items()
                         for _, value, body in entries]
                self.resent += len(items)
                self._publish(producer, items)
            elif not producer.internal:
                del self.producers[producer.reference]
        return True

    def _drop(self, why: Exception | None) -> None:
        client, self.client, self.connected_to = self.client, None, None
        for producer in self.producers.values():
            producer.publisher_id = -1
        self.by_id.clear()
        if client is None:
            return
        if why is not None:
            log.info("forwarding %r: leaving leader connection (%s); %d unconfirmed will go "
                     "to the next leader", self.stream, why,
                     sum(len(e) for p in self.producers.values() for e in p.inflight.values()))
            if self._has_work() and self.stuck_since is None:
                self.stuck_since = time.monotonic()
        try:
            client.sock.close()
        except OSError:
            pass

    def _producer(self, reference: str | None) -> _Producer:
        key = reference or self.internal
        producer = self.producers.get(key)
        if producer is None:
            producer = self.producers[key] = _Producer(key, reference is None)
            if producer.internal:
                producer.next_id = -1  # asked of the leader at its declare
        if producer.publisher_id < 0:
            self._declare(producer)
        return producer

    def _declare(self, producer: _Producer) -> None:
        client = self.client
        assert client is not None
        if len(self.by_id) >= _MAX_PUBLISHERS:
            raise _Moved("publisher ids used up: reconnect to reuse them")
        publisher_id = next(i for i in range(_MAX_PUBLISHERS) if i not in self.by_id)
        client.declare_publisher(publisher_id, self.stream, producer.reference)
        producer.publisher_id = publisher_id
        self.by_id[publisher_id] = producer
        if producer.internal and producer.next_id < 0:
            producer.next_id = client.publisher_sequence(self.stream, producer.reference) + 1

    def _send_queued(self) -> None:
        while True:
            with self.lock:
                if not self.queue:
                    return
                reference, bodies, ids, values, on_durable = self.queue.popleft()
            batch = _Batch(on_durable, len(bodies))
            if not bodies:
                self._answer(batch)
                continue
            producer = self._producer(reference)
            items = []
            for i, body in enumerate(bodies):
                if producer.internal:
                    pid = producer.next_id
                    producer.next_id += 1
                else:
                    pid = ids[i]
                producer.inflight.setdefault(pid, []).append((batch, values[i], body))
                items.append((pid, values[i], body))
            self.forwarded += len(items)
            self._publish(producer, items)

    def _send_offsets(self) -> None:
        """The consumer offsets waiting, after the publishes queued before them. A query
        leaves the queue only once answered: a lost connection asks the next leader."""
        client = self.client
        assert client is not None
        with self.lock:
            stores = dict(self.stores)
        for consumer, offset in stores.items():
            client.store_offset(consumer, self.stream, offset)
            # StoreOffset has no answer: a query after it says the leader took it (a node
            # not yet taking appends as the new leader answers STREAM_NOT_AVAILABLE: again)
            held = self._query(client, consumer)
            with self.lock:
                if self.stores.get(consumer) == offset:
                    del self.stores[consumer]
            if held != offset:
                log.info("forwarding %r: the leader holds %r for %r after storing %d", self.stream,
                         held, consumer, offset)
        while True:
            with self.lock:
                if not self.queries:
                    break
                consumer, answer = self.queries[0]
            error: BrokerError | None = None
            stored: int | None = None
            try:
                stored = self._query(client, consumer)
            except BrokerError as exc:
                error = exc
            with self.lock:
                self.queries.popleft()
            if not self._busy():
                self.stuck_since = None
            self._tell(answer, stored, error)

    def _query(self, client: StreamClient, consumer: str) -> int | None:
        """The leader's stored offset of ``consumer``; ``BrokerError`` for its refusal,
        ``_Moved`` when the node does not (yet) lead, ``ClientError`` without an answer."""
        try:
            return client.query_offset(consumer, self.stream)
        except ClientError as exc:
            if exc.condition is None:  # no answer: the connection, not the leader
                raise
            if exc.condition == ResponseCode.STREAM_NOT_AVAILABLE.name:
                raise _Moved("an offset query answered by a node that does not lead") from None
            error = BrokerError(f"the leader of '{self.stream}' refused the query of "
                                f"{consumer!r}: {exc.condition}")
            error.stream_code = ResponseCode[exc.condition]
            raise error from None

    def _busy(self) -> bool:
        """Publishes wait for the leader's confirms."""
        return bool(self.queue) or any(p.inflight for p in self.producers.values())

    def _tell(self, answer: OnOffset, stored: int | None, error: BrokerError | None) -> None:
        try:
            answer(stored, error)
        except Exception:
            log.exception("answering an offset query of %r", self.stream)

    def _publish(self, producer: _Producer, items: list[tuple[int, str | None, bytes]]) -> None:
        """Publish frames of at most the leader's frame size."""
        client = self.client
        assert client is not None
        room = (client.frame_max or (1 << 20)) - _FRAME_ROOM
        frame: list[tuple[int, str | None, bytes]] = []
        size = 0
        for item in items:
            n = 12 + len(item[2]) + (2 + len(item[1].encode()) if item[1] is not None else 0)
            if frame and size + n > room:
                client.send(publish_frame(producer.publisher_id, frame))
                frame, size = [], 0
            frame.append(item)
            size += n
        if frame:
            client.send(publish_frame(producer.publisher_id, frame))

    def _confirmed(self, publisher_id: int, ids: Sequence[int]) -> None:
        producer = self.by_id.get(publisher_id)
        if producer is None:
            return
        self.stuck_since = None
        inflight = producer.inflight
        for pid in ids:
            entries = inflight.get(pid)
            if not entries:
                continue
            batch = entries.pop(0)[0]
            if not entries:
                del inflight[pid]
            batch.left -= 1
            if not batch.left:
                self._answer(batch)

    def _refused(self, publisher_id: int, errors: Sequence[tuple[int, int]]) -> None:
        producer = self.by_id.get(publisher_id)
        if producer is None:
            return
        for pid, code in errors:
            if code in _MOVED:  # the node steps down, or is not the leader: send it again
                self.again = True
                continue
            entries = producer.inflight.get(pid)
            if not entries:
                continue
            batch = entries.pop(0)[0]
            if not entries:
                del producer.inflight[pid]
            name = ResponseCode(code).name if code in ResponseCode._value2member_map_ else code
            batch.error = BrokerError(f"the leader of '{self.stream}' refused the message: {name}")
            batch.left -= 1
            if not batch.left:
                self._answer(batch)

    def _answer(self, batch: _Batch) -> None:
        with self.lock:
            self.outstanding -= 1
        try:
            batch.on_durable(0, batch.error)
        except Exception:
            log.exception("settling a forwarded batch of %r", self.stream)

    def _expire(self) -> None:
        """Work that no leader took for ``hold`` seconds is released."""
        since = self.stuck_since
        if since is None or time.monotonic() - since < self.hold:
            return
        self.stuck_since = None
        self._drop(None)
        self._fail_all(Released(f"no leader of stream '{self.stream}' took the message within "
                                f"{self.hold:.0f} s"))

    def _fail_all(self, error: BrokerError) -> None:
        batches: dict[int, _Batch] = {}
        for producer in self.producers.values():
            for entries in producer.inflight.values():
                for batch, _, _ in entries:
                    batches[id(batch)] = batch
            producer.inflight.clear()
        with self.lock:
            queued, self.queue = list(self.queue), collections.deque()
            queries, self.queries = list(self.queries), collections.deque()
            stores, self.stores = self.stores, {}
        if queries or stores:
            log.warning("forwarding %r: %d offset queries answered and %d stores dropped: %s",
                        self.stream, len(queries), len(stores), error)
        for _, answer in queries:
            self._tell(answer, None, error)
        if batches or queued:
            log.warning("forwarding %r: %d batch(es) answered %s: %s", self.stream,
                        len(batches) + len(queued), type(error).__name__, error)
        for batch in batches.values():
            batch.error = error
            self._answer(batch)
        for *_, on_durable in queued:
            batch = _Batch(on_durable, 0)
            batch.error = error
            self._answer(batch)

    def stats(self) -> dict[str, int]:
        return {"forwarded": self.forwarded, "resent": self.resent,
                "outstanding": self.outstanding}


class ForwardEntry:
    """What an AMQP publisher link on a cluster node appends to (it quacks as the
    ``StreamEntry`` a publisher uses: ``name``, ``metrics``, ``publishers``, ``append``)."""

    def __init__(self, forwarding: Forwarding, name: str):
        self.forwarding = forwarding
        self.name = name
        self.publishers: set[Any] = set()
        self.deleted = False
        self.forwarder: StreamForwarder | None = None

    @property
    def metrics(self) -> Any:
        local = self._local()
        return local.metrics if local is not None else None

    def _local(self) -> Any:
        """This node's entry when it leads the stream and takes appends, and nothing
        forwarded waits (so a link's messages stay in order), else None."""
        if self.forwarder is not None and self.forwarder.outstanding:
            return None
        if not self.forwarding.takes_appends(self.name):
            return None
        return self.forwarding.core.get(self.name)

    def append(self, reference: str | None, bodies: list, ids: list[int], values: list,
               on_durable: OnDurable, records: int | None = None,
               nbytes: int | None = None) -> None:
        if self.deleted:
            raise ResourceDeleted(f"stream '{self.name}' was deleted")
        local = self._local()
        if local is not None:
            local.append(reference, bodies, ids, values,
                         self._after_local(reference, bodies, ids, values, on_durable),
                         records, nbytes)
            return
        self._forwarder().submit(reference, bodies, ids, values, on_durable)

    def store_offset(self, consumer: str, offset: int) -> None:
        """Store ``consumer``'s offset on the stream's leader (``storage.Stream``'s
        signature, for ``amqp.tracking.ConsumerOffsets``): in this node's log when it leads,
        else through the forwarder. ``StorageError`` for a name or offset that cannot be
        stored, as a local store."""
        local = self._leading()
        if local is not None:
            local.stream.store_offset(consumer, offset)
            return
        tracking_id(consumer, "consumer name")  # refused here as a local store refuses it
        if type(offset) is not int or not 0 <= offset < 1 << 64:
            raise StorageError(f"an offset is an integer in 0..2^64-1, not {offset!r}")
        self._forwarder().store_offset(consumer, offset)

    def query_offset(self, consumer: str, answer: OnOffset) -> None:
        """``consumer``'s offset as the leader holds it; ``answer(offset or None, error)``
        runs on the loop, later (never within this call)."""
        post = self.forwarding.core.mailbox.post
        local = self._leading()
        try:
            tracking_id(consumer, "consumer name")
        except StorageError:  # a name that cannot be stored has nothing stored
            post(answer, None, None)
            return
        if local is None:
            self._forwarder().query_offset(consumer, lambda *result: post(answer, *result))
            return
        try:
            post(answer, local.stream.query_offset(consumer), None)
        except StorageError as exc:
            post(answer, None, InternalError(f"stream '{self.name}': {exc}"))

    def _leading(self) -> Any:
        """This node's entry when the layout names it leader (its log stores offsets)."""
        cluster = self.forwarding.cluster
        layout = cluster.layout(self.name)
        if layout is None or layout.leader != cluster.name:
            return None
        return self.forwarding.core.get(self.name)

    def _forwarder(self) -> StreamForwarder:
        forwarder = self.forwarder
        if forwarder is None or forwarder.closed:
            forwarder = self.forwarder = self.forwarding.forwarder(self.name)
        return forwarder

    def _after_local(self, reference: str | None, bodies: list, ids: list[int], values: list,
                     on_durable: OnDurable) -> OnDurable:
        """A local append's callback. This node deposed before the batch was confirmed
        (``StreamClosedError`` from the leader role's end, the layout naming another
        leader): a named link's batch goes on to the new leader, whose deduplication by its
        ids keeps it once (its chunk may be committed already); an unnamed one is released
        (it may be in the new leader's log: a resend without ids could double it)."""
        def durable(offset: int, error: Exception | None) -> None:
            if error is not None and isinstance(error, StreamClosedError) and not self.deleted:
                layout = self.forwarding.cluster.view.layouts.get(self.name)
                if layout is not None and layout.leader != self.forwarding.cluster.name:
                    if reference:
                        try:
                            self._forwarder().submit(reference, bodies, ids, values, on_durable)
                            return
                        except BrokerError as exc:
                            error = exc
                    else:
                        error = Released(f"stream '{self.name}': this node stopped leading it "
                                         f"before the message was confirmed")
            on_durable(offset, error)
        return durable

    def delete(self) -> None:
        """The stream is gone from the cluster: its links end, what waits is answered."""
        self.deleted = True
        gone = ResourceDeleted(f"stream '{self.name}' was deleted")
        for publisher in list(self.publishers):
            try:
                publisher.end(gone)
            except Exception:
                log.exception("ending %r on the deletion of %r", publisher, self.name)
        self.publishers.clear()
        if self.forwarder is not None:
            self.forwarder.close(gone)


class Forwarding:
    """A cluster node's AMQP publish path: one ``ForwardEntry`` per stream its links
    publish to, one ``StreamForwarder`` per stream it forwards to a leader elsewhere."""

    def __init__(self, core: Core, cluster: ClusterNode, user: str, password: str,
                 hold: float):
        self.core = core
        self.cluster = cluster
        self.user, self.password = user, password
        self.hold = hold
        self.entries: dict[str, ForwardEntry] = {}
        cluster.layout_hooks.append(self.layout_changed)

    def entry(self, name: str) -> ForwardEntry:
        """On the loop: ``NotFound`` when the cluster has no stream ``name``."""
        entry = self.entries.get(name)
        if entry is None or entry.deleted:
            if not self.cluster.exists(name):
                raise NotFound(f"no stream '{name}'")
            entry = self.entries[name] = ForwardEntry(self, name)
        return entry

    def lookup(self, name: str) -> ForwardEntry | None:
        try:
            return self.entry(name)
        except NotFound:
            return None

    def takes_appends(self, name: str) -> bool:
        """Whether this node leads ``name`` and its log takes appends (the leader role is
        applied: until then a new leader's log still refuses them, as a replica's)."""
        cluster = self.cluster
        layout = cluster.layout(name)
        if layout is None or layout.leader != cluster.name:
            return False
        replication = cluster.replication
        return len(layout.members) == 1 or (replication is not None
                                            and name in replication.leaders)

    def offsets_elsewhere(self, name: str) -> ForwardEntry | None:
        """On the loop: where consumer offsets of ``name`` go when another node leads it
        (its entry here); None when this node leads it or the cluster has no such stream
        (a stream this node does not know yet is looked up in ZooKeeper first)."""
        layout = self.cluster.look_up(name)
        if layout is None or layout.leader == self.cluster.name:
            return None
        return self.lookup(name)

    def forwarder(self, name: str) -> StreamForwarder:
        cluster = self.cluster

        def leader() -> Node | None:  # on the forwarder's thread: the view is replaced whole
            view = cluster.view
            layout = view.layouts.get(name)
            return view.nodes.get(layout.leader) if layout is not None else None
        return StreamForwarder(name, cluster.name, leader, self.user, self.password,
                               self.hold).start()

    def layout_changed(self, name: str, before: Any, after: Any) -> None:
        if after is None:
            entry = self.entries.pop(name, None)
            if entry is not None:
                entry.delete()

    def close(self) -> None:
        for entry in self.entries.values():
            if entry.forwarder is not None:
                entry.forwarder.close(Released("the node is stopping"))
