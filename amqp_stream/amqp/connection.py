"""One AMQP 1.0 connection: proton's engine (``Transport`` + ``Connection``) behind a socket.

Strategy: proton is used sans-I/O. Bytes read from the socket go into the transport's tail with
``pn_transport_push`` (no copy beyond proton's own), bytes to send are copied out of its head
with ``pn_transport_peek`` into the loop's one write buffer and popped as far as ``send`` took
them: whatever the socket does not take stays in proton, where the session's outgoing bytes
show a consumer that its client is behind. The engine's events go to the adapter's shared
collector; after any input the adapter processes them and writes every connection that has
output (``Adapter.process``).

Closing (the leak that proton's own reactor had): the transport says when each side is done:
``capacity() < 0`` (tail closed: a framing error, or the peer's EOF) and ``pending() < 0``
(head closed: everything, the close frame included, was written). Head closed: the write side
of the socket is shut and the peer gets ``loop.LINGER`` seconds to finish; both closed: the
socket is closed. Either way ``SocketConnection.close`` releases the socket and the adapter
forgets the connection's links, so nothing outlives it.

Timers: ``pn_transport_tick`` sends heartbeats at half the peer's idle timeout and closes a
connection whose peer stayed silent past ours; its deadline is kept as the loop timer.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from cproton_ffi import ffi, lib
from proton import SSL, Connection, Transport

from amqp_stream.loop import EventLoop, SocketConnection

if TYPE_CHECKING:
    from amqp_stream.amqp.adapter import Adapter

__all__ = ["AmqpConnection"]

WRITE_SIZE = 256 * 1024
_write_buffer = bytearray(WRITE_SIZE)
_write_view = memoryview(_write_buffer)
_write_ptr = ffi.from_buffer(_write_buffer)
_push = lib.pn_transport_push
_peek = lib.pn_transport_peek
_pop = lib.pn_transport_pop
_pending = lib.pn_transport_pending
_capacity = lib.pn_transport_capacity
_tick = lib.pn_transport_tick


class AmqpConnection(SocketConnection):
    def __init__(self, eloop: EventLoop, sock: socket.socket, peer: str, adapter: "Adapter"):
        super().__init__(eloop, sock, peer)
        self.adapter = adapter
        transport = Transport(Transport.SERVER)
        adapter.configure(transport)
        connection = Connection()
        connection.collect(adapter.collector)
        transport.bind(connection)
        self.transport: Transport | None = transport
        self.connection: Connection | None = connection
        self.timp = transport._impl
        self.cimp = connection._impl
        self.ssl: SSL | None = None  # set on a TLS listener (the HTTP API's ssl_protocol)
        self.send_buffer_limited = False
        adapter.added(self)

    def set_ssl(self, domain: Any) -> None:
        assert self.transport is not None
        self.ssl = SSL(self.transport, domain)

    def tls_version(self) -> str:
        """The TLS version agreed (OpenSSL's name, ``TLSv1.3``), "" without TLS or before
        the handshake."""
        return (self.ssl.protocol_name() or "") if self.ssl is not None else ""

    # -- input -----------------------------------------------------------------------------
    def capacity(self) -> int:
        return _capacity(self.timp)

    def received(self, buf: bytearray, n: int) -> None:
        _push(self.timp, ffi.from_buffer(buf), n)  # an error shows as a closed tail
        self.after_io()

    def input_closed(self) -> None:
        if _capacity(self.timp) >= 0:
            lib.pn_transport_close_tail(self.timp)
        self.after_io()

    # -- output ----------------------------------------------------------------------------
    def output(self) -> Any:
        pending = _pending(self.timp)
        if pending < 0:
            return None
        if pending == 0:
            return b""
        n = _peek(self.timp, _write_ptr, min(pending, WRITE_SIZE))
        if n < 0:
            return None
        return _write_view[:n]

    def sent(self, n: int) -> None:
        if n:
            _pop(self.timp, n)

    def limit_send_buffer(self, size: int) -> None:
        """Give the socket a send buffer of ``size`` bytes (once; the kernel's autotuning
        stops): what the kernel holds of a client that does not read is then bounded."""
        if self.send_buffer_limited:
            return
        self.send_buffer_limited = True
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        except OSError:
            pass

    def output_done(self) -> None:
        if _pending(self.timp) >= 0:
            lib.pn_transport_close_head(self.timp)

    def output_finished(self) -> None:
        """Proton wrote its last byte: close if the input is done too, else shut our side and
        give the peer a moment to close."""
        if self.eof or _capacity(self.timp) < 0:
            self.close()
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.linger()

    def drained(self) -> None:
        self.adapter.drained(self)

    # -- driving ---------------------------------------------------------------------------
    def after_io(self) -> None:
        """Run the engine's timers, let the adapter handle the events, write."""
        self.tick()
        self.adapter.wants_write(self)
        self.adapter.process()
        if not self.closed and _capacity(self.timp) < 0:
            # no more input will be read (error or EOF): finish writing, then close
            self.pause_reading()
            if _pending(self.timp) < 0:
                self.close()
            else:
                self.linger()

    def tick(self) -> None:
        deadline = _tick(self.timp, int(self.loop.time() * 1000))
        if deadline:
            self.set_deadline(deadline / 1000.0)

    def on_deadline(self) -> None:
        self.after_io()

    def failed(self, exc: Exception) -> None:
        self.adapter.failed(self, exc)

    def finished(self) -> None:
        adapter = self.adapter
        adapter.removed(self)
        transport = self.transport
        if transport is not None:
            try:
                transport.unbind()
            except Exception:
                pass
        self.transport = None
        self.connection = None
