"""The leader's side of replication: a listener on the replication port and, per replica and
stream, a feed that sends chunks from the replica's next offset as they lie on disk.

As osiris's replica reader: the chunks go out with ``os.sendfile`` as to a stream consumer,
from a reader bounded by what is durable here (not by the commit: a replica must get a chunk
before it can count toward it). Unlike osiris (where the replica listens and the leader's
replica reader connects to it) the replica connects to the leader, as a Kafka follower
fetches: one listening port per node, and a replica that comes back reconnects by itself.

Each connection runs on two threads of its own with blocking sockets (one sends chunks and
commit ends, one reads the replica's tails), apart from the broker's event loop: replication
must not wait behind client traffic, nor client traffic behind a slow replica.

The handshake decides where the replica's log must end, as osiris's ``init_acceptor`` does:
of the replica's (epoch, last chunk id) pairs, newest first, the first epoch the leader's log
holds too gives the common prefix: up to the lower of the two last chunk ids of that epoch
(chunks of one epoch at one id are the same chunk: one leader wrote them). The replica
truncates to that chunk's end and takes everything after it from the leader.
"""

from __future__ import annotations

import bisect
import collections
import logging
import os
import socket
import threading
import time
from typing import Any, Callable

from amqp_stream.cluster import auth
from amqp_stream.cluster import replication_wire as wire
from amqp_stream.cluster.commit import CommitTracker
from storage.files import segment_path

__all__ = ["LeaderRole", "ReplicationServer", "common_end", "admin_request", "LATENCY_BUCKETS"]

log = logging.getLogger("amqp_stream.cluster.leader")

BATCH_BYTES = 1 << 20  # chunks sent before the feed looks at the commit end again
WAIT_S = 0.5  # a feed at the end wakes this often at most to send a moved commit end
# an idle feed sends its commit end again this often: the replica answers with an ACK, so the
# leader hears from each member even when nothing is published (``LeaderRole.in_contact``)
HEARTBEAT_S = 1.0
# commit latency histogram (seconds): Prometheus's default buckets, finer at the low end
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, float("inf"))
PENDING_MAX = 100_000  # local ends awaiting their commit: beyond, the oldest go uncounted

AdminFn = Callable[[dict], dict]


def common_end(stream: Any, epochs: tuple[tuple[int, int], ...]) -> int:
    """Where a replica whose log ends with ``epochs`` ((epoch, last chunk id), newest first)
    must cut its log to be a prefix of ``stream``'s (the leader's)."""
    mine: dict[int, int] = {}
    for epoch, last in stream.epoch_ends():
        mine.setdefault(epoch, last)
    for epoch, last in epochs:
        if epoch not in mine:
            continue
        at = stream.epoch_at(min(last, mine[epoch]))
        if at is not None and at[0] == epoch:
            return int(at[1])
    return int(stream.first_offset) if not epochs else 0


