"""Run every benchmark in turn, each in its own process (``python -m bench [NAME ...]``).

Each benchmark prints its own figures and ratios; run one alone with ``python -m bench.NAME``.
Separate processes keep one benchmark's caches, threads and brokers out of the next one's figures.
"""

from __future__ import annotations

import subprocess
import sys

# Lower layers first, so a broken foundation shows before the layers that use it.
BENCHMARKS = ["bloom_fpr", "storage", "tracking", "message_codec", "sql_filter", "proton_floor", "broker",
              "stream_protocol", "super_stream", "spark", "spark_crash", "derived_keys", "amqp_filtered"]


def main(argv: list[str]) -> int:
    names = argv or BENCHMARKS
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"\n=== bench.{name} ===", flush=True)
        if subprocess.call([sys.executable, "-m", f"bench.{name}"]) != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
