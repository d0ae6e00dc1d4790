"""The broker's event loop: one asyncio loop (uvloop when installed) drives every socket.

Strategy: protocol engines are sans-I/O (proton's ``Transport`` for AMQP 1.0); this module owns
the I/O around them and nothing protocol-specific. A ``Listener`` accepts on a non-blocking
socket and hands each connection to a protocol factory; a ``SocketConnection`` moves bytes
between its socket and its engine with ``recv_into``/``send`` on readiness callbacks
(``add_reader``/``add_writer``, which epoll or libuv serve for any fd number: no ``select()``
limit). Output the socket does not take stays in the engine, so a slow reader's backlog is
visible to the protocol (e.g. a consumer stops when its session's outgoing bytes pile up).

Every connection ends the same way, whoever ended it: ``close()`` removes its callbacks, closes
the socket, cancels its timers and tells the owner, exactly once. A connection that stays
half-closed (its engine closed one side and the peer never finishes) is closed after
``LINGER`` seconds; one that never completes its handshake after ``handshake_timeout``.

Other threads (storage writers) reach the loop through ``Mailbox.post``: calls queue in a deque
and one ``call_soon_threadsafe`` wakes the loop per batch, not per call.

A socket's error can go unreported: uvloop's poll handle (libuv's ``uv_poll``) stops watching a
socket that reports an error (a peer's RST on a socket with nothing left to read) without
calling back, so such a connection would hold its fd until a heartbeat or forever. Every
``SWEEP`` seconds the loop pokes each connection that had no readiness callback since the last
sweep: one ``recv`` (or ``send``) that says EAGAIN on a live socket and the reset or EOF on a
dead one (asyncio's own loop reports these; there the sweep only costs that syscall per idle
connection every ``SWEEP`` seconds).

Limits: at start the soft fd limit is raised to the hard one; beyond ``max_connections`` a new
connection is accepted and closed at once (logged, counted); when ``accept`` fails for want of
fds the listener pauses for ``ACCEPT_PAUSE`` seconds instead of spinning.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import resource
import socket
import time
from typing import Any, Callable

__all__ = ["EventLoop", "Listener", "Mailbox", "SocketConnection", "new_event_loop",
           "raise_fd_limit"]

log = logging.getLogger(__name__)

READ_SIZE = 256 * 1024  # bytes read per readiness callback (one shared buffer)
ACCEPTS_PER_WAKEUP = 128
ACCEPT_PAUSE = 0.1  # seconds without accepting after EMFILE/ENFILE
LINGER = 2.0  # seconds a half-closed connection may take to finish
SWEEP = 5.0  # seconds between pokes of connections that heard nothing from their socket
_FD_SHORTAGE = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_GONE = (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECONNABORTED, errno.ENOTCONN)


def new_event_loop(kind: str = "uvloop") -> asyncio.AbstractEventLoop:
    """uvloop's loop (bench/RESULTS.md: less CPU per message) unless ``kind`` is "asyncio" or
    uvloop is not installed; then asyncio's own (epoll on Linux)."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("uvloop is not installed: using asyncio's event loop")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard limit; return the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


