"""The cluster's coordination on Apache ZooKeeper (through kazoo): the only module that talks
to it, so that another store (etcd) could take its place behind the same small API.

What lives where, under the cluster's path (``zk://HOSTS/PATH``):

- ``PATH/nodes/<name>``: ephemeral, a live node's advertised addresses (``Node`` JSON); it
  goes when the node's session ends (a clean stop closes the session: at once; a crash or a
  partition: after the session timeout).
- ``PATH/streams/<name>``: persistent, the stream's layout (``StreamLayout`` JSON: members,
  leader, epoch) and its declared arguments. Changed only by versioned sets, so two nodes
  electing at once cannot both win.
- ``PATH/streams/<name>/tails/<node>``: ephemeral, the log tail ``(epoch, offset)`` a member
  reports once it sees the stream's leader gone, tagged with the layout epoch it reports for.
- ``PATH/definitions``: the exchanges and bindings document (``ZkStore``).
- ``PATH/secret``: persistent, the cluster's secret for the replication port (``auth``),
  made with a random value by the first node that starts without ``--cluster-secret``.
- ``PATH/drained/<node>``: persistent, a node drained for maintenance (``cluster drain``):
  it is not chosen to lead (placement, elections, transfers) and gives up what it leads,
  until ``cluster revive`` deletes it.

Election: a stream whose leader's node is not live is leaderless. Each of its live members
reports its tail; once a majority of the members (the dead leader counted among them) has
reported for the current epoch, any node picks the reporter with the highest (epoch, offset),
ties to the name that sorts first, and writes the layout with that leader and epoch + 1 with
a versioned set; the others' sets fail and they read the result. With fewer reports it waits:
no leader is better than one missing confirmed data.

Threads: kazoo calls watches on its own thread. Watches here only wake ``Coordinator``'s
worker thread, which re-reads the nodes and layouts, runs elections and hands each new
``ClusterView`` to ``on_view`` (the broker posts it to its loop through its Mailbox). The
broker's own calls (declare, delete, definitions) run on its event loop: they fail at once
while the session is disconnected (so the loop never waits for ZooKeeper to come back: the
streams it serves keep going) and wait at most ``op_timeout`` for an answer otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError,
                              NoNodeError, NotEmptyError)
from kazoo.handlers.threading import KazooTimeoutError

from amqp_stream.cluster.address import parse_url
from amqp_stream.cluster.layout import Node, StreamLayout
from amqp_stream.errors import ClusterUnavailable

__all__ = ["Coordinator", "ClusterView", "CoordinationError", "ZkStore", "read_view",
           "choose_leader_by_tail", "change_layout", "LayoutRefused", "read_secret",
           "set_drained"]

log = logging.getLogger(__name__)

TailFn = Callable[[str], "tuple[int, int] | None"]


class CoordinationError(ClusterUnavailable):
    """ZooKeeper cannot be reached (or refused an operation): the message says which."""


@dataclass(frozen=True)
class ClusterView:
    """What coordination last read: the live nodes, every stream's layout and arguments."""

    nodes: dict[str, Node] = field(default_factory=dict)
    layouts: dict[str, StreamLayout] = field(default_factory=dict)
    arguments: dict[str, dict] = field(default_factory=dict)
    definitions_version: int = -1
    drained: frozenset[str] = frozenset()  # nodes drained for maintenance

    def leaderless(self) -> list[StreamLayout]:
        return [x for x in self.layouts.values() if x.leader not in self.nodes]

    def live_replicas(self, layout: StreamLayout) -> tuple[str, ...]:
        return tuple(m for m in layout.replicas if m in self.nodes)

    def known(self) -> set[str]:
        """Every node named: live, a member of a stream (maybe down), or drained."""
        return set(self.nodes).union(self.drained, *(x.members for x in self.layouts.values()))

    def leaders_held(self) -> dict[str, int]:
        held = dict.fromkeys(self.nodes, 0)
        for layout in self.layouts.values():
            if layout.leader in held:
                held[layout.leader] += 1
        return held

    def status(self) -> dict:
        """``cluster status``: every node known (live, or a member of a stream while down),
        whether it is alive and the leaderships it holds; each stream's layout."""
        held = self.leaders_held()
        known = self.known()
        nodes = []
        for name in sorted(known):
            node = self.nodes.get(name)
            nodes.append({"name": name, "alive": node is not None,
                          "leaders": held.get(name, 0), "drained": name in self.drained,
                          "address": f"{node.host}:{node.stream_port}" if node else None})
        return {"nodes": nodes,
                "streams": [dict(x.to_json(), leader_alive=x.leader in self.nodes)
                            for _, x in sorted(self.layouts.items())]}


