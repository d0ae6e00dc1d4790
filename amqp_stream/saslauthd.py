"""A saslauthd responder in the broker, so that Cyrus checks AMQP passwords against the user store.

Strategy: proton checks an AMQP client's PLAIN password through Cyrus SASL, and Cyrus's sasldb
needs the password itself, which the user store (``amqp_stream.users``) does not have: it keeps
RabbitMQ's salted hashes. Cyrus can instead ask a ``saslauthd`` daemon over a Unix socket
(``pwcheck_method: saslauthd``, ``saslauthd_path``); this module is that daemon, inside the
broker. The request is four strings, each a 2-byte big-endian length and its bytes (login,
password, service, realm); the answer one such string starting ``OK`` or ``NO``
(cyrus-sasl ``lib/checkpw.c``, ``saslauthd_verify_password``).

Cyrus asks synchronously, from inside ``pn_transport_push`` on the event loop's thread, so the
answer must come from another thread: one daemon thread accepts and answers, one request at a
time (the loop waits for each anyway; cffi lets go of the GIL during the C call). It only reads
the store (the loop replaces its dicts whole, or sets single keys: safe under the GIL).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
from typing import Callable

__all__ = ["Responder"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">H")
TIMEOUT = 5.0  # seconds a caller has to send its request


class Responder:
    """Listens on ``path`` and answers with ``check(name, password) -> bool``. Cyrus splits a
    name at its ``@`` (login, realm); the name is put back together."""

    def __init__(self, path: str, check: Callable[[str, str], bool]):
        self.path = path
        self.check = check
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        self.sock.bind(path)
        os.chmod(path, 0o600)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, name="saslauthd", daemon=True)
        self.thread.start()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    conn.settimeout(TIMEOUT)
                    if not conn.recv(1, socket.MSG_PEEK):
                        continue  # a liveness probe (``security``'s sweep of dead brokers' sockets)
                    login, password, _service, realm = (_read_string(conn) for _ in range(4))
                    ok = self._verdict(login + b"@" + realm if realm else login, password)
                    answer = b"OK" if ok else b"NO authentication failed"
                    conn.sendall(_LENGTH.pack(len(answer)) + answer)
                except (OSError, ValueError) as exc:
                    log.warning("saslauthd request failed: %s", exc)

    def _verdict(self, login: bytes, password: bytes) -> bool:
        try:
            return bool(self.check(login.decode("utf-8"), password.decode("utf-8")))
        except UnicodeDecodeError:
            return False
        except Exception:
            log.exception("checking a password")
            return False


def _read_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ValueError("request cut short")
        data += chunk
    return bytes(data)


def _read_string(conn: socket.socket) -> bytes:
    (length,) = _LENGTH.unpack(_read_exact(conn, 2))
    return _read_exact(conn, length)
