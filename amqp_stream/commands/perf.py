"""`amqp-stream perf`: a load tool for publishers and filtered consumers, in the spirit of
RabbitMQ Stream PerfTest.

Why: to see what filtering saves. Producers publish messages of `--size` bytes, each with one
of `--filter-values K` values (`v0` .. `vK-1`, also set as the application property `value`),
in runs of `--filter-run N` messages: the broker's chunk filter skips whole chunks, so values
must come in runs for chunks to differ (round-robin values would put every value in every
chunk and nothing could be skipped). Consumers attach at `--from` (default `next`) with the
filters given and count what they receive: delivered versus matched (the messages carrying a
value they asked for), bytes, and the saving against everything published. Latency is
publish-to-delivery, measured with a send time (ns, application property `ts`) that producers
and consumers on this machine read from the same clock.

Each producer and consumer runs in its own thread with its own connection (the client is
blocking and not shared). On a terminal a live table shows the rates every second; otherwise one
plain line per second. The summary at the end is `key: value` lines, easy to parse; Ctrl-C stops
the run, prints the summary so far, deletes a temporary stream and exits 130; a consumer's
saving then counts only the part of the stream it had read (``read_span``: from its first
delivery to its last), not what it had not reached.

Super streams and single active consumer (`--super-streams`, `--super-stream-partitions`,
`--single-active-consumer`, `--consumer-names`: Stream PerfTest's options) need the stream
protocol: see ``amqp_stream.commands.perf_stream``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from amqp_stream.client import ClientError, PublishError, build_message
from amqp_stream.client.stream import parse_stream_url
from amqp_stream.commands.connect import (
    add_connection_arguments, add_stream_url_argument, fail, is_terminal, open_client,
)
from amqp_stream.commands.consume import FROM_SYNTAX, parse_start
from amqp_stream.commands.consume_super import offset_spec_of
from amqp_stream.commands.filters import check_filters

_GRACE_S = 30.0  # after the producers stop, at most this long for consumers to catch up
_STOP_S = 5.0  # after Ctrl-C, at most this long for each thread to finish


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stream", default=None,
                        help="stream to use; declared if missing (default: a new perf-<id> stream, deleted at the end)")
    parser.add_argument("--producers", type=int, default=1, metavar="N", help="publishing connections (default: 1)")
    parser.add_argument("--consumers", type=int, default=1, metavar="N", help="consuming connections (default: 1)")
    parser.add_argument("--rate", type=float, default=0, metavar="R",
                        help="total messages per second over all producers; 0 = as fast as possible (default)")
    parser.add_argument("--size", type=int, default=100, metavar="B", help="body size in bytes (default: 100)")
    parser.add_argument("--filter-values", type=int, default=0, metavar="K",
                        help="give messages one of K filter values v0..vK-1; 0 = no filter value")
    parser.add_argument("--filter-run", type=int, default=1000, metavar="N",
                        help="messages in a row with the same filter value before the next "
                             "value (default: %(default)s)")
    parser.add_argument("--from", dest="start", default="next", metavar="SPEC",
                        help="where consumers start: next (default), first, last, an offset, an "
                             "interval such as 10m; with --producers 0 and --stream, consumers "
                             "read an existing stream to its end")
    parser.add_argument("--consumer-filter", action="append", default=[], metavar="V",
                        help="stage-1 filter value of every consumer (repeatable, e.g. v0)")
    parser.add_argument("--consumer-sql", metavar="EXPR",
                        help="stage-2 SQL filter of every consumer (e.g. \"value = 'v0'\")")
    parser.add_argument("--match-unfiltered", action="store_true",
                        help="consumers with --consumer-filter also get messages without a filter value")
    parser.add_argument("--allow-missing-filters", action="store_true",
                        help="run even if the broker leaves out a consumer filter (default: fail "
                             "before the load starts)")
    parser.add_argument("--duration", type=float, default=10.0, metavar="S",
                        help="seconds to publish for (default: 10)")
    parser.add_argument("--window", type=int, default=None, metavar="N",
                        help="unconfirmed messages per producer (default: 256 over AMQP, 10000 "
                             "over the stream protocol)")
    parser.add_argument("--protocol", choices=("amqp", "stream"), default="amqp",
                        help="AMQP 1.0 (--url, default) or RabbitMQ's stream protocol (--stream-url)")
    add_stream_url_argument(parser, "the stream-protocol URL (--protocol stream)")
    parser.add_argument("--super-streams", action="store_true",
                        help="--stream is a super stream (made with --super-stream-partitions "
                             "partitions <stream>-0.. if missing): producers spread messages over "
                             "the partitions, consumers read them all (--protocol stream)")
    parser.add_argument("--super-stream-partitions", type=int, default=3, metavar="N",
                        help="partitions of a super stream the run makes (default: %(default)s)")
    parser.add_argument("--single-active-consumer", action="store_true",
                        help="consumers are single active consumers named by --consumer-names: "
                             "of those sharing a name only one is active on a stream or "
                             "partition; they store their offset every 10,000 messages and when "
                             "they step down (--protocol stream)")
    parser.add_argument("--consumer-names", default="%s-%d", metavar="PATTERN",
                        help="consumer names with --single-active-consumer: %%s the stream, %%d "
                             "the consumer's number from 1, or uuid (default: %(default)s, a "
                             "name each: all active; a fixed name makes one group)")
    parser.add_argument("--batch", type=int, default=100, metavar="N",
                        help="messages per Publish frame over the stream protocol (default: 100)")
    add_connection_arguments(parser)


@dataclass
class Counters:
    """One producer's or consumer's figures; written by its thread, read by the reporter.
    ``messages`` is what was published or delivered; ``matched`` the delivered messages that
    carry a filter value the consumer asked for (all of them without stage-1 values)."""
    messages: int = 0
    matched: int = 0
    bytes: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    error: str | None = None
    first_offset: int | None = None  # a consumer's first and last delivered offsets
    last_offset: int | None = None
    streams: list[str] = field(default_factory=list)  # a consumer's streams it counted messages from

    def delivered(self, offset: int) -> None:
        if self.first_offset is None:
            self.first_offset = offset
        self.last_offset = offset

    def span(self) -> int:
        """Offsets from the first delivered message to the last one: the part of the stream a
        consumer has read (stage 1 may have skipped chunks inside it, never outside)."""
        return 0 if self.last_offset is None else self.last_offset - (self.first_offset or 0) + 1


def value_of(n: int, run: int, values: list[str]) -> str | None:
    """The filter value of a producer's ``n``-th message: runs of ``run`` messages per value."""
    return values[(n // run) % len(values)] if values else None


def due(t0: float, n: int, per_second: float, stop: threading.Event) -> bool:
    """Rate limiting: whether message ``n`` of a producer started at ``t0`` is due; if not,
    wait (at most 0.1 s, or until ``stop``) and say so, for the caller to look again."""
    delay = t0 + n / per_second - time.monotonic()
    if delay > 0:
        stop.wait(min(delay, 0.1))
        return False
    return True


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), int(round(p / 100 * len(sorted_values) + 0.5))))
    return sorted_values[rank - 1]


