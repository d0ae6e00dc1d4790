"""An AMQP 1.0 consumer that is not the limit of what it measures.

``bench.broker.consume`` runs proton's reactor and handles every delivery in Python (receive,
accept, settle, credit): ~25-50 µs a message, so 10,000 deliveries take the client 0.3-0.5 s
whatever the broker does. ``count`` drives proton's engine over a plain socket instead:
one attach asking for pre-settled deliveries (``snd-settle-mode`` settled, so no disposition
goes back), all its credit in one drain-mode flow, then only bytes pushed into the engine. The
engine (C) counts the transfers; Python touches no delivery. The broker then costs what it
costs: its reads, its filter, its sends.

It keeps every delivery in the engine until the connection closes (a few hundred bytes each):
meant for filtered reads, up to about a million deliveries.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

from proton import Connection, Endpoint, Link, Transport

from bench.broker import ConsumeResult

__all__ = ["count"]

#: credit given at once: more than any stream here holds
CREDIT = 1 << 24
_READ = 1 << 20


def count(url: str, address: str, filters: dict | None = None, timeout: float = 180.0) -> ConsumeResult:
    """Read ``address`` to its end (a drain that comes back before the credit is spent) with
    source ``filters``; the deliveries received and the time from connecting to the end.
    Raises RuntimeError when the broker refuses or ends the link."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 5672
    start = time.perf_counter()
    sock = socket.create_connection((host, port), timeout=timeout)
    transport = Transport(Transport.CLIENT)
    transport.sasl().allowed_mechs("ANONYMOUS")
    connection = Connection()
    connection.container = "bench-amqp-load"
    connection.hostname = host
    transport.bind(connection)
    connection.open()
    session = connection.session()
    session.open()
    link = session.receiver("bench-amqp-load")
    link.source.address = address
    link.snd_settle_mode = Link.SND_SETTLED
    if filters:
        link.source.filter.put_dict(filters)
    link.open()
    link.drain(CREDIT)
    deadline = start + timeout
    timed_out = False
    try:
        while True:
            pending = transport.pending()
            if pending > 0:
                sock.sendall(transport.peek(pending))
                transport.pop(pending)
            if link.state & Endpoint.REMOTE_CLOSED:
                raise RuntimeError(f"{address}: the broker closed the link ({link.remote_condition})")
            if not link.draining():  # the broker answered the drain: its credit is spent
                break               # on what it sent (proton: credit no longer > queued)
            if time.perf_counter() > deadline:
                timed_out = True
                break
            sock.settimeout(max(0.01, deadline - time.perf_counter()))
            try:
                data = sock.recv(min(_READ, max(transport.capacity(), 1)))
            except TimeoutError:
                continue
            if not data:
                timed_out = True  # the broker closed the connection
                break
            transport.push(data)
        end = time.perf_counter()
        return ConsumeResult(link.queued, 0, end - start, timed_out)
    finally:
        sock.close()
