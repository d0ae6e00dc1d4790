"""What the management HTTP API costs the broker's publishing and consuming (issue 29).

Three brokers run side by side, all ``--fsync never``: ``off`` (``--management-port 0``), ``on``
(the API listening, nobody asking) and ``polled`` (the API listening while a monitor asks
``/api/queues``, ``/api/connections`` and ``/api/stream/consumers`` ``--poll-hz`` times a
second each during the load: far more than the web UI's 5 s refresh). Each round publishes
``--messages`` to a fresh stream of each broker in turn with confirms, then consumes it from the
start (``bench.stream_protocol``'s load generator: pre-encoded frames, records counted from
chunk headers), the brokers' order rotated each round, so the machine's noise falls on all
three alike. Printed: the median rate and broker CPU per message of each, and the ratios
against ``off``.

    python -m bench.http_cost                       # 5 rounds of 300,000 messages
    python -m bench.http_cost --rounds 3 --messages 100000
"""

from __future__ import annotations

import argparse
import base64
import statistics
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Sequence

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.stream_protocol import Result, consume, cpu_seconds, publish, publish_frames

__all__ = ["main"]

VARIANTS = ("off", "on", "polled")
PATHS = ("/api/queues", "/api/connections", "/api/stream/consumers")
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


class Poller(threading.Thread):
    """Asks the API ``hz`` times a second for each of ``PATHS`` until stopped."""

    def __init__(self, broker: BrokerProcess, hz: float):
        super().__init__(daemon=True)
        self.broker, self.period = broker, 1.0 / hz
        self.stopped = threading.Event()
        self.requests = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            for path in PATHS:
                request = urllib.request.Request(self.broker.management_url + path,
                                                 headers={"Authorization": AUTH})
                with urllib.request.urlopen(request, timeout=30) as response:
                    response.read()  # urllib raises for anything but 2xx
                self.requests += 1
            self.stopped.wait(self.period)


def one_round(broker: BrokerProcess, name: str, args: argparse.Namespace,
              poll: bool) -> tuple[Result, Result, int]:
    assert broker.proc is not None
    pid = broker.proc.pid
    poller = Poller(broker, args.poll_hz) if poll else None
    if poller is not None:
        poller.start()
    try:
        with StreamClient(broker.stream_url, timeout=60) as c:
            c.create(name)
            c.declare_publisher(1, name)
            pub = publish(c, publish_frames(1, 0, args.messages, args.frame), pid)
        c = StreamClient(broker.stream_url, timeout=60)
        con = consume(c, name, args.messages, pid)
        c.sock.close()
    finally:
        if poller is not None:
            poller.stopped.set()
            poller.join()
    return pub, con, poller.requests if poller is not None else 0


def request_cpu(broker: BrokerProcess, n: int) -> float:
    """Broker CPU µs per API request: ``n`` requests over ``PATHS`` in turn, one at a time, on
    the broker with the API on and no load (its streams are the rounds')."""
    assert broker.proc is not None
    cpu0 = cpu_seconds(broker.proc.pid)
    for i in range(n):
        request = urllib.request.Request(broker.management_url + PATHS[i % len(PATHS)],
                                         headers={"Authorization": AUTH})
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
    return (cpu_seconds(broker.proc.pid) - cpu0) / n * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--frame", type=int, default=100, help="messages per publish frame")
    parser.add_argument("--poll-hz", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=3000,
                        help="API requests timed for the broker's CPU per request")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, list[Result]]] = {v: {"publish": [], "consume": []} for v in VARIANTS}
    asked = 0
    with tempfile.TemporaryDirectory(prefix="bench-http-") as d:
        brokers = {}
        for v in VARIANTS:
            extra = ["--fsync", "never"] + (["--management-port", "0"] if v == "off" else [])
            brokers[v] = BrokerProcess(Path(d) / v, extra_args=extra).start()
        try:
            for r in range(args.rounds):
                order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
                for v in order:
                    pub, con, n = one_round(brokers[v], f"bench-{r}", args, v == "polled")
                    results[v]["publish"].append(pub)
                    results[v]["consume"].append(con)
                    asked += n
                print(f"round {r + 1}/{args.rounds} done (order {', '.join(order)})", flush=True)
            per_request = request_cpu(brokers["on"], args.requests)
        finally:
            for b in brokers.values():
                b.close()
    print(f"\n{args.rounds} rounds x {args.messages:,} messages of 100 bytes per broker; "
          f"the polled broker answered {asked:,} API requests during its load")
    print(f"broker CPU per API request ({', '.join(PATHS)} in turn, the rounds' streams "
          f"listed): {per_request:.0f} µs; at --poll-hz {args.poll_hz:g} "
          f"({args.poll_hz * len(PATHS):g} requests/s) that is "
          f"{per_request * args.poll_hz * len(PATHS) / 1e4:.2f} % of one core")
    print("ratios: median over the rounds of each round's value against off's in the same round;"
          " spread: the lowest and highest of those")
    print(f"  {'':18} {'msg/s (median)':>15} {'CPU µs/msg':>11} {'rate/off':>9} {'spread':>13} "
          f"{'CPU/off':>8} {'spread':>13}")
    for phase in ("publish", "consume"):
        base = results["off"][phase]
        for v in VARIANTS:
            runs = results[v][phase]
            rates = [x.rate / b.rate for x, b in zip(runs, base, strict=True)]
            cpus = [x.cpu_us / b.cpu_us for x, b in zip(runs, base, strict=True) if b.cpu_us] or [0.0]
            print(f"  {phase + ' ' + v:18} {statistics.median(x.rate for x in runs):>15,.0f} "
                  f"{statistics.median(x.cpu_us for x in runs):>11.3f} "
                  f"{statistics.median(rates):>9.3f} {min(rates):>6.2f}..{max(rates):<5.2f} "
                  f"{statistics.median(cpus):>8.3f} {min(cpus):>6.2f}..{max(cpus):<5.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
