"""Many stream-protocol consumers of one stream at once: a baseline (another checkout given by
``--baseline``, else this one with ``--stream-join-bytes 0``: stored chunks sent one by one), this
checkout with stored chunks joined per Deliver (``--stream-join-bytes 1048576``: off by default,
as RabbitMQ sends each stored chunk), and RabbitMQ 3.10, in turns in one run.

Why: with ``os.sendfile`` issued from the loop thread only, consumers past the first share one
core (issue 28: 0.82x RabbitMQ at 16 consumers). Each round subscribes ``n`` consumers (1, 4,
16) from the first offset of a stream of ``--messages`` 105-byte messages and times until every
one has counted all the records; the brokers take turns within each round. The consumers are
``bench.stream_protocol``'s load generator (credit per chunk, ten ahead; records counted from
chunk headers, the chunk's bytes skipped in one reused buffer), one process and connection
each (no GIL shared between them); their CPU together is printed beside the broker's, and the
number of chunks each received, how often each slept for want of data (its voluntary context
switches: a consumer that is behind never sleeps) and how long the broker's threads waited
runnable for a core (``/proc/<pid>/task/*/schedstat``). Cores used = broker CPU time / wall time. ``--floor`` adds the
machine's floor for the same bytes (``bench.sendfile_floor``: the stream's segment files sent
whole with ``sendfile`` by one process per connection and read by the same ``recv_into`` loop,
no protocol and no Python per chunk) in the same rounds: what no broker can beat here.

    mkdir /tmp/consumers-base && git archive main | tar -x -C /tmp/consumers-base
    python -m bench.consumers [--baseline /tmp/consumers-base] [--messages 1000000]
        [--counts 1,4,16] [--rounds 3] [--floor] [--baseline-args '--stream-join-bytes 1048576']
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from amqp_stream.client.stream import StreamClient
from amqp_stream.streamproto import OffsetSpec
from amqp_stream.testing import BrokerProcess
from bench import scratch_dir
from bench.peer import RabbitMQNode
from bench.sendfile_floor import floor
from bench.stream_protocol import cpu_seconds, publish, publish_frames

__all__ = ["main", "consume_many"]

JOINED = 1 << 20  # the data bytes of a joined Deliver, "this checkout"


@dataclass
class Pass:
    messages: int  # records received by all consumers together
    seconds: float
    broker_cpu: float
    client_cpu: float
    chunks: int  # chunks one consumer received
    blocked: float = 0.0  # times a consumer found its socket empty and slept (mean)
    waiting: float = 0.0  # seconds the broker's threads were runnable but not running

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cores(self) -> float:
        return self.broker_cpu / self.seconds


def _slept() -> int:
    """Voluntary context switches of this process so far: each a wait for the socket."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def waited(pid: int) -> float:
    """Seconds the threads of ``pid`` have spent runnable but waiting for a core
    (``/proc/<pid>/task/*/schedstat``, second field): a broker short of CPU, not of work."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            pass
    return total / 1e9


def _consumer(url: str, stream: str, expected: int, start: Any, results: Any) -> None:
    """One consumer process: connect, wait for the others, read ``expected`` records; report
    (records, when done, own CPU seconds, chunks, sleeps) or the error."""
    try:
        c = StreamClient(url, timeout=60)
        start.wait()
        cpu0, slept0 = time.process_time(), _slept()
        c.subscribe(1, stream, OffsetSpec.first(), credit=10)
        while c.records < expected:
            if not c.pump(30):
                raise RuntimeError("deliveries stopped")
        results.put((c.records, time.perf_counter(), time.process_time() - cpu0, c.chunks,
                     _slept() - slept0))
        c.sock.close()  # mid-stream (credit granted ahead): no Close handshake
    except BaseException as exc:
        results.put(exc)


def consume_many(url: str, stream: str, expected: int, count: int, pid: int) -> Pass:
    """``count`` consumers of ``stream`` from its first offset, each on its own connection in
    its own process (no GIL between them), until each has ``expected`` records."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(count + 1)
    results = ctx.SimpleQueue()
    procs = [ctx.Process(target=_consumer, args=(url, stream, expected, start, results))
             for _ in range(count)]
    for p in procs:
        p.start()
    start.wait(60)
    cpu0, wait0, t0 = cpu_seconds(pid), waited(pid), time.perf_counter()
    got = [results.get() for _ in procs]
    cpu1, wait1 = cpu_seconds(pid), waited(pid)
    for p in procs:
        p.join()
    errors = [g for g in got if isinstance(g, BaseException)]
    if errors:
        raise errors[0]
    # CLOCK_MONOTONIC (perf_counter) is one clock for every process of the machine
    return Pass(sum(g[0] for g in got), max(g[1] for g in got) - t0, cpu1 - cpu0,
                sum(g[2] for g in got), got[0][3], statistics.mean(g[4] for g in got),
                wait1 - wait0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.consumers",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--counts", default="1,4,16", help="consumers at once, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="passes per count and broker (median)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout to compare with (default: this one, chunks not joined)")
    parser.add_argument("--baseline-args", default="",
                        help="extra broker options for the baseline, e.g. "
                             "'--stream-join-bytes 1048576' to compare joined with joined")
    parser.add_argument("--no-rabbitmq", action="store_true", help="leave RabbitMQ out")
    parser.add_argument("--floor", action="store_true",
                        help="also the kernel's floor for the same bytes (bench.sendfile_floor)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.counts.split(",")]
    root = scratch_dir("bench-consumers-")
    targets: dict[str, tuple[str, int]] = {}  # label -> (url, pid)
    stops: list[Callable[[], None]] = []
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.messages} messages of 105 bytes, {os.cpu_count()} cores", flush=True)
    here = Path(__file__).resolve().parent.parent
    before = "baseline" if args.baseline else "not joined"
    cwd = os.getcwd()
    os.chdir(root)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from the cwd
    try:
        for label, code, extra in ((before, args.baseline or here,
                                    (shlex.split(args.baseline_args) if args.baseline
                                     else ["--stream-join-bytes", "0"])),
                                   ("this checkout", here, ["--stream-join-bytes", str(JOINED)])):
            name = label.split()[0]
            b = BrokerProcess(root / f"data-{name}", log_path=root / f"broker-{name}.log",
                              extra_args=["--fsync", "never", *extra],
                              env={"PYTHONPATH": str(Path(code).resolve())})
            b.start()
            stops.append(b.stop)
            targets[label] = (f"rabbitmq-stream://{b.host}:{b.stream_port}", b.proc.pid)
        if not args.no_rabbitmq and RabbitMQNode.available():
            node = RabbitMQNode()
            stops.append(node.stop)
            node.start()
            targets[f"RabbitMQ {node.version().split('-')[0]}"] = (
                f"rabbitmq-stream://{node.host}:{node.stream_port}", node.pid())
        elif not args.no_rabbitmq:
            print("  RabbitMQ: not installed (scripts/apt-install rabbitmq-server): no peer in this run")
        stream = f"bench-consumers-{os.getpid()}"
        frames = publish_frames(1, 0, args.messages, 1000)
        for url, pid in targets.values():
            with StreamClient(url, timeout=60) as c:
                c.create(stream)
                c.declare_publisher(1, stream)
                publish(c, frames, pid)
        segments = sorted(str(p) for p in (root / "data-this").rglob("*.segment"))
        results: dict[tuple[int, str], list[Pass]] = {}
        floors: dict[int, list[float]] = {}
        for n in counts:
            for _ in range(args.rounds):
                for label, (url, pid) in targets.items():
                    results.setdefault((n, label), []).append(
                        consume_many(url, stream, args.messages, n, pid))
                if args.floor:
                    f = floor(segments, n)
                    floors.setdefault(n, []).append(n * args.messages / f.seconds)
                    print(f"  (floor round: {f.seconds:.3f} s, senders {f.sender_cpu:.2f} s CPU, "
                          f"receivers {f.receiver_cpu:.2f} s)", flush=True)
            print(f"consumers {n} (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
            for label in targets:
                rs = results[n, label]
                med = sorted(rs, key=lambda r: r.rate)[len(rs) // 2]
                print(f"  {label:22} {med.rate:>12,.0f} msg/s  {med.seconds:6.3f} s  broker "
                      f"{statistics.median(r.cores for r in rs):4.2f} cores, "
                      f"{statistics.median(r.broker_cpu / r.messages * 1e9 for r in rs):5.1f} ns "
                      f"CPU/msg; client CPU {med.client_cpu:5.2f} s, {med.chunks} chunks each, slept "
                      f"{med.blocked:.0f} times each; broker threads waited {med.waiting:.2f} s "
                      f"for a core  (rounds: "
                      f"{', '.join(f'{r.rate / 1e6:.1f}M' for r in rs)})")
            rates = {label: statistics.median(r.rate for r in results[n, label]) for label in targets}
            after = rates["this checkout"]
            line = f"  this checkout / {before}: {after / rates[before]:.2f}x"
            for label, rate in rates.items():
                if label.startswith("RabbitMQ"):
                    line += (f"; vs {label}: this checkout {after / rate:.2f}x, {before} "
                             f"{rates[before] / rate:.2f}x")
            if n in floors:
                best = statistics.median(floors[n])
                line += (f"; kernel floor {best:,.0f} msg/s (rounds: "
                         f"{', '.join(f'{r / 1e6:.1f}M' for r in floors[n])}): this checkout at "
                         f"{after / best:.2f} of it")
                for label, rate in rates.items():
                    if label.startswith("RabbitMQ"):
                        line += f", RabbitMQ at {rate / best:.2f}, 1.5x RabbitMQ = {1.5 * rate / best:.2f}"
            print(line, flush=True)
    finally:
        for stop in reversed(stops):
            stop()
        os.chdir(cwd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
