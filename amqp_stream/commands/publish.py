"""`amqp-stream publish STREAM` (or `--exchange X [--routing-key K]`): publish lines or JSON
lines from a file or stdin.

Why: the quickest way to put test data into a stream with filter values and application
properties, e.g. `cat events.jsonl | amqp-stream publish events --filter-value-from region`.
Each input line is one message whose body is the line (an AMQP string). A line holding a JSON
object also gives its top-level fields as application properties (nested objects and arrays as
their JSON text), so they can be filtered by property filters and SQL. Messages are confirmed
through the client's window of unsettled deliveries; the command fails (exit 1) unless every
message was accepted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator, TextIO

from amqp_stream.client import ClientError, PublishError, StreamNotFound, build_message
from amqp_stream.commands import interrupt
from amqp_stream.commands.connect import add_connection_arguments, fail, is_terminal, open_client
from amqp_stream.words import plural

_SIMPLE = (str, bool, int, float, type(None))
_LONG = range(-2**63, 2**63)
PROGRESS_INTERVAL_S = 2.0
INTERRUPT_WAIT_S = 5.0  # after Ctrl-C, at most this long for the outcomes of what was sent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", nargs="?", help="stream name (declared already)")
    parser.add_argument("--exchange", "-x", metavar="X",
                        help="publish to exchange X (/exchanges/X/K) instead of a stream: each "
                             "message goes to every stream X routes it to")
    parser.add_argument("--routing-key", "-k", metavar="K", default="",
                        help="routing key with --exchange (default: empty)")
    parser.add_argument("--file", "-f", metavar="F", help="read lines from F instead of stdin")
    parser.add_argument("--format", choices=("auto", "lines", "json"), default="auto",
                        help="auto: a line holding a JSON object is JSON, any other line is text; "
                             "lines: every line is text; json: every line must be a JSON object "
                             "(default: %(default)s)")
    fv = parser.add_mutually_exclusive_group()
    fv.add_argument("--filter-value", metavar="V",
                    help="stage-1 filter value (x-stream-filter-value) for every message")
    fv.add_argument("--filter-value-from", metavar="FIELD",
                    help="take each message's filter value from this JSON field (absent: unfiltered)")
    parser.add_argument("--property", action="append", default=[], metavar="K=V",
                        help="application property for every message (repeatable); V is parsed "
                             "as JSON when it can be (10, true, null), else taken as a string")
    parser.add_argument("--window", type=int, default=256, metavar="N",
                        help="unconfirmed messages in flight (default: %(default)s)")
    add_connection_arguments(parser)


def parse_assignments(items: list[str], option: str) -> dict[str, Any]:
    """`K=V` pairs; V as JSON if it parses (numbers, booleans, null), else the text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} wants K=V, got {item!r}")
        try:
            value = json.loads(text)
            if not isinstance(value, _SIMPLE):
                value = text
        except ValueError:
            value = text
        out[key] = value
    return out


def record_properties(record: dict[str, Any]) -> dict[str, Any]:
    """JSON fields -> application properties (simple values kept, the rest as JSON text)."""
    props = {}
    for key, value in record.items():
        if isinstance(value, int) and not isinstance(value, bool) and value not in _LONG:
            value = str(value)
        elif not isinstance(value, _SIMPLE):
            value = json.dumps(value, separators=(",", ":"))
        props[str(key)] = value
    return props


def parse_line(line: str, fmt: str, number: int) -> tuple[str, dict[str, Any] | None]:
    """(body, JSON record or None) of one input line; ValueError for bad JSON in json mode."""
    if fmt == "lines":
        return line, None
    if fmt == "auto" and not line.lstrip().startswith("{"):
        return line, None
    try:
        record = json.loads(line)
    except ValueError as exc:
        if fmt == "json":
            raise ValueError(f"line {number}: not JSON: {exc}") from None
        return line, None
    if not isinstance(record, dict):
        if fmt == "json":
            raise ValueError(f"line {number}: not a JSON object")
        return line, None
    return line, record


def _lines(source: TextIO) -> Iterator[tuple[int, str, int]]:
    """(line number, text without the line end, bytes read); empty lines come as ""."""
    for number, raw in enumerate(source, 1):
        yield number, raw.rstrip("\r\n"), len(raw.encode("utf-8", "surrogateescape"))