def choose_leader_by_tail(layout: StreamLayout, tails: dict[str, tuple[int, int]],
                          drained: Collection[str] = ()) -> str | None:
    """The member to lead after ``layout.leader`` is gone, from the tails ``(epoch, offset)``
    that live members reported; None until a majority of the members has reported. Among
    those holding the most complete log a node not ``drained`` goes first; a drained node is
    chosen only when it alone holds it (safety before the preference: it then hands the
    leadership over as soon as another member holds its log, ``ClusterNode``)."""
    reported = {n: t for n, t in tails.items() if n in layout.voters and n != layout.leader}
    if len(reported) < layout.quorum:
        return None
    best = max(reported.values())
    return min((n for n, t in reported.items() if t == best),
               key=lambda n: (n in drained, n))


class Coordinator:
    """One node's session with ZooKeeper: its membership, the layouts, elections, watches.

    ``tail_of(stream)`` (called on the worker thread) answers the local log's tail
    ``(epoch of its last chunk, next offset)`` or None when this node holds no log of it;
    ``on_view(view)`` receives every changed ``ClusterView`` (on the worker thread).
    ``on_withdraw(stream, epoch)`` is told when a report is withdrawn because the leader of
    layout ``epoch`` is back (``tail_of`` fences the node's replica link of a stream before
    it answers; this lifts that fence).
    """

    def __init__(self, url: str, node: Node, session_timeout: float,
                 on_view: Callable[[ClusterView], None], tail_of: TailFn,
                 op_timeout: float | None = None):
        self.hosts, self.root = parse_url(url)
        self.url = url
        self.node = node
        self.session_timeout = session_timeout
        self.op_timeout = op_timeout if op_timeout is not None else session_timeout
        self.on_view = on_view
        self.tail_of = tail_of
        self.on_withdraw: Callable[[str, int], None] = lambda stream, epoch: None
        self.view = ClusterView()
        self.client = KazooClient(hosts=self.hosts, timeout=session_timeout)
        self.client.add_listener(self._state_changed)
        self.connected = threading.Event()
        self._wake = threading.Event()
        self._stopped = False
        self._lost = False  # the session expired: register again once connected
        self._disconnected_at = time.monotonic()
        self._worker: threading.Thread | None = None
        self._reported: dict[str, int] = {}  # stream -> layout epoch our tail was reported for
        self._waiting: dict[str, tuple[int, int]] = {}  # stream -> (epoch, reports) logged
        # our own declares and deletes not yet in a read: stream -> (seq, layout or None, args)
        self._lock = threading.Lock()
        self._seq = 0
        self._own: dict[str, tuple[int, StreamLayout | None, dict]] = {}

    # -- paths -----------------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    # -- life ------------------------------------------------------------------------------
    def start(self, connect_timeout: float) -> None:
        """Connect, register this node, read the cluster once and start watching; a
        ``CoordinationError`` when ZooKeeper does not answer in ``connect_timeout`` s or
        the node name is held by a live node."""
        try:
            self.client.start(timeout=connect_timeout)
        except KazooTimeoutError:
            self.client.close()
            raise CoordinationError(f"cannot reach ZooKeeper at {self.hosts} "
                                    f"(--cluster {self.url}) within {connect_timeout:g} s") from None
        try:
            for part in ("nodes", "streams", "drained"):
                self.client.ensure_path(self._path(part))
            self._register(connect_timeout)
            self._refresh()
        except KazooException as exc:
            self.client.stop()
            self.client.close()
            raise CoordinationError(f"ZooKeeper at {self.hosts}: {type(exc).__name__} {exc}") from None
        self._worker = threading.Thread(target=self._run, name="coordination", daemon=True)
        self._worker.start()

    def secret(self) -> str:
        """The cluster's secret (``PATH/secret``), made now when no node made it yet."""
        try:
            found = _secret(self.client, self.root, create=True)
        except KazooException as exc:
            raise CoordinationError(f"ZooKeeper at {self.hosts}: {type(exc).__name__} {exc}") from None
        assert found is not None
        return found

    def _register(self, timeout: float) -> None:
        """Our ephemeral node. One left by this name's previous process (a crash, a restart
        quicker than the session timeout) is waited out; a live one is an error."""
        path = self._path("nodes", self.node.name)
        data = json.dumps(self.node.to_json()).encode()
        gone = threading.Event()
        waited = False
        while True:
            try:
                self.client.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            if waited:
                raise CoordinationError(f"node name {self.node.name!r} is held by a live node "
                                        f"of the cluster (its ZooKeeper session did not end "
                                        f"within {self.session_timeout:g} s)")
            gone.clear()
            if self.client.exists(path, watch=lambda event: gone.set()) is not None:
                log.warning("node name %r still registered (a previous process's session?): "
                            "waiting up to %g s for it to end", self.node.name,
                            self.session_timeout + timeout)
                gone.wait(self.session_timeout + timeout)
                waited = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Close the session: our ephemeral node and tails go at once (a clean stop lets
        the others elect without waiting for the session timeout)."""
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        try:
            self.client.stop()
        finally:
            self.client.close()
        if self._worker is not None:
            self._worker.join(5)

    def _state_changed(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.connected.set()
            self._wake.set()
        else:
            self._lost = self._lost or state == KazooState.LOST
            if self.connected.is_set():
                self._disconnected_at = time.monotonic()
            self.connected.clear()
            if not self._stopped:
                log.warning("ZooKeeper session %s", "lost" if state == KazooState.LOST
                            else "suspended (connection lost; retrying)")

    # -- the worker ------------------------------------------------------------------------
    def _poke(self, event: Any = None) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            # tails and layouts wake us by their watches; the timeout is a safety net, shorter
            # while a stream has no leader (a tail's data changes without a children event)
            self._wake.wait(1.0 if self.view.leaderless() else 5.0)
            self._wake.clear()
            if self._stopped:
                return
            if not self.connected.is_set():
                continue
            if self._lost:
                self._reregister()
            try:
                self._refresh()
            except KazooException as exc:
                if not self._stopped:
                    log.warning("reading the cluster from ZooKeeper: %s %s",
                                type(exc).__name__, exc)
            except Exception:
                log.exception("coordination worker")

    def _reregister(self) -> None:
        """Our session expired (we were cut off from ZooKeeper past the timeout) and kazoo
        opened a new one: register this node again (our leaderships may have gone)."""
        try:
            self._register(self.op_timeout)
        except (KazooException, CoordinationError) as exc:
            log.warning("re-registering with ZooKeeper: %s", exc)
            return
        self._lost = False
        self._reported.clear()
        log.warning("ZooKeeper session re-established: node %r registered again", self.node.name)

    def _refresh(self) -> None:
        """Read nodes and layouts (re-arming the watches), publish the view, run elections."""
        client = self.client
        with self._lock:
            start = self._seq
        nodes = {}
        for name in client.get_children(self._path("nodes"), watch=self._poke):
            try:
                data, _ = client.get(self._path("nodes", name))
            except NoNodeError:
                continue
            nodes[name] = Node.from_json(json.loads(data))
        layouts, arguments = {}, {}
        for name in client.get_children(self._path("streams"), watch=self._poke):
            try:
                data, _ = client.get(self._path("streams", name), watch=self._poke)
            except NoNodeError:
                continue
            doc = json.loads(data)
            layouts[name] = StreamLayout.from_json(doc)
            arguments[name] = doc.get("arguments", {})
        stat = client.exists(self._path("definitions"), watch=self._poke)
        try:
            drained = frozenset(client.get_children(self._path("drained"), watch=self._poke))
        except NoNodeError:  # a cluster made before drains existed: none yet
            drained = frozenset()
        with self._lock:
            for name, (seq, layout, args) in list(self._own.items()):
                if seq <= start:  # written before this read began: the read has it
                    del self._own[name]
                elif layout is None:
                    layouts.pop(name, None)
                    arguments.pop(name, None)
                else:
                    layouts[name], arguments[name] = layout, args
            view = ClusterView(nodes, layouts, arguments, stat.version if stat else -1, drained)
            self._publish(view)
        for name, reported_for in [(n, e) for n, e in self._reported.items()
                                   if n not in view.layouts or view.layouts[n].leader in view.nodes]:
            self._withdraw_tail(name)
            if name in view.layouts and view.layouts[name].epoch == reported_for:
                self.on_withdraw(name, reported_for)
        for layout in view.leaderless():
            self._failover(layout)

    def _withdraw_tail(self, name: str) -> None:
        """The stream has a live leader again (or is gone): our report is stale (the log may
        grow before the leader goes again), so it goes; a new loss brings a new report."""
        del self._reported[name]
        try:
            self.client.delete(self._path("streams", name, "tails", self.node.name))
        except NoNodeError:
            pass

    def _publish(self, view: ClusterView) -> None:
        if view != self.view:
            self.view = view
            self.on_view(view)

    def _failover(self, layout: StreamLayout) -> None:
        """Report our tail for ``layout`` if we are a member, then try to elect."""
        me = self.node.name
        if me in layout.members and self._reported.get(layout.stream) != layout.epoch:
            tail = self.tail_of(layout.stream)
            if tail is not None:
                self._report_tail(layout, tail)
        tails = self._tails(layout)
        leader = choose_leader_by_tail(layout, tails, self.view.drained)
        if leader is None:
            waiting = (layout.epoch, len(tails))
            if self._waiting.get(layout.stream) != waiting:  # once per change, not per look
                self._waiting[layout.stream] = waiting
                log.info("stream %r has no leader (epoch %d): %d of %d members reported, "
                         "waiting for %d", layout.stream, layout.epoch, len(tails),
                         len(layout.members), layout.quorum)
            return
        self._waiting.pop(layout.stream, None)
        self._elect(layout, leader, tails[leader])

    def _report_tail(self, layout: StreamLayout, tail: tuple[int, int]) -> None:
        path = self._path("streams", layout.stream, "tails", self.node.name)
        data = json.dumps({"epoch": tail[0], "offset": tail[1],
                           "layout_epoch": layout.epoch}).encode()
        try:
            try:
                self.client.set(path, data)
            except NoNodeError:
                self.client.create(path, data, ephemeral=True, makepath=True)
        except NoNodeError:  # the stream was deleted meanwhile
            return
        self._reported[layout.stream] = layout.epoch
        log.info("stream %r: leader %s gone; reported tail epoch %d offset %d", layout.stream,
                 layout.leader, tail[0], tail[1])

    def _tails(self, layout: StreamLayout) -> dict[str, tuple[int, int]]:
        """The tails live members reported for ``layout``'s epoch."""
        base = self._path("streams", layout.stream, "tails")
        out = {}
        try:  # a member's report (a new ephemeral child) wakes us
            names = self.client.get_children(base, watch=self._poke)
        except NoNodeError:
            return {}
        for name in names:
            try:
                data, _ = self.client.get(f"{base}/{name}")
            except NoNodeError:
                continue
            doc = json.loads(data)
            if doc.get("layout_epoch") == layout.epoch:
                out[name] = (int(doc["epoch"]), int(doc["offset"]))
        return out

    def _elect(self, layout: StreamLayout, leader: str, tail: tuple[int, int]) -> None:
        path = self._path("streams", layout.stream)
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return
        doc = json.loads(data)
        if StreamLayout.from_json(doc) != layout:
            self._wake.set()  # changed since we read it: look again
            return
        new = StreamLayout(layout.stream, layout.epoch + 1, leader, layout.members,
                           layout.catching_up)
        _set_layout(doc, new)
        try:
            self.client.set(path, json.dumps(doc).encode(), version=stat.version)
        except (BadVersionError, NoNodeError):
            self._wake.set()
            return
        log.warning("stream %r: %s elected leader for epoch %d (tail epoch %d offset %d; %s "
                    "was leader)", layout.stream, leader, new.epoch, tail[0], tail[1],
                    layout.leader)
        self._wake.set()

    # -- the broker's calls (fail at once while disconnected, else wait op_timeout) ------
    def _ready(self, what: str) -> None:
        if not self.connected.is_set():
            since = time.monotonic() - self._disconnected_at
            raise CoordinationError(f"cannot {what}: ZooKeeper at {self.hosts} is unreachable "
                                    f"(connection lost {since:.0f} s ago); the streams keep "
                                    f"being served as they are")

    def _call(self, what: str, fn: Callable[..., Any], *args: Any,
              timeout: float | None = None, **kwargs: Any) -> Any:
        """``fn`` (a kazoo ``*_async``) once connected, waited for at most ``timeout``
        (default ``op_timeout``)."""
        self._ready(what)
        timeout = self.op_timeout if timeout is None else timeout
        try:
            return fn(*args, **kwargs).get(timeout=timeout)
        except KazooTimeoutError:
            raise CoordinationError(f"cannot {what}: ZooKeeper at {self.hosts} did not answer "
                                    f"within {timeout:g} s") from None
        except (NodeExistsError, NoNodeError, BadVersionError, NotEmptyError):
            raise
        except KazooException as exc:
            raise CoordinationError(f"cannot {what}: ZooKeeper at {self.hosts}: "
                                    f"{type(exc).__name__} {exc}") from None

    def create_stream(self, layout: StreamLayout, arguments: dict) -> bool:
        """Record a new stream's layout; False when the stream exists already."""
        doc = dict(layout.to_json(), arguments=arguments)
        try:
            self._call(f"declare stream {layout.stream!r}", self.client.create_async,
                       self._path("streams", layout.stream), json.dumps(doc).encode())
        except NodeExistsError:
            return False
        self._adopt(layout.stream, layout, arguments)
        return True

    def look_up(self, name: str, timeout: float) -> StreamLayout | None:
        """Stream ``name``'s layout read from ZooKeeper (one round trip, at most ``timeout``)
        and put in the view at once, for a name this node's view lacks: another node may
        have declared it a moment ago, before our watch fired. None when ZooKeeper has no
        such stream or cannot answer now (the caller answers from the view, as before)."""
        try:
            data, _ = self._call(f"look up stream {name!r}", self.client.get_async,
                                 self._path("streams", name), timeout=timeout)
        except NoNodeError:
            return None
        except (CoordinationError, ValueError) as exc:  # ValueError: not a znode name
            log.debug("stream %r not looked up in ZooKeeper: %s", name, exc)
            return None
        doc = json.loads(data)
        layout = StreamLayout.from_json(doc)
        self._adopt(name, layout, doc.get("arguments", {}))
        # a refresh that began before this read must not leave it stale for long: one after
        self._wake.set()
        return layout

    def _adopt(self, name: str, layout: StreamLayout | None, arguments: dict) -> None:
        """Our own write (a declare: ``layout``; a delete: None), in the view at once. A
        refresh that began reading before the write completed must not undo it: ``_own``
        keeps it until a read that began after it."""
        with self._lock:
            self._seq += 1
            self._own[name] = (self._seq, layout, arguments)
            view = self.view
            layouts = {k: v for k, v in view.layouts.items() if k != name}
            args = {k: v for k, v in view.arguments.items() if k != name}
            if layout is not None:
                layouts[name], args[name] = layout, arguments
            self._publish(ClusterView(view.nodes, layouts, args, view.definitions_version,
                                      view.drained))

    def delete_stream(self, name: str) -> bool:
        """Remove a stream's layout (and its members' tails); False when there was none."""
        what = f"delete stream {name!r}"
        base = self._path("streams", name)
        try:
            for child in self._call(what, self.client.get_children_async, base + "/tails"):
                try:
                    self._call(what, self.client.delete_async, f"{base}/tails/{child}")
                except NoNodeError:
                    pass
            try:
                self._call(what, self.client.delete_async, base + "/tails")
            except NoNodeError:
                pass
        except NoNodeError:
            pass
        try:
            self._call(what, self.client.delete_async, base)
        except NoNodeError:
            return False
        except NotEmptyError:  # a member reported a tail meanwhile: once more
            return self.delete_stream(name)
        self._adopt(name, None, {})
        return True

    def store(self) -> ZkStore:
        return ZkStore(self, self._path("definitions"))

    def replace_layout(self, expected: StreamLayout, new: StreamLayout) -> bool:
        """From a thread other than the loop (kazoo's blocking calls): write ``new`` for a
        stream whose layout is ``expected``, by a versioned set; False (nothing written) when
        the layout is another by now or ZooKeeper cannot be reached."""
        path = self._path("streams", expected.stream)
        try:
            self._ready(f"change the layout of {expected.stream!r}")
            data, stat = self.client.get(path)
            doc = json.loads(data)
            if StreamLayout.from_json(doc) != expected:
                return False
            _set_layout(doc, new)
            self.client.set(path, json.dumps(doc).encode(), version=stat.version)
        except (BadVersionError, NoNodeError, CoordinationError, KazooException) as exc:
            log.info("stream %r: layout not changed: %s %s", expected.stream,
                     type(exc).__name__, exc)
            return False
        self._wake.set()
        return True


