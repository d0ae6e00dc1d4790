"""Broker throughput, CPU per message and filtered-consumer savings, against an in-memory ceiling.

What it measures, all through real AMQP over loopback with one raw proton client (no
``proton.Message`` decoding on the client, so the client costs the same for every broker):

1. Publishing: 100-byte messages, at least once (the publisher keeps at most ``--window``
   unsettled messages and counts every accept), into the real broker (``--fsync always`` by
   default) and into ``bench.inmemory_broker`` (accepts at once, keeps a list) started in the
   same run: messages/s and the ratio real / in-memory; broker CPU time per message from
   ``/proc/<pid>/stat`` (utime + stime) before and after.
2. Consuming the same messages from the start: messages/s, ratio, broker CPU per message.
3. Filtering, on a second stream of ``--blocks`` x ``--block-size`` messages where block ``b``
   has filter value ``v<b>`` and message ``i`` has application property ``k = i % 100``: an
   unfiltered consumer, a stage-1 consumer (``rabbitmq:stream-filter`` = one block's value:
   about 1 % of the chunks), an SQL consumer (``k = 7``: 1 % of the messages) and a sparse SQL
   consumer (``k = 7`` in one block, an extension's message-annotation reference: 0.01 %, so
   turns end on 200 dropped records in a row, RabbitMQ's rule). For each:
   bytes the client received, ``amqp_stream_read_bytes_total`` for the stream (bytes the broker
   read from disk), messages and time; ratios against the unfiltered consumer.

Consumers grant credit in drain mode, ``--batch`` at a time, and stop when a drain comes back
short (the end of the stream), so they need not know how many messages will match.

    python -m bench.broker                  # full run (~1-2 minutes on 2 cores)
    python -m bench.broker --quick          # a smaller smoke run
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from proton import Delivery, Described, Message, symbol
from proton.reactor import Container, Filter
from proton import Handler

from amqp_stream.client import connect
from amqp_stream.testing import BrokerProcess, free_port, wait_for_port

__all__ = ["main", "publish", "consume", "PublishResult", "ConsumeResult"]

BODY = bytes(range(100))
CLK_TCK = os.sysconf("SC_CLK_TCK")
OFFSET_SPEC = symbol("rabbitmq:stream-offset-spec")
STREAM_FILTER = symbol("rabbitmq:stream-filter")
SQL_FILTER = symbol("amqp:sql-filter")


# --------------------------------------------------------------------------- client side

@dataclass
class PublishResult:
    sent: int
    accepted: int
    other: int
    seconds: float


@dataclass
class ConsumeResult:
    messages: int
    bytes: int
    seconds: float
    timed_out: bool


class _Publisher(Handler):
    def __init__(self, url: str, address: str, encoded: Callable[[int], bytes], count: int,
                 window: int, timeout: float):
        super().__init__()
        self.url, self.address, self.encoded, self.count = url, address, encoded, count
        self.window, self.timeout = window, timeout
        self.sent = self.accepted = self.other = 0
        self.start = self.end = 0.0
        self.sender = None

    def on_reactor_init(self, event) -> None:
        self.container = event.container
        conn = self.container.connect(self.url, handler=self, reconnect=False)
        self.sender = self.container.create_sender(conn, self.address, handler=self)
        self.timer = self.container.schedule(self.timeout, self)
        self.start = time.perf_counter()

    def on_timer_task(self, event) -> None:
        self.end = time.perf_counter()
        print(f"publisher timed out: sent {self.sent}, accepted {self.accepted}, other {self.other}, "
              f"link credit {self.sender.credit}, unsettled {self.sender.unsettled}", file=sys.stderr)
        self.sender.connection.close()

    def on_link_flow(self, event) -> None:
        self._send(event.link)

    def _send(self, link) -> None:
        while (self.sent < self.count and link.credit > 0
               and self.sent - self.accepted - self.other < self.window):
            link.delivery(str(self.sent))
            link.send(self.encoded(self.sent))
            link.advance()
            self.sent += 1

    def on_delivery(self, event) -> None:
        delivery = event.delivery
        if delivery.remote_state == Delivery.ACCEPTED:
            self.accepted += 1
        else:
            self.other += 1
        delivery.settle()
        if self.accepted + self.other == self.count:
            self.end = time.perf_counter()
            self.timer.cancel()
            delivery.link.connection.close()
        else:
            self._send(delivery.link)

    def on_transport_error(self, event) -> None:
        print(f"publisher: transport error {event.transport.condition}", file=sys.stderr)


class _Consumer(Handler):
    def __init__(self, url: str, address: str, filters: dict | None, batch: int, timeout: float):
        super().__init__()
        self.url, self.address, self.filters = url, address, filters
        self.batch, self.timeout = batch, timeout
        self.messages = self.bytes = self.round = 0
        self.start = self.end = 0.0
        self.timed_out = False

    def on_reactor_init(self, event) -> None:
        self.container = event.container
        conn = self.container.connect(self.url, handler=self, reconnect=False)
        options = [Filter(self.filters)] if self.filters else None
        self.receiver = self.container.create_receiver(conn, self.address, handler=self, options=options)
        self.timer = self.container.schedule(self.timeout, self)
        self.start = time.perf_counter()
        self.receiver.drain(self.batch)

    def on_timer_task(self, event) -> None:
        self.timed_out = True
        self._finish()

    def _finish(self) -> None:
        if not self.end:
            self.end = time.perf_counter()
            self.timer.cancel()
            self.receiver.connection.close()

    def on_delivery(self, event) -> None:
        delivery = event.delivery
        if delivery.partial:
            return
        link = delivery.link
        self.bytes += len(link.recv(delivery.pending))
        link.advance()
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        self.messages += 1
        self.round += 1
        self._check(link)

    def on_link_flow(self, event) -> None:
        self._check(event.link)

    def _check(self, link) -> None:
        if self.end or link.draining() or link.credit > 0:
            return
        if self.round < self.batch:  # the drain came back short: the end of the stream
            self._finish()
        else:
            self.round = 0
            link.drain(self.batch)


def publish(url: str, address: str, encoded: Callable[[int], bytes], count: int, window: int = 1000,
            timeout: float = 180.0) -> PublishResult:
    """Publish ``count`` messages (``encoded(i)`` gives message i's bytes), at least once."""
    handler = _Publisher(url, address, encoded, count, window, timeout)
    Container(handler).run()
    return PublishResult(handler.sent, handler.accepted, handler.other, handler.end - handler.start)


def consume(url: str, address: str, filters: dict | None = None, batch: int = 2000,
            timeout: float = 180.0) -> ConsumeResult:
    """Read ``address`` to its end with drain-mode credit; count messages and bytes received."""
    handler = _Consumer(url, address, filters, batch, timeout)
    Container(handler).run()
    return ConsumeResult(handler.messages, handler.bytes, handler.end - handler.start, handler.timed_out)


def encode(body: bytes = BODY, filter_value: str | None = None, properties: dict | None = None) -> bytes:
    """A message's AMQP encoding (done once per variant, outside the timed part)."""
    message = Message(body=body, properties=properties)
    if filter_value is not None:
        message.annotations = {symbol("x-stream-filter-value"): filter_value}
    return message.encode()


def stream_filters(offset: str = "first", values: Sequence[str] = (), sql: str | None = None) -> dict:
    """A source filter map as the RabbitMQ clients send it (symbol descriptors)."""
    filters: dict = {OFFSET_SPEC: Described(OFFSET_SPEC, offset)}
    if values:
        filters[STREAM_FILTER] = Described(STREAM_FILTER, list(values))
    if sql is not None:
        filters[symbol("sql-filter")] = Described(SQL_FILTER, sql)
    return filters


# --------------------------------------------------------------------------- broker side

def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def metric(metrics_url: str, name: str, stream: str) -> float:
    """One counter's value for one stream from the Prometheus text endpoint (0 if absent)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    pattern = re.compile(rf'^{re.escape(name)}\{{[^}}]*stream="{re.escape(stream)}"[^}}]*\}}\s+(\S+)', re.M)
    match = pattern.search(text)
    return float(match.group(1)) if match else 0.0


def declare(url: str, name: str) -> None:
    """Declare a stream through the management node."""
    client = connect(url)
    try:
        client.declare(name)
    finally:
        client.close()


class InMemoryProcess:
    """``python -m bench.inmemory_broker`` on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"amqp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.inmemory_broker", "--port", str(self.port)])
        wait_for_port("127.0.0.1", self.port, 30, self.proc)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- the run

