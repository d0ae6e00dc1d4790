"""AMQP 1.0 consumers of a stream this node holds no member of, served from a member.

Why: an AMQP 1.0 client consumes from any stream through any node, as in RabbitMQ 4. A node
that is a member (leader or replica) serves its consumers from its own log; a node that is not
gives the consumer link a ``RemoteEntry``, whose ``reader`` is a ``RemoteReader``: a thread
with one stream-protocol subscription (``amqp_stream.client.stream.StreamClient``, our own
client) to a live member, a replica first (as RabbitMQ spreads consumers over replicas), the
leader otherwise. It quacks as the ``storage.Reader`` the AMQP consumer reads
(``read_chunk``, ``position``, ``stats``, ``close``), so everything the consumer does is the
same as on a member:

- the offsets are the stream's: the member sends its chunks as they lie on its disk (header
  and data section, CRC checked here) and the records are numbered from the chunk id;
- stage 1 (``rabbitmq:stream-filter``, ``match-unfiltered``) is asked of the member
  (``filter.N`` / ``match-unfiltered`` on the Subscribe: the same Bloom test its own readers
  make), stage 2 (SQL, property filters) runs in the consumer as on a member;
- a member shows committed chunks only, so nothing uncommitted is delivered.

When the member goes (connection lost), the reader subscribes to another live member from the
offset after the last chunk it took: the consumer goes on, no record lost or repeated, and the
AMQP link is told nothing. Memory: at most ``MAX_CHUNKS`` chunks are held (credit is given
only for room; a chunk is at most the storage's chunk size).

A named consumer (offset tracking, ``x-consumer-name``) works here as on a member: its stored
offset is asked of the leader before its reader starts, and what it accepts is stored on the
leader (``amqp.consuming.Consumer``'s ``offsets_at``: the stream's ``cluster.forwarder``
entry), as for a named consumer on a replica. The entry has no local log (no ``stream``): the
consumer's lag is not known here.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

from amqp_stream.client.errors import ClientError
from amqp_stream.cluster.wakeup import Wakeup
from amqp_stream.client.stream import StreamClient
from amqp_stream.errors import NotFound, ResourceDeleted
from amqp_stream.streamproto import OffsetSpec as WireSpec
from amqp_stream.streamproto import OffsetType
from amqp_stream.streamproto.constants import FILTER_PROPERTY_PREFIX, MATCH_UNFILTERED_PROPERTY
from storage.crc import crc32
from storage.errors import CorruptionError
from storage.format import CHUNK_HEADER_BYTES, CHUNK_USER, decode_header, decode_records
from storage.offsets import OffsetSpec
from storage.reader import ReadChunk, ReaderStats

if TYPE_CHECKING:
    from amqp_stream.cluster.layout import Node
    from amqp_stream.cluster.node import ClusterNode
    from amqp_stream.core import Core

__all__ = ["RemoteReading", "RemoteEntry", "RemoteReader", "MAX_CHUNKS"]

log = logging.getLogger(__name__)

MAX_CHUNKS = 8  # chunks held per remote consumer (credit given for room only)
_RETRY_S = 0.2
_SUBSCRIPTION = 0


def wire_spec(spec: OffsetSpec) -> WireSpec:
    """The stream protocol's offset spec for a storage one."""
    return WireSpec(getattr(OffsetType, spec.kind.upper()), spec.value)


