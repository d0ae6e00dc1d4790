"""Stage 2's scan of a stored stream in-process, without sockets: a baseline checkout against
this one, in turns, per scanned record.

Why: ``bench.stage2_ab`` measures the broker whole (the scan and the credit round trips) and its
figures move with the machine's load and with the chunk sizes the writer made; this one times
only what the subscription does per stored chunk (read, CRC, columns, frames:
``Subscription._add_runs``; runs of consecutive chunks at once, ``_add_span``, where the checkout
has them, as its prefetch does) over one stream on disk with chunks of a given size, CPU time, best
of five passes. The stream is ``bench.stage2_ab``'s (message ``i``: ``k = i % 100``,
``zone = 'z<k>'``, ``region = 'r00'``).

    python -m bench.stage2_scan --baseline /tmp/stage2-base [--chunk 8192] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CASES = ("k = 7", "zone = 'z07'")


def scan(directory: str, n: int, chunk: int) -> None:
    """In a child process whose path starts with the checkout: build the stream if it is not
    there, then print each case's best CPU per scanned record."""
    from amqp_stream import fast_match
    from amqp_stream.columns import column_matcher
    from amqp_stream.stream_listener.consuming import Subscription
    from bench.broker import encode
    from sqlfilter import compile_sql
    from storage import SCAN_PAUSED, OffsetSpec, Stream, StreamConfig

    s = Stream.open(directory, StreamConfig(min_chunk_entries=chunk, max_chunk_entries=chunk))
    with s.reader(OffsetSpec.first()) as r:
        empty = r.read_location() is None
    if empty:
        variants = [encode(properties={"k": k, "zone": f"z{k:02d}", "region": "r00"})
                    for k in range(100)]
        for at in range(0, n, chunk):
            s.append_batch([variants[i % 100] for i in range(at, min(n, at + chunk))])
            s.flush()
    proto = types.SimpleNamespace(deliver_version=2, frame_max=0)
    conn = types.SimpleNamespace(proto=proto, peer="bench", adapter=types.SimpleNamespace(
        config=types.SimpleNamespace(stream_join_bytes=0)))
    entry = types.SimpleNamespace(metrics=None, stream=s, name="bench")
    for case in CASES:
        f = compile_sql(case)
        best = float("inf")
        for _ in range(5):
            with s.reader(OffsetSpec.first(), columns=column_matcher(f)) as r:
                sub = Subscription(conn, 1, entry, r, 0, 0, fast_match.bytes_matcher(f),
                                   lambda *a: None)
                spans = hasattr(r, "read_span")  # (a checkout before them: chunk by chunk)
                t0 = time.process_time()
                while True:
                    span = r.read_span(8192) if spans else None
                    if span is not None:
                        sub._add_span(span)
                        continue
                    loc = r.read_location(1000)
                    if loc is None:
                        break
                    if loc is not SCAN_PAUSED:
                        sub._add_runs(loc)
                best = min(best, time.process_time() - t0)
        print(f"{case}\t{best / n * 1e9:.1f}")
    s.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stage2_scan",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=8192, help="records per stored chunk")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, args.child[0])
        scan(args.child[1], args.messages, args.chunk)
        return 0
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.messages} messages, {args.chunk} a chunk")
    with tempfile.TemporaryDirectory(prefix="bench-stage2-scan-") as tmp:
        for _ in range(args.rounds):
            for name, code in (("baseline", args.baseline.resolve()), ("this checkout", HERE)):
                out = subprocess.run(
                    [sys.executable, "-m", "bench.stage2_scan", "--baseline", str(code),
                     "--messages", str(args.messages), "--chunk", str(args.chunk),
                     "--child", str(code), str(Path(tmp, "stream"))],
                    cwd=HERE, check=True, capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": str(code)}).stdout
                figures = dict(line.split("\t") for line in out.splitlines() if "\t" in line)
                print(f"  {name:14} " + "   ".join(f"{case}: {figures[case]} ns a record"
                                                    for case in CASES), flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
