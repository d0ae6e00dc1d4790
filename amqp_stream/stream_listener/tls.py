"""TLS for the stream listener (its own port, RabbitMQ's 5551): ``ssl.SSLObject`` over memory
buffers, so the connection stays non-blocking and sans-I/O like the plain one.

Strategy: ``TlsStreamConnection`` is a ``StreamConnection`` whose socket carries TLS records.
Bytes read go into the TLS object's incoming buffer; the handshake runs as data arrives; what
it decrypts goes to the protocol engine as on a plain connection. On the way out, the queued
frames and file ranges are encrypted as the socket takes them: a file range is read with
``os.pread`` (``os.sendfile`` cannot encrypt), at most ``MAX_CIPHER`` bytes of ciphertext wait
at a time, so the subscriptions' backpressure (``pending``) works as on a plain connection.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import Any

from amqp_stream.loop import READ_SIZE
from amqp_stream.stream_listener.connection import FileRange, StreamConnection

__all__ = ["TlsStreamConnection", "server_context"]

log = logging.getLogger("amqp_stream.stream_listener")

MAX_CIPHER = 1 << 20  # ciphertext bytes encrypted ahead of the socket
_SLICE = 256 * 1024  # plaintext bytes encrypted per step


def server_context(cert: Any, key: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    return context


class TlsStreamConnection(StreamConnection):
    def __init__(self, *args: Any, context: ssl.SSLContext, **kw: Any):
        super().__init__(*args, **kw)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.handshaken = False
        self.cipher = bytearray()  # encrypted, not yet taken by the socket

    def tls_version(self) -> str:
        """The TLS version agreed (``TLSv1.3``), "" before the handshake."""
        return (self.tls.version() or "") if self.handshaken else ""

    # -- input -----------------------------------------------------------------------------
    def received(self, buf: bytearray, n: int) -> None:
        self.last_read = self.loop.time()
        self.incoming.write(bytes(buf[:n]))
        try:
            if not self.handshaken:
                try:
                    self.tls.do_handshake()
                except ssl.SSLWantReadError:
                    self.write()  # the handshake's own records
                    return
                self.handshaken = True
            while True:
                try:
                    data = self.tls.read(READ_SIZE)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    data = b""
                if not data:  # the client's close_notify
                    self.proto.receive_data(b"")
                    break
                self.proto.receive_data(data)
        except ssl.SSLError as exc:
            log.info("stream connection %s: TLS failed: %s", self.peer, exc)
            self.close()
            return
        self.process()

    # -- output ----------------------------------------------------------------------------
    def _encrypt(self) -> None:
        """Move queued plaintext into ``cipher`` until ``MAX_CIPHER`` bytes wait."""
        out = self._take_buf()
        tls = self.tls
        while out and len(self.cipher) < MAX_CIPHER:
            item = out[0]
            if type(item) is FileRange:
                n = min(item.left, _SLICE)
                data = os.pread(item.fd, n, item.pos)
                if len(data) != n:
                    raise EOFError(f"segment ended {item.left - len(data)} bytes early")
                item.pos += n
                item.left -= n
                if not item.left:
                    out.popleft()
                    if item.owned:
                        os.close(item.fd)
            else:
                data = bytes(item[:_SLICE])
                if len(item) > _SLICE:
                    out[0] = memoryview(item)[_SLICE:]
                else:
                    out.popleft()
            tls.write(data)
            produced = self.outgoing.read()
            self.cipher += produced
            self.pending += len(produced) - len(data)

    def write(self, writable: bool = False) -> None:
        if self.closed or self.lost or (self.writing and not writable):
            return
        try:
            if self.handshaken:
                self._encrypt()
            handshake = self.outgoing.read()  # handshake records, alerts
            if handshake:
                self.cipher += handshake
                self.pending += len(handshake)
            while self.cipher:
                n = self.sock.send(self.cipher)
                del self.cipher[:n]
                self.pending -= n
                self.bytes_out += n  # on the wire: ciphertext, as RabbitMQ's socket stats
                self.writes += 1
                self.last_write = self.loop.time()
                if self.cipher:
                    break
                if self.handshaken and self.out:
                    self._encrypt()
        except (BlockingIOError, InterruptedError):
            pass
        except EOFError as exc:
            log.error("stream connection %s: cannot send a chunk: %s", self.peer, exc)
            self.close()
            return
        except ssl.SSLError as exc:
            log.info("stream connection %s: TLS failed: %s", self.peer, exc)
            self.close()
            return
        except OSError as exc:
            self._lost(exc)
            return
        if self.cipher or self.out:
            self.wait_writable(True)
            return
        self.wait_writable(False)
        if self.finishing:
            self.close()