class RemoteReader:
    """One consumer's chunks from a member elsewhere (see the module)."""

    def __init__(self, stream: str, spec: OffsetSpec, filter_values: Iterable[str],
                 match_unfiltered: bool, members: Callable[[], "list[Node]"], user: str,
                 password: str, on_chunk: Callable[[], None]):
        self.stream = stream
        self.spec = spec
        self.properties = {f"{FILTER_PROPERTY_PREFIX}{i}": v
                           for i, v in enumerate(filter_values)}
        if self.properties and match_unfiltered:
            self.properties[MATCH_UNFILTERED_PROPERTY] = "true"
        self.members = members
        self.user, self.password = user, password
        self.on_chunk = on_chunk  # from the thread: a chunk arrived (wake the consumer)
        self.stats = ReaderStats()
        self.position = spec.value if spec.kind == "offset" else 0
        self.lower = self.position  # records below it are not given (a chunk starts before)
        self.resume: int | None = None  # where to subscribe again: after the last chunk taken
        self.chunks: collections.deque[ReadChunk] = collections.deque()
        self.lock = threading.Lock()
        self.given = 0  # credit outstanding with the member
        self.closed = False
        self.client: StreamClient | None = None
        self.source: str | None = None
        self.wakeup = Wakeup()
        self.thread = threading.Thread(target=self._run, name=f"remote-read-{stream}",
                                       daemon=True)
        self.thread.start()

    # -- the consumer's side (the loop) ----------------------------------------------------
    def read_chunk(self, max_skips: int | None = None) -> ReadChunk | None:
        with self.lock:
            chunk = self.chunks.popleft() if self.chunks else None
        if chunk is not None:
            self.position = chunk.next_offset
            self.wakeup.wake()  # room for more credit
        return chunk

    def close(self) -> None:
        self.closed = True
        self.wakeup.wake()

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self.closed:
                try:
                    if self.client is None and not self._connect():
                        self.wakeup.wait(None, _RETRY_S)
                        continue
                    self._credit()
                    self.wakeup.wait(self.client, 0.5)
                except (ClientError, OSError, CorruptionError) as exc:
                    self._drop(exc)
        except Exception:
            log.exception("reading %r from a member failed", self.stream)
        finally:
            self._drop(None)
            self.wakeup.close()

    def _connect(self) -> bool:
        for member in self.members():
            url = f"rabbitmq-stream://{member.host}:{member.stream_port}"
            try:
                client = StreamClient(url, user=self.user, password=self.password, timeout=5.0,
                                      on_chunk=self._take, auto_credit=False,
                                      product="amqp-stream remote reader")
            except (ClientError, OSError):
                continue
            spec = self.spec if self.resume is None else OffsetSpec.offset(self.resume)
            with self.lock:  # before the Subscribe: its first chunks may come with the answer
                room = MAX_CHUNKS - len(self.chunks)
                self.given = room
            try:
                client.subscribe(_SUBSCRIPTION, self.stream, wire_spec(spec), room,
                                 self.properties)
            except (ClientError, OSError) as exc:
                log.info("reading %r: %s refused the subscription: %s", self.stream,
                         member.name, exc)
                client.sock.close()
                continue
            self.client, self.source = client, member.name
            log.info("AMQP consumer of %r reads from member %s (%s) from %s", self.stream,
                     member.name, url, spec)
            return True
        return False

    def _drop(self, why: Exception | None) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        if why is not None:
            log.info("reading %r: left member %s (%s); going on from offset %s elsewhere",
                     self.stream, self.source, why, self.resume)
        try:
            client.sock.close()
        except OSError:
            pass

    def _credit(self) -> None:
        client = self.client
        assert client is not None
        with self.lock:
            room = MAX_CHUNKS - len(self.chunks) - self.given
            if room > 0:
                self.given += room
        if room > 0:
            client.credit(_SUBSCRIPTION, room)

    def _take(self, chunk: memoryview) -> None:
        """A Deliver's chunk (header and data section; the filter and trailer stay behind)."""
        h = decode_header(chunk, path=f"member of {self.stream}")
        with self.lock:
            self.given -= 1
        if h.type != CHUNK_USER or not h.records:
            self.resume = h.next_offset
            return
        data = bytes(chunk[CHUNK_HEADER_BYTES:CHUNK_HEADER_BYTES + h.data_length])
        if len(data) != h.data_length or crc32(data) != h.crc:  # read again elsewhere
            raise CorruptionError(f"member of {self.stream}", h.chunk_id,
                                  "CRC mismatch in a chunk read from a member")
        records = decode_records(data, h.chunk_id, entries=h.entries)
        self.resume = h.next_offset
        if records and records[0][0] < self.lower:
            records = [r for r in records if r[0] >= self.lower]
        self.stats.chunks_read += 1
        self.stats.bytes_read += len(chunk)
        if records:
            with self.lock:
                self.chunks.append(ReadChunk(h.chunk_id, h.timestamp, records, h.next_offset))
            self.on_chunk()


class RemoteEntry:
    """What an AMQP consumer link on a node with no member of the stream reads (it quacks as
    the ``StreamEntry`` a consumer uses: ``name``, ``metrics``, ``consumers``, ``reader``)."""

    metrics = None

    def __init__(self, reading: RemoteReading, name: str):
        self.reading = reading
        self.name = name
        self.consumers: set[Any] = set()
        self.deleted = False

    def reader(self, spec: OffsetSpec, filter_values: Any = (), match_unfiltered: bool = False,
               stage2: Any = None) -> RemoteReader:
        cluster = self.reading.cluster
        name = self.name

        def members() -> list[Node]:  # on the reader's thread: the view is replaced whole
            view = cluster.view
            layout = view.layouts.get(name)
            if layout is None:
                return []
            order = [*view.live_replicas(layout), layout.leader]
            return [view.nodes[m] for m in order if m in view.nodes]
        return RemoteReader(name, spec, filter_values, match_unfiltered, members,
                            self.reading.user, self.reading.password,
                            lambda: self.reading.core.mailbox.post(self.wake))

    def wake(self) -> None:
        """On the loop: chunks arrived for the consumers waiting at their end."""
        for consumer in list(self.consumers):
            consumer.wake()

    def delete(self) -> None:
        self.deleted = True
        gone = ResourceDeleted(f"stream '{self.name}' was deleted")
        for consumer in list(self.consumers):
            try:
                consumer.end(gone)
            except Exception:
                log.exception("ending %r on the deletion of %r", consumer, self.name)
        self.consumers.clear()


class RemoteReading:
    """A cluster node's AMQP consumers of streams it holds no member of."""

    def __init__(self, core: Core, cluster: ClusterNode, user: str, password: str):
        self.core = core
        self.cluster = cluster
        self.user, self.password = user, password
        self.entries: dict[str, RemoteEntry] = {}
        cluster.layout_hooks.append(self.layout_changed)

    def entry(self, name: str) -> RemoteEntry:
        """On the loop: ``NotFound`` when the cluster has no stream ``name``."""
        entry = self.entries.get(name)
        if entry is None or entry.deleted:
            if not self.cluster.exists(name):
                raise NotFound(f"no stream '{name}'")
            entry = self.entries[name] = RemoteEntry(self, name)
        return entry

    def layout_changed(self, name: str, before: Any, after: Any) -> None:
        if after is None:
            entry = self.entries.pop(name, None)
            if entry is not None:
                entry.delete()
