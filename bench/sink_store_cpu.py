"""The broker's CPU a message for the Spark sink's Publish frames, in one process, without
sockets: this checkout against a baseline checkout, interleaved.

Why: over loopback (``bench.publish_ab --sink``) the CPU a message swings with the machine's
load by more than a change to the decoder or storage moves it; here each round decodes the
same pre-encoded Publish v2 frames (a named publisher, a filter value each, 150-190-byte
messages), hands them to a ``StreamPublisher`` flushing every two frames to a real stream
(fsync never), and counts the process's CPU (the writer thread's too) until all is written,
and the loop thread's (decode, publisher, storage's checks) alone:
the part of the broker's work that is its own code, without the socket's. Each round runs
in a fresh subprocess per checkout, in turns (A B A B ...); medians are printed.

    mkdir /tmp/base && git archive <baseline> | tar -x -C /tmp/base
    .venv/bin/python -m bench.sink_store_cpu --baseline /tmp/base [--rounds 5] [--messages 300000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

_ROUND = r"""
import random, sys, tempfile, time
from pathlib import Path
import storage
from amqp_stream.core import ByteBudget
from amqp_stream.metrics import Metrics
from amqp_stream.stream_listener.publishing import StreamPublisher
from amqp_stream.streamproto.frames import decode
from amqp_stream.streams import StreamEntry
from bench.stream_protocol import publish_frames
from types import SimpleNamespace

n = int(sys.argv[1])
rnd = random.Random(1)
messages = [b"\x00\x53\x75\xa0" + bytes([k]) + rnd.randbytes(k)
            for k in (rnd.randrange(145, 185) for _ in range(997))]
values = [f"r{(i * 7919) % 100:02d}" for i in range(n)]
frames = [raw[4:] for raw, _ in publish_frames(1, 1, n, 1000, values, messages)]

class Conn:
    serving, peer = True, "bench"
    def __init__(self):
        self.adapter = self
        self.core = SimpleNamespace(metrics=Metrics())
        self.to_write = set()
    def send(self, frame): pass
    def count(self, name, k): pass
    def throttle(self, publisher, on): pass

with tempfile.TemporaryDirectory() as tmp:
    stream = storage.Stream.open(Path(tmp, "s"), storage.StreamConfig(fsync="never"))
    entry = StreamEntry("s", {}, Path(tmp, "s"), stream)
    posted = []
    pub = StreamPublisher(Conn(), 1, "sink-bench", entry, ByteBudget(1 << 40), 1 << 40, 1 << 20,
                          lambda fn, *a: posted.append((fn, a)), lambda p: None, lambda p, e: None)
    c0, t0 = time.process_time(), time.thread_time()
    for k, raw in enumerate(frames):
        pub.publish(decode(raw).messages)
        if k % 2:
            pub.flush()
    pub.flush()
    loop = time.thread_time() - t0  # this thread: what the broker's loop does
    stream.flush(60)
    cpu = time.process_time() - c0
    assert stream.next_offset == n, stream.next_offset
    stream.close()
print(loop / n * 1e6, cpu / n * 1e6)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"baseline": [], "this checkout": []}
    loops: dict[str, list[float]] = {"baseline": [], "this checkout": []}
    loads = []
    for _ in range(args.rounds):
        for name, code in (("baseline", args.baseline.resolve()), ("this checkout", HERE)):
            loads.append(os.getloadavg()[0])
            out = subprocess.run([sys.executable, "-c", _ROUND, str(args.messages)], cwd=code,
                                 env={**os.environ, "PYTHONPATH": str(code)}, check=True,
                                 capture_output=True, text=True).stdout
            loop, cpu = map(float, out.split()[-2:])
            results[name].append(cpu)
            loops[name].append(loop)
    print(f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}; {args.messages} messages a "
          f"round, {args.rounds} rounds alternating; CPU µs a message (decode, publisher, storage)")
    for name, cpus in results.items():
        print(f"  {name:14s} median {statistics.median(cpus):.3f}, of which the loop's thread "
              f"{statistics.median(loops[name]):.3f}  (rounds: {', '.join(f'{c:.3f}' for c in cpus)})")
    ratio = statistics.median(results["this checkout"]) / statistics.median(results["baseline"])
    print(f"  this checkout / baseline: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
