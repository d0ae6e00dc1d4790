"""A thread's sleep that another thread can cut short, while it also waits for a client.

The forwarder and the remote reader each run one thread that talks to another node over a
``StreamClient`` and is woken by the event loop (new work, credit, close). ``select`` on the
client's socket and on one end of a socket pair does both without polling.
"""

from __future__ import annotations

import select
import socket
from typing import Any

from amqp_stream.client.stream import StreamClient

__all__ = ["Wakeup"]


class Wakeup:
    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)

    def wake(self) -> None:
        """From any thread: end the current (or next) ``wait``."""
        try:
            self._w.send(b"\0")
        except OSError:  # a wake-up is pending already (or the thread ended and closed it)
            pass

    def wait(self, client: StreamClient | None, timeout: float) -> None:
        """Until a wake-up, traffic from ``client`` (handled here), or ``timeout``."""
        socks: list[Any] = [self._r] if client is None else [self._r, client.sock]
        ready, _, _ = select.select(socks, [], [], timeout)
        if self._r in ready:
            try:
                self._r.recv(4096)
            except BlockingIOError:
                pass
        if client is not None and client.sock in ready:
            client.pump(0)

    def close(self) -> None:
        self._r.close()
        self._w.close()