class LeaderRole:
    """This node leads ``stream`` under ``epoch``: the commit tracker and the live feeds."""

    def __init__(self, name: str, stream: Any, epoch: int, members: tuple[str, ...],
                 quorum: int, node: str, voters: tuple[str, ...] | None = None):
        self.name = name
        self.stream = stream
        self.epoch = epoch
        self.node = node
        self.feeds: set[Feed] = set()
        self.closed = False
        # commit latency: (local end, when it became durable here) until the commit passes
        # it; a histogram of the waits (cumulative counts per LATENCY_BUCKETS, their sum)
        self._pending: collections.deque[tuple[int, float]] = collections.deque()
        self._pending_lock = threading.Lock()
        self.latency_counts = [0] * len(LATENCY_BUCKETS)
        self.latency_sum = 0.0
        self.catch_up_targets: dict[str, int] = {}  # a catching-up member -> commit to reach
        self.promoting: set[str] = set()
        # when each member's last ACK came (any feed of it, by monotonic time), and when this
        # role began: how long ago a quorum was in contact (``in_contact``)
        self.started_at = time.monotonic()
        self.heard: dict[str, float] = {}
        floor = stream.local_end if stream.last_epoch < epoch else 0
        commit = stream.commit_gate or 0
        self.tracker = CommitTracker(members, quorum, floor, commit, self._committed, voters)
        self._listener = self._local_tail
        stream.add_listener(self._listener)
        if floor:
            # the epoch's first chunk, at once: what older epochs left is committed with it
            # once a quorum holds it, not only with the next publish
            stream.mark_epoch()
        self._local_tail()

    def _local_tail(self) -> None:
        """The writer moved the local end (durable here per the policy)."""
        end = self.stream.local_end
        with self._pending_lock:
            if end > self.tracker.commit and (not self._pending or self._pending[-1][0] < end):
                self._pending.append((end, time.monotonic()))
                if len(self._pending) > PENDING_MAX:
                    self._pending.popleft()
        self.tracker.report(self.node, end, self.stream.last_chunk_id)

    def _committed(self, end: int, chunk_id: int) -> None:
        """The quorum commit moved: each local end it passes took ``now - written``."""
        now = time.monotonic()
        with self._pending_lock:
            while self._pending and self._pending[0][0] <= end:
                wait = now - self._pending.popleft()[1]
                self.latency_sum += wait
                self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS, wait)] += 1
        self.stream.set_commit(end, chunk_id)

    def reconfigure(self, members: tuple[str, ...], voters: tuple[str, ...], quorum: int) -> None:
        """Members added or removed under this leader and epoch: the tracker counts the new
        voters; a removed member's feed ends."""
        self.tracker.reconfigure(members, voters, quorum)
        for gone in [m for m in self.catch_up_targets if m in voters or m not in members]:
            del self.catch_up_targets[gone]
        self.promoting &= set(members) - set(voters)
        for feed in list(self.feeds):
            if feed.hello.node not in members:
                feed.close()
            elif feed.acked[1] >= 0:  # a new member connected before this leader saw it
                self.tracker.report(feed.hello.node, *feed.acked)

    def reepoch(self, epoch: int, members: tuple[str, ...], voters: tuple[str, ...],
                quorum: int) -> None:
        """A member change under this leader raised the epoch: chunks carry ``epoch`` from
        here, the new voters count only tails past this log's end now (the epoch's first
        chunk, written at once, commits what came before once they hold it), and the feeds of
        the old epoch end (each replica comes back under the new one)."""
        self.stream.set_epoch(epoch)
        self.epoch = epoch
        self.tracker.reconfigure(members, voters, quorum, floor=self.stream.local_end)
        self.stream.mark_epoch()
        for gone in [m for m in self.catch_up_targets if m in voters or m not in members]:
            del self.catch_up_targets[gone]
        self.promoting &= set(members) - set(voters)
        for feed in list(self.feeds):
            feed.close()

    def caught_up(self, catching_up: tuple[str, ...]) -> list[str]:
        """Polled on the loop: the catching-up members whose durable tail reached the commit
        end this leader had at the previous poll (with a steady publish load the live commit
        end keeps moving past an acknowledgement in flight)."""
        done = []
        commit = self.tracker.commit
        tails = dict(self.tracker.tails)
        for member in catching_up:
            target = self.catch_up_targets.get(member)
            tail = tails.get(member)
            if target is not None and tail is not None and tail[0] >= target \
                    and member not in self.promoting:
                done.append(member)
            self.catch_up_targets[member] = commit
        return done

    def in_contact(self) -> float:
        """The last moment (monotonic) at which a quorum of the voters, this leader counted
        as always heard, had been heard from: a leader cut off from its replicas sees it fall
        behind and gives up its leadership (``Replication``). The role's start counts as
        contact, so replicas have time to connect."""
        tracker = self.tracker
        need = tracker.quorum - (1 if self.node in tracker.voters else 0)
        if need <= 0:
            return time.monotonic()
        heard = sorted((self.heard[m] for m in tracker.voters
                        if m != self.node and m in self.heard), reverse=True)
        if len(heard) < need:
            return self.started_at
        return max(self.started_at, heard[need - 1])

    def lag_bytes(self) -> dict[str, int]:
        """Bytes of this leader's log each connected member does not hold yet (sent and not
        acknowledged, and not sent yet)."""
        return {feed.hello.node: feed.lag_bytes() for feed in list(self.feeds)}

    def close(self) -> None:
        self.closed = True
        self.stream.remove_listener(self._listener)
        for feed in list(self.feeds):
            feed.close()