def run(args: argparse.Namespace) -> int:
    try:
        extra = parse_assignments(args.property, "--property")
    except ValueError as exc:
        print(f"amqp-stream publish: error: {exc}", file=sys.stderr)
        return 2
    if args.window < 1:
        print("amqp-stream publish: error: --window must be >= 1", file=sys.stderr)
        return 2
    if (args.stream is None) == (args.exchange is None):
        print("amqp-stream publish: error: give a STREAM or --exchange X (one of them)", file=sys.stderr)
        return 2
    if args.routing_key and args.exchange is None:
        print("amqp-stream publish: error: --routing-key goes with --exchange", file=sys.stderr)
        return 2
    target = f"exchange {args.exchange}" if args.exchange is not None else args.stream
    try:
        source = open(args.file, encoding="utf-8") if args.file else sys.stdin
    except OSError as exc:
        return fail("publish", f"cannot read {args.file}: {exc.strerror}")
    total_bytes = os.fstat(source.fileno()).st_size if args.file else None
    progress = _Progress(total_bytes) if is_terminal(sys.stderr) else None
    sent = number = 0
    ticker = None
    try:
        with open_client(args) as client, _publisher(client, args) as pub:
            if progress is None:
                ticker = _Ticker(lambda: (pub.sent, pub.accepted))
            try:
                for number, text, size in _lines(source):
                    interrupt.check()  # a Ctrl-C that landed in proton and was dropped there
                    if progress:
                        progress.advance(size, pub.sent)
                    if not text:
                        continue
                    body, record = parse_line(text, args.format, number)
                    props = dict(extra)
                    value = args.filter_value
                    if record is not None:
                        props.update(record_properties(record))
                        if args.filter_value_from:
                            v = record.get(args.filter_value_from)
                            value = None if v is None else (v if isinstance(v, str) else json.dumps(v))
                    if value == "":
                        value = None
                    pub.send(build_message(body, application_properties=props or None, filter_value=value))
                outcomes = pub.flush(check=False)
            except KeyboardInterrupt:
                if progress:
                    progress.stop(pub.sent)
                    progress = None
                _report_interrupt(pub, target, number)
                raise  # exit 130 (the connection is dropped: client.leave)
            finally:
                sent = pub.sent
                if progress:
                    progress.stop(sent)
                if ticker:
                    ticker.stop()
    except ValueError as exc:
        return fail("publish", exc)
    except StreamNotFound:
        if args.exchange is not None:
            return fail("publish", f"exchange {args.exchange!r} not found (declare it first: "
                                   f"amqp-stream declare-exchange {args.exchange})")
        return fail("publish", f"stream {args.stream!r} not found (declare it first: amqp-stream declare {args.stream})")
    except PublishError as exc:
        return fail("publish", f"{exc}")
    except ClientError as exc:
        return fail("publish", exc)
    finally:
        if args.file:
            source.close()
    bad = [o for o in outcomes if not o.accepted]
    if bad:
        first = bad[0]
        unroutable = " (routed to no stream)" if args.exchange is not None and first.state == "released" else ""
        return fail("publish", f"{len(bad)} of {sent} message(s) not accepted; first: message #{first.seq + 1} "
                               f"{first.state}{unroutable} ({first.condition or 'no condition'})")
    print(f"published {plural(sent, 'message')} to {target}")
    return 0


def _publisher(client: Any, args: argparse.Namespace) -> Any:
    if args.exchange is not None:
        return client.exchange_publisher(args.exchange, args.routing_key, window=args.window)
    return client.publisher(args.stream, window=args.window)


def _report_interrupt(pub: Any, target: str, line: int) -> None:
    """After Ctrl-C: how many messages the broker confirmed, so the user knows what to publish
    again. The outcomes already sent back are collected (a short wait, at most
    ``INTERRUPT_WAIT_S``; a second Ctrl-C ends the process at once)."""
    pub.timeout = min(pub.timeout, INTERRUPT_WAIT_S)
    try:
        pub.flush(check=False)
    except (ClientError, KeyboardInterrupt):
        pass  # what has come is counted; the rest stays unconfirmed
    sent, failed = pub.sent, len(pub.failed)
    unconfirmed = max(0, sent - pub.accepted - failed)
    print(f"amqp-stream publish: interrupted after input line {line}: {plural(sent, 'message')} sent "
          f"to {target}, {pub.accepted} confirmed, {failed} not accepted, {unconfirmed} unconfirmed "
          "(they may or may not be stored)", file=sys.stderr, flush=True)


class _Ticker:
    """Off a terminal: a `progress:` line on stderr every ``PROGRESS_INTERVAL_S`` seconds (also
    while waiting for input), so a long publish into a pipe or a log is not silent."""

    def __init__(self, counts: Callable[[], tuple[int, int]]):
        self.counts = counts
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="publish-progress", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self.stopped.wait(PROGRESS_INTERVAL_S):
            sent, accepted = self.counts()
            elapsed = time.monotonic() - t0
            print(f"amqp-stream publish: progress: {sent} messages sent, {accepted} accepted, "
                  f"{elapsed:.0f}s, {sent / elapsed:.0f} msg/s", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


class _Progress:
    """A rich progress bar on stderr: bytes of the file when known, else a message count."""

    def __init__(self, total_bytes: int | None):
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress,
                                   SpinnerColumn, TextColumn, TimeElapsedColumn)

        columns = [SpinnerColumn(), TextColumn("publishing"), BarColumn()]
        columns += [DownloadColumn()] if total_bytes else [MofNCompleteColumn()]
        columns += [TextColumn("{task.fields[sent]} msgs"), TimeElapsedColumn()]
        self.bar = Progress(*columns, console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task("publish", total=total_bytes, sent=0)
        self.by_bytes = bool(total_bytes)
        self.bar.start()

    def advance(self, size: int, sent: int) -> None:
        self.bar.update(self.task, advance=size if self.by_bytes else 1, sent=sent)

    def stop(self, sent: int) -> None:
        self.bar.update(self.task, sent=sent)
        self.bar.stop()
