"""`amqp-stream tracking STREAM` and `amqp-stream reset-offset STREAM NAME SPEC`: a stream's
stored consumer offsets and publisher sequences, through the `/management` node.

Why through the broker: the tracking state lives in the stream (osiris's records) and only the
broker knows it as of now (what is queued for the disk included), and only the broker can
resolve an offset spec (`last`, a timestamp) against the stream as it is. `tracking` prints
what `rabbitmq-streams list_stream_tracking` prints (type `offset` or `writer`, name, value)
and, for each consumer name, its lag: the stream's committed offset (`next_offset` of the
queue's info, less one) minus the stored offset, 0 at least; as tab-separated lines under a
header, or JSON; `reset-offset` moves one consumer name (as
RabbitMQ 4.2's `reset_offset`, with a spec of where the name resumes) and prints the result.
Both use this broker's management extension (`GET /queues/<q>/tracking`,
`PUT /queues/<q>/offsets/<name>`), so they work against this broker only.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from amqp_stream.client import ClientError, ManagementError, StreamNotFound, offset_value, queue_address
from amqp_stream.client.links import path_segment
from amqp_stream.commands.connect import add_connection_arguments, fail, open_client

SPEC_HELP = ("first | last | next | offset N (or N) | timestamp MS_OR_ISO_TIME (or @MS) | an "
             "interval such as 10m: where NAME resumes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", help="stream name")
    if parser.prog.endswith(" reset-offset"):
        parser.add_argument("name", help="consumer name")
        parser.add_argument("spec", nargs="+", metavar="SPEC", help=SPEC_HELP)
    else:
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--all", action="store_true", help="offsets and writers (the default)")
        which.add_argument("--offset", action="store_true", help="only consumer offsets")
        which.add_argument("--writer", action="store_true", help="only publisher sequences")
        parser.add_argument("--json", action="store_true",
                            help='one JSON object: {"offsets": {name: offset}, "sequences": {reference: id}}')
    add_connection_arguments(parser)


def parse_spec(words: list[str]) -> Any:
    """SPEC as the value sent (the broker resolves it): a name or interval as text, an offset
    as an integer, a timestamp as an AMQP timestamp."""
    from amqp_stream.commands.consume import parse_start

    text = " ".join(words).strip()
    head, _, rest = text.partition(" ")
    rest = rest.strip()
    try:
        if head == "offset" and rest:
            if not rest.isdigit():
                raise ValueError(f"offset N needs a non-negative integer, not {rest!r}")
            return int(rest)
        if head == "timestamp" and rest:
            return offset_value(parse_start("@" + rest if rest.isdigit() else rest))
        if rest:
            raise ValueError(f"not an offset spec: {text!r}")
        return offset_value(parse_start(text))
    except ValueError as exc:
        raise ValueError(f"{exc} ({SPEC_HELP})") from None


def _path(stream: str, *rest: str) -> str:
    return "/".join([queue_address(stream), *map(path_segment, rest)])


def run(args: argparse.Namespace) -> int:
    command = args.command
    spec = None
    if command == "reset-offset":
        try:
            spec = parse_spec(args.spec)
        except ValueError as exc:
            print(f"amqp-stream {command}: error: {exc}", file=sys.stderr)
            return 2
    try:
        with open_client(args) as client:
            if command == "reset-offset":
                _, body = client.request("PUT", _path(args.stream, "offsets", args.name), {"spec": spec},
                                         ok=(200,))
                print(f"consumer {args.name} on {args.stream}: stored offset {body['offset']}, "
                      f"resumes at offset {body['resumes_at']}")
                return 0
            _, body = client.request("GET", _path(args.stream, "tracking"), None, ok=(200,))
            _, info = client.request("GET", queue_address(args.stream), None, ok=(200,))
    except StreamNotFound:
        return fail(command, f"stream {args.stream!r} not found")
    except ManagementError as exc:
        reason = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str)
        return fail(command, f"the broker answered {exc.status}: {reason}")
    except ClientError as exc:
        return fail(command, exc)
    offsets = {} if args.writer else body.get("offsets", {})
    sequences = {} if args.offset else body.get("sequences", {})
    lags = lag(offsets, int(info["next_offset"]) - 1)
    if args.json:
        print(json.dumps({"offsets": offsets, "sequences": sequences, "lag": lags},
                         ensure_ascii=False))
        return 0
    print("type\tname\ttracking_value\tlag")
    for name, value in offsets.items():
        print(f"offset\t{name}\t{value}\t{lags[name]}")
    for name, value in sequences.items():
        print(f"writer\t{name}\t{value}\t")
    return 0


def lag(offsets: dict[str, int], committed: int) -> dict[str, int]:
    """Each consumer name's lag: messages committed after its stored offset (the last one it
    processed), 0 at least (a stored offset may be ahead of an empty stream)."""
    return {name: max(0, committed - offset) for name, offset in offsets.items()}