def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def _measure_publish(label: str, url: str, pid: int, address: str, encoded, count: int, window: int,
                     dump_state: bool = False) -> dict:
    print(f"  publishing to {label} {address}", flush=True)
    cpu0 = cpu_seconds(pid)
    result = publish(url, address, encoded, count, window)
    cpu = cpu_seconds(pid) - cpu0
    if result.accepted != count:
        print(f"  {label}: only {result.accepted}/{count} accepted ({result.other} other outcomes)", file=sys.stderr)
        if dump_state:  # the broker logs every link's flow-control state on SIGUSR1
            os.kill(pid, signal.SIGUSR1)
    return {"label": label, "msgs": result.accepted, "seconds": result.seconds,
            "rate": _rate(result.accepted, result.seconds), "cpu_us": 1e6 * cpu / max(result.accepted, 1)}


def _measure_consume(label: str, url: str, pid: int, address: str, filters, batch: int,
                     metrics_url: str | None = None, stream: str | None = None,
                     client: Callable[..., ConsumeResult] | None = None) -> dict:
    """One consume, with the broker's CPU and disk reads; ``client(url, address, filters)``
    reads (default: ``consume`` with ``batch`` credit at a time)."""
    print(f"  consuming from {label} {address}", flush=True)
    read0 = metric(metrics_url, "amqp_stream_read_bytes_total", stream) if metrics_url else 0.0
    cpu0 = cpu_seconds(pid)
    result = client(url, address, filters) if client else consume(url, address, filters, batch)
    cpu = cpu_seconds(pid) - cpu0
    read = (metric(metrics_url, "amqp_stream_read_bytes_total", stream) - read0) if metrics_url else float("nan")
    if result.timed_out:
        print(f"  {label}: timed out after {result.messages} messages", file=sys.stderr)
    return {"label": label, "msgs": result.messages, "bytes": result.bytes, "seconds": result.seconds,
            "rate": _rate(result.messages, result.seconds), "cpu_us": 1e6 * cpu / max(result.messages, 1),
            "read_bytes": read}


