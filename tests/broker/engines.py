"""Many real AMQP clients in one test process: proton's client engine per socket, driven by one
``selectors`` loop (a ``BlockingConnection`` per client would cost a container each).

Each ``EngineClient`` does SASL ANONYMOUS and opens its connection like any proton client;
``pump`` moves bytes until a condition holds for every client or the deadline passes.
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from typing import Callable, Iterable

from proton import Connection, Endpoint, Transport

from tests.polling import wait_for

__all__ = ["EngineClient", "pump", "raw_socket", "fd_count", "socket_count", "connection_count", "wait_for"]


class EngineClient:
    def __init__(self, host: str, port: int, rcvbuf: int | None = None,
                 container: str | None = None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the window stays small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(10)
        self.sock.connect((host, port))
        self.sock.setblocking(False)
        self.rewrite: tuple[bytes, bytes] | None = None  # (placeholder, bytes): patch output
        self.ticks = True  # run the engine's timers (heartbeats) while pumped
        self.transport = Transport(Transport.CLIENT)
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self.connection.container = container or f"engine-{self.sock.getsockname()[1]}"
        self.connection.hostname = host
        self.transport.bind(self.connection)
        self.connection.open()
        self.eof = False

    @property
    def opened(self) -> bool:
        return bool(self.connection.state & Endpoint.REMOTE_ACTIVE)

    @property
    def closed_by_peer(self) -> bool:
        return self.eof or bool(self.connection.state & Endpoint.REMOTE_CLOSED)

    def write(self) -> None:
        if self.ticks:
            self.transport.tick(time.monotonic())
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                return
            data = self.transport.peek(pending)
            if self.rewrite is not None:  # same length: frame sizes stay right
                data = bytes(data).replace(*self.rewrite)
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.eof = True
                return
            self.transport.pop(n)
            if n < pending:
                return

    def read(self) -> None:
        capacity = self.transport.capacity()
        if capacity == 0:  # the engine is full: leave the bytes in the socket for now
            return
        try:
            data = self.sock.recv(min(65536, capacity) if capacity > 0 else 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.eof = True
            if self.transport.capacity() >= 0:
                self.transport.close_tail()
            return
        if self.transport.capacity() >= 0:
            self.transport.push(data)

    def close(self) -> None:
        self.sock.close()


def pump(clients: Iterable[EngineClient], done: Callable[[EngineClient], bool],
         timeout: float) -> list[EngineClient]:
    """Drive ``clients`` until ``done(client)`` for each (or ``timeout``); the ones not done."""
    waiting = {c for c in clients if not done(c)}
    sel = selectors.DefaultSelector()
    events: dict[EngineClient, int] = {}
    for c in waiting:
        c.write()
        events[c] = selectors.EVENT_READ
        sel.register(c.sock, selectors.EVENT_READ, c)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        ready = sel.select(0.2)
        for c in waiting:
            if c.ticks and not any(key.data is c for key, _ in ready):
                c.write()  # timers only (heartbeats)
        for key, mask in ready:
            c = key.data
            if mask & selectors.EVENT_READ:
                c.read()
            c.write()
            if done(c) or c.eof:
                if c in waiting:
                    waiting.discard(c)
                    sel.unregister(c.sock)
                continue
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.transport.pending() > 0
                                           else 0)
            if want != events[c]:
                events[c] = want
                sel.modify(c.sock, want, c)
    sel.close()
    return [c for c in waiting if not done(c)]


def raw_socket(host: str, port: int) -> socket.socket:
    return socket.create_connection((host, port), timeout=10)


def fd_count(pid: int) -> int:
    """Open file descriptors of process ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def connection_count(pid: int) -> int:
    """Network connections process ``pid`` holds open: its socket fds that are neither
    listening TCP sockets nor Unix sockets (a reset connection leaves /proc/net/tcp while its
    fd is still open, so the fds are what counts)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table, inode_at in (("tcp", 9), ("tcp6", 9), ("unix", 6)):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if len(fields) > inode_at and (table == "unix" or fields[3] == "0A"):
                    inodes.discard(fields[inode_at])
    return len(inodes)


def socket_count(pid: int) -> int:
    """Open sockets of process ``pid`` (listeners and connections; stream files left out)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except FileNotFoundError:
            pass
    return count

