"""The machine's floor for ``n`` consumers of one stream: the kernel's work alone.

Why: with 16 consumers of one stream on this 2-core machine, a broker and its consumers share
the cores, and most of what both do is in the kernel: the broker's ``sendfile`` (page
references into socket buffers) and each consumer's ``recv`` (the copy out). This measures
that alone, with no protocol and no Python per chunk: ``n`` sender processes (no GIL between
them) each ``sendfile`` the same files whole to their own loopback connection, and ``n``
receiver processes each ``recv_into`` one reused 4 MiB buffer (what ``bench.stream_protocol``'s
load generator does with a chunk's bytes) until they have them all. A broker cannot deliver
the same bytes to the same readers faster than this; ``bench.consumers`` prints it beside the
brokers, for the stream's own segment files.

    python -m bench.sendfile_floor FILE... [--counts 1,4,16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Floor", "floor", "main"]

READ = 4 << 20  # the load generator's read size (amqp_stream.client.stream.READ_SIZE)


@dataclass
class Floor:
    seconds: float  # until the last receiver had every byte
    sender_cpu: float  # the senders' CPU together (user + system)
    receiver_cpu: float


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _send(port: int, paths: list[str], start: Any, out: Any) -> None:
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fds = [os.open(p, os.O_RDONLY) for p in paths]
        start.wait()
        cpu = _cpu()
        for fd in fds:
            pos, size = 0, os.fstat(fd).st_size
            while pos < size:
                pos += os.sendfile(sock.fileno(), fd, pos, size - pos)
        out.put(("send", _cpu() - cpu))
        sock.close()
    except BaseException as exc:
        out.put(exc)


def _receive(sock: socket.socket, total: int, start: Any, out: Any) -> None:
    try:
        buf = memoryview(bytearray(READ))
        start.wait()
        cpu = _cpu()
        got = 0
        while got < total:
            n = sock.recv_into(buf)
            if not n:
                raise EOFError(f"{total - got} bytes short")
            got += n
        out.put(("recv", time.perf_counter(), _cpu() - cpu))
    except BaseException as exc:
        out.put(exc)


def floor(paths: list[str], count: int) -> Floor:
    """``count`` loopback connections, each sent every byte of ``paths`` (``sendfile``, one
    process per sender) and read whole by a process of its own."""
    total = sum(os.path.getsize(p) for p in paths)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(2 * count + 1)
    out = ctx.SimpleQueue()
    listener = socket.create_server(("127.0.0.1", 0), backlog=count)
    port = listener.getsockname()[1]
    procs = []
    for _ in range(count):
        sender = ctx.Process(target=_send, args=(port, paths, start, out))
        sender.start()
        conn, _ = listener.accept()
        receiver = ctx.Process(target=_receive, args=(conn, total, start, out))
        receiver.start()
        conn.close()
        procs += [sender, receiver]
    listener.close()
    start.wait(60)
    t0 = time.perf_counter()
    got = [out.get() for _ in procs]
    for p in procs:
        p.join()
    errors = [g for g in got if isinstance(g, BaseException)]
    if errors:
        raise errors[0]
    ends = [g[1] for g in got if g[0] == "recv"]
    return Floor(max(ends) - t0, sum(g[1] for g in got if g[0] == "send"),
                 sum(g[2] for g in got if g[0] == "recv"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sendfile_floor",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--counts", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    total = sum(os.path.getsize(p) for p in args.files)
    for n in (int(x) for x in args.counts.split(",")):
        rs = [floor(args.files, n) for _ in range(args.rounds)]
        med = sorted(rs, key=lambda r: r.seconds)[len(rs) // 2]
        print(f"{n:3} connections: {n * total / med.seconds / 1e9:5.2f} GB/s in {med.seconds:.3f} s; "
              f"senders {med.sender_cpu:.2f} s CPU, receivers {med.receiver_cpu:.2f} s "
              f"(rounds: {', '.join(f'{r.seconds:.3f}' for r in rs)} s; load "
              f"{statistics.mean(os.getloadavg()[:1]):.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
