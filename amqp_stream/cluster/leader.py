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

import logging
import os
import socket
import threading
from typing import Any, Callable

from amqp_stream.cluster import replication_wire as wire
from amqp_stream.cluster.commit import CommitTracker

__all__ = ["LeaderRole", "ReplicationServer", "common_end"]

log = logging.getLogger("amqp_stream.cluster.leader")

BATCH_BYTES = 1 << 20  # chunks sent before the feed looks at the commit end again
WAIT_S = 0.5  # a feed at the end wakes this often at most to send a moved commit end


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
                 quorum: int, node: str):
        self.name = name
        self.stream = stream
        self.epoch = epoch
        self.node = node
        self.feeds: set[Feed] = set()
        self.closed = False
        floor = stream.local_end if stream.last_epoch < epoch else 0
        commit = stream.commit_gate or 0
        self.tracker = CommitTracker(members, quorum, floor, commit, stream.set_commit)
        self._listener = self._local_tail
        stream.add_listener(self._listener)
        if floor:
            # the epoch's first chunk, at once: what older epochs left is committed with it
            # once a quorum holds it, not only with the next publish
            stream.mark_epoch()
        self._local_tail()

    def _local_tail(self) -> None:
        """The writer moved the local end (durable here per the policy)."""
        self.tracker.report(self.node, self.stream.local_end, self.stream.last_chunk_id)

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

    def run(self) -> None:
        role = self.role
        role.feeds.add(self)
        role.tracker.forget(self.hello.node)
        reader_thread = threading.Thread(target=self._read_acks, daemon=True,
                                         name=f"repl-acks:{role.name}:{self.hello.node}")
        reader_thread.start()
        stream = role.stream
        sent_commit = -1
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
                commit = stream.commit_gate or 0
                if commit != sent_commit:
                    self.sock.sendall(wire.encode_commit(commit, stream.committed_chunk_id))
                    sent_commit = commit
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
    """The node's replication listener: each connection's HELLO names a stream this node
    must lead (``roles(name)``), else it is refused."""

    def __init__(self, host: str, port: int, roles: Callable[[str], LeaderRole | None]):
        self.roles = roles
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
            sock.settimeout(10.0)
            hello = _read_hello(sock)
            sock.settimeout(None)
        except (OSError, wire.WireError) as exc:
            log.info("replication handshake failed: %s", exc)
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


def _read_hello(sock: socket.socket) -> wire.Hello:
    buf = bytearray()
    while True:
        data = sock.recv(65536)
        if not data:
            raise wire.WireError("closed before HELLO")
        buf += data
        got, _ = wire.frames(buf)
        if got:
            kind, payload = got[0]
            if kind != wire.HELLO:
                raise wire.WireError(f"frame type {kind} before HELLO")
            return wire.decode_hello(payload)
