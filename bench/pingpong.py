"""The floor of a credit round trip: what a bare uvloop server costs a round trip on loopback TCP.

Why: a stream consumer that grants credit a chunk at a time makes the broker answer each Credit
frame with one write, after waking from its event loop's wait. Here a forked server does only
that (a read callback: ``recv_into``, one ``send`` of ``--size`` bytes) and the client waits
``--delay`` µs between round trips, as a client that handles what it got does (the bench's
load generator takes ~58 µs): a loop that falls asleep between round trips costs more a wake-up.
The server's CPU comes from the scheduler's counters (``bench.stage2_ab.cpu_ns``).

    python -m bench.pingpong [--delay 0,30,60,100] [--size 230] [--round-trips 10000]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

from bench.stage2_ab import cpu_ns


def serve(listener: socket.socket, size: int) -> None:
    """In the child: answer every read with ``size`` bytes until the client closes."""
    import uvloop
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.setblocking(False)
    loop = uvloop.new_event_loop()
    buf, answer = bytearray(65536), b"x" * size

    def readable() -> None:
        if not conn.recv_into(buf):
            loop.stop()
            return
        conn.send(answer)

    loop.add_reader(conn.fileno(), readable)
    loop.run_forever()


def round_trips(port: int, pid: int, n: int, size: int, delay: float) -> tuple[float, float]:
    """(server CPU, wall time) a round trip in µs, the client busy ``delay`` µs before each."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cpu0, t0 = cpu_ns(pid), time.perf_counter()
    for _ in range(n):
        until = time.perf_counter() + delay * 1e-6
        while time.perf_counter() < until:
            pass
        sock.send(b"c" * 13)  # a Credit frame's size
        got = 0
        while got < size:
            got += len(sock.recv(65536))
    wall = (time.perf_counter() - t0) / n * 1e6
    cpu = (cpu_ns(pid) - cpu0) / n / 1e3
    sock.close()
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pingpong", description=__doc__.splitlines()[0])
    parser.add_argument("--delay", default="0,30,60,100", help="µs the client spends between round trips")
    parser.add_argument("--size", type=int, default=230, help="bytes of each answer (a one-record chunk's Deliver)")
    parser.add_argument("--round-trips", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for delay in (float(d) for d in args.delay.split(",")):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        pid = os.fork()
        if pid == 0:
            try:
                serve(listener, args.size)
            finally:
                os._exit(0)
        listener.close()
        cpu, wall = round_trips(port, pid, args.round_trips, args.size, delay)
        os.waitpid(pid, 0)
        print(f"client delay {delay:5.0f} µs: server CPU {cpu:5.1f} µs a round trip, wall {wall:6.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
