"""The replica's side of replication: one thread per stream this node follows. It connects
to the leader's replication port, proves the cluster's secret and checks the leader's proof
(``auth``), says what its log holds, truncates where the leader says
(only unconfirmed chunks of an older epoch can be there), then appends the leader's chunks as
they come (the same bytes at the same offsets: ``storage.Stream.append_chunks`` checks the
offset, the epoch and the CRCs), durable per this node's fsync policy, and answers each batch
with its durable tail. The leader's commit end bounds this node's consumers.

Fencing: a chunk of an epoch older than the log's last one is refused by storage; a leader
of an older epoch than the one this replica knows is refused here (its START says its
epoch), so a deposed leader gets nothing acknowledged. ``fence()`` stops the link from
appending and acknowledging before this node reports its tail for an election (the leader's
session ended but its connection may still live): every chunk it ever acknowledged is then
within the tail it reports, so the leader elected holds whatever the old one could commit
(Raft's rule: a vote for a new term refuses the old leader). After any failure the thread
waits ``RETRY_S`` and connects again (to whatever leader the layout names by then), unless
fenced.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable

from amqp_stream.cluster import auth
from amqp_stream.cluster import replication_wire as wire
from amqp_stream.cluster.layout import Node
from storage.errors import StaleEpochError, StorageError

__all__ = ["ReplicaLink"]

log = logging.getLogger("amqp_stream.cluster.replica")

RETRY_S = 0.5
# answer the leader's idle COMMIT (its heartbeat) with an ACK when none went for this long:
# the leader hears from this member even when nothing is published
ACK_IDLE_S = 0.5
RECV_BYTES = 4 << 20


class ReplicaLink:
    """Follows ``stream`` from ``leader`` under ``epoch`` until ``close``."""

    def __init__(self, name: str, stream: Any, epoch: int, leader: Node, node: str,
                 secret: bytes, sync_interval_s: float = 0.2,
                 on_event: Callable[[str], None] | None = None):
        self.name = name
        self.secret = secret
        self.stream = stream
        self.epoch = epoch
        self.leader = leader
        self.node = node
        self.sync_interval_s = sync_interval_s
        self.on_event = on_event or (lambda what: None)
        self.closed = False
        self.fenced = False
        self._fence = threading.Lock()  # held while appending and acknowledging
        self.sock: socket.socket | None = None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"repl-replica:{name}")

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.closed = True
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(timeout=5)

    def fence(self) -> None:
        """From another thread: append and acknowledge nothing more (returns once a batch in
        progress is acknowledged) and drop the connection, until ``unfence``."""
        with self._fence:
            self.fenced = True
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def unfence(self) -> None:
        """The leader is back under the same epoch (no election): follow it again."""
        self.fenced = False

    def _run(self) -> None:
        refused = False
        while not self.closed:
            if self.fenced:
                time.sleep(RETRY_S)  # waiting for a new layout (this link is then closed)
                continue
            try:
                self._follow()
            except auth.AuthError as exc:
                if not self.closed:  # every retry meets it again: said once, loudly
                    if not refused:
                        log.warning("replica of %r: the leader %s refused this node's "
                                    "authentication: %s", self.name, self.leader.name, exc)
                    refused = True
                    self.on_event(f"AuthError: {exc}")
            except (OSError, wire.WireError, StorageError, EOFError) as exc:
                if not self.closed:
                    log.info("replica of %r from %s: %s: %s", self.name, self.leader.name,
                             type(exc).__name__, exc)
                    self.on_event(f"{type(exc).__name__}: {exc}")
            except Exception:
                log.exception("replica of %r", self.name)
            finally:
                self.connected.clear()
                if self.sock is not None:
                    self.sock.close()
                    self.sock = None
            if not self.closed:
                time.sleep(RETRY_S)  # a back-off between attempts, not a synchronisation

    def _follow(self) -> None:
        stream = self.stream
        sock = socket.create_connection((self.leader.host, self.leader.replication_port),
                                        timeout=5)
        self.sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = auth.FrameReader(sock)
        auth_frame, welcome = auth.client_auth(reader, self.secret)
        sock.sendall(auth_frame + wire.encode_hello(wire.Hello(
            self.name, self.node, self.epoch, stream.local_end, tuple(stream.epoch_ends()))))
        # the leader proves the secret too: no chunk is taken from a node that lacks it
        auth.check_welcome(*reader.next("the leader's proof", auth.HANDSHAKE_FRAME), welcome)
        # what came with the proof (START and chunks may share its read) is handled before
        # the next recv: the leader may have nothing more to send until it hears an ACK
        early = reader.rest()
        rest = b""  # a partial frame carried to the next read
        started = False
        # wake at least every sync interval: chunks left unsynced (``interval``) get their
        # fsync even when nothing more comes
        sock.settimeout(self.sync_interval_s if self.sync_interval_s > 0 else None)
        last_sync = acked_at = time.monotonic()
        while not self.closed:
            if early:
                data, early = early, b""
            else:
                try:
                    data = sock.recv(RECV_BYTES)
                except TimeoutError:
                    stream.sync()
                    last_sync = time.monotonic()
                    continue
                if not data:
                    raise EOFError("the leader closed the connection")
            if rest:
                data = rest + data
            # the chunks are views into ``data`` (immutable: no copy, nothing to release)
            got, at = wire.frame_views(data)
            rest = data[at:]
            chunks: list[tuple[memoryview, bool]] = []
            commit: tuple[int, int] | None = None
            for kind, payload in got:
                if kind == wire.CHUNK:
                    if not started:
                        raise wire.WireError("CHUNK before START")
                    chunks.append((payload[1:], bool(payload[0] & 1)))
                elif kind == wire.COMMIT:
                    commit = wire.decode_position(payload)
                elif kind == wire.START:
                    start = wire.decode_start(payload)
                    with self._fence:
                        if self.fenced:
                            raise EOFError("fenced: this node reported its tail for an election")
                        self._start(start)
                    started = True
                    commit = (start.commit, start.commit_chunk)
                elif kind == wire.REFUSE:
                    code, reason = wire.decode_refuse(payload)
                    raise wire.WireError(f"refused by {self.leader.name} ({code}): {reason}")
                else:
                    raise wire.WireError(f"frame type {kind} from a leader")
            if chunks:
                with self._fence:
                    if self.fenced:
                        raise EOFError("fenced: this node reported its tail for an election")
                    try:
                        end = stream.append_chunks(chunks)
                    except StaleEpochError as exc:
                        log.warning("replica of %r: %s", self.name, exc)
                        self.on_event(f"stale: {exc}")
                        raise
                    sock.sendall(wire.encode_ack(end, stream.last_chunk_id))
                    acked_at = time.monotonic()
            elif commit is not None and started and time.monotonic() - acked_at >= ACK_IDLE_S:
                with self._fence:
                    if self.fenced:
                        raise EOFError("fenced: this node reported its tail for an election")
                    sock.sendall(wire.encode_ack(stream.local_end, stream.last_chunk_id))
                acked_at = time.monotonic()
            if commit is not None:
                if commit[0] > stream.local_end:  # not here yet: up to what is
                    commit = (stream.local_end, stream.last_chunk_id)
                stream.set_commit(*commit)
            now = time.monotonic()
            if now - last_sync >= self.sync_interval_s:
                stream.sync()
                last_sync = now

    def _start(self, start: wire.Start) -> None:
        stream = self.stream
        if start.epoch < self.epoch:
            raise StaleEpochError(f"leader {self.leader.name} is at epoch {start.epoch}, "
                                  f"older than {self.epoch}")
        if start.reset:
            log.warning("replica of %r: the leader keeps nothing this log shares with it "
                        "before %d (this log ends at %d): starting the log again there",
                        self.name, start.offset, stream.local_end)
            self.on_event(f"reset {stream.local_end} -> {start.offset}")
            stream.reset(start.offset)
        elif start.offset < stream.local_end:
            log.warning("replica of %r: truncating from %d to %d (chunks the leader of epoch "
                        "%d does not hold)", self.name, stream.local_end, start.offset,
                        start.epoch)
            self.on_event(f"truncated {stream.local_end} -> {start.offset}")
            stream.truncate(start.offset)
        elif start.offset > stream.local_end:
            log.warning("replica of %r: the leader keeps nothing before %d, beyond this log's "
                        "end %d: starting the log again there", self.name, start.offset,
                        stream.local_end)
            self.on_event(f"reset {stream.local_end} -> {start.offset}")
            stream.reset(start.offset)
        self.connected.set()
        self.sock.sendall(wire.encode_ack(stream.local_end, stream.last_chunk_id))  # type: ignore[union-attr]
        log.info("replica of %r: following %s (epoch %d) from %d", self.name,
                 self.leader.name, start.epoch, stream.local_end)