class Mailbox:
    """Thread-safe hand-over to the loop: ``post(fn, *args)`` from any thread; the loop runs
    the calls in order. One wake-up per batch of posts."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.calls: collections.deque = collections.deque()
        self.signalled = False
        self.after: Callable[[], None] | None = None  # run once after each batch (on the loop)

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        self.calls.append((fn, args))  # append first, then look at the flag (see drain)
        self.wake()

    def wake(self) -> None:
        """From any thread: make the loop drain (and run ``after``) soon, once per batch."""
        if not self.signalled:
            self.signalled = True
            try:
                self.loop.call_soon_threadsafe(self.drain)
            except RuntimeError:  # the loop is closed: shutdown already drained
                pass

    def drain(self) -> None:
        self.signalled = False
        calls = self.calls
        while calls:
            fn, args = calls.popleft()
            try:
                fn(*args)
            except Exception:
                log.exception("mailbox call %r failed", fn)
        if self.after is not None:
            self.after()


class EventLoop:
    """The loop, its listeners and every live connection (of any protocol)."""

    def __init__(self, max_connections: int, handshake_timeout: float, kind: str = "uvloop"):
        self.kind = kind
        self.loop = new_event_loop(kind)
        self.max_connections = max_connections
        self.handshake_timeout = handshake_timeout
        self.mailbox = Mailbox(self.loop)
        self.connections: set[SocketConnection] = set()
        self.listeners: list[Listener] = []
        self.read_buffer = bytearray(READ_SIZE)
        self.refused = 0  # connections refused over max_connections, since start
        self._refused_logged = 0.0
        self.on_count: Callable[[int], None] | None = None  # told the live count on each change
        self.sweeper: asyncio.TimerHandle | None = None

    def _sweep(self) -> None:
        """Poke the connections whose socket was silent since the last sweep (see above)."""
        for conn in list(self.connections):
            conn.poke()
        self.sweeper = self.loop.call_later(SWEEP, self._sweep)

    def listen(self, host: str, port: int, factory: Callable[[socket.socket, str], "SocketConnection"],
               name: str) -> "Listener":
        listener = Listener(self, host, port, factory, name)
        self.listeners.append(listener)
        if self.sweeper is None:
            self.sweeper = self.loop.call_later(SWEEP, self._sweep)
        return listener

    def stop_listening(self) -> None:
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()

    def admit(self, sock: socket.socket, peer: str, listener: "Listener") -> bool:
        """May one more connection be served? Logs refusals at most once a second."""
        if len(self.connections) < self.max_connections:
            return True
        self.refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= 1.0:
            self._refused_logged = now
            log.warning("%s: refused a connection from %s: max_connections (%d) reached "
                        "(%d refused so far)", listener.name, peer, self.max_connections,
                        self.refused)
        return False

    def added(self, conn: "SocketConnection") -> None:
        self.connections.add(conn)
        if self.on_count is not None:
            self.on_count(len(self.connections))

    def removed(self, conn: "SocketConnection") -> None:
        self.connections.discard(conn)
        if self.on_count is not None:
            self.on_count(len(self.connections))


def peer_name(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr)


class Listener:
    """A listening socket that accepts on readiness and hands sockets to ``factory``."""

    def __init__(self, eloop: EventLoop, host: str, port: int,
                 factory: Callable[[socket.socket, str], "SocketConnection"], name: str):
        self.eloop = eloop
        self.factory = factory
        self.name = name
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.address = sock.getsockname()
        self.paused = False
        eloop.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        eloop = self.eloop
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                sock, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _FD_SHORTAGE:
                    log.warning("%s: cannot accept: %s; pausing %.1f s", self.name, exc.strerror,
                                ACCEPT_PAUSE)
                    self._pause()
                elif exc.errno != errno.ECONNABORTED:
                    log.warning("%s: accept failed: %s", self.name, exc)
                return
            peer = peer_name(addr)
            if not eloop.admit(sock, peer, self):
                sock.close()
                continue
            try:
                sock.setblocking(False)
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = self.factory(sock, peer)
                conn.start()
            except Exception:
                log.exception("%s: setting up a connection from %s failed", self.name, peer)
                sock.close()

    def _pause(self) -> None:
        if self.paused or self.sock.fileno() < 0:
            return
        self.paused = True
        self.eloop.loop.remove_reader(self.sock.fileno())
        self.eloop.loop.call_later(ACCEPT_PAUSE, self._resume)

    def _resume(self) -> None:
        self.paused = False
        if self.sock.fileno() >= 0:
            self.eloop.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            if not self.paused:
                self.eloop.loop.remove_reader(self.sock.fileno())
            self.sock.close()


class SocketConnection:
    """One accepted socket and the engine behind it. Subclasses implement ``received``,
    ``input_closed``, ``output`` and ``output_done`` (the engine side) and ``finished``.

    ``read_paused`` stops reading (the engine takes no more input); ``write()`` sends what the
    engine has; the socket is closed by ``close()`` only.
    """

    def __init__(self, eloop: EventLoop, sock: socket.socket, peer: str):
        self.eloop = eloop
        self.loop = eloop.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.reading = False
        self.writing = False
        self.closed = False
        self.eof = False  # the peer shut its side
        self.lost = False  # the socket failed: nothing more is written to it
        self.events = 0  # readiness callbacks so far; the sweep compares
        self.swept = 0  # ``events`` at the last sweep
        # RabbitMQ's connection socket statistics (the HTTP API's recv_oct, send_oct,
        # recv_cnt, send_cnt): counted per recv/send call, never per message
        self.bytes_in = 0  # bytes read so far (0: a port probe, or a client gone at once)
        self.bytes_out = 0
        self.reads = 0
        self.writes = 0
        self.connected_at = int(time.time() * 1000)  # ms since the epoch, as RabbitMQ's
        self.throttled: set[Any] = set()  # publishers over their byte bound: input paused
        self.handshake_timer: asyncio.TimerHandle | None = None
        self.linger_timer: asyncio.TimerHandle | None = None
        self.timer: asyncio.TimerHandle | None = None  # the engine's next deadline
        self.timer_at = 0.0

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        self.eloop.added(self)
        if self.eloop.handshake_timeout > 0:
            self.handshake_timer = self.loop.call_later(self.eloop.handshake_timeout,
                                                        self._handshake_expired)
        self.resume_reading()

    def handshake_done(self) -> None:
        """The protocol's handshake (SASL, open) completed: no more handshake deadline."""
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None

    def _handshake_expired(self) -> None:
        self.handshake_timer = None
        if not self.closed:
            log.info("connection %s closed: handshake not done within %.0f s", self.peer,
                     self.eloop.handshake_timeout)
            self.close()

    def linger(self) -> None:
        """One side is closed: give the other ``LINGER`` seconds to finish, then close."""
        if self.linger_timer is None and not self.closed:
            self.linger_timer = self.loop.call_later(LINGER, self.close)

    def close(self) -> None:
        """Release everything of this connection, once."""
        if self.closed:
            return
        self.closed = True
        self.pause_reading()
        self.wait_writable(False)
        for timer in (self.handshake_timer, self.linger_timer, self.timer):
            if timer is not None:
                timer.cancel()
        self.handshake_timer = self.linger_timer = self.timer = None
        try:
            self.sock.close()
        except OSError:
            pass
        self.eloop.removed(self)
        try:
            self.finished()
        except Exception:
            log.exception("releasing connection %s", self.peer)

    # -- reading ---------------------------------------------------------------------------
    def resume_reading(self) -> None:
        if not self.reading and not self.closed and not self.eof:
            self.loop.add_reader(self.fd, self._on_readable)
            self.reading = True

    def throttle(self, owner: Any, on: bool) -> None:
        """``owner`` (a publisher holding too many bytes) holds back this connection's input
        (``on``) or lets it go; the socket is read only while no owner holds it back."""
        if on:
            self.throttled.add(owner)
            self.pause_reading()
        else:
            self.throttled.discard(owner)
            if not self.throttled:
                self.resume_reading()

    def wait_writable(self, on: bool) -> None:
        """Have the loop call ``_on_writable`` when the socket takes more (``on``), or stop."""
        if on and not self.writing:
            self.loop.add_writer(self.fd, self._on_writable)
            self.writing = True
        elif not on and self.writing:
            self.loop.remove_writer(self.fd)
            self.writing = False

    def pause_reading(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def poke(self) -> None:
        """The sweep: if the socket said nothing since the last sweep, ask it (a silent error
        shows as the reset or EOF and ends the connection; a live socket says EAGAIN)."""
        if self.events != self.swept or self.closed:
            self.swept = self.events
            return
        try:
            if self.reading:
                self._on_readable()
            elif self.writing:
                self._on_writable()
        finally:
            self.swept = self.events

    def _on_readable(self) -> None:
        self.events += 1
        buf = self.eloop.read_buffer
        limit = self.capacity()
        if limit <= 0:
            self.pause_reading()
            return
        try:
            n = self.sock.recv_into(buf, min(limit, len(buf)))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        try:
            if n == 0:
                self.eof = True
                self.pause_reading()
                self.input_closed()
            else:
                self.bytes_in += n
                self.reads += 1
                self.received(buf, n)
        except Exception as exc:
            log.exception("connection %s: failed on its input", self.peer)
            self.failed(exc)

    def _lost(self, exc: OSError) -> None:
        """The socket failed (reading or writing): let the engine see the end of both sides,
        then close. ``lost`` first, so that whatever the engine does on hearing of it writes
        nothing: a write would fail again and come back here (once a recursion down to
        Python's limit, a traceback at every level)."""
        if self.lost:
            return
        self.lost = True
        if exc.errno not in _GONE:
            log.info("connection %s: socket error: %s", self.peer, exc)
        self.eof = True
        self.pause_reading()
        try:
            self.input_closed()
            self.output_done()
        except Exception:
            log.exception("connection %s: closing after a socket error", self.peer)
        self.close()

    # -- writing ---------------------------------------------------------------------------
    def write(self, writable: bool = False) -> None:
        """Send what the engine has, as far as the socket takes it; wait for writability for
        the rest. While waiting, the engine is not asked for output at all: what it has not
        produced stays where its protocol sees the backlog (and proton's output buffer, which
        grows when asked while full, stays as it is)."""
        if self.closed or self.lost or (self.writing and not writable):
            return
        sock = self.sock
        while True:
            data = self.output()
            if data is None:  # the engine will write no more
                self.wait_writable(False)
                self.output_finished()
                return
            if not data:
                break
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._lost(exc)
                return
            self.bytes_out += n
            self.writes += 1
            self.sent(n)
            if n < len(data):
                self.wait_writable(True)
                return
        self.wait_writable(False)

    def _on_writable(self) -> None:
        self.events += 1
        try:
            self.write(writable=True)
            if not self.writing:
                self.drained()
        except Exception as exc:
            log.exception("connection %s: failed on its output", self.peer)
            self.failed(exc)

    def set_deadline(self, when: float) -> None:
        """Call ``on_deadline`` at loop time ``when`` (0: none); the earliest request wins
        until it fires."""
        if when <= 0 or self.closed:
            return
        if self.timer is not None:
            if self.timer_at <= when:
                return
            self.timer.cancel()
        self.timer_at = when
        self.timer = self.loop.call_at(when, self._deadline)

    def _deadline(self) -> None:
        self.timer = None
        if not self.closed:
            try:
                self.on_deadline()
            except Exception as exc:
                log.exception("connection %s: timer failed", self.peer)
                self.failed(exc)

    # -- the engine side (subclasses) ------------------------------------------------------
    def capacity(self) -> int:
        """How many bytes the engine takes now (<= 0: stop reading)."""
        return READ_SIZE

    def received(self, buf: bytearray, n: int) -> None:
        raise NotImplementedError

    def input_closed(self) -> None:
        """The peer closed its side (EOF) or the socket failed."""

    def output(self) -> Any:
        """Bytes to send now (a buffer), b"" when none, None when the engine has closed its
        output."""
        return None

    def sent(self, n: int) -> None:
        """``n`` bytes of the last ``output()`` went out."""

    def output_done(self) -> None:
        """The socket takes no more output."""

    def output_finished(self) -> None:
        """The engine closed its output and all of it was sent."""

    def drained(self) -> None:
        """Everything pending went out after the socket was full."""

    def on_deadline(self) -> None:
        """A deadline set with ``set_deadline`` has come."""

    def failed(self, exc: Exception) -> None:
        """A bug while handling this connection: close it."""
        self.close()

    def finished(self) -> None:
        """The connection is closed: release the engine and forget it."""