def _producer(args, index: int, stop: threading.Event, counters: Counters, started: threading.Barrier) -> None:
    body = os.urandom(args.size // 2 + 1).hex()[: args.size].encode()
    per_second = args.rate / args.producers if args.rate > 0 else 0.0
    values = [f"v{i}" for i in range(args.filter_values)]
    try:
        with open_client(args) as client, client.publisher(args.stream, window=args.window) as pub:
            started.wait()
            t0 = time.monotonic()
            n = 0
            while not stop.is_set():
                if per_second and not due(t0, n, per_second, stop):
                    continue
                value = value_of(n, args.filter_run, values)
                props: dict[str, object] = {"ts": time.time_ns(), "producer": index}
                if value is not None:
                    props["value"] = value
                pub.send(build_message(body, application_properties=props, filter_value=value))
                n += 1
                if per_second or n % 16 == 0:
                    _flush_io(client)
                counters.messages = n  # sent so far; the accepted count replaces it at the end
            pub.flush(check=False)
            counters.messages = pub.accepted
            counters.errors = len(pub.failed)
            counters.bytes = pub.accepted * args.size
    except (ClientError, PublishError) as exc:
        counters.error = str(exc)
        abort_start(started)


def _consumer(args, index: int, interrupted: threading.Event, counters: Counters,
              started: threading.Barrier, ready: threading.Event) -> None:
    """Count deliveries until the end of the stream once publishing is over (``ready``), or
    until ``interrupted``. ``index``: the consumer's number (it names stream-protocol
    consumers; AMQP ones have no name here)."""
    wanted = set(args.consumer_filter)
    try:
        with open_client(args) as client, client.consumer(
                args.stream, offset=args.offset, filter_values=args.consumer_filter or None,
                match_unfiltered=args.match_unfiltered, sql=args.consumer_sql, credit=1000) as consumer:
            if consumer.missing_filters and not args.allow_missing_filters:
                counters.error = (f"the broker left out consumer filter(s) "
                                  f"{', '.join(consumer.missing_filters)} (--allow-missing-filters "
                                  "to run anyway)")
                abort_start(started)
                return
            started.wait()
            while not interrupted.is_set():
                m = consumer.receive(timeout=0.2)
                now = time.time_ns()
                if m is None:
                    # publishing has ended: a drain that leaves nothing buffered means this
                    # consumer has seen the whole stream (everything it matches has arrived)
                    if ready.is_set() and consumer.drain() == 0:
                        return
                    continue
                body = m.body
                counters.bytes += len(body) if isinstance(body, (bytes, str)) else 0
                counters.messages += 1
                if m.offset is not None:
                    counters.delivered(m.offset)
                if not wanted or m.filter_value in wanted or (args.match_unfiltered and m.filter_value is None):
                    counters.matched += 1
                ts = m.application_properties.get("ts")
                if isinstance(ts, int):
                    counters.latencies_ms.append((now - ts) / 1e6)
    except ClientError as exc:
        counters.error = str(exc)
        abort_start(started)


def _flush_io(client) -> None:
    """One pass of the client's event loop, so a sent message goes out now: the blocking client
    only does I/O while one of its calls waits (a rate-limited producer would otherwise hold a
    whole window back until it fills)."""
    with client.lock:
        container = client.conn.container
        saved, container.timeout = container.timeout, 0
        try:
            # proton's Python reactor does socket I/O on the REACTOR_QUIESCED event that the
            # first pass only queues; the second pass runs it (with a zero select timeout)
            container.process()
            container.process()
        finally:
            container.timeout = saved


def abort_start(barrier: threading.Barrier) -> None:
    try:
        barrier.abort()
    except threading.BrokenBarrierError:
        pass


def run(args: argparse.Namespace) -> int:
    problems = [msg for bad, msg in [
        (args.producers < 0 or args.consumers < 0, "--producers and --consumers must be >= 0"),
        (args.producers + args.consumers < 1, "nothing to do: no producers and no consumers"),
        (args.size < 1 or args.batch < 1 or (args.window or 1) < 1, "--size, --batch and --window must be >= 1"),
        (args.rate < 0 or args.filter_values < 0, "--rate and --filter-values must be >= 0"),
        (args.filter_run < 1, "--filter-run must be >= 1"),
        (args.duration <= 0, "--duration must be > 0"),
        (args.producers == 0 and args.stream is None, "--producers 0 reads an existing stream: name it with --stream"),
        ((args.super_streams or args.single_active_consumer) and args.protocol != "stream",
         "--super-streams and --single-active-consumer need --protocol stream"),
        (not 1 <= args.super_stream_partitions <= 255, "--super-stream-partitions must be 1..255"),
    ] if bad]
    bad_filter = check_filters("--consumer-sql", sql=args.consumer_sql) if args.consumer_sql else None
    over_stream = args.protocol == "stream"
    if args.window is None:
        args.window = 10_000 if over_stream else 256
    try:
        try:
            args.offset = parse_start(args.start)
        except ValueError as exc:
            raise ValueError(f"--from: {exc}" + ("" if over_stream else f" ({FROM_SYNTAX})")) from None
        if over_stream:
            parse_stream_url(args.stream_url)
            # as consume over the stream protocol: a time or an interval is a timestamp spec
            args.start_spec = offset_spec_of(args.offset)
    except (ValueError, ClientError) as exc:
        problems.append(str(exc))
    if problems or bad_filter:
        print(f"amqp-stream perf: error: {problems[0] if problems else bad_filter}", file=sys.stderr)
        return 2
    temporary = args.stream is None
    args.stream = args.stream or f"perf-{uuid.uuid4().hex[:8]}"
    producer, consumer = _producer, _consumer
    try:
        if over_stream:
            from amqp_stream.commands import perf_stream  # it imports this module

            producer, consumer = perf_stream.producer, perf_stream.consumer
            perf_stream.declare(args)
            available = perf_stream.available(args)
        else:
            with open_client(args) as admin:
                if args.producers:
                    admin.declare(args.stream)
                info = admin.info(args.stream)
            available = int(info.get("next_offset", 0)) - int(info.get("first_offset", 0))
    except ClientError as exc:
        return fail("perf", exc)
    # with no producers, the consumers' yardstick for the saving is what the stream held

    stop, done_publishing, interrupted = threading.Event(), threading.Event(), threading.Event()
    if not args.producers:
        done_publishing.set()
    producers = [Counters() for _ in range(args.producers)]
    consumers = [Counters() for _ in range(args.consumers)]
    started = threading.Barrier(args.producers + args.consumers + 1)
    threads = [threading.Thread(target=consumer, args=(args, i, interrupted, c, started, done_publishing),
                                daemon=True) for i, c in enumerate(consumers)]
    threads += [threading.Thread(target=producer, args=(args, i, stop, p, started), daemon=True)
                for i, p in enumerate(producers)]
    for t in threads:
        t.start()
    try:
        started.wait(timeout=args.timeout)
    except KeyboardInterrupt:
        stop.set()
        interrupted.set()
        _cleanup(args, temporary)
        return 130
    except threading.BrokenBarrierError:
        stop.set()
        interrupted.set()
        errors = [c.error for c in producers + consumers if c.error]
        _cleanup(args, temporary)
        return fail("perf", errors[0] if errors else "clients did not start in time")
    live = _Live(producers, consumers, terminal=is_terminal(sys.stderr))
    t0 = time.monotonic()
    publish_elapsed = 0.0
    try:
        if args.producers:
            while time.monotonic() - t0 < args.duration:
                time.sleep(min(1.0, max(0.0, args.duration - (time.monotonic() - t0))))
                live.update(time.monotonic() - t0)
            stop.set()
            publish_elapsed = time.monotonic() - t0
            for t in threads[args.consumers:]:
                t.join()
            done_publishing.set()
        deadline = time.monotonic() + (_GRACE_S if args.producers else float("inf"))
        for t in threads[: args.consumers]:
            while t.is_alive() and time.monotonic() < deadline:
                t.join(min(1.0, max(0.0, deadline - time.monotonic())))
                live.update(time.monotonic() - t0)
    except KeyboardInterrupt:
        # the summary so far: producers stop at once, consumers count what they have
        interrupted.set()
        stop.set()
        publish_elapsed = publish_elapsed or time.monotonic() - t0
        for t in threads[args.consumers:]:
            t.join(_STOP_S)
        for t in threads[: args.consumers]:
            t.join(_STOP_S)
    finally:
        live.stop()
    elapsed = time.monotonic() - t0
    _summary(args, producers, consumers, publish_elapsed or elapsed, elapsed, available,
             interrupted.is_set())
    _cleanup(args, temporary)
    if interrupted.is_set():
        return 130
    errors = [c.error for c in producers + consumers if c.error]
    for e in errors:
        print(f"amqp-stream perf: error: {e}", file=sys.stderr)
    return 1 if errors or any(p.errors for p in producers) else 0


def _cleanup(args, temporary: bool) -> None:
    if not temporary:
        return
    try:
        if args.protocol == "stream":
            from amqp_stream.commands import perf_stream

            perf_stream.delete(args)
        else:
            with open_client(args) as admin:
                admin.delete(args.stream)
    except ClientError:
        pass


def _summary(args, producers: list[Counters], consumers: list[Counters], publish_s: float,
             total_s: float, available: int, interrupted: bool) -> None:
    published = sum(p.messages for p in producers)
    consumed = sum(c.messages for c in consumers)
    latencies = sorted(x for c in consumers for x in c.latencies_ms)
    # what each consumer would have received without filters
    baseline = published if producers else available
    lines = [
        ("stream", args.stream),
        *([("partitions", ",".join(args.partitions))] if args.super_streams else []),
        ("duration_s", f"{publish_s:.2f}"),
        ("producers", args.producers), ("consumers", args.consumers),
        ("published", published),
        ("publish_rate_msg_s", f"{published / publish_s:.1f}" if publish_s else "0.0"),
        ("rejected", sum(p.errors for p in producers)),
        ("consumed", consumed),
        ("consume_rate_msg_s", f"{consumed / total_s:.1f}" if total_s else "0.0"),
        ("latency_ms_p50", f"{percentile(latencies, 50):.2f}"),
        ("latency_ms_p95", f"{percentile(latencies, 95):.2f}"),
        ("latency_ms_p99", f"{percentile(latencies, 99):.2f}"),
        ("latency_ms_max", f"{latencies[-1] if latencies else 0:.2f}"),
    ]
    if interrupted:
        lines.append(("interrupted", "true"))
    for i, c in enumerate(consumers):
        # Interrupted, a consumer has not read the whole stream: what it has not reached is no
        # saving of the filters. The yardstick is then the part it read (read_span).
        read = min(baseline, c.span()) if interrupted else baseline
        saving = 100.0 * (1 - c.messages / read) if read else 0.0
        lines.append((f"consumer_{i}", f"delivered={c.messages} matched={c.matched} "
                                       f"bytes={c.bytes} saving={saving:.1f}%"
                                       + (f" read_span={read}" if interrupted else "")
                                       + (f" streams={','.join(c.streams) or '-'}"
                                          if args.super_streams or args.single_active_consumer
                                          else "")))
    for key, value in lines:
        print(f"{key}: {value}")
    sys.stdout.flush()


class _Live:
    """Live rates: a rich table on a terminal, else one `progress:` line per second on stderr."""

    def __init__(self, producers: list[Counters], consumers: list[Counters], terminal: bool):
        self.producers, self.consumers = producers, consumers
        self.last = (0.0, 0, 0)
        self.live = None
        if terminal:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(self._table(0, 0, 0), console=Console(stderr=True), transient=True,
                             auto_refresh=False)
            self.live.start()

    def _table(self, elapsed: float, pub_rate: float, con_rate: float):
        from rich.table import Table

        t = Table(title="amqp-stream perf")
        for col in ("elapsed s", "published", "msg/s out", "consumed", "msg/s in"):
            t.add_column(col, justify="right")
        t.add_row(f"{elapsed:.0f}", str(sum(p.messages for p in self.producers)), f"{pub_rate:.0f}",
                  str(sum(c.messages for c in self.consumers)), f"{con_rate:.0f}")
        return t

    def update(self, elapsed: float) -> None:
        published = sum(p.messages for p in self.producers)
        consumed = sum(c.messages for c in self.consumers)
        t_prev, p_prev, c_prev = self.last
        dt = max(elapsed - t_prev, 1e-9)
        pub_rate, con_rate = (published - p_prev) / dt, (consumed - c_prev) / dt
        self.last = (elapsed, published, consumed)
        if self.live is not None:
            self.live.update(self._table(elapsed, pub_rate, con_rate), refresh=True)
        else:
            print(f"progress: t={elapsed:.0f}s published={published} consumed={consumed} "
                  f"publish_rate={pub_rate:.0f} consume_rate={con_rate:.0f}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
