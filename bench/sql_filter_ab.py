"""The filters' hot path, this tree against an older commit, interleaved in one run.

Why: the machine is shared and noisy, so a change to the filters' path is judged by running
the old and the new code in turns (A B A B ...) in the same minutes, each round in a fresh
interpreter, and comparing medians. What is timed is what the broker calls per stored record:
``bytes_matcher()`` of compiled SQL filters, JMS selectors and a property filter over the
encoded messages of ``bench.sql_filter`` (``make_sections`` / ``encode``), and
``evaluate_view`` over views of those bytes.

Run: ``.venv/bin/python -m bench.sql_filter_ab --before <commit> [--rounds 5]``
(``git archive`` of that commit goes to a temporary directory; this tree is the "after").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: run in each tree (its own sqlfilter, wire and bench): prints {case: rate}
_ROUND = r'''
import json, random, sys, time
try:  # after: the broker installs the wire's reader; before: there was none to install
    from amqp_stream.filtering import install
    install()
except ImportError:
    pass
from proton import symbol
from amqp_stream.wire import MessageView
from bench.sql_filter import CASES, SELECTOR_CASES, encode, make_sections
from sqlfilter import compile_property_filter, compile_selector, compile_sql

seconds = float(sys.argv[1])
rng = random.Random(7)
encoded = [encode(make_sections(rng)) for _ in range(1000)]

def rate(fn, items):
    done, start = 0, time.perf_counter()
    while True:
        for x in items:
            fn(x)
        done += len(items)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed

out = {}
for label, text, _ in CASES:
    out["bytes_matcher " + label] = rate(compile_sql(text).bytes_matcher(), encoded)
    ev, view = compile_sql(text).evaluate_view, MessageView.from_bytes
    out["from_bytes + evaluate_view " + label] = rate(lambda d: ev(view(d)), encoded)
for _, selector in SELECTOR_CASES:
    out["bytes_matcher selector: " + selector] = rate(compile_selector(selector).bytes_matcher(),
                                                      encoded)
pf = compile_property_filter(properties={symbol("subject"): "order.created"},
                             application_properties={"region": "EMEA"})
out["bytes_matcher property filter: subject + region"] = rate(pf.bytes_matcher(), encoded)
print(json.dumps(out))
'''


def run_round(tree: Path, seconds: float) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", _ROUND, str(seconds)], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each (interleaved)")
    parser.add_argument("--seconds", type=float, default=0.5, help="per case per round")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp)
        archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        got: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        print(f"load: {os.getloadavg()[0]:.2f} (1-min average, 2 cores shared)")
        for i in range(args.rounds):
            for name, tree in (("before", before), ("after", ROOT)) if i % 2 == 0 else (
                    ("after", ROOT), ("before", before)):
                for case, value in run_round(tree, args.seconds).items():
                    got[name].setdefault(case, []).append(value)
        # the median of the rounds, and the best: on a loaded machine the best round is the
        # one least disturbed by other processes (CPU-bound work only ever gets slower)
        print(f"{args.rounds} interleaved rounds each; before = {args.before}, after = this tree")
        print(f"{'case':70s} {'median before':>13s} {'after':>9s} {'ratio':>5s}"
              f" {'best before':>11s} {'after':>9s} {'ratio':>5s}")
        medians, bests = [], []
        for case, values in got["after"].items():
            b, a = statistics.median(got["before"][case]), statistics.median(values)
            bb, ba = max(got["before"][case]), max(values)
            medians.append(a / b)
            bests.append(ba / bb)
            print(f"{case[:70]:70s} {b:13,.0f} {a:9,.0f} {a / b:5.2f} {bb:11,.0f} {ba:9,.0f}"
                  f" {ba / bb:5.2f}")
        print(f"geometric mean of the ratios: median {statistics.geometric_mean(medians):.3f}, "
              f"best {statistics.geometric_mean(bests):.3f}")
        print(f"load: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
