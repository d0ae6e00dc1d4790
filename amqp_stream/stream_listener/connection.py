"""One stream-protocol socket: bytes in to ``streamproto.ServerConnection``, frames and file
ranges out.

Strategy: the codec is sans-I/O; this ``SocketConnection`` feeds it what the socket read and
hands each event to the adapter (``amqp_stream.stream_listener.adapter``). Output is a queue of byte
buffers and ``FileRange``s (a chunk's data section in a segment file, sent with
``os.sendfile``, never read into Python). Small frames written in one turn are gathered in one
buffer and go out in one ``send``. A file range is sent at once when the socket is free; only
when the socket is behind does it wait in the queue, and then it holds its own ``os.dup`` of
the segment's descriptor (the reader may move on and close its own). With sender threads
(``--stream-send-threads``, ``senders.Senders``) output holding a file range is not sent by the
loop: the whole queue goes to a worker as one ``Batch`` and nothing more is sent on that socket
until it comes back (``batch_sent``), so the order of the bytes is kept and ``os.sendfile``'s
copies of different connections run on other cores.

``pending`` counts the queued bytes: consumers stop reading chunks while it is above
``MAX_PENDING`` and are resumed by ``drained()`` (a client that never reads costs at most about
that much memory, and nothing of the file's bytes). Publishers over their byte budget pause
reading (``throttled``).

Frames above the negotiated frame max (taken up to ``streamproto``'s hard max, as RabbitMQ up
to 4.2.6 takes them): before such a frame is read whole, its size is reserved in the
listener's ``LargeFrames`` (``LARGE_FRAME_BUDGET`` bytes broker-wide; an empty budget takes any
one frame); a connection that does not fit is not read until others' reservations go, in turn.
A reservation lasts ``idle_timeout`` at most: a client stalled inside its large frame is closed.
A decoded Publish costs about 290 bytes per message beside its frame, so this, not the frame
size alone, is what bounds the memory of clients that ignore frame_max.

Heartbeats (once open, when negotiated): a Heartbeat goes out when nothing was written for the
heartbeat period; a client silent for two periods is disconnected.

Ending: ``finish()`` writes what is queued and then closes the socket; the client's Close, a
failed authentication and a protocol error end that way. A client that just drops the socket
is closed at once. Either way ``finished()`` lets the adapter release publishers and
subscriptions.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from amqp_stream.loop import READ_SIZE, EventLoop, SocketConnection
from amqp_stream.stream_listener.senders import Batch
from amqp_stream.streamproto import (
    NEED_DATA, PAUSED, ConnectionClosed, Heartbeat, RemoteProtocolError, ServerConnection, State,
)
from amqp_stream.streamproto.constants import DEFAULT_FRAME_MAX, ResponseCode
from amqp_stream.streamproto.frames import Credit, Frame

if TYPE_CHECKING:
    from amqp_stream.stream_listener.adapter import StreamAdapter

__all__ = ["StreamConnection", "FileRange", "LargeFrames", "MAX_PENDING", "LARGE_FRAME_BUDGET"]

log = logging.getLogger("amqp_stream.stream_listener")

MAX_PENDING = 4 << 20  # queued output bytes above which consumers wait for the socket
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
LARGE_FRAME_BUDGET = 16 << 20  # bytes of frames above frame_max read at once, broker-wide


class LargeFrames:
    """Reservations for frames above the frame max, broker-wide; connections that wait for
    room, in order (see the module's docstring)."""

    def __init__(self, limit: int = LARGE_FRAME_BUDGET):
        self.limit = limit
        self.used = 0
        self.waiting: dict[StreamConnection, int] = {}  # insertion order is the queue

    def reserve(self, size: int) -> bool:
        if self.used and self.used + size > self.limit:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size
        while self.waiting:
            conn, size = next(iter(self.waiting.items()))
            if not self.reserve(size):
                return
            del self.waiting[conn]
            conn.granted(size)


class FileRange:
    """``left`` bytes of ``fd`` from ``pos``; ``owned``: the descriptor is ours to close."""

    __slots__ = ("fd", "pos", "left", "owned")

    def __init__(self, fd: int, pos: int, left: int):
        self.fd, self.pos, self.left, self.owned = fd, pos, left, False


class StreamConnection(SocketConnection):
    def __init__(self, eloop: EventLoop, sock: socket.socket, peer: str, adapter: StreamAdapter,
                 proto: ServerConnection):
        super().__init__(eloop, sock, peer)
        self.adapter = adapter
        self.proto = proto
        self.out: collections.deque[Any] = collections.deque()
        self.buf = bytearray()  # frames of this turn, not yet in ``out``
        self.pending = 0  # bytes in ``out`` and ``buf``
        self.finishing = False  # close once the output is out
        self.user: str | None = None
        self.anonymous = False  # logged in with ANONYMOUS: no permission checks
        self.peer_address: Any = None  # the socket's getpeername(), for the loopback rule
        self.opened = False
        self.publishers: dict[int, Any] = {}
        self.last_publishers: dict[str, Any] = {}  # per stream: its last frame's publisher
        self.subscriptions: dict[int, Any] = {}
        self.blocked: set[Any] = set()  # subscriptions waiting for the socket
        self.large = 0  # bytes reserved in adapter.large_frames for the frame being read
        self.large_until = 0.0  # loop time by which that frame must be in (``_hold``)
        self.last_read = self.last_write = self.loop.time()
        self.batch: Batch | None = None  # output a sender thread holds (see ``_hand_over``)
        self.wsock: socket.socket | None = None  # the sender threads' duplicate of ``sock``

    # -- input -----------------------------------------------------------------------------
    def capacity(self) -> int:
        return 0 if self.throttled or self.finishing else READ_SIZE

    def received(self, buf: bytearray, n: int) -> None:
        self.last_read = self.loop.time()
        if not self.large and not self.closed and not self.finishing:
            credit = self.proto.credit_frame(buf, n)
            if credit is not None:  # (what ``process`` would do with it, less the decode
                # and, for a subscription of ours, the frame object and the dispatch)
                sub = self.subscriptions.get(credit[0])
                if sub is not None:
                    sub.add_credit(credit[1])
                else:  # (the adapter answers that it does not exist)
                    self.adapter.handle(self, Credit(*credit))
                self.write()
                return
        self.proto.receive_data(memoryview(buf)[:n])  # copied there: no copy before that
        self.process()

    def input_closed(self) -> None:
        self.proto.receive_data(b"")
        self.process()

    def process(self) -> None:
        """Turn what is buffered into events for the adapter, then write the answers."""
        proto = self.proto
        handle = self.adapter.handle
        while not self.closed and not self.finishing:
            try:
                event = proto.next_event()
            except RemoteProtocolError as exc:
                log.info("stream connection %s: protocol error: %s", self.peer, exc)
                self.adapter.count("protocol_errors")
                if exc.reply:
                    self.queue(exc.reply)
                if proto.state is State.CLOSE_SENT:
                    self.linger()  # the client's CloseResponse, or the linger timer, ends it
                    for sub in list(self.subscriptions.values()):
                        self.adapter.drop_subscription(self, sub)
                    continue
                self.finish()
                break
            if event is NEED_DATA or event is PAUSED:
                break
            if isinstance(event, ConnectionClosed):
                if self.eof and not self.out and not self.buf:
                    self.close()
                else:
                    self.finish()
                break
            handle(self, event)
        if not self.closed:
            self._make_room()
        self.write()

    def _make_room(self) -> None:
        """Reserve the size of a frame above the frame max before it is read whole (or wait
        for room, unread); give the reservation back once that frame is taken."""
        size = self.proto.incoming
        want = size if size > (self.proto.frame_max or DEFAULT_FRAME_MAX) else 0
        if want == self.large or self in self.adapter.large_frames.waiting:
            return
        budget = self.adapter.large_frames
        if self.large:
            held, self.large = self.large, 0
            budget.release(held)
        if want:
            if budget.reserve(want):
                self._hold(want)
            else:
                budget.waiting[self] = want
                self.throttle(budget, True)

    def granted(self, size: int) -> None:
        """Room was made for the large frame this connection waits to read."""
        self._hold(size)
        self.throttle(self.adapter.large_frames, False)

    def _hold(self, size: int) -> None:
        """A reservation is held while the frame comes in, for ``idle_timeout`` at most: a
        client that stalls in a large frame would hold up everyone else's."""
        self.large = size
        timeout = self.adapter.config.idle_timeout
        self.large_until = self.loop.time() + timeout if timeout > 0 else float("inf")
        if timeout > 0:
            self.set_deadline(self.large_until)

    # -- output ----------------------------------------------------------------------------
    @property
    def serving(self) -> bool:
        """Open for traffic: confirms, deliveries and notices may be sent."""
        return not self.closed and not self.finishing and self.proto.state is State.OPEN

    def send(self, frame: Frame) -> None:
        """Queue ``frame`` (written at the end of this turn); a response code other than OK
        is counted (RabbitMQ's rabbitmq_global_stream_error_*_total)."""
        code = getattr(frame, "code", ResponseCode.OK)
        if code != ResponseCode.OK:
            self.adapter.core.metrics.stream_error(code)
        data = self.proto.send(frame)
        self.buf += data
        self.pending += len(data)
        if self.proto.state is State.CLOSED:
            self.finish()

    def queue(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data
        self.pending += len(data)

    def queue_file(self, fd: int, pos: int, length: int) -> None:
        """Queue ``length`` bytes of ``fd`` from ``pos`` after what is queued, and write now
        (the descriptor is only guaranteed until the caller's next read; a range still queued
        after this call holds its own). TLS reads the range when it encrypts it. With sender
        threads the range takes its own descriptor now and waits for the caller's ``write()``
        at the end of its turn, so that a turn's chunks go to a worker as one batch."""
        self.pending += length
        if self.adapter.senders is not None:
            item = FileRange(os.dup(fd), pos, length)
            item.owned = True
            self._take_buf().append(item)
            return
        self._take_buf().append(FileRange(fd, pos, length))
        self.write()
        if self.out and not self.closed:
            self._own_files()

    def queue_owned(self, fd: int, pos: int, length: int) -> None:
        """``queue_file`` for a descriptor that is the connection's from now on (the caller's
        own ``os.dup``: no second one), closed once sent or dropped."""
        if self.closed:
            os.close(fd)
            return
        self.pending += length
        item = FileRange(fd, pos, length)
        item.owned = True
        self._take_buf().append(item)
        if self.adapter.senders is None:
            self.write()

    def _take_buf(self) -> Any:
        """The output queue, with this turn's small frames appended to it as one buffer."""
        if self.buf:
            self.out.append(self.buf)
            self.buf = bytearray()
        return self.out

    def _own_files(self) -> None:
        for item in self.out:
            if type(item) is FileRange and not item.owned:
                item.fd = os.dup(item.fd)
                item.owned = True

    def finish(self) -> None:
        """Write what is queued, then close the socket."""
        if not self.finishing:
            self.finishing = True
            self.linger()

    def write(self, writable: bool = False) -> None:
        if self.closed or self.lost or (self.writing and not writable) or self.batch is not None:
            return
        out = self._take_buf()
        if self.adapter.senders is not None and FileRange in map(type, out):
            self._hand_over(out)
            return
        sock = self.sock
        sent = calls = 0
        try:
            while out:
                item = out[0]
                calls += 1
                if type(item) is FileRange:
                    n = os.sendfile(self.fd, item.fd, item.pos, item.left)
                    if n == 0:  # the file is shorter than its index said
                        raise EOFError(f"segment ended {item.left} bytes early")
                    sent += n
                    item.pos += n
                    item.left -= n
                    if item.left:
                        break
                    out.popleft()
                    if item.owned:
                        os.close(item.fd)
                else:
                    n = sock.send(item, _MSG_MORE if len(out) > 1 else 0)
                    sent += n
                    if n < len(item):
                        out[0] = memoryview(item)[n:]
                        break
                    out.popleft()
        except (BlockingIOError, InterruptedError):
            pass
        except EOFError as exc:
            log.error("stream connection %s: cannot send a chunk: %s", self.peer, exc)
            self.close()
            return
        except OSError as exc:
            self._lost(exc)
            return
        self._count_sent(sent, calls)
        if out:
            self.wait_writable(True)
            self._own_files()
            return
        self.wait_writable(False)
        if self.finishing:
            self.close()

    def _count_sent(self, n: int, calls: int) -> None:
        """Account ``n`` bytes sent in ``calls`` calls (none: nothing to count)."""
        if n:
            self.pending -= n
            self.bytes_out += n
            self.writes += calls
            self.last_write = self.loop.time()

    def _hand_over(self, out: collections.deque[Any]) -> None:
        """Give everything queued to a sender thread (each file range with a descriptor of its
        own: the reader may close its own before the worker gets there)."""
        senders = self.adapter.senders
        assert senders is not None
        self._own_files()
        if self.wsock is None:
            self.wsock = self.sock.dup()
        self.batch = Batch(self.wsock, list(out))
        out.clear()
        self.wait_writable(False)
        senders.submit(self.batch, self.batch_sent)

    def batch_sent(self, batch: Batch) -> None:
        """On the loop: a sender thread is done with ``batch``. What it did not send goes
        back in front of the queue; an error closes this connection (one log line)."""
        self.batch = None
        self.writes += batch.calls  # (its calls count even when none sent a byte)
        self._count_sent(batch.sent, 0)
        self.out.extendleft(reversed(batch.rest))
        if self.closed:
            self._release()
            return
        exc = batch.error
        if isinstance(exc, EOFError):
            log.error("stream connection %s: cannot send a chunk: %s", self.peer, exc)
            self.close()
            return
        if isinstance(exc, OSError):
            self._lost(exc)
            return
        if exc is not None:
            log.error("stream connection %s: sending failed: %r", self.peer, exc)
            self.close()
            return
        if batch.rest:  # the socket is full: on with the rest when it is writable
            self.wait_writable(True)
            return
        if self.blocked and self.pending <= MAX_PENDING:
            self.drained()  # resumes the consumers that waited for room, and writes
        else:
            self.write()

    def drained(self) -> None:
        if self.blocked:
            blocked = list(self.blocked)
            self.blocked.clear()
            for sub in blocked:
                sub.turn()
            self.write()

    # -- heartbeats ------------------------------------------------------------------------
    def start_heartbeats(self) -> None:
        period = self.proto.heartbeat
        if period > 0:
            self.set_deadline(self.loop.time() + period)

    def on_deadline(self) -> None:
        now = self.loop.time()
        if self.large and now >= self.large_until:
            log.info("stream connection %s closed: its frame of %d bytes (above the frame max) "
                     "not received whole within %.0f s", self.peer, self.large,
                     self.adapter.config.idle_timeout)
            self.close()
            return
        if self.large:
            self.set_deadline(self.large_until)
        period = self.proto.heartbeat
        if period <= 0 or self.finishing:
            return
        if now - self.last_read > 2 * period:
            log.info("stream connection %s closed: no heartbeat for %.0f s", self.peer,
                     now - self.last_read)
            self.close()
            return
        if now - self.last_write >= period and self.proto.state is State.OPEN:
            self.send(Heartbeat())
            self.write()
        self.set_deadline(min(self.last_read + 2 * period, self.last_write + period) + 0.01)

    # -- end -------------------------------------------------------------------------------
    def output_done(self) -> None:
        self.finishing = True

    def finished(self) -> None:
        budget = self.adapter.large_frames
        budget.waiting.pop(self, None)
        if self.large:
            held, self.large = self.large, 0
            budget.release(held)
        if self.batch is None:
            self._release()
        elif self.wsock is not None:
            try:  # the worker's next send fails at once; its batch_sent releases the rest
                self.wsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.buf = bytearray()
        self.adapter.removed(self)

    def _release(self) -> None:
        """Close the descriptors this connection still holds (none is in a worker's hands)."""
        for item in self.out:
            if type(item) is FileRange and item.owned:
                os.close(item.fd)
        self.out.clear()
        if self.wsock is not None:
            self.wsock.close()
            self.wsock = None
