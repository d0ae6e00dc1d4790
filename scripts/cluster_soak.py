"""A long run of the cluster's repeated-fault test (``tests/cluster/faults.py``): a real
ZooKeeper, three broker processes of this tree, a seeded nemesis killing, restarting and
pausing nodes while named producers of both protocols publish with confirms and a consumer
reads; then the checker. Rounds of ``--seconds`` each (a fresh cluster per round, the fsync
policies in turn) until ``--rounds`` are done or one fails; each round prints its seed and
figures, a failure its seed for replay (``--seed``).

    python scripts/cluster_soak.py --rounds 10 --seconds 300
    python scripts/cluster_soak.py --rounds 1 --seconds 60 --fsync never --seed 1234
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster.faults import run_faults  # noqa: E402
from tests.cluster.nodes import SESSION_TIMEOUT, node  # noqa: E402
from tests.cluster.zookeeper import ZooKeeperServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=300.0, help="faults per round")
    parser.add_argument("--fsync", choices=("always", "never", "both"), default="both")
    parser.add_argument("--seed", type=int, default=None,
                        help="the first round's seed (default: a fresh one)")
    args = parser.parse_args()
    # the clients' own logs of every dropped connection would bury the rounds' lines
    logging.basicConfig(level=logging.CRITICAL)
    os.chdir(ROOT)  # the broker subprocesses run this tree's code
    policies = ["always", "never"] if args.fsync == "both" else [args.fsync]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    zk = ZooKeeperServer().start()
    try:
        for k in range(args.rounds):
            fsync = policies[k % len(policies)]
            with tempfile.TemporaryDirectory(prefix="cluster-soak-") as d:
                tmp = Path(d)
                root = f"/amqp-stream-soak/{os.getpid()}-{k}"
                url = f"zk://{zk.hosts}{root}"
                brokers = {n: node(tmp, url, n, "--fsync", fsync) for n in ("n1", "n2", "n3")}
                t0 = time.monotonic()
                print(f"round {k + 1}/{args.rounds}: fsync {fsync}, seed {seed} "
                      f"(replay: --seed {seed} --fsync {fsync} --seconds {args.seconds:g})",
                      flush=True)
                try:
                    for b in brokers.values():
                        b.start()
                    outcome = run_faults(zk.hosts, root, brokers, "soak", seed, args.seconds,
                                         SESSION_TIMEOUT)
                except AssertionError as exc:
                    print(f"round {k + 1} FAILED (seed {seed}, fsync {fsync}): {exc}", flush=True)
                    return 1
                finally:
                    for b in brokers.values():
                        b.close()
                print(f"  {outcome.line()} ({time.monotonic() - t0:.0f} s)", flush=True)
            seed = random.Random(seed).randrange(1 << 32)
    finally:
        zk.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
