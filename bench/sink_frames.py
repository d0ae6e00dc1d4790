"""The broker's CPU a message for the Spark sink's traffic by Publish frame size: frames of
``--frames`` messages each (e.g. 1,000, the sink's old cut, against 5,000, what frame_max
lets a frame of ~185-byte messages hold), interleaved in one run.

Why: the sink chooses how many messages go in a frame, and the broker's work per frame (the
decode's numpy calls, the turn's flush, a chunk per frame with its Bloom filter, CRC and
index record, and with ``--fsync always`` an fsync per written group) is paid per message
divided by the frame's size. Like two Spark partitions, two publisher processes (named, Publish
v2, a filter value each, 150-190-byte messages: ``bench.publish_ab --sink``'s traffic) write
to one stream of one broker (this checkout, its default fsync policy unless ``--fsync``) with
at most ``--window`` frames unconfirmed each. Printed per frame size: the medians of
throughput, the broker's CPU a message, that CPU by thread (the loop, the stream's writer;
user and system), the broker's resident memory once the publishers are done (and its peak)
and its minor page faults a message (a first touch of a page costs
~3 µs on this VM: ``bench.page_cost``) from ``/proc``.

    PYTHONPATH=$PWD .venv/bin/python -m bench.sink_frames [--frames 1000,5000] [--rounds 4]

With ``--baseline DIR`` (a checkout, e.g. ``git archive main | tar -x -C /tmp/base``) each
frame size runs on the baseline's broker and on this checkout's in alternating turns, and the
ratios (this checkout / baseline) of the medians are printed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from multiprocessing import Process
from pathlib import Path

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.stream_protocol import cpu_seconds, proc_stat, publish, publish_frames

_TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds of the broker's threads: the loop (the main thread) and the rest (the
    stream's writer, and a few idle ones), user and system apart."""
    out = {"loop user": 0.0, "loop system": 0.0, "writer user": 0.0, "writer system": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = "loop" if tid == str(pid) else "writer"
        out[f"{kind} user"] += int(fields[11]) / _TICK
        out[f"{kind} system"] += int(fields[12]) / _TICK
    return out


def _minflt(pid: int) -> int:
    """The broker's minor page faults so far (``/proc/<pid>/stat`` field 10, all threads)."""
    return int(proc_stat(pid)[7])


def _memory(pid: int) -> dict[str, float]:
    """The broker's resident memory now and at its peak (MiB)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) / 1024
    return out


def _frames(messages: int, per_frame: int) -> list[tuple[bytes, int]]:
    rnd = random.Random(1)
    bodies = [b"\x00\x53\x75\xa0" + bytes([n]) + rnd.randbytes(n)  # an AMQP data section
              for n in (rnd.randrange(145, 185) for _ in range(997))]
    values = [f"r{(i * 7919) % 100:02d}" for i in range(messages)]
    return publish_frames(1, 1, messages, per_frame, values, bodies)


def _publisher(port: int, reference: str, pid: int, frames: list[tuple[bytes, int]],
               window: int) -> None:
    with StreamClient(f"rabbitmq-stream://127.0.0.1:{port}", timeout=60) as c:
        c.declare_publisher(1, "s", reference)
        publish(c, frames, pid, window=window)


HERE = Path(__file__).resolve().parent.parent


def _round(fsync: str, frames: list[tuple[bytes, int]], window: int, publishers: int,
           messages: int, code: Path = HERE) -> tuple[float, float, dict[str, float]]:
    """One broker, ``publishers`` processes each publishing ``frames``: (msg/s, broker CPU µs a
    message, its threads' CPU µs a message)."""
    with tempfile.TemporaryDirectory(prefix="bench-sink-frames-") as tmp:
        broker = BrokerProcess(Path(tmp, "d"), extra_args=["--fsync", fsync],
                               env={"PYTHONPATH": str(code)})
        broker.start()
        try:
            with StreamClient(broker.stream_url) as c:
                c.create("s")
            pid = broker.proc.pid
            before, c0, t0 = _threads(pid), cpu_seconds(pid), time.perf_counter()
            before["faults"] = _minflt(pid)
            procs = [Process(target=_publisher, args=(broker.stream_port, f"sink-{k}", pid, frames,
                                                      window)) for k in range(publishers)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
                if p.exitcode:
                    raise RuntimeError(f"a publisher failed ({p.exitcode})")
            seconds, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
            after = _threads(pid)
            after["faults"] = _minflt(pid)
            memory = _memory(pid)
        finally:
            broker.stop()
    total = publishers * messages
    per = {k: (after[k] - before[k]) / total * (1 if k == "faults" else 1e6) for k in after}
    return total / seconds, cpu / total * 1e6, {**per, **memory}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", default="1000,5000", help="messages a frame, comma-separated")
    parser.add_argument("--messages", type=int, default=1_000_000, help="per publisher")
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--window", type=int, default=10, help="frames unconfirmed at most")
    parser.add_argument("--fsync", default="always", choices=("never", "interval", "always"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline", type=Path, help="a checkout to compare with")
    args = parser.parse_args()
    sizes = [int(x) for x in args.frames.split(",")]
    frames = {n: _frames(args.messages, n) for n in sizes}
    codes = {"": HERE} if args.baseline is None else {
        "baseline": args.baseline.resolve(), "this checkout": HERE}
    results: dict[tuple[str, int], list[tuple[float, float, dict[str, float]]]] = {
        (name, n): [] for n in sizes for name in codes}
    loads = [os.getloadavg()[0]]
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())  # ``-m amqp_stream`` then imports from PYTHONPATH
    try:
        for k in range(args.rounds):
            for n in sizes:
                # alternate which goes first, so neither always follows the other
                for name in (list(codes) if k % 2 == 0 else list(codes)[::-1]):
                    results[name, n].append(_round(args.fsync, frames[n], args.window * n,
                                                   args.publishers, args.messages, codes[name]))
                    loads.append(os.getloadavg()[0])
    finally:
        os.chdir(cwd)
    print(f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}; {args.publishers} publishers x "
          f"{args.messages} messages, fsync {args.fsync}, {args.window} frames unconfirmed, "
          f"{args.rounds} rounds alternating; medians (CPU in µs a message, minor page faults "
          f"a message)")
    for (name, n), rs in results.items():
        threads = {k: statistics.median(r[2][k] for r in rs) for k in rs[0][2]}
        print(f"  {name + ' ' if name else ''}{n:6d} a frame  {statistics.median(r[0] for r in rs):>11,.0f} msg/s  broker "
              f"{statistics.median(r[1] for r in rs):.3f}  ("
              + ", ".join(f"{k} {v:.3f}" for k, v in threads.items() if k.islower()
                          and k != "faults")
              + f")  RSS after {threads['VmRSS']:.0f} MiB (peak {threads['VmHWM']:.0f})"
              + f"  faults {threads['faults']:.4f} ("
              + ", ".join(f"{r[2]['faults']:.4f}" for r in rs)
              + f")  rounds: {', '.join(f'{r[1]:.2f}' for r in rs)}")
    if args.baseline is not None:
        for n in sizes:
            new, old = results["this checkout", n], results["baseline", n]
            cpu = statistics.median(r[1] for r in new) / statistics.median(r[1] for r in old)
            faults = (statistics.median(r[2]["faults"] for r in new)
                      / max(statistics.median(r[2]["faults"] for r in old), 1e-9))
            print(f"  ratio this checkout / baseline, {n} a frame: CPU a message {cpu:.2f}x, "
                  f"faults a message {faults:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
