"""`amqp-stream declare|delete|info STREAM`: stream management through the `/management` node.

Why through AMQP and not the data directory: these commands work against any broker speaking
RabbitMQ 4.2's HTTP-over-AMQP management protocol (ours or RabbitMQ), with the same
authentication as publishing. Output is plain and parseable: `declare` and `delete` print one
line, `info` prints the queue info map as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from amqp_stream.client import ClientError, ManagementError, StreamNotFound, queue_address
from amqp_stream.commands.connect import add_connection_arguments, fail, open_client
from amqp_stream.words import plural

# option dest -> stream argument (amqp-interface.md "Stream arguments")
STREAM_ARGUMENTS: dict[str, str] = {
    "max_length_bytes": "x-max-length-bytes",
    "max_age": "x-max-age",
    "max_segment_size_bytes": "x-stream-max-segment-size-bytes",
    "filter_size_bytes": "x-stream-filter-size-bytes",
    "initial_cluster_size": "x-initial-cluster-size",
    "derived_keys": "x-stream-derived-filter-keys",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stream", help="stream name")
    add_connection_arguments(parser)
    # The dispatcher builds one parser per command with this function; the stream arguments only
    # mean something to `declare`, so only its parser (and --help) has them.
    if parser.prog.endswith(" declare"):
        add_stream_arguments(parser, "declare")


def add_stream_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The stream arguments a new stream takes (``declare``, ``create-super-stream``)."""
    g = parser.add_argument_group(f"stream arguments ({command})")
    g.add_argument("--max-length-bytes", type=int, metavar="N",
                   help="retention: keep at most N bytes (x-max-length-bytes)")
    g.add_argument("--max-age", metavar="AGE",
                   help="retention: drop segments older than AGE, e.g. 7D, 12h (x-max-age; units Y M D h m s)")
    g.add_argument("--max-segment-size-bytes", type=int, metavar="N",
                   help="segment file size (x-stream-max-segment-size-bytes)")
    g.add_argument("--filter-size-bytes", type=int, metavar="N",
                   help="Bloom filter size per chunk, 16..255 (x-stream-filter-size-bytes)")
    g.add_argument("--derived-keys", type=_names, metavar="K[,K...]",
                   help="fields the broker indexes per block of records, so that filters requiring "
                        "their values skip what cannot match: application properties, or p. and a "
                        "properties field (x-stream-derived-filter-keys, an extension)")
    g.add_argument("--initial-cluster-size", type=int, metavar="N",
                   help="members of the stream on a cluster, the leader included "
                        "(x-initial-cluster-size; default 3, or every node when fewer; "
                        "docs/cluster.md)")


def _names(text: str) -> list[str]:
    """A comma-separated list of names (the broker checks them)."""
    return [name.strip() for name in text.split(",")]


def stream_arguments(args: argparse.Namespace) -> dict[str, Any]:
    return {arg: getattr(args, dest) for dest, arg in STREAM_ARGUMENTS.items()
            if getattr(args, dest, None) is not None}


def run(args: argparse.Namespace) -> int:
    command = args.command
    arguments = stream_arguments(args)
    try:
        with open_client(args) as client:
            if command == "declare":
                status, body = client.request("PUT", queue_address(args.stream), _declare_body(arguments), ok=(200, 201))
                verb = "created" if status == 201 else "exists"
                print(f"{verb} {args.stream}")
            elif command == "delete":
                # deleting a missing stream succeeds (RabbitMQ's semantics), but say so
                existed = client.exists(args.stream)
                count = client.delete(args.stream)
                print(f"deleted {args.stream} ({plural(count, 'message')})" if existed else
                      f"no stream {args.stream}: nothing deleted")
            else:
                info = client.info(args.stream)
                json.dump(info, sys.stdout, indent=2, sort_keys=True, default=str)
                sys.stdout.write("\n")
    except StreamNotFound:
        return fail(command, f"stream {args.stream!r} not found")
    except ManagementError as exc:
        reason = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str)
        if exc.status == 409 and "exists with other arguments" in reason:
            # the broker's reason says it all (and names the arguments that differ)
            return fail(command, reason.removeprefix("PRECONDITION_FAILED: "))
        what = {409: "exists with other arguments", 400: "refused"}.get(exc.status, f"answered {exc.status}")
        return fail(command, f"stream {args.stream!r} {what}: {reason}")
    except ClientError as exc:
        return fail(command, exc)
    return 0


def _declare_body(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"durable": True, "exclusive": False, "auto_delete": False,
            "arguments": {"x-queue-type": "stream", **arguments}}
