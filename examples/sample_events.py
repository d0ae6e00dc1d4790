"""Write a small, reproducible CSV of events (the examples' input): a real file format that
Spark reads like any other source. ``python examples/sample_events.py [path] [rows]``."""

from __future__ import annotations

import csv
import datetime as dt
import random
import sys
from pathlib import Path

REGIONS = ["eu-west", "eu-north", "us-east", "us-west", "ap-south"]
KINDS = ["view", "click", "purchase", "refund"]


def write_events(path: str | Path, rows: int = 2000, seed: int = 7) -> Path:
    """``event_id, ts, region, kind, user, amount`` rows, ``rows`` of them."""
    rnd = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["event_id", "ts", "region", "kind", "user", "amount"])
        for i in range(rows):
            ts = start + dt.timedelta(seconds=i * 37)
            w.writerow([f"evt-{i:07d}", ts.strftime("%Y-%m-%d %H:%M:%S"), rnd.choice(REGIONS),
                        rnd.choice(KINDS), f"user-{rnd.randrange(300)}", round(rnd.uniform(1, 500), 2)])
    return path


if __name__ == "__main__":
    out = write_events(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "data" / "events.csv",
                       int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
    print(out)