def _set_layout(doc: dict, layout: StreamLayout) -> None:
    """``layout`` into a stream's znode document (its arguments kept)."""
    doc.pop("catching_up", None)
    doc.update(layout.to_json())


class LayoutRefused(ValueError):
    """An operator's layout change that the cluster's rules refuse (the message says why)."""


def _observer(url: str, timeout: float) -> tuple[KazooClient, str]:
    """A started client for the CLI's one-off reads and writes (it joins no membership), and
    the cluster's root path; the caller stops and closes it."""
    hosts, root = parse_url(url)
    client = KazooClient(hosts=hosts, timeout=max(timeout, 1.0))
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.close()
        raise CoordinationError(f"cannot reach ZooKeeper at {hosts} within {timeout:g} s") from None
    return client, root


def change_layout(url: str, timeout: float, stream: str,
                  change: Callable[[StreamLayout, ClusterView], StreamLayout]
                  ) -> tuple[StreamLayout, StreamLayout]:
    """The CLI's ``add-replica`` / ``delete-replica``: read ``stream``'s layout and the live
    nodes, write ``change(layout, view)`` by a versioned set (read again and retried when
    another node wrote meanwhile); returns (old, new). ``change`` raises ``LayoutRefused``;
    a stream that does not exist is refused too."""
    client, root = _observer(url, timeout)
    path = f"{root}/streams/{stream}"
    try:
        for _ in range(10):
            view = _read(client, root)
            try:
                data, stat = client.get(path)
            except NoNodeError:
                raise LayoutRefused(f"stream {stream!r} does not exist") from None
            doc = json.loads(data)
            old = StreamLayout.from_json(doc)
            new = change(old, view)
            if new == old:
                return old, new
            _set_layout(doc, new)
            try:
                client.set(path, json.dumps(doc).encode(), version=stat.version)
            except BadVersionError:
                continue
            return old, new
        raise CoordinationError(f"the layout of {stream!r} kept changing; try again")
    except KazooException as exc:
        raise CoordinationError(f"changing {stream!r} at {url}: {type(exc).__name__} {exc}") from None
    finally:
        client.stop()
        client.close()


