"""AMQP 1.0 filtered consume against proton's own floor, this checkout against a baseline, in one run.

Why: issue 28 asks that a filtered consume over AMQP 1.0 cost at most twice what proton's engine
alone needs to send the same deliveries (``bench.proton_floor``), for a stream with a
broker-derived key and for a plain SQL filter. Each broker (a baseline checkout and this one)
gets the same ``--messages`` messages over the stream protocol (fast; not what is measured):
application properties ``region`` (``r00``..``r99`` in runs of 1,000) and ``k`` (``i % 100``,
round robin), a 60-byte body; once into ``plain`` and once into ``derived``
(``x-stream-derived-filter-keys`` = ``region``). Cases:

- ``derived 1%`` / ``derived 10%``: ``region = 'r42'`` / ``region IN (10 values)`` on
  ``derived`` (the skip table leaves out the chunks that cannot match);
- ``SQL 1%`` / ``SQL 10%``: ``k = 7`` / ``k < 10`` on ``plain`` (every chunk holds matches:
  every message is evaluated);
- ``SQL runs 1%``: ``region = 'r42'`` on ``plain`` (no derived key: the needles drop most
  chunks whole).

The client is proton's engine over a plain socket (``bench.amqp_load``: pre-settled, all credit
in one drain, no Python per delivery), so the broker is the limit. Per consume: the wall time
from sending the attach to the drain's answer (after the last delivery), and the broker's CPU
time (every thread's ``/proc/<pid>/task/*/schedstat``: nanoseconds, not 10 ms ticks). The floor
(``bench.proton_floor.measure``: proton's sending engine for the same number of deliveries of
the same message) is measured in each round too. Rounds alternate the order of the brokers;
figures are medians, with the ratio to the floor and this checkout / baseline.

    mkdir /tmp/amqpf-base && git archive main | tar -x -C /tmp/amqpf-base
    PYTHONPATH=$PWD .venv/bin/python -m bench.amqp_filtered --baseline /tmp/amqpf-base
    ... --baseline '' (this checkout only) --profile /tmp/loop.prof (this broker's loop thread
    under cProfile, by its CPU clock: the figures are then not comparable)
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import proton
from proton import Connection, Endpoint, Link, Transport

from amqp_stream.client.stream import StreamClient
from amqp_stream.derived_keys import ARGUMENT
from amqp_stream.testing import BrokerProcess
from bench import proton_floor
from bench.broker import stream_filters
from bench.stream_protocol import publish, publish_frames

HERE = Path(__file__).resolve().parent.parent
PERIOD = 100_000  # the dataset repeats every 100 runs of 1,000
#: (label, stream, SQL, share of the messages it matches)
CASES = (("derived 1%", "derived", "region = 'r42'", 0.01),
         ("derived 10%", "derived", "region IN (" + ", ".join(f"'r{40 + i}'" for i in range(10)) + ")", 0.10),
         ("SQL 1%", "plain", "k = 7", 0.01),
         ("SQL 10%", "plain", "k < 10", 0.10),
         ("SQL runs 1%", "plain", "region = 'r42'", 0.01))


def messages() -> list[bytes]:
    """The stored bytes of messages 0 .. PERIOD-1 (message ``i`` of the stream is ``i % PERIOD``)."""
    variants: dict[tuple[int, int], bytes] = {}
    out = []
    for i in range(PERIOD):
        key = ((i // 1000) % 100, i % 100)
        data = variants.get(key)
        if data is None:
            data = variants[key] = proton.Message(
                body=b"b" * 60, properties={"region": f"r{key[0]:02d}", "k": key[1]}).encode()
        out.append(data)
    return out


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far (ns: ``schedstat``'s first field)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def read(url: str, address: str, filters: dict, timeout: float = 120.0) -> tuple[int, float]:
    """(deliveries, seconds from sending the attach to the drain's answer): ``bench.amqp_load``'s
    reader, with the clock started at the attach (connection setup left out)."""
    parsed = urlparse(url)
    sock = socket.create_connection((parsed.hostname, parsed.port), timeout=timeout)
    transport = Transport(Transport.CLIENT)
    transport.sasl().allowed_mechs("ANONYMOUS")
    connection = Connection()
    connection.hostname = parsed.hostname
    transport.bind(connection)
    connection.open()
    session = connection.session()
    session.open()

    def flush() -> None:
        while (n := transport.pending()) > 0:
            sock.sendall(transport.peek(n))
            transport.pop(n)

    def take() -> None:
        data = sock.recv(max(1, min(1 << 20, transport.capacity())))
        if not data:
            raise RuntimeError(f"{address}: the broker closed the connection")
        transport.push(data)

    try:
        flush()
        deadline = time.perf_counter() + timeout
        while not connection.state & Endpoint.REMOTE_ACTIVE:  # opened: the attach alone is timed
            take()
            flush()  # (the SASL exchange)
            if time.perf_counter() > deadline:
                raise RuntimeError("no open from the broker")
        link = session.receiver("bench-amqp-filtered")
        link.source.address = address
        link.snd_settle_mode = Link.SND_SETTLED
        link.source.filter.put_dict(filters)
        link.open()
        link.drain(1 << 24)
        start = time.perf_counter()
        flush()
        while link.draining():
            if link.state & Endpoint.REMOTE_CLOSED:
                raise RuntimeError(f"{address}: link closed ({link.remote_condition})")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{address}: {link.queued} deliveries, then timed out")
            take()
            flush()
        return link.queued, time.perf_counter() - start
    finally:
        sock.close()


#: run the broker with its main thread (the event loop) under cProfile timed by the thread's
#: own CPU clock (wall time would charge the loop for the waits of a loaded machine)
_PROFILED = """
import cProfile, runpy, sys, time
profile = cProfile.Profile(time.thread_time)
path, sys.argv = sys.argv[1], ["amqp_stream", *sys.argv[2:]]
profile.enable()
try:
    runpy.run_module("amqp_stream", run_name="__main__")
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats(path)
"""


class ProfiledBroker(BrokerProcess):
    """A broker whose main thread (the event loop) runs under cProfile, written at its stop."""

    def __init__(self, *args, profile: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.profile = profile

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-c", _PROFILED, self.profile, *cmd[3:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.amqp_filtered",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="", help="a checkout to compare with ('' for none)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default="", help="labels to run, comma-separated (default all)")
    parser.add_argument("--profile", default="", help="write this broker's loop-thread cProfile here")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if not args.cases or c[0] in args.cases.split(",")]
    data = messages()
    frames = {pid: publish_frames(pid, 0, args.messages, 1000, messages=data) for pid in (1, 2)}
    names = (["baseline"] if args.baseline else []) + ["this checkout"]
    codes = ([Path(args.baseline).resolve()] if args.baseline else []) + [HERE]
    wall: dict[tuple[str, str], list[float]] = {(n, c[0]): [] for n in names for c in cases}
    cpu: dict[tuple[str, str], list[float]] = {(n, c[0]): [] for n in names for c in cases}
    floor: dict[str, list[float]] = {c[0]: [] for c in cases}  # wall
    floor_cpu: dict[str, list[float]] = {c[0]: [] for c in cases}
    got: dict[tuple[str, str], set[int]] = {(n, c[0]): set() for n in names for c in cases}
    with tempfile.TemporaryDirectory(prefix="bench-amqpf-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from here
        brokers = {}
        try:
            for name, code in zip(names, codes, strict=True):
                kind = ProfiledBroker if args.profile and name == "this checkout" else BrokerProcess
                extra = {"profile": args.profile} if kind is ProfiledBroker else {}
                b = kind(Path(tmp, name.split()[0]), extra_args=["--fsync", "never"],
                         env={"PYTHONPATH": str(code)}, **extra).start()
                brokers[name] = b
                with StreamClient(f"rabbitmq-stream://{b.host}:{b.stream_port}", timeout=60) as c:
                    for pid, stream, arguments in ((1, "plain", {}), (2, "derived", {ARGUMENT: "region"})):
                        c.create(stream, arguments)
                        c.declare_publisher(pid, stream)
                        publish(c, frames[pid], b.proc.pid)
            for k in range(args.rounds):
                for label, stream, sql, _ in cases:
                    for name in (names if k % 2 == 0 else names[::-1]):
                        b = brokers[name]
                        used = cpu_ns(b.proc.pid)
                        n, seconds = read(b.url, f"/queues/{stream}", stream_filters("first", sql=sql))
                        cpu[name, label].append((cpu_ns(b.proc.pid) - used) / 1e9)
                        wall[name, label].append(seconds)
                        got[name, label].add(n)
                    n = next(iter(got[names[-1], label]))
                    floor[label].append(proton_floor.measure(max(n, 1), data[42_007])["send_us"]
                                        * n / 1e6)
                    floor_cpu[label].append(proton_floor.measure(
                        max(n, 1), data[42_007], time.thread_time)["send_us"] * n / 1e6)
        finally:
            for b in brokers.values():
                b.stop()
            os.chdir(cwd)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.messages} "
          f"messages ({len(data[0])} bytes stored), {args.rounds} rounds alternating; medians; "
          f"floor = bench.proton_floor's sender for the same deliveries, same run, by the wall "
          f"clock (for wall) and by its thread's CPU clock (for CPU)")
    print(f"  {'case':<13}{'broker':<15}{'deliveries':>10}{'floor ms':>9}{'(CPU)':>7}{'wall ms':>9}"
          f"{'CPU ms':>8}{'wall/floor':>11}{'CPU/floor':>10}{'CPU µs/deliv.':>14}")
    for label, _, sql, share in cases:
        f = statistics.median(floor[label])
        fc = statistics.median(floor_cpu[label])
        for name in names:
            counts = got[name, label]
            n = next(iter(counts))
            w, c = statistics.median(wall[name, label]), statistics.median(cpu[name, label])
            bad = "" if counts == {round(args.messages * share)} else f"  !! got {sorted(counts)}"
            print(f"  {label:<13}{name:<15}{n:>10}{f * 1e3:>9.1f}{fc * 1e3:>7.1f}{w * 1e3:>9.1f}"
                  f"{c * 1e3:>8.1f}{w / f:>10.2f}x{c / fc:>9.2f}x{c / max(n, 1) * 1e6:>14.2f}{bad}")
        if len(names) == 2:
            ratio = statistics.median(wall[names[1], label]) / statistics.median(wall[names[0], label])
            cratio = statistics.median(cpu[names[1], label]) / statistics.median(cpu[names[0], label])
            print(f"  {'':<13}this checkout / baseline: wall {ratio:.2f}x, CPU {cratio:.2f}x   ({sql})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
