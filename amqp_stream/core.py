"""The broker's protocol-neutral core: streams, declare/delete, appends, wake-ups, metrics.

Strategy: everything a stream does for a client, whatever protocol that client speaks, lives
here and is called by the protocol adapters (``amqp_stream.amqp`` today, the stream protocol
next) on the event loop thread:

- streams: ``declare`` (validated arguments; all or nothing), ``delete`` (ends every attached
  consumer and publisher of every protocol with ``ResourceDeleted``), ``info``, ``stream``;
- definitions: exchanges and bindings (``amqp_stream.definitions``, super streams are
  ``amqp_stream.super_streams``), loaded after the streams; a super stream operation a crash
  interrupted is completed at start; deleting a stream drops its bindings;
- attachments: a consumer or publisher of any protocol registers with ``attach`` and leaves
  with ``detach``; it only has to offer ``end(error)`` (the core ends it) and, for consumers,
  ``wake()`` (the stream grew);
- appends: publishers queue their messages during a loop turn and ``mark_dirty`` themselves;
  ``flush`` hands each publisher's batch to its stream's writer once per turn (group commit
  across connections), and the writers' callbacks come back through the mailbox;
- memory: ``publish_budget`` bounds the bytes publishers of all protocols hold;
- wake-ups: storage's writer threads say "the committed end of X moved"; the names are
  collected and each waiting consumer of X is woken once per mailbox batch.

Errors are ``amqp_stream.errors.BrokerError``s, which each adapter turns into its protocol's
answer.
"""

from __future__ import annotations

import collections
import logging
import os
from typing import Any, Callable, Protocol

from amqp_stream.config import BrokerConfig
from amqp_stream.definitions import FILE as DEFINITIONS_FILE
from amqp_stream.definitions import Definitions, FileStore
from amqp_stream.errors import Forbidden, NotFound, ResourceDeleted
from amqp_stream.loop import Mailbox
from amqp_stream.metrics import Metrics, StreamState
from amqp_stream.streams import Registry, StreamEntry
from amqp_stream import arguments as stream_arguments

__all__ = ["Core", "Attachment", "ByteBudget", "Publishing", "DefinitionsUnreadable"]

log = logging.getLogger(__name__)


class DefinitionsUnreadable(RuntimeError):
    """The definitions file exists but cannot be read: the broker must not start."""


class Attachment(Protocol):
    """A consumer or publisher of any protocol, as the core sees it."""

    def end(self, error: Exception) -> None:
        """The broker ends it (its stream was deleted, the broker stops)."""


class Publishing(Protocol):
    def flush(self) -> None:
        """Hand the messages queued this turn to storage."""


class ByteBudget:
    """Bytes that every publisher of the broker holds; ``waiting`` callbacks run (once) when
    the total falls back under ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.waiting: dict[Any, Callable[[], None]] = {}

    @property
    def over(self) -> bool:
        return self.used >= self.limit

    def take(self, n: int) -> None:
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n
        if self.waiting and self.used < self.limit:
            waiting, self.waiting = self.waiting, {}
            for callback in waiting.values():
                callback()


def _stored_offsets(entry: StreamEntry) -> dict[str, int]:
    """Consumer name -> stored offset of ``entry``'s stream (empty when its writer failed)."""
    try:
        offsets, _ = entry.stream.tracking()
    except Exception:  # StorageError: the state may be ahead of the disk; nothing to show
        return {}
    return {name.decode("utf-8", "replace"): offset for name, offset in offsets.items()}