def set_drained(url: str, timeout: float, node: str, drained: bool) -> bool:
    """The CLI's ``cluster drain`` / ``revive``: mark ``node`` drained (a persistent znode,
    so the state outlives restarts) or clear the mark; False when it was so already."""
    client, root = _observer(url, timeout)
    path = f"{root}/drained/{node}"
    try:
        if drained:
            try:
                client.create(path, json.dumps({"since": time.time()}).encode(), makepath=True)
            except NodeExistsError:
                return False
        else:
            try:
                client.delete(path)
            except NoNodeError:
                return False
        return True
    except KazooException as exc:
        raise CoordinationError(f"marking {node} at {url}: {type(exc).__name__} {exc}") from None
    finally:
        client.stop()
        client.close()


def _read(client: KazooClient, root: str) -> ClusterView:
    nodes: dict[str, Node] = {}
    layouts: dict[str, StreamLayout] = {}
    try:
        drained = frozenset(client.get_children(f"{root}/drained"))
    except NoNodeError:
        drained = frozenset()
    for kind in ("nodes", "streams"):
        try:
            names = client.get_children(f"{root}/{kind}")
        except NoNodeError:
            continue
        for name in names:
            try:
                data, _ = client.get(f"{root}/{kind}/{name}")
            except NoNodeError:
                continue
            doc = json.loads(data)
            if kind == "nodes":
                nodes[name] = Node.from_json(doc)
            else:
                layouts[name] = StreamLayout.from_json(doc)
    return ClusterView(nodes, layouts, drained=drained)


