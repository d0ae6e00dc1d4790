"""AMQP PLAIN logins per second: this checkout against a baseline checkout (``--baseline DIR``).

Why: since the user store, Cyrus checks an AMQP password by asking the broker's saslauthd
responder over a Unix socket (a thread of the broker; ``amqp_stream.saslauthd``), where it read
a sasldb before. A connection storm pays that once per connection; this measures what it costs.
Both brokers get the same users file; rounds alternate A and B; each login is a proton
``BlockingConnection`` opened with PLAIN and closed.

    mkdir /tmp/login-base && git archive <revision before the store> | tar -x -C /tmp/login-base
    .venv/bin/python -m bench.login --baseline /tmp/login-base
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess

HERE = Path(__file__).resolve().parent.parent


def _broker(code: Path, users: Path, data: Path) -> BrokerProcess:
    env = {"PYTHONPATH": str(code)}
    return BrokerProcess(data, extra_args=["--users", str(users)], env=env)


def _logins(broker: BrokerProcess, count: int) -> float:
    """Logins per second over ``count`` sequential open/close pairs."""
    start = time.perf_counter()
    for _ in range(count):
        BlockingConnection(broker.url, timeout=10, user="alice", password="wonderland",
                           allowed_mechs="PLAIN", allow_insecure_mechs=True).close()
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-login-") as tmp:
        users = Path(tmp, "users")
        users.write_text("alice:wonderland\n")
        users.chmod(0o600)
        cwd = os.getcwd()
        os.chdir(tmp)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from here
        try:
            a = _broker(args.baseline.resolve(), users, Path(tmp, "a"))
            b = _broker(HERE, users, Path(tmp, "b"))
            a.start()
            b.start()
            try:
                rates: dict[str, list[float]] = {"baseline": [], "this checkout": []}
                for _ in range(args.rounds):
                    rates["baseline"].append(_logins(a, args.logins))
                    rates["this checkout"].append(_logins(b, args.logins))
            finally:
                a.close()
                b.close()
        finally:
            os.chdir(cwd)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.logins} AMQP PLAIN logins a round, {args.rounds} rounds alternating")
    for name, values in rates.items():
        print(f"  {name:15s} median {statistics.median(values):8.1f} logins/s  "
              f"(rounds: {', '.join(f'{v:.1f}' for v in values)})")
    ratio = statistics.median(rates["this checkout"]) / statistics.median(rates["baseline"])
    print(f"  ratio (this checkout / baseline, medians): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
