"""False-positive rate and speed of stage-1 chunk filters (``bloom``), both schemes.

Why: the filter decides how many chunks a filtered reader reads for nothing. This measures,
per reader value per chunk, the false-positive rate (FPR) of scheme 0 (osiris, k = 2) and
scheme 1 (mmh3, k chosen per chunk) over a grid of filter sizes and distinct values per chunk,
against the theoretical optimum of a Bloom filter of that size, and the cost of ``build`` and
``Matcher.matches``.

Definitions:
- m = usable bits = 8 * size - 1 (bit 0 is reserved for "chunk has unfiltered entries").
- theoretical optimum = min over integers k >= 1 of ``(1 - (1 - 1/m)**(k*n))**k``, the
  standard Bloom filter FPR for n distinct values in m bits with k hash positions.
- measured FPR = share of (chunk filter, value not in the chunk) pairs that match. Chunks are
  built with ``bloom.build`` from n fresh random values; the absent values' bits come from
  ``bloom.schemes.digest_mask``, the code ``Matcher`` uses. A ratio is printed only where the
  optimum predicts at least ``MIN_EXPECTED`` false positives in the pairs tried (else the cell
  shows the false-positive count, and "<res": below what the run can resolve).

Run: ``.venv/bin/python -m bench.bloom_fpr`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time

import bloom
from bloom.schemes import Scheme, choose_k, digest, digest_mask, theoretical_fpr

SIZES = (16, 32, 64, 128, 255)
COUNTS = (5, 10, 20, 30, 50, 100, 200)
MIN_EXPECTED = 30


def optimum(m: int, n: int) -> tuple[int, float]:
    """Best integer k and its FPR for n values in m bits (search to well past m/n ln 2)."""
    top = max(2, int(m / n * math.log(2)) + 3)
    return min(((k, theoretical_fpr(m, n, k)) for k in range(1, top + 1)), key=lambda t: t[1])


def _random_values(rng: random.Random, count: int, tag: str) -> list[bytes]:
    return [f"{tag}{rng.getrandbits(64):016x}".encode() for _ in range(count)]


def measure(scheme: Scheme, size: int, n: int, budget: int, queries: int, rng: random.Random):
    """(false positives, pairs tried) for one cell."""
    k = choose_k(n, size) if scheme == Scheme.MMH3 else 0
    qmasks = [digest_mask(digest(v, scheme), size, scheme, k) for v in _random_values(rng, queries, "q")]
    filters = max(1, budget // queries)
    fp = 0
    for _ in range(filters):
        cf = bloom.build(_random_values(rng, n, "v"), size, scheme)
        assert cf is not None and cf.param == k
        x = int.from_bytes(cf.bits, "big")
        fp += sum(1 for mk in qmasks if x & mk == mk)
    return fp, filters * queries


def fpr_table(budget_max: int, queries: int, seed: int) -> None:
    rng = random.Random(seed)
    print(f"FPR per reader value per chunk; pairs per cell up to {budget_max:,}; seed {seed}")
    head = f"{'size':>5} {'n':>4} | {'opt k':>5} {'optimum':>10} | {'osiris':>10} {'x opt':>6} | {'mmh3 k':>6} {'mmh3':>10} {'x opt':>6} {'pairs':>11}"
    print(head)
    print("-" * len(head))
    worst = {Scheme.OSIRIS: 0.0, Scheme.MMH3: 0.0}
    for size in SIZES:
        m = 8 * size - 1
        for n in COUNTS:
            kopt, popt = optimum(m, n)
            budget = int(min(budget_max, max(200_000, 2000 / max(popt, 1e-30))))
            cells = []
            for scheme in (Scheme.OSIRIS, Scheme.MMH3):
                fp, pairs = measure(scheme, size, n, budget, queries, rng)
                rate = fp / pairs
                if popt * pairs >= MIN_EXPECTED:
                    ratio = rate / popt
                    worst[scheme] = max(worst[scheme], ratio)
                    rtxt = f"{ratio:6.2f}"
                else:
                    rtxt = "  <res"
                cells.append((rate, rtxt, fp, pairs))
            (orate, ortxt, _, _), (mrate, mrtxt, mfp, mpairs) = cells
            print(
                f"{size:>5} {n:>4} | {kopt:>5} {popt:>10.3e} | {orate:>10.3e} {ortxt} | "
                f"{choose_k(n, size):>6} {mrate:>10.3e} {mrtxt} {mpairs:>11,}"
                + (f"  ({mfp} fp)" if mrtxt == "  <res" else "")
            )
    print(f"worst resolved ratio to optimum: osiris {worst[Scheme.OSIRIS]:.2f}x, mmh3 {worst[Scheme.MMH3]:.2f}x")


def _timeit(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number * 1e6


def speed(seed: int) -> None:
    """µs per build of a 100-record chunk and per match, both schemes; baseline: osiris."""
    rng = random.Random(seed)
    print("\nspeed (µs; 'x osiris' = ratio to scheme 0 in the same run)")
    print(f"{'size':>5} | {'build osiris':>12} {'build mmh3':>10} {'x osiris':>8} | "
          f"{'build fresh o':>13} {'fresh mmh3':>10} | {'match osiris':>12} {'match mmh3':>10} {'x osiris':>8}")
    for size in (16, 255):
        vals = [f"region-{i % 20}" for i in range(100)]  # 20 distinct values, repeating (warm cache)
        res = {}
        for scheme in (Scheme.OSIRIS, Scheme.MMH3):
            bloom.build(vals, size, scheme)
            res[("build", scheme)] = _timeit(lambda: bloom.build(vals, size, scheme), 2000)
            fresh = [_random_values(rng, 100, "f") for _ in range(200)]
            it = iter(fresh)
            res[("fresh", scheme)] = _timeit(lambda: bloom.build(next(it), size, scheme), 200)
            cf = bloom.build(vals, size, scheme)
            matcher = bloom.Matcher(["region-3x", "region-77", "other"], match_unfiltered=True)
            matcher.matches(cf.bits, cf.scheme, cf.param)
            res[("match", scheme)] = _timeit(lambda: matcher.matches(cf.bits, cf.scheme, cf.param), 50_000)
        o, h = Scheme.OSIRIS, Scheme.MMH3
        print(f"{size:>5} | {res[('build', o)]:>12.1f} {res[('build', h)]:>10.1f} {res[('build', h)] / res[('build', o)]:>8.2f} | "
              f"{res[('fresh', o)]:>13.1f} {res[('fresh', h)]:>10.1f} | "
              f"{res[('match', o)]:>12.2f} {res[('match', h)]:>10.2f} {res[('match', h)] / res[('match', o)]:>8.2f}")
    print("build: 100 records, 20 distinct values seen before; fresh: 100 never-seen values; "
          "match: 3 reader values + match_unfiltered, non-matching chunk")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs per cell")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1 min avg), cpus {os.cpu_count()}")
    fpr_table(2_000_000 if args.quick else 20_000_000, 5_000 if args.quick else 20_000, args.seed)
    speed(args.seed)


if __name__ == "__main__":
    main()
