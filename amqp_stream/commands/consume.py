"""`amqp-stream consume STREAM`: consume with filters and print each message as it arrives.

Why: to see what a filtered consumer gets, and whether the broker honoured the filters. The
broker's attach reply says which filters it put in place; this command prints that set on
stderr. A filter the broker left out means more messages than asked for, so it is an error
(exit 1) unless `--allow-missing-filters` makes it a warning; a filter that does not compile is
refused before connecting (exit 2, with the reason and position). Stage-1 values (`--filter`) select whole
chunks, so the command also drops, client-side, messages whose filter value was not asked for
(RabbitMQ's advice for stream filtering). `--check` says where that value is read: the
message's `x-stream-filter-value` annotation (the default; AMQP publishers set it), an
application property (a stream-protocol publisher's filter value travels beside the message, not
in it, and usually comes from a property), or nowhere (`--check none`, or `--raw`: what the
broker sent). What the check drops is never silent: the first message without a value is
reported at once, and the counts and reasons when the command ends.

With `--name N` the link is a named consumer (the broker's tracking extension): it starts after
the offset the broker stored for N (else at `--from`) and accepts each message once it is
printed, so the broker stores N's place as it goes and when the command ends.

With `--super-stream` (STREAM names a super stream: all its partitions at once) or
`--single-active-consumer` (a member of the group `--name` on each partition, or on a plain
stream) the command speaks RabbitMQ's stream protocol (`--stream-url`): see
``amqp_stream.commands.consume_super``. Each line then starts with the partition and the offset.

stdout carries only messages: the body as text, or one JSON object per line with `--json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from amqp_stream.client import ClientError, StreamMessage, StreamNotFound
from amqp_stream.commands import interrupt
from amqp_stream.commands.connect import (
    add_connection_arguments, add_stream_url_argument, fail, is_terminal, open_client,
)
from amqp_stream.commands.filters import check_filters
from amqp_stream.commands.publish import parse_assignments
from amqp_stream.commands.values import body_text, jsonable
from amqp_stream.words import plural
from storage import TIMESTAMP_FROM_MS, OffsetSpec, StorageError

_PROPERTY_PREFIXES = ("p.", "properties.")
_TIME_PROPERTIES = ("creation_time", "absolute_expiry_time")
FROM_SYNTAX = "first, last, next, N, @MS, ISO time or an interval like 10m"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", help="stream name")
    parser.add_argument("--from", dest="start", default="first", metavar="SPEC",
                        help="first | last | next | N (offset) | TIMESTAMP_MS (>= 1e12, or @MS) | "
                             "ISO-8601 time | an interval such as 10m, 2h, 7D (default: first)")
    parser.add_argument("--filter", action="append", default=[], metavar="V",
                        help="stage-1 filter value (repeatable, values are ORed)")
    parser.add_argument("--match-unfiltered", action="store_true",
                        help="with --filter, also messages published without a filter value")
    parser.add_argument("--sql", metavar="EXPR", help="stage-2 SQL filter expression")
    parser.add_argument("--property", action="append", default=[], metavar="K=V",
                        help="stage-2 property filter entry (repeatable, ANDed): application "
                             "property K, or AMQP property NAME with K = p.NAME (e.g. p.subject=x); "
                             "V as JSON when it parses, &p:/&s: prefix/suffix modifiers")
    parser.add_argument("--count", type=int, metavar="N", help="stop after N messages")
    parser.add_argument("--no-follow", action="store_true",
                        help="stop at the current end of the stream instead of waiting")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per message: offset, filter_value, properties, "
                             "application_properties, annotations, body")
    parser.add_argument("--allow-missing-filters", action="store_true",
                        help="go on (with a warning) when the broker leaves out a filter that was "
                             "asked for; by default that fails (exit 1)")
    parser.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # the default now
    parser.add_argument("--check", default="annotation", metavar="WHERE", type=_check_source,
                        help="where the client-side check of --filter reads a message's filter "
                             "value: annotation (x-stream-filter-value, set by AMQP publishers; the "
                             "default), property:NAME (application property NAME: a stream-protocol "
                             "publisher's filter value is not in the message), or none (print "
                             "every message the broker sends)")
    parser.add_argument("--raw", action="store_true", help="the same as --check none")
    parser.add_argument("--name", metavar="NAME",
                        help="a named consumer (the broker's tracking extension): resume after the "
                             "offset stored for NAME (else at --from), and accept each message once "
                             "printed, so the broker stores where NAME is")
    parser.add_argument("--credit", type=int, default=256, metavar="N",
                        help="link credit kept open (default: %(default)s)")
    parser.add_argument("--super-stream", action="store_true",
                        help="STREAM is a super stream: consume all its partitions at once over "
                             "the stream protocol (--stream-url); each line starts with the "
                             "partition and the offset")
    parser.add_argument("--single-active-consumer", action="store_true",
                        help="join the single-active-consumer group --name (on each partition "
                             "with --super-stream): messages only while the broker makes this "
                             "member active, from the offset the group stored; stream protocol")
    add_stream_url_argument(parser, "with --super-stream or --single-active-consumer, the broker's "
                                    "stream-protocol port")
    add_connection_arguments(parser)


def parse_start(text: str) -> Any:
    """The --from value as the client's offset: storage's offset spec text (first/last/next and
    RabbitMQ intervals sent as they are, for the broker to resolve; N an offset; @MS, a bare
    integer >= ``TIMESTAMP_FROM_MS`` or another interval a datetime), or an ISO time.
    ``ValueError`` says what is wrong with the text; the caller names its option and syntax
    (``--from`` here, a positional SPEC in ``reset-offset``)."""
    t = text.strip()
    try:
        OffsetSpec.parse(t, rabbitmq=True)
        return t
    except StorageError:
        pass
    try:
        spec = OffsetSpec.parse(t, timestamp_from=TIMESTAMP_FROM_MS)
    except StorageError:
        try:
            return dt.datetime.fromisoformat(t)
        except ValueError:
            raise ValueError(f"not an offset spec: {text!r}") from None
    if spec.kind == "offset":
        return spec.value
    return dt.datetime.fromtimestamp(spec.value / 1000, dt.timezone.utc)


def split_properties(items: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """--property entries -> (AMQP properties filter, application properties filter)."""
    amqp, app = {}, {}
    for key, value in parse_assignments(items, "--property").items():
        for prefix in _PROPERTY_PREFIXES:
            if key.startswith(prefix):
                amqp[key[len(prefix):].replace("_", "-")] = value
                break
        else:
            app[key] = value
    return amqp, app


def _check_source(text: str) -> str:
    """``--check``: annotation, none, or property:NAME."""
    if text in ("annotation", "none") or (text.startswith("property:") and len(text) > len("property:")):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: annotation, property:NAME or none")


class _Check:
    """The client-side check of ``--filter`` values, and what it dropped: stage 1 hands over
    whole chunks, so messages with other values (or none) come too."""

    def __init__(self, wanted: list[str], source: str, match_unfiltered: bool):
        self.wanted, self.source, self.match_unfiltered = set(wanted), source, match_unfiltered
        self.other = 0  # dropped: another value
        self.missing = 0  # dropped: no value where the check looks

    def value(self, m: StreamMessage) -> Any:
        if self.source == "annotation":
            return m.filter_value
        value = m.application_properties.get(self.source.partition(":")[2])
        return None if value is None else str(value)

    def keep(self, m: StreamMessage) -> bool:
        value = self.value(m)
        if value in self.wanted or (value is None and self.match_unfiltered):
            return True
        if value is None:
            self.missing += 1
        else:
            self.other += 1
        return False

    def where(self) -> str:
        return ("no x-stream-filter-value annotation" if self.source == "annotation" else
                f"no application property {self.source.partition(':')[2]}")

    def advice(self) -> str:
        return ("a stream-protocol publisher's filter value is not in the message: --check "
                "property:NAME checks an application property, --check none prints everything"
                if self.source == "annotation" else
                "--check annotation or another property:NAME, or --check none prints everything")

    def report(self, err: "_Err", seen: int) -> None:
        dropped = self.other + self.missing
        if not dropped:
            return
        reasons = []
        if self.other:
            reasons.append(f"{self.other} with another filter value (stage 1 selects whole chunks)")
        if self.missing:
            reasons.append(f"{self.missing} with {self.where()} ({self.advice()})")
        err.info(f"the client-side check of --filter dropped {plural(dropped, 'message')} of "
                 f"{seen} the broker sent: {'; '.join(reasons)}")


def render(m: StreamMessage, as_json: bool, partition: str | None = None) -> str:
    """The body as text, or a JSON object; with ``partition`` (the stream protocol's consume)
    the text starts with the partition and the offset, tab-separated, and the object says the
    partition."""
    if as_json:
        # proton gives AMQP timestamps in message properties as float seconds; print them in
        # ms like timestamp values everywhere else (application properties, annotations)
        props = {k: round(v * 1000) if k in _TIME_PROPERTIES and isinstance(v, (int, float)) else v
                 for k, v in m.properties.items()}
        head = {} if partition is None else {"partition": partition}
        return json.dumps({
            **head, "offset": m.offset, "filter_value": m.filter_value,
            "properties": jsonable(props),
            "application_properties": jsonable(m.application_properties),
            "annotations": jsonable({k: v for k, v in m.annotations.items()
                                     if k not in ("x-stream-offset", "x-stream-filter-value")}),
            "body": jsonable(m.body),
        }, ensure_ascii=False, sort_keys=False)
    if partition is not None:
        return f"{partition}\t{m.offset}\t{body_text(m.body)}"
    return body_text(m.body)


def describe(value: Any) -> str:
    v = getattr(value, "value", value)
    return json.dumps(jsonable(v), ensure_ascii=False)


def run(args: argparse.Namespace) -> int:
    try:
        try:
            start = parse_start(args.start)
        except ValueError as exc:
            raise ValueError(f"--from: {exc} ({FROM_SYNTAX})") from None
        amqp_props, app_props = split_properties(args.property)
        if args.sql is not None and (amqp_props or app_props):
            raise ValueError("--sql and --property are alternatives: a link has one kind of stage-2 filter")
        if args.count is not None and args.count < 1:
            raise ValueError("--count must be >= 1")
        if args.credit < 1:
            raise ValueError("--credit must be >= 1")
        bad_filter = check_filters("--sql" if args.sql is not None else "--property", sql=args.sql,
                                   properties=amqp_props or None,
                                   application_properties=app_props or None)
        if bad_filter:
            raise ValueError(bad_filter)
        over_stream = args.super_stream or args.single_active_consumer
        if over_stream:
            _check_stream_protocol_options(args, start, bool(amqp_props or app_props))
    except ValueError as exc:
        print(f"amqp-stream consume: error: {exc}", file=sys.stderr)
        return 2
    check = _Check(args.filter, args.check, args.match_unfiltered) \
        if args.filter and not args.raw and args.check != "none" else None
    err = _Err()
    printed = seen = 0
    if over_stream:
        return _run_over_stream(args, check, err)
    try:
        with open_client(args) as client:
            with client.consumer(args.stream, offset=start, filter_values=args.filter or None,
                                 match_unfiltered=args.match_unfiltered, sql=args.sql,
                                 properties=amqp_props or None, application_properties=app_props or None,
                                 credit=args.credit, consumer_name=args.name) as consumer:
                accepted = consumer.accepted_filters or {}
                shown = ", ".join(f"{k}={describe(v)}" for k, v in accepted.items()) or "none"
                err.info(f"filters in place: {shown}")
                missing = consumer.missing_filters
                if missing and not args.allow_missing_filters:
                    return fail("consume", f"the broker left out filter(s) {', '.join(missing)}: "
                                "messages would not be filtered as asked (--allow-missing-filters "
                                "to go on anyway)")
                for key in missing:
                    err.warn(f"the broker left out filter {key} ({describe(consumer.requested_filters[key])}): "
                             "it is not applied")
                try:
                    for m in _messages(consumer, args.no_follow):
                        seen += 1
                        if check is not None and not check.keep(m):
                            if check.missing == 1 and check.value(m) is None:
                                # say why at once: a following consume may print nothing for long
                                err.warn(f"dropping messages with {check.where()} (offset "
                                         f"{m.offset} the first): {check.advice()}")
                            consumer.accept(m)
                            continue
                        print(render(m, args.json), flush=True)
                        consumer.accept(m)  # a named consumer: done with it (else a no-op)
                        printed += 1
                        if args.count is not None and printed >= args.count:
                            break
                finally:
                    if check is not None:
                        check.report(err, seen)
    except StreamNotFound:
        return fail("consume", f"stream {args.stream!r} not found")
    except ClientError as exc:
        return fail("consume", exc)
    except BrokenPipeError:
        return 0
    return 0


def _check_stream_protocol_options(args: argparse.Namespace, start: Any, properties: bool) -> None:
    """What `--super-stream`/`--single-active-consumer` take; ``ValueError`` (exit 2) names the rest."""
    from amqp_stream.client.stream import parse_stream_url
    from amqp_stream.commands.consume_super import offset_spec_of

    if args.single_active_consumer and not args.name:
        raise ValueError("--single-active-consumer needs --name (the group's name)")
    if properties:
        raise ValueError("--property is for AMQP consumers; over the stream protocol use --sql")
    if args.no_follow:
        raise ValueError("--no-follow is for AMQP consumers (a drain finds the end); over the "
                         "stream protocol stop with --count or Ctrl-C")
    try:
        parse_stream_url(args.stream_url)
    except ClientError as exc:
        raise ValueError(f"--stream-url: {exc}") from None
    args.offset_spec = offset_spec_of(start)


def _run_over_stream(args: argparse.Namespace, check: _Check | None, err: _Err) -> int:
    """Consume a super stream or as a group member (``consume_super``), printing as above."""
    from amqp_stream.commands import consume_super

    counts = {"seen": 0, "printed": 0}

    def show(partition: str, m: StreamMessage) -> None:
        counts["seen"] += 1
        if check is not None and not check.keep(m):
            if check.missing == 1 and check.value(m) is None:
                err.warn(f"dropping messages with {check.where()} ({partition} offset {m.offset} "
                         f"the first): {check.advice()}")
            return
        print(render(m, args.json, partition), flush=True)
        counts["printed"] += 1

    def enough() -> bool:
        return args.count is not None and counts["printed"] >= args.count

    try:
        return consume_super.run(args, err, show, enough)
    except ClientError as exc:
        return fail("consume", exc)
    except BrokenPipeError:
        return 0
    finally:
        if check is not None:
            check.report(err, counts["seen"])


def _messages(consumer, no_follow: bool):
    if no_follow:
        for m in consumer.read_available():
            interrupt.check()
            yield m
        return
    while True:
        m = consumer.receive(timeout=1.0)
        interrupt.check()  # a Ctrl-C that proton's callbacks swallowed
        if m is not None:
            yield m


class _Err:
    """Status lines on stderr: yellow warnings on a terminal, plain `amqp-stream consume: ...` otherwise."""

    def __init__(self):
        self.console = None
        if is_terminal(sys.stderr):
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)

    def info(self, text: str) -> None:
        if self.console:
            self.console.print(f"[dim]{_escape(text)}[/dim]")
        else:
            print(f"amqp-stream consume: {text}", file=sys.stderr)

    def warn(self, text: str) -> None:
        if self.console:
            self.console.print(f"[yellow]warning:[/yellow] {_escape(text)}")
        else:
            print(f"amqp-stream consume: warning: {text}", file=sys.stderr)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