def run(args: argparse.Namespace) -> dict:
    results: dict = {}
    data_root = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    real = BrokerProcess(data_root / "data", extra_args=["--fsync", args.fsync, *args.broker_arg],
                         log_path=data_root / "broker.log")
    real.start()
    memory = InMemoryProcess()
    try:
        plain = encode()
        print(f"publish {args.messages} x 100-byte messages, window {args.window}, fsync {args.fsync}, "
              f"best of {args.repeat} alternating runs")
        runs: dict[str, list[tuple[dict, dict]]] = {"in-memory": [], "amqp-stream": []}
        for i in range(args.repeat):
            address = f"/queues/bench-plain-{i}"
            declare(real.url, f"bench-plain-{i}")
            order = [("in-memory", memory.url, memory.proc.pid, None),
                     ("amqp-stream", real.url, real.proc.pid, stream_filters("first"))]
            for label, url, pid, filters in (order if i % 2 == 0 else order[::-1]):
                pub = _measure_publish(label, url, pid, address, lambda i: plain, args.messages, args.window,
                                       dump_state=label == "amqp-stream")
                con = _measure_consume(label, url, pid, address, filters, args.batch)
                runs[label].append((pub, con))
        results["runs"] = runs
        results["publish"] = [max((r[0] for r in runs[k]), key=lambda row: row["rate"]) for k in runs]
        results["consume"] = [max((r[1] for r in runs[k]), key=lambda row: row["rate"]) for k in runs]

        declare(real.url, "bench-filtered")
        variants: dict[tuple[int, int], bytes] = {}
        block_size = args.block_size

        def filtered(i: int) -> bytes:
            key = (i // block_size, i % 100)
            data = variants.get(key)
            if data is None:
                data = variants[key] = encode(filter_value=f"v{key[0]}", properties={"k": key[1]})
            return data

        total = args.blocks * block_size
        for i in range(total):  # encode outside the timed part
            filtered(i)
        print(f"filter dataset: {total} messages in {args.blocks} blocks of {block_size}")
        results["filter_publish"] = _measure_publish("amqp-stream (filter values)", real.url, real.proc.pid,
                                                     "/queues/bench-filtered", filtered, total, args.window,
                                                     dump_state=True)
        wanted = f"v{args.blocks // 2}"
        results["filters"] = [
            _measure_consume("unfiltered", real.url, real.proc.pid, "/queues/bench-filtered",
                             stream_filters("first"), args.batch, real.metrics_url, "bench-filtered"),
            _measure_consume(f"stage 1 ({wanted})", real.url, real.proc.pid, "/queues/bench-filtered",
                             stream_filters("first", [wanted]), args.batch, real.metrics_url, "bench-filtered"),
            _measure_consume("SQL (k = 7)", real.url, real.proc.pid, "/queues/bench-filtered",
                             stream_filters("first", sql="k = 7"), args.batch, real.metrics_url, "bench-filtered"),
            # sparse: 200+ dropped records in a row end a turn (RabbitMQ's rule), many times over
            _measure_consume(f"SQL, 1 block (k = 7, {wanted})", real.url, real.proc.pid,
                             "/queues/bench-filtered",
                             stream_filters("first", sql=f"k = 7 AND m.[x-stream-filter-value] = '{wanted}'"),
                             args.batch, real.metrics_url, "bench-filtered"),
        ]
    finally:
        memory.close()
        real.stop()
        shutil.rmtree(data_root / "data", ignore_errors=True)
        print(f"broker log: {real.log_path}")
    return results


def report(results: dict) -> None:
    print()
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for label, rows in results["runs"].items():
        print(f"{label} runs (publish msg/s, consume msg/s): "
              + ", ".join(f"{p['rate']:.0f}/{c['rate']:.0f}" for p, c in rows))
    for phase in ("publish", "consume"):
        base, ours = results[phase]
        print(f"{phase}: {'':14}{'msgs':>9}{'s':>8}{'msg/s':>10}{'broker CPU µs/msg':>19}")
        for row in (base, ours):
            print(f"  {row['label']:<18}{row['msgs']:>9}{row['seconds']:>8.2f}{row['rate']:>10.0f}{row['cpu_us']:>19.1f}")
        print(f"  ratio amqp-stream / in-memory: {ours['rate'] / base['rate']:.2f}x throughput, "
              f"{ours['cpu_us'] / base['cpu_us']:.2f}x CPU per message")
    fp = results["filter_publish"]
    print(f"publish with filter values: {fp['msgs']} msgs, {fp['rate']:.0f} msg/s, {fp['cpu_us']:.1f} µs CPU/msg")
    rows = results["filters"]
    base = rows[0]
    print(f"filtered consumers: {'':12}{'msgs':>9}{'bytes sent':>12}{'read from disk':>16}{'s':>8}"
          f"{'sent/unf.':>11}{'speed-up':>10}")
    for row in rows:
        print(f"  {row['label']:<30}{row['msgs']:>9}{row['bytes']:>12}{row['read_bytes']:>16.0f}{row['seconds']:>8.2f}"
              f"{row['bytes'] / max(base['bytes'], 1):>10.2%}{base['seconds'] / row['seconds']:>9.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="messages to publish and consume")
    parser.add_argument("--window", type=int, default=1000, help="unsettled messages a publisher may have")
    parser.add_argument("--batch", type=int, default=2000, help="credit per drain round for consumers")
    parser.add_argument("--blocks", type=int, default=100, help="filter values in the filter dataset")
    parser.add_argument("--block-size", type=int, default=1000, help="messages per filter value")
    parser.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs of the publish/consume phases")
    parser.add_argument("--quick", action="store_true", help="10k messages, 50 blocks of 400")
    parser.add_argument("--broker-arg", action="append", default=[], metavar="ARG",
                        help="an extra argument for the broker (repeat), e.g. --broker-arg=--event-loop=asyncio")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.blocks, args.block_size = 10_000, 50, 400
    report(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