def _secret(client: KazooClient, root: str, create: bool) -> str | None:
    """``root/secret``'s value; made with a random one when absent and ``create`` (the first
    of several nodes starting at once wins: the others read its value)."""
    from amqp_stream.cluster.auth import new_secret

    path = f"{root}/secret"
    try:
        return bytes(client.get(path)[0]).decode("utf-8")
    except NoNodeError:
        if not create:
            return None
    try:
        client.create(path, new_secret().encode("utf-8"), makepath=True)
        log.info("made the cluster's secret at %s (the first node without --cluster-secret)", path)
    except NodeExistsError:
        pass
    return bytes(client.get(path)[0]).decode("utf-8")


def read_secret(url: str, timeout: float) -> str | None:
    """The cluster's secret as ZooKeeper holds it (None: no node made one), read by an
    observer (the operations commands prove it to the nodes)."""
    client, root = _observer(url, timeout)
    try:
        return _secret(client, root, create=False)
    except KazooException as exc:
        raise CoordinationError(f"reading the cluster at {url}: {type(exc).__name__} {exc}") from None
    finally:
        client.stop()
        client.close()


def read_view(url: str, timeout: float) -> ClusterView:
    """The cluster as ZooKeeper holds it now, read by an observer that does not join it (the
    CLI's ``cluster status``)."""
    client, root = _observer(url, timeout)
    try:
        return _read(client, root)
    except KazooException as exc:
        raise CoordinationError(f"reading the cluster at {url}: {type(exc).__name__} {exc}") from None
    finally:
        client.stop()
        client.close()


