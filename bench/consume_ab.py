"""AMQP 1.0 consume: this checkout against a baseline checkout, interleaved in one run.

Why: a consumer link stops at ``ConsumerTurn.max_held`` deliveries while its socket is backed up,
and a connection that leaves that many unsettled gets a small socket send buffer (issue 25
item 9). Neither may cost a consumer that reads. Each round reads the whole stream from each
broker in turn (A B A B ...) two ways: pre-settled through ``bench.amqp_load.count`` (proton's
engine, no Python per delivery: the broker is the limit), and unsettled with ``--credit``
credit, settling every ``--settle-every`` deliveries (a client that leaves thousands unsettled:
the one that gets the small send buffer). Messages: 100-byte bodies published over the stream
protocol (``bench.stream_protocol``). Throughput and the broker's CPU per message (``/proc``:
steadier than throughput on a shared machine); the order alternates each round.

    mkdir /tmp/consume-base && git archive <baseline> | tar -x -C /tmp/consume-base
    .venv/bin/python -m bench.consume_ab --baseline /tmp/consume-base [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from proton import Connection, Delivery, Described, Transport, symbol

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess
from bench.amqp_load import count
from bench.stream_protocol import cpu_seconds, publish, publish_frames

HERE = Path(__file__).resolve().parent.parent
OFFSET_SPEC = symbol("rabbitmq:stream-offset-spec")
FIRST = {OFFSET_SPEC: Described(OFFSET_SPEC, "first")}


def settle_in_batches(url: str, address: str, expected: int, credit: int, every: int,
                      timeout: float = 300.0) -> float:
    """Seconds to read ``expected`` unsettled deliveries with ``credit`` credit, accepting and
    settling every ``every`` of them (then granting as many again)."""
    host, port = url.rsplit("/", 1)[-1].split(":")
    start = time.perf_counter()
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    transport = Transport(Transport.CLIENT)
    transport.sasl().allowed_mechs("ANONYMOUS")
    connection = Connection()
    connection.hostname = host
    transport.bind(connection)
    connection.open()
    session = connection.session()
    session.open()
    link = session.receiver("bench-consume-ab")
    link.source.address = address
    link.source.filter.put_dict(FIRST)
    link.open()
    link.flow(credit)
    got = 0
    unsettled: list = []
    deadline = start + timeout
    try:
        while got < expected:
            pending = transport.pending()
            if pending > 0:
                sock.sendall(transport.peek(pending))
                transport.pop(pending)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{address}: {got} of {expected} deliveries in {timeout} s")
            data = sock.recv(max(1, min(1 << 20, transport.capacity())))
            if not data:
                raise RuntimeError(f"{address}: the broker closed the connection")
            transport.push(data)
            while link.current is not None and not link.current.partial:
                d = link.current
                link.recv(d.pending)
                link.advance()
                unsettled.append(d)
                got += 1
                if len(unsettled) == every:
                    for d in unsettled:
                        d.update(Delivery.ACCEPTED)
                        d.settle()
                    unsettled.clear()
                    link.flow(every)
        return time.perf_counter() - start
    finally:
        sock.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout to compare with")
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--credit", type=int, default=10_000)
    parser.add_argument("--settle-every", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ways", default="pre-settled,batch-settled",
                        help="which reads, comma-separated (pre-settled, batch-settled)")
    args = parser.parse_args()
    ways = args.ways.split(",")
    frames = publish_frames(1, 0, args.messages, 1000)
    names = ("baseline", "this checkout")
    rates: dict[tuple[str, str], list[float]] = {(n, w): [] for n in names for w in ways}
    cpu: dict[tuple[str, str], list[float]] = {(n, w): [] for n in names for w in ways}
    with tempfile.TemporaryDirectory(prefix="bench-consume-") as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # ``-m amqp_stream`` then imports from PYTHONPATH, not from here
        brokers = {}
        try:
            for name, code in zip(names, (args.baseline.resolve(), HERE), strict=True):
                b = BrokerProcess(Path(tmp, name.split()[0]), extra_args=["--fsync", "never"],
                                  env={"PYTHONPATH": str(code)}).start()
                brokers[name] = b
                with StreamClient(f"rabbitmq-stream://{b.host}:{b.stream_port}", timeout=60) as c:
                    c.create("ab")
                    c.declare_publisher(1, "ab")
                    publish(c, frames, b.proc.pid)
            for k in range(args.rounds):
                # A B, then B A: neither broker always reads right after the other
                for name in (names if k % 2 == 0 else names[::-1]):
                    b = brokers[name]
                    for way in ways:
                        used = cpu_seconds(b.proc.pid)
                        if way == "pre-settled":
                            r = count(b.url, "/queues/ab", FIRST)
                            assert r.messages == args.messages and not r.timed_out, r
                            seconds = r.seconds
                        else:
                            seconds = settle_in_batches(b.url, "/queues/ab", args.messages,
                                                        args.credit, args.settle_every)
                        cpu[name, way].append((cpu_seconds(b.proc.pid) - used) / args.messages * 1e6)
                        rates[name, way].append(args.messages / seconds)
        finally:
            for b in brokers.values():
                b.stop()
            os.chdir(cwd)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.messages} "
          f"messages of 100 bytes, {args.rounds} rounds alternating (2 shared cores); "
          f"batch-settled: credit {args.credit}, settled every {args.settle_every}")
    for way in ways:
        for name in names:
            rs = rates[name, way]
            print(f"  {way:13s} {name:14s} median {statistics.median(rs):>10,.0f} msg/s "
                  f"{statistics.median(cpu[name, way]):5.2f} broker CPU µs/msg "
                  f"(rounds: {', '.join(f'{r / 1e3:.0f}k' for r in rs)})")
        ratio = statistics.median(rates["this checkout", way]) / statistics.median(rates["baseline", way])
        cpu_ratio = (statistics.median(cpu["this checkout", way])
                     / statistics.median(cpu["baseline", way]))
        print(f"  {way:13s} ratio (this checkout / baseline, medians): throughput {ratio:.2f}x, "
              f"broker CPU per message {cpu_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
