"""A node's replication: which role it plays for each replicated stream, from the layouts.

Why here: the core knows nothing of the cluster but ``storage.Stream``'s commit gate (a
replicated stream confirms and shows what the cluster committed); this module turns each
layout (``Layouts``: coordination's answer) into that gate and a role, on the broker's loop
thread, a few times a second:

- a member's stream is created here from the layout's arguments when this node lacks it;
- the leader: appends taken, its epoch written into each chunk, a ``LeaderRole`` (commit
  tracker; feeds to the replicas through the node's ``ReplicationServer``);
- a replica: appends refused, a ``ReplicaLink`` to the leader;
- a layout change (new epoch or leader) ends the old role before the new one starts.
A stream without a layout, or with one member, stays as on a single node.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable

from amqp_stream.cluster import commit
from amqp_stream.cluster.layout import StreamLayout
from amqp_stream.cluster.layouts import Layouts
from amqp_stream.cluster.leader import LeaderRole, ReplicationServer
from amqp_stream.cluster.replica import ReplicaLink
from storage.errors import StreamClosedError

__all__ = ["Replication", "POLL_S"]

log = logging.getLogger("amqp_stream.cluster.replication")

POLL_S = 0.2
# a gap this long between two polls means this process itself was stopped (SIGSTOP, a VM
# paused, a starved loop): its replicas' silence meanwhile is not theirs, it counts again
STALL_S = 2.0


class Replication:
    def __init__(self, core: Any, layouts: Layouts, bind_host: str, secret: bytes):
        self.core = core
        self.secret = secret  # the cluster's (``auth``): both ends of every connection prove it
        self.layouts = layouts
        self.node = layouts.node_name
        self.bind_host = bind_host
        self.leaders: dict[str, LeaderRole] = {}
        self.replicas: dict[str, ReplicaLink] = {}
        self.applied: dict[str, StreamLayout] = {}
        self._stored: dict[str, int] = {}  # the commit end last stored, by stream
        self.server: ReplicationServer | None = None
        self.closed = False
        # a catching-up member reached the commit end (on the loop): coordination writes
        # the layout that counts it (``ClusterNode``); None: nobody to tell (static layouts)
        self.on_caught_up: Callable[[StreamLayout, str], None] | None = None
        # an operator's leadership transfer (``ClusterNode.transfer``), on a server thread
        self.on_transfer: Callable[[str, str, float], dict] | None = None
        # a leader that has not heard from a quorum of its members for ``quorum_timeout`` s
        # gives the leadership up: its role ends here at once and ``on_step_down(layout)``
        # (coordination) writes the layout without a leader, so the members that reach each
        # other elect one; None: never (static layouts have no elections)
        self.quorum_timeout = 0.0
        self.on_step_down: Callable[[StreamLayout], None] | None = None
        # stream -> the layout this node stepped down from: applied with no leader until the
        # cluster's layout moves on (the write may not have landed yet, or may have failed)
        self.stepped_down: dict[str, StreamLayout] = {}
        self._checked_at = time.monotonic()

    def start(self) -> None:
        me = self.layouts.nodes()[self.node]
        self.server = ReplicationServer(self.bind_host, me.replication_port, self.leaders.get,
                                        self.secret, self.admin)
        self.server.start()
        log.info("replication: node %s listening on %s:%d", self.node, self.bind_host,
                 me.replication_port)
        self.reconcile(force=True)

    def poll(self) -> None:
        """On the loop: take in layout changes (scheduled every ``POLL_S``)."""
        if self.closed:
            return
        try:
            self.reconcile()
            self._promote()
            self._persist()
            self._check_quorum()
        except Exception:
            log.exception("replication: applying the layouts")
        self.core.mailbox.loop.call_later(POLL_S, self.poll)

    def _persist(self) -> None:
        """Store each replicated stream's commit end that moved since the last poll (a small
        file per stream, ``commit.store``: at most one write per stream per poll)."""
        for name in self.applied:
            entry = self.core.get(name)
            if entry is None:
                continue
            stream = entry.stream
            chunk_id = stream.committed_chunk_id  # first: never newer than the end read next
            end = stream.commit_gate
            if end is None or self._stored.get(name) == end:
                continue
            try:
                commit.store(stream.directory, end, chunk_id)
            except OSError as exc:
                log.warning("replication: cannot store the commit end of %r: %s", name, exc)
                continue
            self._stored[name] = end

    def _promote(self) -> None:
        """The leader's side of a new member's catch-up: tell coordination of each
        catching-up member whose durable tail reached the commit end."""
        if self.on_caught_up is None:
            return
        for name, role in list(self.leaders.items()):
            layout = self.applied.get(name)
            if layout is None or not layout.catching_up:
                continue
            for member in role.caught_up(layout.catching_up):
                role.promoting.add(member)
                log.info("replication: %r: %s caught up (tail %s, commit %d): counting it",
                         name, member, role.tracker.tails.get(member), role.tracker.commit)
                self.on_caught_up(layout, member)

    def _check_quorum(self) -> None:
        """Each stream this node leads: when no quorum of its voters has been heard from
        for ``quorum_timeout`` s (its replicas are down, or cut off from it while its own
        ZooKeeper session lives, so no election would happen), give the leadership up:
        appends are refused from here and what waited for the quorum is answered with an
        error (nothing taken after this is confirmed by this node), then coordination
        writes the layout with no leader and the members elect again. This node stands in
        that election too, but only once it reaches a quorum of the members itself
        (``ClusterNode.replicated_tail``), so a leader cut off does not win again and
        again, and one whose replicas were merely down leads again when they return."""
        if self.on_step_down is None or self.quorum_timeout <= 0:
            return
        now = time.monotonic()
        stalled = now - self._checked_at > STALL_S
        self._checked_at = now
        for name, role in list(self.leaders.items()):
            if stalled:  # this process was stopped or starved: not its replicas' silence
                role.started_at = now
                continue
            layout = self.applied.get(name)
            if layout is None or layout.leader != self.node:
                continue
            silent = now - role.in_contact()
            if silent < self.quorum_timeout:
                continue
            log.warning("replication: %r: no quorum of %s heard from for %.1f s (members %s, "
                        "quorum %d): giving up the leadership of epoch %d", name, self.node,
                        silent, ",".join(layout.members), layout.quorum, layout.epoch)
            self.stepped_down[name] = layout
            self._apply(dataclasses.replace(layout, leader=""))
            self.on_step_down(layout)

    def reconcile(self, force: bool = False) -> None:
        if not self.layouts.refresh() and not force:
            return
        current = dict(self.layouts.layouts())
        for name, gave_up in list(self.stepped_down.items()):
            if current.get(name) == gave_up:  # the cluster has not moved on yet: no leader
                current[name] = dataclasses.replace(gave_up, leader="")
            else:
                del self.stepped_down[name]
        for name in list(self.applied):
            layout = current.get(name)
            if layout is None or self.node not in layout.members or len(layout.members) < 2:
                self._leave(name, layout)
        for name, layout in current.items():
            if self.node not in layout.members or len(layout.members) < 2:
                continue
            if self.core.get(name) is None and self.core.exists(name):
                # a cluster node opens member logs one by one and reconciles after each: a
                # stream of the same view whose log is not open yet waits for its turn
                continue
            applied = self.applied.get(name)
            if applied == layout:
                continue
            if applied is not None and (applied.leader, applied.epoch) == (layout.leader,
                                                                            layout.epoch):
                self._reconfigure(layout)
                continue
            role = self.leaders.get(name)
            if applied is not None and role is not None and self._carries_on(role, applied,
                                                                             layout):
                self._reepoch(role, layout)
                continue
            self._apply(layout)

    def _carries_on(self, role: LeaderRole, applied: StreamLayout,
                    layout: StreamLayout) -> bool:
        """This node leads ``layout``'s newer epoch as it led ``applied``'s, and its role
        still takes appends: the role carries on in place (``_reepoch``). One epoch more
        with other members is a member change (``membership``). Several epochs more are
        layouts this node did not see in between (a delete-replica then an add-replica
        within one poll): meanwhile nothing but its own role touched its log (no replica
        link ran) and no replica acknowledged a newer epoch to it, so its log is the new
        epoch's leader log, as a re-elected Raft leader's is, and what it holds waits for
        the new epoch's commit. (A leader handing over refuses appends: it starts afresh.)"""
        if not (applied.leader == layout.leader == self.node and role.epoch == applied.epoch
                and not role.stream.follower):
            return False
        if layout.epoch == applied.epoch + 1:
            return (applied.members, applied.catching_up) != (layout.members,
                                                               layout.catching_up)
        return layout.epoch > applied.epoch + 1

    def _reconfigure(self, layout: StreamLayout) -> None:
        """Members added, caught up or removed under the same leader and epoch: the role
        stays (no publish is failed by a member change); the leader counts the new voters."""
        role = self.leaders.get(layout.stream)
        if role is not None:
            role.reconfigure(layout.members, layout.voters, layout.quorum)
        log.info("replication: %r: members %s (catching up: %s)", layout.stream,
                 ",".join(layout.members), ",".join(layout.catching_up) or "none")
        self.applied[layout.stream] = layout

    def _reepoch(self, role: LeaderRole, layout: StreamLayout) -> None:
        """A member change raised the epoch under this leader (``membership``): the role
        carries on under the new epoch with the new voters (no publish failed, nothing cut);
        the replicas reconnect under it."""
        role.reepoch(layout.epoch, layout.members, layout.voters, layout.quorum)
        log.info("replication: %r: members %s (catching up: %s), epoch %d", layout.stream,
                 ",".join(layout.members), ",".join(layout.catching_up) or "none", layout.epoch)
        self.applied[layout.stream] = layout

    def _apply(self, layout: StreamLayout) -> None:
        name = layout.stream
        core = self.core
        if not core.exists(name):
            core.declare(name, self.layouts.arguments(name))
        stream = core.stream(name).stream
        if layout.leader != self.node:
            stream.set_follower(True)  # first: nothing more is taken while the role ends
        self._end_role(name)
        if stream.commit_gate is None:
            # what this member knew committed before a restart is served at once
            stream.gate_commit(*commit.load(stream))
        if layout.leader == self.node:
            stream.set_follower(False)
            stream.set_epoch(layout.epoch)
            self.leaders[name] = LeaderRole(name, stream, layout.epoch, layout.members,
                                            layout.quorum, self.node, layout.voters)
            log.info("replication: leading %r (epoch %d, members %s)", name, layout.epoch,
                     ",".join(layout.members))
        else:
            stream.set_follower(True)
            leader = self.layouts.nodes().get(layout.leader)
            if not layout.leader:  # the leader gave up its leadership: an election is due
                log.info("replication: %r has no leader (epoch %d): waiting for the election",
                         name, layout.epoch)
                self.applied[name] = layout
                return
            if leader is None:  # not seen yet (restarted while it is down): the next change
                log.info("replication: %r: its leader %s is not known yet; waiting", name,
                         layout.leader)
                return
            sync_s = core.config.fsync_interval_ms / 1000.0
            link = ReplicaLink(name, stream, layout.epoch, leader, self.node, self.secret,
                               sync_s)
            self.replicas[name] = link
            link.start()
            log.info("replication: following %r from %s (epoch %d)", name, layout.leader,
                     layout.epoch)
        self.applied[name] = layout

    def fence(self, name: str) -> None:
        """From the coordinator's thread, before it reports this node's tail of ``name`` for
        an election: the replica link (whatever epoch it follows: none newer than the one
        failing over) appends and acknowledges no more (``ReplicaLink.fence``)."""
        link = self.replicas.get(name)
        if link is not None:
            link.fence()

    def unfence(self, name: str, epoch: int) -> None:
        """The leader of ``epoch`` came back before an election: follow it again."""
        link = self.replicas.get(name)
        if link is not None and link.epoch == epoch:
            link.unfence()

    def _leave(self, name: str, layout: StreamLayout | None) -> None:
        """``name`` is no longer replicated on this node: its role ends; the local log stays
        (deleting a stream is coordination's decision, made through the core). As the only
        member left, the local durable end commits again; otherwise appends stop here."""
        entry = self.core.get(name)
        alone = layout is not None and layout.members == (self.node,)
        if entry is not None and alone:
            entry.stream.ungate()  # first: what waited is durable here, so confirmed
        self._end_role(name)
        del self.applied[name]
        self._stored.pop(name, None)
        if entry is not None:
            entry.stream.set_follower(not alone)
            if alone and layout is not None and layout.epoch > entry.stream.last_epoch:
                entry.stream.set_epoch(layout.epoch)
        log.info("replication: %r no longer replicated on this node", name)

    def _end_role(self, name: str) -> None:
        role = self.leaders.pop(name, None)
        if role is not None:
            role.close()
            n = role.stream.fail_held(StreamClosedError(
                f"stream '{name}': this node no longer leads it; not confirmed"))
            if n:
                log.warning("replication: %r: %d publishes left unconfirmed by the leader "
                            "change (answered with an error)", name, n)
        link = self.replicas.pop(name, None)
        if link is not None:
            link.close()

    # -- operators' requests (the replication port's ADMIN frames, on a server thread) -------
    def admin(self, request: dict) -> dict:
        op, name = request.get("op"), request.get("stream")
        if not isinstance(name, str):
            return {"error": "a request names its stream"}
        if op == "status":
            return self.status(name)
        if op == "transfer":
            target = request.get("node")
            if self.on_transfer is None:
                return {"error": "leadership transfers need a coordinated cluster (--cluster)"}
            if not isinstance(target, str):
                return {"error": "a transfer names its target node"}
            return self.on_transfer(name, target, float(request.get("timeout", 10.0)))
        return {"error": f"unknown request {op!r}"}

    def status(self, name: str) -> dict:
        """This member's figures for ``stream status`` (RabbitMQ's ``stream_status``
        columns: role, epoch, offset, committed offset, first offset, segments), and on the
        leader each member's durable tail and lag in offsets and bytes."""
        entry = self.core.get(name)
        if entry is None:
            return {"node": self.node, "error": f"no local log of {name!r}"}
        stream = entry.stream
        role = self.leaders.get(name)
        link = self.replicas.get(name)
        layout = self.applied.get(name)
        out: dict = {
            "node": self.node,
            "role": "leader" if role is not None else "replica" if link is not None else "none",
            "epoch": layout.epoch if layout is not None else stream.last_epoch,
            "local_end": stream.local_end,
            "committed_end": stream.committed_end(),
            "committed_chunk_id": stream.committed_chunk_id,
            "first_offset": stream.first_offset,
            "segments": len(stream.segment_starts()),
        }
        if link is not None:
            out["following"] = link.leader.name
            out["connected"] = link.connected.is_set()
        if role is not None:
            end = stream.local_end
            lag_bytes = role.lag_bytes()
            lag_bytes[self.node] = 0
            # a member not connected now has its last acknowledged tail and no byte lag
            out["members"] = {
                m: {"tail": t[0], "lag": max(0, end - t[0]), "lag_bytes": lag_bytes.get(m)}
                for m, t in dict(role.tracker.tails).items()}
        return out

    def wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        """On a server thread: poll ``condition`` until true or ``timeout`` (a transfer
        waiting for its target to hold the leader's log)."""
        deadline = time.monotonic() + timeout
        done = threading.Event()
        while not condition():
            if time.monotonic() >= deadline:
                return False
            done.wait(0.01)
        return True

    def close(self) -> None:
        self.closed = True
        self._persist()
        if self.server is not None:
            self.server.close()
        for name in list(self.leaders) + list(self.replicas):
            self._end_role(name)
