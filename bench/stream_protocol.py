"""The stream protocol's throughput and CPU per message, against RabbitMQ and the AMQP 1.0 path.

A load generator that is not the limit: publishing sends frames pre-encoded before the clock
starts (``--frame`` messages each, 100-byte bodies as AMQP data sections) and counts confirms
from each PublishConfirm's count field; consuming grants credit per chunk and counts records
from each delivered chunk's header, skipping the chunk's bytes without looking at a message.
Broker CPU = utime + stime of the broker process from ``/proc`` around each phase.

Phases, each on each broker in the same run:
1. publish ``--messages`` with confirms (this broker with ``--fsync never``, like RabbitMQ
   which does not fsync either; and with ``--fsync always``);
2. consume the whole stream from the start (``--passes`` times: the median rate; one pass
   lasts ~0.05 s);
3. stage 1 (this broker only: RabbitMQ 3.10 has no stream filtering): a stream whose values
   come in bursts (block ``b`` of ``--block`` messages has value ``v<b % 100>``), consumed with
   ``filter.0 = v7`` (1 value in 100): bytes read from disk (the broker's
   ``amqp_stream_read_bytes_total``) and bytes sent, as shares of the unfiltered consumer's;
4. stage 2 over the stream protocol (this broker only, an extension): the same stream with
   SQL filters that keep 1 % of the messages (a number and a string in round robin, a string
   in bursts; and the string in bursts as a broker-derived key), each one's time against the
   unfiltered consume by the same client (the load generator, and rstream);
and the AMQP 1.0 path of this broker for the same publish and consume (``bench.broker``'s
proton client: a Python client, which is its limit; the figure to compare is broker CPU per
message).

RabbitMQ: Debian's ``rabbitmq-server`` (3.10) started by ``bench.peer`` on private ports when
installed; otherwise the bench says so and carries on.

    python -m bench.stream_protocol                 # 1,000,000 messages
    python -m bench.stream_protocol --quick         # 100,000
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Sequence

from amqp_stream.testing import BrokerProcess
from bench import scratch_dir
from bench.peer import RabbitMQNode
from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.streamproto import OffsetSpec

__all__ = ["main", "publish", "consume"]

BODY = bytes(range(100))
MESSAGE = b"\x00\x53\x75\xa0" + bytes([len(BODY)]) + BODY  # an AMQP data section
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat``'s fields after the command's name (field 3 first: index = field - 3)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def publish_frames(publisher: int, first_id: int, count: int, per_frame: int,
                   values: Sequence[str] | None = None,
                   messages: Sequence[bytes] = (MESSAGE,)) -> list[tuple[bytes, int]]:
    """Publish frames for ``count`` messages, message ``i`` being ``messages[i % len]`` (v2
    with a filter value each when ``values``)."""
    frames = []
    for start in range(first_id, first_id + count, per_frame):
        ids = range(start, min(start + per_frame, first_id + count))
        frames.append((publish_frame(publisher, [
            (i, values[i - first_id] if values is not None else None, messages[i % len(messages)])
            for i in ids]), len(ids)))
    return frames


@dataclass
class Result:
    messages: int
    bytes: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu / self.messages * 1e6 if self.messages else 0.0


def publish(client: StreamClient, frames: list[tuple[bytes, int]], pid: int,
            window: int = 200_000) -> Result:
    """Send ``frames``, keeping at most ``window`` messages unconfirmed; until all confirmed."""
    total = sum(n for _, n in frames)
    sent, base = 0, client.confirmed
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for data, n in frames:
        while sent - (client.confirmed - base) >= window:
            if not client.pump(30):
                raise RuntimeError("confirms stopped")
        client.send(data)
        sent += n
        client.pump(0)
    while client.confirmed - base < total:
        if not client.pump(30):
            raise RuntimeError("confirms stopped")
    seconds, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    if client.errors:
        raise RuntimeError(f"the broker refused {client.errors} messages (PublishError)")
    return Result(total, total * len(MESSAGE), seconds, cpu)


def consume(client: StreamClient, stream: str, expected: int, pid: int,
            properties: dict[str, str] | None = None, credit: int = 10,
            until: int | None = None) -> Result:
    """Subscribe from the first offset; count records from chunk headers until ``expected``
    records came, or (``until``, for filtered consumers) a chunk reaching that offset."""
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    client.subscribe(1, stream, OffsetSpec.first(), credit=credit, properties=properties or {})
    while client.records < expected if until is None else client.end < until:
        if not client.pump(30):
            raise RuntimeError("deliveries stopped")
    return Result(client.records, client.received, time.perf_counter() - t0, cpu_seconds(pid) - cpu0)


def _metric(url: str, name: str, stream: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    m = re.search(rf'^{name}{{stream="{re.escape(stream)}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _row(label: str, r: Result) -> str:
    return (f"  {label:34} {r.messages:>9} {r.seconds:>7.2f} {r.rate:>11,.0f} {r.cpu_us:>9.3f}")


HEADER = f"  {'':34} {'messages':>9} {'s':>7} {'msg/s':>11} {'CPU µs/msg':>9}"


def run_stream_broker(label: str, host: str, port: int, pid: int, args: argparse.Namespace,
                      out: list[str]) -> tuple[Result, Result]:
    """Publish then consume ``--messages`` on a fresh stream; the results and their rows."""
    stream = f"bench-{label.split()[0]}-{os.getpid()}"
    url = f"rabbitmq-stream://{host}:{port}"
    with StreamClient(url, timeout=60) as c:
        c.create(stream)
        c.declare_publisher(1, stream)
        frames = publish_frames(1, 0, args.messages, args.frame)
        pub = publish(c, frames, pid)
    passes = []
    for _ in range(args.passes):  # one consume lasts ~0.1 s: the median of several
        c = StreamClient(url, timeout=60)
        passes.append(consume(c, stream, args.messages, pid))
        c.sock.close()  # mid-stream (credit was granted ahead): no Close handshake
    con = sorted(passes, key=lambda r: r.rate)[len(passes) // 2]
    con = Result(con.messages, con.bytes, con.seconds,
                 sum(r.cpu for r in passes) / len(passes))  # CPU: the mean (10 ms ticks)
    out.append(_row(f"{label}: publish", pub))
    out.append(_row(f"{label}: consume", con))
    return pub, con


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_protocol",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--frame", type=int, default=1000, help="messages per Publish frame")
    parser.add_argument("--block", type=int, default=1000, help="messages per filter-value burst")
    parser.add_argument("--quick", action="store_true", help="100,000 messages")
    parser.add_argument("--passes", type=int, default=5, help="consumes of each stream (median)")
    parser.add_argument("--targets", default="amqp-stream,rabbitmq",
                        help="brokers to measure, comma-separated (default: both)")
    parser.add_argument("--sql-property", default="sql-filter",
                        help="the subscription property carrying an SQL filter")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages = 100_000
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{args.messages} messages of {len(BODY)} bytes, {args.frame} per Publish frame")
    out = [HEADER]
    results: dict[str, tuple[Result, Result]] = {}
    root = scratch_dir("bench-stream-")

    targets = set(args.targets.split(","))
    for fsync in ("never", "always") if "amqp-stream" in targets else ():
        b = BrokerProcess(root / f"data-{fsync}", extra_args=["--fsync", fsync],
                          log_path=root / f"broker-{fsync}.log")
        b.start()
        stream_port = b.stream_port
        try:
            results[fsync] = run_stream_broker(f"amqp-stream (fsync {fsync})", b.host, stream_port,
                                               b.proc.pid, args, out)
            if fsync == "never":
                filtered(b, stream_port, args, out)
                amqp_path(b, args, out)
        finally:
            b.stop()

    if "rabbitmq" not in targets:
        out.append("  RabbitMQ: not measured (--targets)")
    elif not RabbitMQNode.available():
        out.append("  RabbitMQ: not installed (scripts/apt-install rabbitmq-server): no peer in this run")
    else:
        node = RabbitMQNode()
        try:
            node.start()
            results["rabbitmq"] = run_stream_broker(f"RabbitMQ {node.version().split('-')[0]}",
                                                    node.host, node.stream_port, node.pid(), args, out)
        finally:
            node.stop()
    print("\n".join(out))
    if "rabbitmq" in results and "never" in results:
        ours, theirs = results["never"], results["rabbitmq"]
        print(f"  ratio amqp-stream (fsync never) / RabbitMQ: publish {ours[0].rate / theirs[0].rate:.2f}x "
              f"throughput, {ours[0].cpu_us / theirs[0].cpu_us:.2f}x CPU per message; consume "
              f"{ours[1].rate / theirs[1].rate:.2f}x throughput, "
              f"{ours[1].cpu_us / theirs[1].cpu_us:.2f}x CPU per message")
    return 0


def filtered(b: BrokerProcess, stream_port: int, args: argparse.Namespace, out: list[str]) -> None:
    """Stage 1 and stage 2 on streams whose filter values and ``region`` come in bursts."""
    from bench.broker import encode
    n, block = args.messages, args.block
    values = [f"v{(i // block) % 100}" for i in range(n)]
    # message i: k = i % 100 and zone = 'z<k>' (round robin), region = 'r<two digits>' in
    # bursts like the values
    variants = {(k, r): encode(properties={"k": k, "zone": f"z{k:02d}", "region": f"r{r:02d}"})
                for k in range(100) for r in range(100)}
    messages = [variants[i % 100, (i // block) % 100] for i in range(n)]
    # and a last one that every filter below matches: a consumer is done when it arrives
    values.append("v7")
    messages.append(variants[7, 7])
    n += 1
    pid = b.proc.pid
    url = f"rabbitmq-stream://{b.host}:{stream_port}"
    plain, derived = f"bench-filtered-{os.getpid()}", f"bench-derived-{os.getpid()}"
    with StreamClient(url, timeout=60) as c:
        c.create(plain)
        c.declare_publisher(1, plain)
        publish(c, publish_frames(1, 0, n, args.frame, values, messages), pid)
        try:  # broker-derived filter keys (an extension): the same messages, region indexed
            c.create(derived, {"stream-derived-filter-keys": "region"})
        except Exception as exc:
            out.append(f"  derived filter keys: not available ({exc})")
            derived = ""
        else:
            c.declare_publisher(2, derived)
            publish(c, publish_frames(2, 0, n, args.frame, values, messages), pid)
    metrics = b.metrics_url

    def read(stream: str, properties: dict[str, str] | None, expected: int) -> tuple[Result, float]:
        before = _metric(metrics, "amqp_stream_read_bytes_total", stream)
        c = StreamClient(url, timeout=60)
        r = consume(c, stream, expected, pid, properties, until=n)
        c.sock.close()  # mid-stream: no Close handshake
        return r, _metric(metrics, "amqp_stream_read_bytes_total", stream) - before

    everything, read_all = read(plain, None, n)
    stage1, read1 = read(plain, {"filter.0": "v7"}, n)
    out.append(_row("unfiltered consume", everything))
    out.append(f"  stage 1 (filter.0 = v7, 1 value in 100, bursts of {block}): {stage1.messages} "
               f"records in chunks, read {read1 / max(read_all, 1):.2%} of the bytes, sent "
               f"{stage1.bytes / max(everything.bytes, 1):.2%}, {stage1.seconds:.2f} s")
    cases = [(plain, "k = 7", "round robin, a number: every record evaluated"),
             (plain, "zone = 'z07'", "round robin, a string: the records holding it found by a search"),
             (plain, "region = 'r07'", "bursts, a string: chunks without it dropped whole")]
    if derived:
        cases.append((derived, "region = 'r07'", "bursts, region a derived key: blocks skipped"))
    for stream, sql, what in cases:
        stage2, read2 = read(stream, {args.sql_property: sql}, n)
        out.append(f"  stage 2 (SQL {sql}, 1 %; {what}): {stage2.messages} records, "
                   f"{stage2.seconds:.3f} s, read {read2 / max(read_all, 1):.2%} of the bytes; "
                   f"{everything.seconds / max(stage2.seconds, 1e-9):.2f}x sooner than unfiltered "
                   f"(the load generator, which decodes nothing)")
    # what a user sees with a real client, two ways: rstream handing each message over as it
    # came (raw: its own CPU shows what a delivered chunk costs it, and round robin sends one
    # chunk per match), and rstream decoding each message with its ``amqp_decoder`` as its
    # README does (what a consumer that looks at its messages pays per message it is sent)
    for how, decoder in (("raw", None), ("amqp_decoder", "amqp")):
        rs_plain = rstream_consume(b.host, stream_port, plain, None, n, decoder=decoder)
        for stream, sql, what in cases:
            got = rstream_consume(b.host, stream_port, stream, {args.sql_property: sql}, n,
                                  upto=n, decoder=decoder)
            out.append(f"  rstream ({how}): unfiltered {rs_plain[1]:.2f} s ({rs_plain[0]} "
                       f"messages), stage 2 {sql} ({what.split(':')[0]}) {got[1]:.2f} s "
                       f"({got[0]} messages): {rs_plain[1] / max(got[1], 1e-9):.1f}x sooner; "
                       f"rstream's own CPU {rs_plain[2]:.2f} s unfiltered, {got[2]:.2f} s filtered")


def rstream_consume(host: str, port: int, stream: str, properties: dict[str, str] | None,
                    expected: int, upto: int | None = None,
                    decoder: str | None = None) -> tuple[int, float, float]:
    """(messages, seconds, this process's CPU seconds meanwhile) for rstream to receive
    ``expected`` messages from the first offset (with ``upto``: the ones below that offset,
    for a filtered read); ``decoder="amqp"``: each decoded by rstream's ``amqp_decoder``."""
    import asyncio

    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder

    async def run() -> tuple[int, float, float]:
        got = 0
        done = asyncio.Event()

        async def on_message(message, context) -> None:
            nonlocal got
            if upto is None or context.offset < upto:
                got += 1
            if got >= expected or (upto is not None and context.offset >= upto - 1):
                done.set()

        consumer = Consumer(host, port, username="guest", password="guest")
        await consumer.start()
        t0, c0 = time.perf_counter(), time.process_time()
        await consumer.subscribe(stream, on_message, properties=properties,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
                                 decoder=amqp_decoder if decoder == "amqp" else None)
        await asyncio.wait_for(done.wait(), 300)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        await consumer.close()
        return got, seconds, cpu

    return asyncio.run(run())


def amqp_path(b: BrokerProcess, args: argparse.Namespace, out: list[str]) -> None:
    """The same publish and consume over AMQP 1.0 (proton's Python client is the limit)."""
    from bench import broker as amqp_bench
    from amqp_stream.client import connect
    n = min(args.messages, 100_000)
    encoded = amqp_bench.encode()
    with connect(b.url) as client:
        client.declare("bench-amqp")
    cpu0 = cpu_seconds(b.proc.pid)
    pub = amqp_bench.publish(b.url, "/queues/bench-amqp", lambda i: encoded, n)
    cpu1 = cpu_seconds(b.proc.pid)
    con = amqp_bench.consume(b.url, "/queues/bench-amqp", amqp_bench.stream_filters("first"))
    cpu2 = cpu_seconds(b.proc.pid)
    out.append(_row("amqp-stream AMQP 1.0: publish", Result(pub.accepted, 0, pub.seconds, cpu1 - cpu0)))
    out.append(_row("amqp-stream AMQP 1.0: consume", Result(con.messages, con.bytes, con.seconds, cpu2 - cpu1)))


if __name__ == "__main__":
    sys.exit(main())