class Core:
    def __init__(self, config: BrokerConfig, mailbox: Mailbox, metrics: Metrics | None = None):
        self.config = config
        self.mailbox = mailbox
        self.metrics = metrics or Metrics()
        self.registry = Registry(config, self._on_moved)
        # exchanges and bindings (super streams); loaded by open_all, after the streams
        self.definitions = Definitions(
            FileStore(os.path.join(config.data_dir, DEFINITIONS_FILE)), self.exists)
        self.moved: collections.deque[str] = collections.deque()
        self.dirty: list[Publishing] = []
        self.flush_scheduled = False
        self.stopping = False
        # bytes every publisher of every protocol holds until the disk has them
        self.publish_budget = ByteBudget(config.max_unconfirmed_bytes_total)
        # the adapters' ``process``: run after each batch of work that may have produced
        # output (a flush, a mailbox batch), so that output is written in the same turn
        self.turn_hooks: list[Callable[[], None]] = []
        mailbox.after = self.after_mailbox
        # a cluster node's coordination (amqp_stream.cluster.node.ClusterNode), set by the
        # server with --cluster: streams then exist cluster-wide, this node holds the logs
        # of those it is a member of
        self.cluster: Any = None

    # -- life ------------------------------------------------------------------------------
    def open_all(self) -> list[str]:
        names = self.registry.open_all()
        for name in names:
            self.registry.entries[name].metrics = self.metrics.for_stream(name)
        self.metrics.streams.set(len(names))
        self._load_definitions()
        return sorted(self.registry.entries)

    def _load_definitions(self) -> None:
        """Exchanges and bindings; then an operation over several streams that a crash
        interrupted (``definitions.pending``) is completed: its streams are deleted."""
        definitions = self.definitions
        try:
            definitions.load(prune=not self.registry.broken)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged from outside
            raise DefinitionsUnreadable(
                f"{definitions.store} cannot be read ({type(exc).__name__}: {exc}); the broker "
                f"does not start without its exchanges and bindings (a start would overwrite "
                f"them): repair or move the file away") from exc
        if self.cluster is not None and definitions.pending:
            # the document is shared: another node may be in the middle of that operation
            log.warning("definitions hold %d operation(s) over several streams not completed "
                        "(another node's, under way or interrupted): left as they are: %s",
                        len(definitions.pending), definitions.pending)
            return
        for operation in list(definitions.pending):
            gone = [s for s in operation.get("delete_streams", []) if self.exists(s)]
            log.warning("%s %r was interrupted: deleting %s", operation.get("op"),
                        operation.get("name"), gone)
            for stream in gone:
                self.delete(stream)
            with definitions.edit():
                definitions.pending.remove(operation)

    def close_all(self) -> None:
        """Writers finish and fsync what is queued; their callbacks wait in the mailbox."""
        self.flush()
        self.registry.close_all()

    def stream_states(self) -> list[StreamState]:
        """For the metrics scrape (on its HTTP thread): copies of plain values only (the
        stored offsets are copied under the stream writer's lock)."""
        return [StreamState(e.name, e.directory / "log", e.stream.next_offset,
                            [c.next_offset for c in consumers], _stored_offsets(e),
                            e.stream.first_offset,
                            [(getattr(c, "protocol", "amqp10"), getattr(c, "metrics_label", ""),
                              c.next_offset) for c in consumers])
                for e in list(self.registry.entries.values())
                for consumers in (list(e.consumers),)]

    # -- streams ---------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        """Whether stream ``name`` exists. On a cluster node a miss in the view asks ZooKeeper
        (``ClusterNode.look_up``): a stream declared through another node a moment ago, before
        this node's watch fired, exists here too (a GET or an equal PUT through any node finds
        it at once), as RabbitMQ answers from its cluster-wide metadata store."""
        if self.cluster is not None:
            return self.cluster.exists(name) or self.cluster.look_up(name) is not None
        return self.registry.exists(name)

    def stream(self, name: str) -> StreamEntry:
        entry = self.local(name)
        if entry is None:
            raise NotFound(f"no stream '{name}'")
        return entry

    def local(self, name: str) -> StreamEntry | None:
        """This node's log of ``name``. On a cluster node a miss first asks ZooKeeper
        (``ClusterNode.look_up``): a stream declared through another node a moment ago
        gets its member log here before its watch fires."""
        entry = self.registry.get(name)
        if entry is None and self.cluster is not None:
            if self.cluster.look_up(name) is not None:
                entry = self.registry.get(name)
        return entry

    def get(self, name: str) -> StreamEntry | None:
        return self.registry.get(name)

    def publish_entry(self, name: str, look_up: bool = True) -> Any:
        """What an AMQP publisher of ``name`` appends to: its entry; on a cluster node one
        that forwards to the stream's leader where this node does not lead it
        (``amqp_stream.cluster.forwarder``). ``NotFound`` when there is no such stream.
        ``look_up``: a stream this node does not know yet is asked of ZooKeeper (``local``)."""
        forwarding = getattr(self.cluster, "forwarding", None)
        if forwarding is not None:
            if look_up:
                self.local(name)
            return forwarding.entry(name)
        return self.stream(name)

    def consume_entry(self, name: str) -> Any:
        """What an AMQP consumer of ``name`` reads: this node's log; on a cluster node that
        holds no member of it, one read from a member elsewhere
        (``amqp_stream.cluster.remote_reader``). ``NotFound`` when there is no such stream."""
        entry = self.local(name)
        reading = getattr(self.cluster, "reading", None)
        if entry is None and reading is not None:
            return reading.entry(name)
        return self.stream(name)

    def offsets_elsewhere(self, name: str) -> Any:
        """Where consumer offsets of ``name`` are stored and read when another cluster node
        leads it, as RabbitMQ keeps them on the leader: its ``ForwardEntry``
        (``amqp_stream.cluster.forwarder``); None on a single node, where this node leads
        it, or when there is no such stream (then answered here, as before)."""
        forwarding = getattr(self.cluster, "forwarding", None)
        return forwarding.offsets_elsewhere(name) if forwarding is not None else None

    def publish_lookup(self, name: str) -> Any:
        """``publish_entry``, None when there is no such stream (a message's ``to``: per
        message, so a miss does not ask ZooKeeper)."""
        try:
            return self.publish_entry(name, look_up=False)
        except NotFound:
            return None

    def info(self, name: str) -> dict:
        """The management node's answer for a stream. On a cluster node its leader and
        members come from the layout (RabbitMQ's ``leader`` and ``replicas``: every member),
        the counts from this node's log where it holds one (0 where it holds none: RabbitMQ
        asks the leader)."""
        layout = self.cluster.layout(name) if self.cluster is not None else None
        if layout is None and (self.cluster is not None or not self.registry.exists(name)):
            raise NotFound(f"queue '{name}' not found")
        if layout is None:
            return self.registry.info(name)
        if self.registry.exists(name):
            info = self.registry.info(name)
        else:
            info = {"name": name, "vhost": "/", "durable": True, "auto_delete": False,
                    "exclusive": False, "type": "stream",
                    "arguments": dict(self.cluster.view.arguments.get(name, {})),
                    "message_count": 0, "consumer_count": 0, "first_offset": 0,
                    "next_offset": 0}
        info.update(leader=layout.leader, replicas=list(layout.members),
                    members=list(layout.members))
        return info

    def declare(self, name: str, arguments: dict) -> bool:
        """Create stream ``name`` with validated ``arguments`` (``amqp_stream.arguments``);
        False when it exists with the same arguments, ``PreconditionFailed`` when they differ."""
        if name.startswith("amq."):
            raise Forbidden(f"ACCESS_REFUSED: queue name '{name}' contains reserved prefix 'amq.'")
        self.metrics.declared()
        if self.cluster is not None:
            return self.cluster.declare(name, arguments)
        if self.registry.exists(name):
            stream_arguments.equivalent(self.registry.arguments(name), arguments, name)
            return False
        self.open_local(name, arguments)
        return True

    def open_local(self, name: str, arguments: dict) -> StreamEntry:
        """This node's log of stream ``name``, made (empty) with validated ``arguments``."""
        entry = self.registry.create(name, arguments)
        entry.metrics = self.metrics.created(name)
        self.metrics.streams.set(len(self.registry.entries))
        return entry

    def delete(self, name: str) -> int | None:
        """Delete ``name`` (in a cluster: on every node); every consumer and publisher on it
        is ended first. None when there was no such stream, else the count of messages it
        held (0 on a node of a cluster that held no log of it)."""
        if self.cluster is not None:
            if not self.cluster.delete(name):
                return None
            count = self.delete_local(name)
        else:
            count = self.delete_local(name)
            if count is None:
                return None
        self.definitions.forget_stream(name)  # after: a crash between leaves a binding load drops
        return count or 0

    def delete_local(self, name: str) -> int | None:
        """Delete this node's log of ``name``, ending its attachments; None when it has none."""
        entry = self.registry.get(name)
        if entry is None:
            return None
        self.flush()
        gone = ResourceDeleted(f"stream '{name}' was deleted")
        for attachment in [*entry.consumers, *entry.publishers]:
            try:
                attachment.end(gone)
            except Exception:
                log.exception("ending %r on the deletion of %r", attachment, name)
        entry.consumers.clear()
        entry.publishers.clear()
        count = self.registry.delete(name)
        self.mailbox.drain()  # settle (reject) what the closed writer failed
        self.metrics.forget(name)
        self.metrics.streams.set(len(self.registry.entries))
        return count

    # -- attachments -----------------------------------------------------------------------
    def attach_consumer(self, entry: StreamEntry, consumer: Any) -> None:
        entry.consumers.add(consumer)
        self.metrics.consumers.inc()
        self.metrics.attach("consumers", getattr(consumer, "protocol", "amqp10"), 1)

    def detach_consumer(self, entry: StreamEntry, consumer: Any) -> None:
        if consumer in entry.consumers:
            entry.consumers.discard(consumer)
        self.metrics.consumers.dec()
        self.metrics.attach("consumers", getattr(consumer, "protocol", "amqp10"), -1)

    def attach_publisher(self, entry: StreamEntry | None, publisher: Any) -> None:
        if entry is not None:
            entry.publishers.add(publisher)
        self.metrics.publishers.inc()
        self.metrics.attach("publishers", getattr(publisher, "protocol", "amqp10"), 1)

    def detach_publisher(self, entry: StreamEntry | None, publisher: Any) -> None:
        if entry is not None:
            entry.publishers.discard(publisher)
        self.metrics.publishers.dec()
        self.metrics.attach("publishers", getattr(publisher, "protocol", "amqp10"), -1)

    # -- appends ---------------------------------------------------------------------------
    def mark_dirty(self, publisher: Publishing) -> None:
        """``publisher`` queued messages this turn: flush it once the loop's turn is over."""
        self.dirty.append(publisher)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.mailbox.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        dirty = self.dirty
        if not dirty:
            return
        while dirty:
            publisher = dirty.pop()
            try:
                publisher.flush()
            except Exception:
                log.exception("flushing a publisher")
        self._run_turn_hooks()

    def _run_turn_hooks(self) -> None:
        for hook in self.turn_hooks:
            try:
                hook()
            except Exception:
                log.exception("turn hook %r failed", hook)

    # -- wake-ups --------------------------------------------------------------------------
    def _on_moved(self, name: str) -> None:
        """From a writer thread: the committed end of ``name`` moved."""
        self.moved.append(name)  # first, then wake: the drain's ``after`` reads it
        self.mailbox.wake()

    def after_mailbox(self) -> None:
        """On the loop, after a mailbox batch (writers' callbacks): wake the consumers of every
        stream that grew, then let the adapters write."""
        self._wake_moved()
        self._run_turn_hooks()

    def _wake_moved(self) -> None:
        moved = self.moved
        if not moved:
            return
        names = set()
        while moved:
            names.add(moved.popleft())
        for name in names:
            entry = self.registry.get(name)
            if entry is not None:
                for consumer in list(entry.consumers):
                    consumer.wake()
