"""Stage 2 over the stream protocol, values in round robin: a baseline checkout against this
one, in turns in one run, each against the same client's unfiltered read.

Why: with values in round robin every match is a chunk of its own (a delivered chunk holds
consecutive offsets only) and takes a credit of its own, so how fast a filtered read goes
depends on how the broker uses the credit the client grants and on its CPU per scanned record.
The streams are ``bench.stream_protocol``'s filtered ones (message ``i``: ``k = i % 100``,
``zone = 'z<k>'``, plus a last record every filter matches, where a consumer stops); the
client is its load generator (credit one per chunk, ten ahead; nothing decoded). Per round and
broker: the unfiltered read, then ``k = 7`` and ``zone = 'z07'`` (1 %); broker CPU per scanned
record from ``/proc/<pid>/task/*/schedstat`` (nanoseconds, every thread: ``/proc``'s
utime/stime count 10 ms ticks, ~0.01 µs a record here, as much as the changes measured).

The writer's chunk sizes follow how far it is behind the publisher (``storage.writer``), and
a stored chunk's fixed costs make them decide the figure: ``--frames PER_FRAME:WINDOW`` (again
for more streams, each measured in the same run) publishes frames of ``PER_FRAME`` messages
keeping at most ``WINDOW`` unconfirmed. The default, 1000:200000, leaves what the machine's
load makes (on this machine ~1,000 to ~4,000 records a chunk); 2000:2000 (one frame in flight)
stored chunks of 976 and 1,024 records, what a publisher the writer keeps up with leaves;
8192:8192 chunks of 4,096.

    mkdir /tmp/stage2-base && git archive <commit> | tar -x -C /tmp/stage2-base
    python -m bench.stage2_ab --baseline /tmp/stage2-base [--messages 1000000] [--rounds 3]
        [--frames 2000:2000 --frames 8192:8192]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.stream_protocol import Result, consume, publish, publish_frames

HERE = Path(__file__).resolve().parent.parent
CASES = ("k = 7", "zone = 'z07'")


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of process ``pid`` so far, in ns (the scheduler's own)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # (a thread that ended meanwhile)
    return total


def stored_chunks(data: Path, stream: str = "*") -> list[int]:
    """The records of each stored chunk of ``stream`` (the only one: ``*``) under broker data
    directory ``data`` (the broker stopped)."""
    from storage import OffsetSpec, Stream, StreamConfig
    log = next(data.glob(f"streams/{stream}/log"))
    sizes = []
    with Stream.open(str(log), StreamConfig()) as s, s.reader(OffsetSpec.first()) as r:
        while (loc := r.read_location()) is not None:
            sizes.append(loc.records)
    return sizes


def main(argv: list[str] | None = None) -> int:
    from bench.broker import encode
    parser = argparse.ArgumentParser(prog="python -m bench.stage2_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--credit", type=int, default=10, help="credit the client keeps ahead")
    parser.add_argument("--frames", action="append", metavar="PER_FRAME:WINDOW",
                        help="a stream published in frames of PER_FRAME messages, at most WINDOW "
                             "unconfirmed (again for more streams; default 1000:200000)")
    args = parser.parse_args(argv)
    n = args.messages
    layouts = [tuple(int(x) for x in spec.split(":")) for spec in args.frames or ["1000:200000"]]
    variants = [encode(properties={"k": k, "zone": f"z{k:02d}", "region": "r00"})
                for k in range(100)]
    messages = [variants[i % 100] for i in range(n)] + [variants[7]]
    streams = [f"rr{i}" for i in range(len(layouts))]
    got: dict[tuple[str, str, str], list[Result]] = {}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{n} messages + 1, credit {args.credit}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-stage2-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from here
        brokers: dict[str, BrokerProcess] = {}
        try:
            # each stream is published once and its data directory copied: both brokers scan
            # the same stored chunks (the writer's chunk sizes follow the machine's load, and
            # a chunk's fixed costs are ~45 us: a confound between brokers otherwise)
            first = BrokerProcess(Path(tmp, "published"), extra_args=["--fsync", "never"],
                                  env={"PYTHONPATH": str(HERE)})
            first.start()
            try:
                with StreamClient(f"rabbitmq-stream://{first.host}:{first.stream_port}",
                                  timeout=60) as c:
                    for p, (stream, (per_frame, window)) in enumerate(zip(streams, layouts,
                                                                         strict=True), 1):
                        c.create(stream)
                        c.declare_publisher(p, stream)
                        publish(c, publish_frames(p, 0, n + 1, per_frame, messages=messages),
                                first.proc.pid, window=window)
            finally:
                first.stop()
            for stream, (per_frame, window) in zip(streams, layouts, strict=True):
                sizes = stored_chunks(Path(tmp, "published"), stream)
                print(f"{stream} (frames of {per_frame}, {window} unconfirmed): stored chunks "
                      f"{len(sizes)}, records a chunk: median {statistics.median(sizes):.0f}, "
                      f"smallest {min(sizes)}, largest {max(sizes)}", flush=True)
            for name, code in (("baseline", args.baseline.resolve()), ("this checkout", HERE)):
                shutil.copytree(Path(tmp, "published"), Path(tmp, name.split()[0]))
                b = brokers[name] = BrokerProcess(Path(tmp, name.split()[0]),
                                                  extra_args=["--fsync", "never"],
                                                  env={"PYTHONPATH": str(code)})
                b.start()
            for _ in range(args.rounds):
                for stream in streams:
                    for name, b in brokers.items():
                        url = f"rabbitmq-stream://{b.host}:{b.stream_port}"
                        for case in (None, *CASES):
                            c = StreamClient(url, timeout=120)
                            before = cpu_ns(b.proc.pid)
                            r = consume(c, stream, n + 1, b.proc.pid,
                                        {"sql-filter": case} if case else None,
                                        credit=args.credit, until=n + 1)
                            r.cpu = (cpu_ns(b.proc.pid) - before) / 1e9
                            c.sock.close()
                            got.setdefault((stream, name, case or "unfiltered"), []).append(r)
        finally:
            for b in brokers.values():
                b.stop()
            os.chdir(cwd)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for stream in streams:
        print(f"{stream}:")
        for name in brokers:
            base = statistics.median(r.seconds for r in got[stream, name, "unfiltered"])
            print(f"  {name}: unfiltered {base:.3f} s (rounds "
                  f"{', '.join(f'{r.seconds:.3f}' for r in got[stream, name, 'unfiltered'])})")
            for case in CASES:
                rs = got[stream, name, case]
                s = statistics.median(r.seconds for r in rs)
                cpu = statistics.median(r.cpu for r in rs) / (n + 1) * 1e6
                print(f"    {case:14} {rs[0].messages:>6} records {s:7.3f} s = {base / s:5.2f}x "
                      f"the unfiltered read's speed; broker CPU {cpu:.3f} µs per scanned record "
                      f"(rounds {', '.join(f'{r.seconds:.3f}' for r in rs)}; CPU "
                      f"{', '.join(f'{r.cpu / (n + 1) * 1e6:.3f}' for r in rs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
