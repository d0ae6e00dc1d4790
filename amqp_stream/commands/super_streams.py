"""`amqp-stream create-super-stream|delete-super-stream|super-streams`: super streams.

Why two protocols: RabbitMQ makes and removes a super stream with the stream protocol's
`CreateSuperStream`/`DeleteSuperStream` (what `rabbitmq-streams add_super_stream` and the stream
clients do), so `create-super-stream` and `delete-super-stream` send those (`--stream-url`) and
work against RabbitMQ 3.13+ too. Partitions are named as `rabbitmq-streams` names them:
`--partitions N` makes `<name>-0` .. `<name>-<N-1>` bound with keys `0` .. `N-1`;
`--binding-keys a,b` makes `<name>-a`, `<name>-b` bound with `a`, `b`. `super-streams` lists them
through the management node (`--url`): the exchanges whose arguments carry `x-super-stream`
(`GET /exchanges`, this broker's extension) and their partitions in order
(`GET /bindings?src=<name>`, by `x-stream-partition-order`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from urllib.parse import urlencode

from amqp_stream.client import ClientError, ManagementError
from amqp_stream.client.stream import StreamClient
from amqp_stream.commands.connect import (add_connection_arguments, add_stream_url_argument, fail,
                                           open_client)
from amqp_stream.commands.manage import add_stream_arguments, stream_arguments

SUPER_STREAM = "x-super-stream"
PARTITION_ORDER = "x-stream-partition-order"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    command = parser.prog.rsplit(" ", 1)[-1]
    if command == "super-streams":
        parser.add_argument("--json", action="store_true",
                            help='one JSON object: {name: [partition, ...]}')
        add_connection_arguments(parser)
        return
    parser.add_argument("name", help="super stream name")
    if command == "create-super-stream":
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--partitions", type=int, metavar="N",
                           help="N partitions <name>-0 .. <name>-<N-1>, keys 0 .. N-1")
        which.add_argument("--binding-keys", metavar="K[,K...]",
                           help="one partition <name>-<K> per binding key K")
        add_stream_arguments(parser, command)
    add_stream_url_argument(parser, "the stream protocol listener ([user:password@] and /vhost "
                                    "may be given)")
    parser.add_argument("--user", default=os.environ.get("AMQP_STREAM_USER"),
                        help="user (default: $AMQP_STREAM_USER, else the URL's, else guest)")
    parser.add_argument("--password", default=os.environ.get("AMQP_STREAM_PASSWORD"),
                        help="password (default: $AMQP_STREAM_PASSWORD, else the URL's)")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S",
                        help="seconds to wait for the broker (default: %(default)s)")


def layout(name: str, partitions: int | None, binding_keys: str | None) -> tuple[list[str], list[str]]:
    """(partition streams, binding keys) as ``rabbitmq-streams add_super_stream`` makes them."""
    if partitions is not None:
        if partitions < 1:
            raise ValueError("--partitions must be at least 1")
        keys = [str(i) for i in range(partitions)]
    else:
        keys = [k.strip() for k in (binding_keys or "").split(",")]
        if not all(keys):
            raise ValueError("--binding-keys needs non-empty keys, comma-separated")
    return [f"{name}-{k}" for k in keys], keys


def run(args: argparse.Namespace) -> int:
    command = args.command
    try:
        if command == "super-streams":
            return _list(args)
        with StreamClient(args.stream_url, user=args.user, password=args.password,
                          timeout=args.timeout) as client:
            if command == "create-super-stream":
                try:
                    streams, keys = layout(args.name, args.partitions, args.binding_keys)
                except ValueError as exc:
                    return fail(command, exc)
                # the stream protocol's names (no x-) and string values
                arguments = {key.removeprefix("x-"): _text(value)
                             for key, value in stream_arguments(args).items()}
                client.create_super_stream(args.name, streams, keys, arguments)
                print(f"created super stream {args.name}: {', '.join(streams)}")
            else:
                client.delete_super_stream(args.name)
                print(f"deleted super stream {args.name}")
    except ManagementError as exc:
        reason = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str)
        return fail(command, f"the broker answered {exc.status}: {reason}")
    except ClientError as exc:
        return fail(command, exc)
    return 0


def _text(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def partitions_of(bindings: list[dict]) -> list[str]:
    """A super stream's partition streams in order (``x-stream-partition-order``; bindings
    without it last), each once, as ``rabbit_stream_manager:partitions`` lists them."""
    def order(b: dict) -> tuple[int, int]:
        value = (b.get("arguments") or {}).get(PARTITION_ORDER)
        return (0, int(value)) if isinstance(value, int) else (1, 0)
    streams = [b["destination_queue"] for b in sorted(bindings, key=order)
               if "destination_queue" in b]
    return list(dict.fromkeys(streams))


def _list(args: argparse.Namespace) -> int:
    with open_client(args) as client:
        exchanges = client.request("GET", "/exchanges", ok=(200,))[1] or []
        found = {}
        for x in exchanges:
            if (x.get("arguments") or {}).get(SUPER_STREAM) is True:
                query = "?" + urlencode({"src": x["name"]})
                found[x["name"]] = partitions_of(
                    client.request("GET", "/bindings" + query, ok=(200,))[1] or [])
    if args.json:
        json.dump(found, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print("name\tpartitions")
        for name, streams in sorted(found.items()):
            print(f"{name}\t{','.join(streams)}")
    return 0