class Feed:
    """One replica's connection: chunks out (this thread), tails in (a reader thread)."""

    def __init__(self, role: LeaderRole, sock: socket.socket, hello: wire.Hello, start: int):
        self.role = role
        self.sock = sock
        self.hello = hello
        self.start = start
        self.closed = False
        self.acked = (start, -1)
        # bytes sent, and (chunk end, bytes sent through it) not yet acknowledged: lag in bytes
        self.sent_bytes = 0
        self.acked_bytes = 0
        self._unacked: collections.deque[tuple[int, int]] = collections.deque()
        self._read_at: tuple[int, int] | None = None  # last chunk sent: (its id, its end byte)

    def lag_bytes(self) -> int:
        """Sent and unacknowledged, plus what the log holds beyond the last chunk sent
        (segment file sizes: read when Prometheus scrapes, not on the send path)."""
        stream = self.role.stream
        starts = list(stream.segment_starts())
        if self._read_at is None:
            at = max(0, bisect.bisect_right(starts, self.start) - 1)
            position = 0
        else:
            at = max(0, bisect.bisect_right(starts, self._read_at[0]) - 1)
            position = self._read_at[1]
        unsent = 0
        for i, start in enumerate(starts[at:]):
            try:
                size = os.stat(segment_path(stream.directory, start)).st_size
            except OSError:  # gone meanwhile (retention)
                continue
            unsent += max(0, size - position) if i == 0 else size
        return max(0, self.sent_bytes - self.acked_bytes) + unsent

    def run(self) -> None:
        role = self.role
        role.feeds.add(self)
        role.tracker.forget(self.hello.node)
        reader_thread = threading.Thread(target=self._read_acks, daemon=True,
                                         name=f"repl-acks:{role.name}:{self.hello.node}")
        reader_thread.start()
        stream = role.stream
        sent_commit = -1
        sent_at = 0.0
        reader = None
        try:
            reader = stream.replication_reader(self.start)
            fd = self.sock.fileno()
            while not self.closed and not role.closed:
                sent = 0
                while sent < BATCH_BYTES:
                    c = reader.read_raw()
                    if c is None:
                        break
                    self.sock.sendall(wire.chunk_head(c.size, c.first))
                    pos, left = c.position, c.size
                    while left:
                        n = os.sendfile(fd, c.fd, pos, left)
                        if n == 0:
                            raise EOFError(f"segment ended {left} bytes early")
                        pos += n
                        left -= n
                    sent += c.size
                    self.sent_bytes += c.size
                    self._unacked.append((c.next_offset, self.sent_bytes))
                    self._read_at = (c.chunk_id, c.position + c.size)
                commit = stream.commit_gate or 0
                if commit != sent_commit or time.monotonic() - sent_at >= HEARTBEAT_S:
                    self.sock.sendall(wire.encode_commit(commit, stream.committed_chunk_id))
                    sent_commit = commit
                    sent_at = time.monotonic()
                if sent:
                    continue
                position = reader.position
                stream.wait_change(position, sent_commit, WAIT_S)
        except (OSError, EOFError) as exc:
            if not self.closed:
                log.info("replica %s of %r: connection ended: %s", self.hello.node, role.name, exc)
        except Exception:
            log.exception("feeding replica %s of %r", self.hello.node, role.name)
        finally:
            if reader is not None:
                reader.close()
            self.close()
            role.feeds.discard(self)

    def _read_acks(self) -> None:
        buf = bytearray()
        at = 0
        try:
            while not self.closed:
                data = self.sock.recv(65536)
                if not data:
                    break
                buf += data
                got, at = wire.frames(buf, at)
                for kind, payload in got:
                    if kind != wire.ACK:
                        raise wire.WireError(f"frame type {kind} from a replica")
                    end, chunk_id = wire.decode_position(payload)
                    self.acked = (end, chunk_id)
                    self.role.heard[self.hello.node] = time.monotonic()
                    unacked = self._unacked
                    while unacked and unacked[0][0] <= end:
                        self.acked_bytes = unacked.popleft()[1]
                    self.role.tracker.report(self.hello.node, end, chunk_id)
                if at > 65536:
                    del buf[:at]
                    at = 0
        except (OSError, wire.WireError) as exc:
            if not self.closed:
                log.info("replica %s of %r: %s", self.hello.node, self.role.name, exc)
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class ReplicationServer:
    """The node's replication listener. Each connection first proves the cluster's
    ``secret`` (``auth``: refused and logged otherwise); then its HELLO names a stream this
    node must lead (``roles(name)``), else it is refused. A connection that sends an ADMIN
    frame instead is an operator's request (``admin(request)``: ``stream status``, a
    leadership transfer), answered with one ADMIN frame and closed."""

    def __init__(self, host: str, port: int, roles: Callable[[str], LeaderRole | None],
                 secret: bytes, admin: AdminFn | None = None):
        self.roles = roles
        self.secret = secret
        self.admin = admin
        self.sock = socket.create_server((host, port), reuse_port=False)
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True, name="repl-listener")

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                if self.closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(sock,), daemon=True,
                             name="repl-feed").start()

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            peer = "%s:%s" % sock.getpeername()[:2]
        except OSError:
            peer = "?"
        try:
            sock.settimeout(10.0)
            nonce = auth.send_challenge(sock)
            reader = auth.FrameReader(sock)
            kind, payload = reader.next("AUTH", auth.HANDSHAKE_FRAME)
            try:
                welcome = auth.check_auth(self.secret, nonce, kind, payload)
            except auth.AuthError as exc:
                # the peer learns only that it failed; the log says who and why
                log.warning("replication connection from %s refused: %s", peer, exc)
                sock.sendall(wire.encode_refuse(
                    wire.REFUSE_AUTH, "authentication failed: the cluster secret does not "
                    "match this node's (--cluster-secret, or the cluster's ZooKeeper path)"))
                sock.close()
                return
            sock.sendall(welcome)
            kind, payload = reader.next("HELLO")
            if kind == wire.ADMIN:
                self._answer(sock, wire.decode_admin(payload))
                return
            if kind != wire.HELLO:
                raise wire.WireError(f"frame type {kind} before HELLO")
            hello = wire.decode_hello(payload)
            sock.settimeout(None)
        except (OSError, wire.WireError) as exc:
            # a peer closing before saying anything is a reachability probe (an election's)
            log.log(logging.DEBUG if "closed before" in str(exc) else logging.INFO,
                    "replication handshake with %s failed: %s", peer, exc)
            sock.close()
            return
        role = self.roles(hello.stream)
        refusal = None
        if role is None or role.closed:
            refusal = (wire.REFUSE_NOT_LEADER, f"not the leader of {hello.stream!r}")
        elif hello.epoch > role.epoch:
            refusal = (wire.REFUSE_NOT_LEADER, f"epoch {hello.epoch} is newer than this "
                                               f"leader's {role.epoch}")
        elif hello.epoch < role.epoch:
            refusal = (wire.REFUSE_STALE_EPOCH, f"epoch {hello.epoch} is older than this "
                                                f"leader's {role.epoch}: refresh the layout")
        if refusal is not None or role is None:
            code, reason = refusal or (wire.REFUSE_NOT_LEADER, "")
            try:
                sock.sendall(wire.encode_refuse(code, reason))
            except OSError:
                pass
            sock.close()
            return
        stream = role.stream
        start = min(common_end(stream, hello.epochs), hello.end) if hello.epochs else \
            min(hello.end, stream.local_end)
        first = stream.first_offset
        reset = False
        if start < first:  # what the logs share is gone here (retention): it starts over
            start, reset = first, True
        log.info("replica %s of %r (epoch %d): from offset %d (its end %d%s)", hello.node,
                 hello.stream, role.epoch, start, hello.end, ", reset" if reset else "")
        try:
            sock.sendall(wire.encode_start(wire.Start(role.epoch, start, stream.commit_gate or 0,
                                                      stream.committed_chunk_id, reset)))
        except OSError:
            sock.close()
            return
        Feed(role, sock, hello, start).run()


    def _answer(self, sock: socket.socket, request: dict) -> None:
        try:
            if self.admin is None:
                answer = {"error": "this node takes no operator requests"}
            else:
                answer = self.admin(request)
        except Exception as exc:
            log.exception("operator request %r", request)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            sock.settimeout(10.0)
            sock.sendall(wire.encode_admin(answer))
        except OSError:
            pass
        finally:
            sock.close()


def admin_request(host: str, port: int, request: dict, timeout: float, secret: bytes) -> dict:
    """Send an operator's ``request`` to a node's replication port, proving the cluster's
    ``secret``; its answer (a JSON object; ``{"error": ...}`` when refused). ``OSError``
    when the node cannot be reached, ``WireError`` (``AuthError``) when it refuses or fails
    to prove the secret itself."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        reader = auth.FrameReader(sock)
        auth_frame, welcome = auth.client_auth(reader, secret)
        sock.sendall(auth_frame + wire.encode_admin(request))
        auth.check_welcome(*reader.next("the node's proof", auth.HANDSHAKE_FRAME), welcome)
        kind, payload = reader.next("the answer")
        if kind != wire.ADMIN:
            raise wire.WireError(f"frame type {kind} in answer to a request")
        return wire.decode_admin(payload)
