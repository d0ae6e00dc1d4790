"""What one AMQP 1.0 delivery costs in proton's engine alone: the floor under any consumer
figure of this broker, whatever it reads or filters.

Why: a selective consumer that gets 10,000 messages out of 1,000,000 is measured against a scan
of all of them (issue 15's `region = 'r42'`). However little the broker reads, each of the
10,000 still goes out as its own transfer, and the broker's engine is proton (kept by design).
Here two proton engines talk over memory, no socket, no broker: the sending side makes each
delivery with exactly the calls the broker's consumer makes (``pn_delivery`` with the link's
``TagCell``, ``pn_link_send``, ``pn_delivery_settle``, which advances the link past the current
delivery itself: pre-settled, as the load generator asks; proton's C functions called directly,
as ``Consumer.pump`` does) and hands its transport's output over every 1,024 deliveries, as the
broker does per turn; the receiving side only pushes the bytes into its engine (what
``bench.amqp_load`` does). Each side is timed on its own.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.proton_floor [--deliveries N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

from cproton_ffi import lib
from proton import Connection, Link, Transport

from amqp_stream.amqp.tags import TagCell
from amqp_stream.wire import with_stream_offset

__all__ = ["measure"]

BATCH = 1024  # deliveries a consumer turn sends before the loop writes (``ConsumerTurn.max_batch``)


def _take(a: Transport) -> list[bytes]:
    """What ``a`` has to send (what the broker's loop writes to the socket)."""
    out = []
    while (n := a.pending()) > 0:
        out.append(a.peek(n))
        a.pop(n)
    return out


def _give(b: Transport, data: list[bytes]) -> None:
    """Push ``data`` into ``b``, as much at a time as it takes."""
    for chunk in data:
        view = memoryview(chunk)
        while view:
            n = min(b.capacity(), len(view))
            b.push(bytes(view[:n]))
            view = view[n:]


def _pump(a: Transport, b: Transport) -> None:
    """Move what ``a`` has to send into ``b``."""
    _give(b, _take(a))


def _pair(settled: bool = True) -> tuple[Transport, Transport, Link, Link]:
    """A server engine with an open sending link to a client engine that gave it credit (the
    transports, the sender, the receiver); pre-settled unless not ``settled``."""
    server_t, client_t = Transport(Transport.SERVER), Transport(Transport.CLIENT)
    server_c, client_c = Connection(), Connection()
    server_t.bind(server_c)
    client_t.bind(client_c)
    client_c.open()
    session = client_c.session()
    session.open()
    receiver = session.receiver("floor")
    receiver.snd_settle_mode = Link.SND_SETTLED if settled else Link.SND_UNSETTLED
    receiver.open()
    receiver.flow(1 << 30)
    _pump(client_t, server_t)
    server_c.open()
    server_c.session_head(0).open()
    sender = server_c.link_head(0)
    sender.snd_settle_mode = Link.SND_SETTLED if settled else Link.SND_UNSETTLED
    sender.open()
    for _ in range(3):
        _pump(server_t, client_t)
        _pump(client_t, server_t)
    if sender.credit <= 0:
        raise RuntimeError("no credit reached the sending engine")
    return server_t, client_t, sender, receiver


def measure(deliveries: int, message: bytes, clock: Callable[[], float] = time.perf_counter) -> dict:
    """µs a delivery on each side, over ``deliveries`` pre-settled copies of ``message`` (its
    stored bytes: the offset is spliced in as the broker does); ``clock``: wall time, or e.g.
    ``time.thread_time`` for CPU time (steadier on a loaded machine)."""
    server_t, client_t, sender, receiver = _pair()
    impl = sender._impl
    payload = with_stream_offset(message, 123_456)
    size = len(payload)
    cell, tag_bytes = (c := TagCell()).cell, c.tag
    send_s = recv_s = 0.0
    sent = 0
    tag = 0
    while sent < deliveries:
        t = clock()
        for _ in range(min(BATCH, deliveries - sent)):
            tag += 1
            cell[0] = tag
            d = lib.pn_delivery(impl, tag_bytes)
            lib.pn_link_send(impl, payload, size)
            lib.pn_delivery_settle(d)  # (advances past it: the current delivery)
        out = _take(server_t)
        t2 = clock()
        _give(client_t, out)
        _pump(client_t, server_t)  # its flow frames back (the session window)
        t3 = clock()
        send_s += t2 - t
        recv_s += t3 - t2
        sent += min(BATCH, deliveries - sent)
    if receiver.queued != deliveries:  # a harness that lost some would flatter the floor
        raise RuntimeError(f"{receiver.queued} of {deliveries} deliveries arrived")
    return {"deliveries": deliveries, "payload_bytes": len(payload),
            "send_us": send_s / deliveries * 1e6, "receive_us": recv_s / deliveries * 1e6}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deliveries", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    from bench.derived_keys import Dataset  # (it measures with this module: imported here)
    message = Dataset(1)(0)  # one of issue 15's messages
    runs = [measure(args.deliveries, message) for _ in range(args.repeat)]
    best_send = min(r["send_us"] for r in runs)
    best_recv = min(r["receive_us"] for r in runs)
    print(f"{args.deliveries} pre-settled deliveries of {runs[0]['payload_bytes']} bytes, "
          f"two proton engines over memory, best of {args.repeat}:")
    print(f"  sending engine (the broker's calls + encoding)   {best_send:6.2f} µs a delivery")
    print(f"  receiving engine (bytes pushed, as amqp_load)     {best_recv:6.2f} µs a delivery")
    print(f"  {args.deliveries} deliveries cost the sender at least "
          f"{best_send * args.deliveries / 1000:.1f} ms")


if __name__ == "__main__":
    main()
