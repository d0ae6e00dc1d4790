"""The broker's side of coordination: one cluster node's core kept in step with the cluster.

``ClusterNode`` is what the core asks (does stream X exist, declare, delete) when the broker
runs with ``--cluster``; it places new streams (``placement``) and records them through the
``Coordinator`` (the only code that talks to ZooKeeper). Each new ``ClusterView`` the
coordinator reads arrives on the event loop through the Mailbox and is applied there:

- a stream whose layout names this node as a member gets its local log (opened, or created
  empty: replication fills it);
- a stream whose layout is gone is deleted locally (its attachments ended as on a delete);
- a stream first seen, whose leader or epoch changed, or deleted is announced to
  ``layout_hooks`` (the stream listener sends MetadataUpdate to the publishers and
  subscriptions that must move; replication follows its leaders);
- definitions changed by another node are read again.

Local stream directories that no layout names are left as they are (logged): the cluster's
path may be wrong, and deleting data on that evidence would be worse than keeping it. A local
log of a stream whose layout does not name this node (``delete-replica``, now or while this
node was down) is deleted: the layout is the evidence.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Callable

from amqp_stream import arguments as stream_arguments
from amqp_stream.cluster import placement
from amqp_stream.cluster.layout import Node, StreamLayout
from amqp_stream.config import BrokerConfig
from amqp_stream.errors import ClusterUnavailable

if TYPE_CHECKING:
    from amqp_stream.cluster.coordination import ClusterView
    from amqp_stream.cluster.forwarder import Forwarding
    from amqp_stream.cluster.remote_reader import RemoteReading
    from amqp_stream.cluster.replication import Replication
    from amqp_stream.core import Core

__all__ = ["ClusterNode"]

log = logging.getLogger(__name__)

# how long a lookup on a miss (``ClusterNode.look_up``) may hold the loop for ZooKeeper's
# answer (a round trip on a LAN: a millisecond or less)
LOOKUP_TIMEOUT = 0.5

# a drained node looks this often for leaderships to hand over, each transfer waiting at most
# DRAIN_TRANSFER_S for its target to hold the whole log
DRAIN_POLL_S = 1.0
DRAIN_TRANSFER_S = 10.0

LayoutHook = Callable[[str, "StreamLayout | None", "StreamLayout | None"], None]


class ClusterNode:
    def __init__(self, core: Core, config: BrokerConfig, advertised_host: str,
                 advertised_stream_port: int):
        from amqp_stream.cluster.coordination import ClusterView, Coordinator  # kazoo

        assert config.cluster and config.node_name
        self.core = core
        self.config = config
        self.name = config.node_name
        self.node = Node(self.name, advertised_host, config.port, advertised_stream_port,
                         config.replication_port, config.management_port)
        # this node's log tail of a stream, (epoch, next offset) or None, asked on the
        # coordinator's thread when the stream's leader is gone; replication may replace it
        # with one that knows the epoch of the last chunk it holds
        self.tail_of: Callable[[str], tuple[int, int] | None] = self.local_tail
        self.coordinator = Coordinator(config.cluster, self.node, config.cluster_session_timeout,
                                       self._post_view, lambda name: self.tail_of(name))
        self.applied: ClusterView = ClusterView()
        # on the loop: (stream, None, layout) when this node first sees a stream (at start,
        # or declared), (stream, old, new) after a change of leader or epoch, (stream, old,
        # None) after a delete, (stream, layout, layout) when this node, leading it, begins
        # handing the leadership over (``transfer``: its publishers must move)
        self.layout_hooks: list[LayoutHook] = []
        self.replication: Replication | None = None
        self.secret = b""  # the replication port's (``auth``), known once started
        # AMQP publishes to streams led elsewhere (set by the server: cluster.forwarder)
        self.forwarding: Forwarding | None = None
        # AMQP consumers of streams with no member here (set by the server: remote_reader)
        self.reading: RemoteReading | None = None
        self._not_standing: dict[str, int] = {}  # stream -> epoch it was logged for
        self._handing_over: set[str] = set()  # streams a drain's transfer is moving now
        self._not_handed: dict[str, int] = {}  # stream -> epoch "no candidate" was logged for

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect and register (``CoordinationError`` when ZooKeeper cannot be reached);
        the definitions then come from ZooKeeper."""
        self.coordinator.start(self.config.cluster_session_timeout)
        self.core.definitions.store = self.coordinator.store()
        from amqp_stream.cluster.auth import secret_bytes

        given = self.config.cluster_secret
        # the replication port's secret: given, or the cluster's in ZooKeeper (made once)
        try:
            self.secret = secret_bytes(given, "--cluster-secret") if given is not None else \
                secret_bytes(self.coordinator.secret(), f"{self.config.cluster}/secret")
        except ValueError as exc:
            self.coordinator.stop()
            raise ClusterUnavailable(str(exc)) from None

    def stop(self) -> None:
        if self.forwarding is not None:
            self.forwarding.close()
        self.coordinator.stop()

    @property
    def view(self) -> ClusterView:
        """The latest view the coordinator read (or wrote itself)."""
        return self.coordinator.view

    def replicate(self, replication: Replication) -> None:
        """Replication runs from this node's view: a member log this node opens gets its
        role (and a replicated stream its commit gate) at once, before any publish can be
        confirmed on local durability alone; elections rank this node by the epoch of the
        last chunk it holds and its durable end."""
        self.replication = replication
        self.tail_of = self.replicated_tail
        replication.on_caught_up = self._count_member
        replication.on_transfer = self.transfer
        replication.on_step_down = self.step_down
        replication.quorum_timeout = (self.config.cluster_quorum_timeout
                                      or 3 * self.config.cluster_session_timeout)
        self.coordinator.on_withdraw = replication.unfence
        self.core.mailbox.loop.call_later(DRAIN_POLL_S, self._hand_over)

    def _hand_over(self) -> None:
        """On the loop, every ``DRAIN_POLL_S``: while this node is drained (``cluster
        drain``), hand each leadership it holds to the running, undrained voter whose durable
        tail is highest (``transfer``: nothing confirmed lost, nothing cut), one thread per
        stream. Also after a restart, or when an election had to choose this node (it alone
        held the most complete log)."""
        replication = self.replication
        if replication is None or replication.closed:
            return
        self.core.mailbox.loop.call_later(DRAIN_POLL_S, self._hand_over)
        view = self.view
        if self.name not in view.drained:
            return
        for name, layout in view.layouts.items():
            role = replication.leaders.get(name)
            if layout.leader != self.name or name in self._handing_over or role is None \
                    or role.epoch != layout.epoch:
                continue
            tails = dict(role.tracker.tails)
            candidates = [m for m in layout.voters if m != self.name and m in view.nodes
                          and m not in view.drained]
            if not candidates:
                if self._not_handed.get(name) != layout.epoch:  # once per epoch
                    self._not_handed[name] = layout.epoch
                    log.warning("stream %r: this node is drained but no running, undrained "
                                "member can take its leadership", name)
                continue
            target = max(candidates, key=lambda m: (tails.get(m, (-1, -1))[0], m))
            self._handing_over.add(name)

            def move(name: str = name, target: str = target) -> None:
                try:
                    answer = self.transfer(name, target, DRAIN_TRANSFER_S)
                    if "error" in answer:
                        log.warning("stream %r: drained node's leadership not handed to %s: %s",
                                    name, target, answer["error"])
                finally:
                    self.core.mailbox.post(self._handing_over.discard, name)

            threading.Thread(target=move, daemon=True, name=f"drain:{name}").start()

    def step_down(self, layout: StreamLayout) -> None:
        """On the loop: this node gave up leading ``layout`` (no quorum heard from; its role
        has ended). Write the layout with no leader, on a thread of its own (kazoo blocks),
        so the members elect one; tried again every second while ZooKeeper is unreachable
        and the layout unchanged (if the session ends meanwhile, the others elect anyway)."""
        new = dataclasses.replace(layout, leader="")

        def write() -> None:
            while not self.coordinator.stopped and self.view.layouts.get(layout.stream) == layout:
                if self.coordinator.replace_layout(layout, new):
                    log.warning("stream %r: %s gave up the leadership of epoch %d: the "
                                "members elect again", layout.stream, self.name, layout.epoch)
                    return
                time.sleep(1.0)  # a retry's back-off (ZooKeeper unreachable), not a sync

        threading.Thread(target=write, daemon=True, name=f"step-down:{layout.stream}").start()

    def reaches_quorum(self, layout: StreamLayout) -> bool:
        """From the coordinator's thread, before this node reports its tail for a stream
        whose leader gave up: whether it reaches a quorum of the voters itself (a TCP connect
        to each live voter's replication port, Raft's pre-vote). A member cut off from the
        others (the leader that gave up, typically) stays out of the election: it could not
        lead them, and elected it would only give up again."""
        reached = 1 if self.name in layout.voters else 0
        timeout = min(1.0, self.config.cluster_session_timeout / 4)
        for member in layout.voters:
            node = self.view.nodes.get(member)
            if member == self.name or node is None:
                continue
            try:
                with socket.create_connection((node.host, node.replication_port), timeout):
                    reached += 1
            except OSError:
                continue
        return reached >= layout.quorum

    # -- operations (``add-replica``'s catch-up, ``transfer-leadership``) -----------------
    def _count_member(self, layout: StreamLayout, member: str) -> None:
        """On the loop: ``member`` caught up; write the layout that counts it toward the
        quorum, on a thread of its own (a ZooKeeper round trip must not stall the loop).
        A write that fails (the layout moved meanwhile) is tried again at the next poll."""
        new = StreamLayout(layout.stream, layout.epoch, layout.leader, layout.members,
                           tuple(m for m in layout.catching_up if m != member))

        def write() -> None:
            if self.coordinator.replace_layout(layout, new):
                log.info("stream %r: %s caught up: it counts toward the quorum (%d of %d)",
                         layout.stream, member, new.quorum, len(new.voters))
            else:
                role = self.replication.leaders.get(layout.stream) if self.replication else None
                if role is not None:
                    role.promoting.discard(member)

        threading.Thread(target=write, daemon=True, name=f"promote:{layout.stream}").start()

    def transfer(self, name: str, target: str, timeout: float) -> dict:
        """On a replication server thread (an operator's request to this node): hand the
        leadership of ``name`` to member ``target`` with no confirmed publish lost. This
        leader stops taking appends, waits (up to ``timeout``) until ``target`` holds its
        whole log durably and the commit covers it, then writes the layout with ``target``
        leading under epoch + 1. Nothing is cut anywhere: the new leader's log is this
        one's. On any failure appends resume and the answer says why."""
        layout = self.view.layouts.get(name)
        if layout is None:
            return {"error": f"stream {name!r} does not exist"}
        if layout.leader != self.name:
            return {"error": f"{self.name} does not lead {name!r} (its leader: {layout.leader})",
                    "leader": layout.leader}
        if target == self.name:
            return {"ok": True, "leader": target, "epoch": layout.epoch}
        if target not in layout.members:
            return {"error": f"{target} is not a member of {name!r} (members: "
                             f"{', '.join(layout.members)})"}
        if target in layout.catching_up:
            return {"error": f"{target} is still catching up on {name!r}: it cannot lead yet"}
        if target not in self.view.nodes:
            return {"error": f"node {target} is not running in the cluster"}
        if target in self.view.drained:
            return {"error": f"node {target} is drained for maintenance: it takes no "
                             f"leadership until it is revived (amqp-stream cluster revive)"}
        role = self.replication.leaders.get(name) if self.replication is not None else None
        if role is None or role.epoch != layout.epoch:
            # the layout names it, its role is not taken up yet (it follows within ~0.5 s of
            # an election or a transfer): the CLI asks again
            return {"error": f"{self.name} is not leading {name!r} yet; try again", "retry": True}
        stream = role.stream
        # as RabbitMQ's transfer (it restarts the stream's writer): from here appends are
        # refused, and the stream-protocol publishers of the stream are dropped with a
        # MetadataUpdate, so a publish sent meanwhile is answered PUBLISHER_DOES_NOT_EXIST
        # at once and the client asks Metadata for the new leader; both on the loop, between
        # two frames
        begun = threading.Event()
        cancelled: list[bool] = []
        lock = threading.Lock()

        def begin() -> None:
            with lock:
                if cancelled:  # the transfer gave up waiting for the loop: nothing to do
                    return
                stream.set_follower(True)
                self._run_hooks(name, layout, layout)
                begun.set()

        self.core.mailbox.post(begin)
        if not begun.wait(timeout):
            with lock:
                if not begun.is_set():
                    cancelled.append(True)
                    return {"error": f"{self.name} was too busy to begin the transfer within "
                                     f"{timeout:g} s; leadership not moved"}

        def target_holds_all() -> bool:
            end = stream.local_end
            tail = role.tracker.tails.get(target)
            return tail is not None and tail[0] >= end and role.tracker.commit >= end

        moved = False
        try:
            assert self.replication is not None
            # what was queued before the refusal (records, stored offsets) is written first
            stream.flush(timeout)
            if not self.replication.wait_for(target_holds_all, timeout):
                tail = role.tracker.tails.get(target)
                return {"error": f"{target} did not catch up with {name!r} within {timeout:g} s "
                                 f"(its tail {tail[0] if tail else None}, the log's end "
                                 f"{stream.local_end}); leadership not moved"}
            new = StreamLayout(name, layout.epoch + 1, target, layout.members, layout.catching_up)
            moved = self.coordinator.replace_layout(layout, new)
            if not moved:
                return {"error": f"the layout of {name!r} changed meanwhile (or ZooKeeper is "
                                 f"unreachable); leadership not moved"}
            log.warning("stream %r: leadership handed to %s (epoch %d) at offset %d", name,
                        target, new.epoch, stream.local_end)
            return {"ok": True, "leader": target, "epoch": new.epoch, "offset": stream.local_end}
        finally:
            if not moved and self.replication is not None \
                    and self.replication.leaders.get(name) is role:
                stream.set_follower(False)

    # -- the core's questions --------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return name in self.view.layouts

    def layout(self, name: str) -> StreamLayout | None:
        return self.view.layouts.get(name)

    def look_up(self, name: str) -> StreamLayout | None:
        """On the loop, where a client names a stream (Subscribe, Metadata, an AMQP attach)
        and this node has no log of it: its layout, read from ZooKeeper when the view lacks
        it, and applied now (this node's member log opened, the hooks told) rather than when
        the mailbox brings the view. A stream declared through another node is named by
        that node's Metadata at once, before this node's watch fires; as RabbitMQ answers
        from its cluster-wide metadata store, a client sent here must find it. Only on a
        miss, one round trip bounded by ``LOOKUP_TIMEOUT`` (ZooKeeper unreachable: at once);
        None when the cluster has no such stream (or ZooKeeper cannot say)."""
        layout = self.view.layouts.get(name)
        if layout is None:
            began = time.monotonic()
            layout = self.coordinator.look_up(name, LOOKUP_TIMEOUT)
            if layout is None:
                return None
            log.info("stream %r: not in this node's view yet; read from ZooKeeper in %.1f ms "
                     "(leader %s, epoch %d)", name, (time.monotonic() - began) * 1000,
                     layout.leader, layout.epoch)
        if name not in self.applied.layouts:
            self._apply(self.view)
        return layout

    def declare(self, name: str, arguments: dict) -> bool:
        """Place and record stream ``name``; False when it exists with the same arguments.
        This node opens its member log at once; the others when they see the layout."""
        view = self.view
        if name in view.layouts:
            stream_arguments.equivalent(view.arguments.get(name, {}), arguments, name)
            return False
        layout = placement.place(name, arguments, sorted(view.nodes), self.name,
                                 view.layouts.values(), view.drained)
        if not self.coordinator.create_stream(layout, arguments):  # declared elsewhere meanwhile
            self.look_up(name)  # its layout, rather than waiting for the watch
            return self.declare(name, arguments)
        log.info("stream %r placed: leader %s, members %s", name, layout.leader,
                 ", ".join(layout.members))
        # our log now, so a publisher here can start at once; the rest of the view (and the
        # definitions, which a super stream's declare may be editing) waits for the mailbox
        self._open_member_log(name, layout, arguments)
        return True

    def delete(self, name: str) -> bool:
        return self.coordinator.delete_stream(name)

    # -- views, on the loop ----------------------------------------------------------------
    def _post_view(self, view: ClusterView) -> None:
        """From the coordinator's thread."""
        self.core.mailbox.post(self._apply, view)

    def apply_now(self) -> None:
        """At start, before serving: the member logs this node must hold."""
        self._apply(self.view)

    def _apply(self, view: ClusterView) -> None:
        view = self.view  # the newest, whichever post brought us here
        old, self.applied = self.applied, view
        core = self.core
        for name, layout in view.layouts.items():
            self._open_member_log(name, layout, view.arguments.get(name, {}))
            before = old.layouts.get(name)
            if self.name not in layout.members and core.get(name) is not None:
                # delete-replica named this node (now, or while it was down): its role ends,
                # then its log goes, as RabbitMQ's member with target deleted; kept, it would
                # be served and written as a stream of this node alone
                log.info("stream %r: this node is not a member (members %s): deleting its log",
                         name, ", ".join(layout.members))
                if self.replication is not None:
                    self.replication.reconcile(force=True)
                core.delete_local(name)
            if before is None:
                self._run_hooks(name, None, layout)
            elif (before.leader, before.epoch) != (layout.leader, layout.epoch):
                log.info("stream %r: leader %s (epoch %d), was %s (epoch %d)", name,
                         layout.leader, layout.epoch, before.leader, before.epoch)
                self._run_hooks(name, before, layout)
        for name, before in old.layouts.items():
            if name not in view.layouts:
                if core.get(name) is not None:
                    log.info("stream %r was deleted in the cluster: deleting its local log", name)
                    core.delete_local(name)
                self._run_hooks(name, before, None)
        store = core.definitions.store
        if view.definitions_version != old.definitions_version and \
                view.definitions_version != getattr(store, "version", None):
            try:
                core.definitions.load(prune=False)
            except Exception:
                log.exception("reading the definitions another node changed")

    def _open_member_log(self, name: str, layout: StreamLayout, arguments: dict) -> None:
        if self.name in layout.members and self.core.get(name) is None:
            log.info("stream %r: this node is a member (leader %s, epoch %d): opening its log",
                     name, layout.leader, layout.epoch)
            # one stream's disk trouble must not keep the others' logs from opening; the
            # next view tries again
            try:
                self.core.open_local(name, arguments)
            except Exception:
                log.exception("stream %r: cannot open this member's log", name)
                return
            if self.replication is not None and self.replication.server is not None:
                self.replication.reconcile(force=True)

    def _run_hooks(self, name: str, before: StreamLayout | None,
                   after: StreamLayout | None) -> None:
        for hook in self.layout_hooks:
            try:
                hook(name, before, after)
            except Exception:
                log.exception("layout hook %r for %r", hook, name)

    def local_tail(self, name: str) -> tuple[int, int] | None:
        """From the coordinator's thread: this node's log tail of ``name`` (the epoch its
        writer stamps and its next offset), None when it holds none."""
        entry = self.core.registry.entries.get(name)
        if entry is None:
            return None
        stream = entry.stream
        return stream.config.epoch, stream.next_offset

    def replicated_tail(self, name: str) -> tuple[int, int] | None:
        """From the coordinator's thread, for an election: (epoch of the last chunk held,
        durable end). First the replica link stops appending and acknowledging (fenced), so
        no chunk this node acknowledges can lie beyond the tail it reports: one the old
        leader could still commit with this node's ack, the leader elected without it would
        lack. Then each is one attribute of the writer, read without the loop; the epoch
        first, so a chunk landing between the reads gives a rank between the log's before
        and after it."""
        entry = self.core.registry.entries.get(name)
        if entry is None:
            return None
        layout = self.view.layouts.get(name)
        if layout is not None and not layout.leader and not self.reaches_quorum(layout):
            if self._not_standing.get(name) != layout.epoch:  # once per epoch, not per look
                self._not_standing[name] = layout.epoch
                log.info("stream %r: not standing in its election (epoch %d): this node "
                         "reaches no quorum of its members", name, layout.epoch)
            return None
        if self.replication is not None:
            self.replication.fence(name)
        stream = entry.stream
        epoch = stream.last_epoch
        return epoch, stream.local_end
