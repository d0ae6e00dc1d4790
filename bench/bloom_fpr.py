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
- measured FPR = share of (chunk filter, value not in the chunk) pairs that match. Each
  chunk's filter is the OR of its n values' masks from ``bloom.schemes.digest_mask`` (the
  code ``build`` and ``Matcher`` use; the first chunks of each cell are checked against
  ``bloom.build``), each chunk is tested against 1000 values it does not hold, and at least
  1000 chunks are tried per cell. A ratio is printed only where the optimum predicts at least
  ``MIN_EXPECTED`` false positives in the pairs tried (else the cell shows "<res", the
  false-positive count, and how many the chosen k predicts).

Run: ``.venv/bin/python -m bench.bloom_fpr`` (``--quick`` for a smaller run, ``--only fpr|speed``).
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
POOL = 4000  # values per pool (chunk values, absent values)
QUERIES = 1000  # absent values tested per chunk


def optimum(m: int, n: int) -> tuple[int, float]:
    """Best integer k and its FPR for n values in m bits (search to well past m/n ln 2)."""
    top = max(2, int(m / n * math.log(2)) + 3)
    return min(((k, theoretical_fpr(m, n, k)) for k in range(1, top + 1)), key=lambda t: t[1])


def _random_values(rng: random.Random, count: int, tag: str) -> list[bytes]:
    return [f"{tag}{rng.getrandbits(64):016x}".encode() for _ in range(count)]


def measure(scheme: Scheme, size: int, n: int, budget: int, rng: random.Random) -> tuple[int, int]:
    """(false positives, pairs tried) for one cell.

    Each chunk holds n values drawn from a pool of ``POOL`` random values and is tested
    against ``QUERIES`` values from a disjoint pool, so many chunks are tried (a chunk's fill
    varies, and with it its FPR: too few chunks would make the estimate noisy). The first
    chunks of every cell are also built with ``bloom.build`` and must come out identical.
    """
    k = choose_k(n, size) if scheme == Scheme.MMH3 else 0
    values = _random_values(rng, POOL, "v")
    vmasks = [digest_mask(digest(v, scheme), size, scheme, k) for v in values]
    qmasks = [digest_mask(digest(v, scheme), size, scheme, k) for v in _random_values(rng, POOL, "q")]
    qmasks = qmasks + qmasks[:QUERIES]
    chunks = max(1, budget // QUERIES)
    indexes = range(POOL)
    fp = 0
    for c in range(chunks):
        picked = rng.sample(indexes, n)
        x = 0
        for i in picked:
            x |= vmasks[i]
        if c < 3:
            cf = bloom.build([values[i] for i in picked], size, scheme)
            if cf is None or cf.param != k or int.from_bytes(cf.bits, "big") != x:
                raise RuntimeError(f"bloom.build disagrees with digest_mask ({scheme.name}, {size} B, n={n})")
        start = rng.randrange(POOL)
        fp += sum(1 for mk in qmasks[start:start + QUERIES] if x & mk == mk)
    return fp, chunks * QUERIES


def fpr_table(budget_max: int, seed: int) -> None:
    rng = random.Random(seed)
    print(f"FPR per reader value per chunk; pairs per cell up to {budget_max:,}; seed {seed}")
    head = (f"{'size':>5} {'n':>4} | {'opt k':>5} {'optimum':>10} | {'osiris':>10} {'x opt':>6} | "
            f"{'mmh3 k':>6} {'mmh3':>10} {'x opt':>6} {'pairs':>11}")
    print(head)
    print("-" * len(head))
    worst = {Scheme.OSIRIS: 0.0, Scheme.MMH3: 0.0}
    for size in SIZES:
        m = 8 * size - 1
        for n in COUNTS:
            kopt, popt = optimum(m, n)
            budget = int(min(budget_max, max(budget_max // 20, 2000 / max(popt, 1e-30))))
            cells = []
            for scheme in (Scheme.OSIRIS, Scheme.MMH3):
                fp, pairs = measure(scheme, size, n, budget, rng)
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
                + (f"  ({mfp} fp; {theoretical_fpr(m, n, choose_k(n, size)) * mpairs:.3g} expected at mmh3's k)"
                   if mrtxt == "  <res" else "")
            )
    print(f"worst resolved ratio to optimum: osiris {worst[Scheme.OSIRIS]:.2f}x, mmh3 {worst[Scheme.MMH3]:.2f}x")


def _timeit(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number * 1e6


def speed(seed: int) -> None:
    """µs per build of a 100-record chunk and per match, both schemes; baseline: scheme 0."""
    rng = random.Random(seed)
    print("\nspeed, µs (x osiris = scheme 1 / scheme 0, same run)")
    print(f"{'size':>5} {'operation':<44} {'osiris':>9} {'mmh3':>9} {'x osiris':>9}")
    repeating = [f"region-{i % 20}" for i in range(100)]
    distinct = [f"customer-{i}" for i in range(100)]
    for size in (16, 255):
        rows: dict[str, dict[Scheme, float]] = {}
        for scheme in (Scheme.OSIRIS, Scheme.MMH3):
            for label, vals in (("build, 100 records, 20 values seen before", repeating),
                                ("build, 100 records, 100 values seen before", distinct)):
                bloom.build(vals, size, scheme)
                rows.setdefault(label, {})[scheme] = _timeit(lambda: bloom.build(vals, size, scheme), 2000)
            fresh = iter([_random_values(rng, 100, "f") for _ in range(200)])
            rows.setdefault("build, 100 records, 100 new values", {})[scheme] = _timeit(
                lambda: bloom.build(next(fresh), size, scheme), 200)
            cf = bloom.build(repeating, size, scheme)
            for label, matcher in (("match, 3 values + unfiltered, no match", bloom.Matcher(["a", "b", "c"], True)),
                                   ("match, 1 value, matches", bloom.Matcher(["region-7"]))):
                matcher.matches(cf.bits, cf.scheme, cf.param)
                rows.setdefault(label, {})[scheme] = _timeit(
                    lambda: matcher.matches(cf.bits, cf.scheme, cf.param), 50_000)
            new_size = iter(range(16, 256))
            rows.setdefault("match, new size: masks for 3 values", {})[scheme] = _timeit(
                lambda: bloom.Matcher(["a", "b", "c"]).matches(bytes(next(new_size)), scheme, 3), 200)
        for label, r in rows.items():
            o, h = r[Scheme.OSIRIS], r[Scheme.MMH3]
            print(f"{size:>5} {label:<44} {o:>9.2f} {h:>9.2f} {h / o:>9.2f}")

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("fpr", "speed"), help="run one part")
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1 min avg), cpus {os.cpu_count()}")
    if args.only != "speed":
        fpr_table(2_000_000 if args.quick else 20_000_000, args.seed)
    if args.only != "fpr":
        speed(args.seed)


if __name__ == "__main__":
    main()