class ZkStore:
    """The definitions document (``amqp_stream.definitions.Store``) in one znode, so every
    node declares into and routes by the same exchanges and bindings. ``save`` is a set
    versioned by the last ``load``: an edit made from a stale copy fails (the caller's edit
    is undone) instead of dropping another node's change."""

    def __init__(self, coordinator: Coordinator, path: str):
        self.coordinator = coordinator
        self.path = path
        self.version: int | None = None  # None: no document yet

    def __str__(self) -> str:
        return f"{self.coordinator.url}{self.path[len(self.coordinator.root):]}"

    def load(self) -> dict | None:
        c = self.coordinator
        try:
            data, stat = c._call("read the definitions", c.client.get_async, self.path)
        except NoNodeError:
            self.version = None
            return None
        self.version = stat.version
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict):
            raise ValueError(f"{self}: not a JSON object")
        return document

    def stale(self) -> bool:
        """Whether ZooKeeper holds another version than the one last loaded (one round trip):
        another node may have changed the document a moment ago, before this node's watch
        fired and the view reached the loop."""
        c = self.coordinator
        stat = c._call("read the definitions", c.client.exists_async, self.path)
        return (stat.version if stat is not None else None) != self.version

    def save(self, document: dict) -> None:
        c = self.coordinator
        data = json.dumps(document, sort_keys=True).encode("utf-8")
        try:
            if self.version is None:
                c._call("save the definitions", c.client.create_async, self.path, data)
                self.version = 0
            else:
                stat = c._call("save the definitions", c.client.set_async, self.path, data,
                               self.version)
                self.version = stat.version
        except (NodeExistsError, BadVersionError, NoNodeError):
            raise CoordinationError("the definitions were changed by another node meanwhile: "
                                    "try again") from None

