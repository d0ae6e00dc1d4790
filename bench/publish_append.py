"""The publisher's per-message Python path, this tree against a git revision, in one process.

``amqp_stream.amqp.publishing.Publisher._append`` (what every received message goes through:
``stored_form``, then into the batch of its stream) timed for a ``/queues/<stream>`` link in
this tree and in ``--against`` (the same file loaded from ``git show REV:...``), alternating
rounds, so that a loaded machine's noise falls on both alike; CPU time of the process, not wall
time (on a shared machine the minimum of the rounds is the steadier figure). Also, this tree only: a link to a
direct exchange with one binding, and to a fanout of 3 streams (routing per message).
No broker, no socket, no disk: the costs the change could add, alone.

    python -m bench.publish_append --against db64bc1 [--messages 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from amqp_stream.amqp import publishing
from amqp_stream.amqp.addresses import Target
from amqp_stream.amqp.credit import PublisherCredit
from amqp_stream.definitions import Binding, Definitions, Exchange
from bench import scratch_dir
from bench.broker import encode

ROOT = Path(__file__).resolve().parent.parent


class _Link:
    _impl = None
    credit = 1000

    def flow(self, n: int) -> None:
        pass


class _Entry:
    def __init__(self, name: str):
        self.name = name
        self.metrics = None


class _Store:
    def load(self) -> None:
        return None

    def save(self, document: dict) -> None:
        pass


def _old_module(rev: str) -> Any:
    source = subprocess.run(["git", "show", f"{rev}:amqp_stream/amqp/publishing.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    path = scratch_dir("bench-publishing-") / "publishing_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("publishing_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _publisher(module: Any, entry: Any, **kwargs: Any) -> Any:
    streams = {name: _Entry(name) for name in ("s0", "s1", "s2", "s3")}
    return module.Publisher(_Link(), entry, PublisherCredit(), 1 << 20, lambda *a: None,
                            lambda p: None, lookup=streams.get, **kwargs)


def _time(publisher: Any, data: bytes, n: int) -> float:
    append = publisher._append
    start = time.process_time()  # CPU time: a loaded machine's waits are not counted
    for i in range(n):
        append(None, data)  # pre-settled: no proton delivery needed
        if i % 1000 == 999:
            publisher.batches = {}
    return (time.process_time() - start) / n * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    old = _old_module(args.against)
    definitions = Definitions(_Store(), lambda name: name in ("s0", "s1", "s2", "s3"))
    definitions.declare_exchange(Exchange("d", "direct"))
    definitions.declare_exchange(Exchange("f", "fanout"))
    definitions.bind(Binding("d", "s1", "k"))
    for s in ("s1", "s2", "s3"):
        definitions.bind(Binding("f", s))
    data = encode()
    cases = {
        f"/queues, {args.against}": _publisher(old, _Entry("s0")),
        "/queues, this tree": _publisher(publishing, _Entry("s0")),
        "/exchanges/d/k (1 stream)": _publisher(publishing, None, target=Target("d", "k", None),
                                                definitions=definitions),
        "/exchanges/f (fanout, 3)": _publisher(publishing, None, target=Target("f", "", None),
                                               definitions=definitions),
    }
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(args.rounds):
        for label, publisher in cases.items():
            times[label].append(_time(publisher, data, args.messages))
    base = times[f"/queues, {args.against}"]
    print(f"{'path (µs/msg over ' + str(args.rounds) + ' rounds)':<32} {'median':>7} {'min':>7} "
          f"{'ratio of medians':>17} {'ratio of mins':>14}")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:<32} {median:>7.3f} {min(values):>7.3f} "
              f"{median / statistics.median(base):>17.3f} {min(values) / min(base):>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
