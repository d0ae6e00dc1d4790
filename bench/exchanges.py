"""Publishing through exchanges against publishing to a stream, in one run.

One broker (``--fsync always``), one raw proton publisher (``bench.broker.publish``: 100-byte
messages, at least once, up to ``--window`` unsettled), alternating rounds of four targets:

- ``/queues/s0``: the one-stream path (no routing);
- ``/exchanges/direct/k``: a direct exchange with one binding to ``s1`` (routing, one stream);
- ``/exchanges/topic/eu.orders``: a topic exchange with 10 bindings, one matching (``s2``);
- ``/exchanges/fanout``: a fanout to 3 streams (each message stored 3 times, accepted when
  the 3 have it).

For each: messages/s, broker CPU per message, and the ratio to ``/queues/s0`` of the same round.

    python -m bench.exchanges [--messages 30000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Sequence

from amqp_stream.client import connect
from amqp_stream.testing import BrokerProcess
from bench.broker import _measure_publish, encode

TARGETS = (("queue", "/queues/s0"), ("direct", "/exchanges/direct/k"),
           ("topic-10", "/exchanges/topic/eu.orders"), ("fanout-3", "/exchanges/fanout"))


def setup(url: str) -> None:
    client = connect(url)
    try:
        for i in range(5):
            client.declare(f"s{i}")
        for name, kind in (("direct", "direct"), ("topic", "topic"), ("fanout", "fanout")):
            client.request("PUT", f"/exchanges/{name}", {"type": kind}, ok=(204,))

        def bind(source: str, stream: str, key: str = "") -> None:
            client.request("POST", "/bindings", {"source": source, "destination_queue": stream,
                                                 "binding_key": key, "arguments": {}}, ok=(204,))
        bind("direct", "s1", "k")
        bind("topic", "s2", "eu.*")
        for i in range(9):
            bind("topic", "s3", f"other{i}.#")
        for i in (2, 3, 4):
            bind("fanout", f"s{i}")
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    body = encode()
    with tempfile.TemporaryDirectory(prefix="bench-exchanges-") as d, \
            BrokerProcess(Path(d) / "data", extra_args=["--fsync", "always"]) as broker:
        setup(broker.url)
        pid = broker.proc.pid
        rows: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in TARGETS}
        for _ in range(args.repeat):
            base = None
            for label, address in TARGETS:
                r = _measure_publish(label, broker.url, pid, address, lambda i: body,
                                     args.messages, args.window)
                if base is None:
                    base = r["rate"]
                rows[label].append((r["rate"], r["cpu_us"], r["rate"] / base))
    print(f"{'target':<10} {'msg/s per round':<28} {'broker CPU µs/msg':<22} ratio to /queues")
    for label, runs in rows.items():
        print(f"{label:<10} {' / '.join(f'{r:.0f}' for r, _, _ in runs):<28} "
              f"{' / '.join(f'{c:.1f}' for _, c, _ in runs):<22} "
              f"{' / '.join(f'{x:.2f}' for _, _, x in runs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
