"""`amqp-stream declare-exchange|delete-exchange|exchanges|bind|unbind|bindings`: exchanges and
bindings through the `/management` node.

Why through AMQP: as `declare`/`delete`/`info`, these speak RabbitMQ 4.2's HTTP-over-AMQP
management (`PUT`/`DELETE /exchanges/<x>`, `POST /bindings`, `GET /bindings?src=..&dstq=..&key=..`,
`DELETE /bindings/<location>`), so `declare-exchange`, `delete-exchange`, `bind` and `unbind`
work against RabbitMQ too. `exchanges` (all of them) and `bindings` with only some of source,
destination and key use this broker's extensions (`GET /exchanges`, a partial `GET /bindings`).
Output: one line per change; listings as tab-separated lines under a header, or `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import urlencode

from amqp_stream.client import ClientError, ManagementError
from amqp_stream.client.links import path_segment
from amqp_stream.commands.connect import add_connection_arguments, fail, open_client

TYPES = ("direct", "fanout", "topic", "headers", "x-local-random")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    command = parser.prog.rsplit(" ", 1)[-1]
    if command in ("declare-exchange", "delete-exchange"):
        parser.add_argument("name", help="exchange name")
    if command == "declare-exchange":
        parser.add_argument("--type", default="direct", choices=TYPES,
                            help="exchange type (default: %(default)s)")
        parser.add_argument("--auto-delete", action="store_true", help="auto_delete (RabbitMQ's)")
        parser.add_argument("--internal", action="store_true",
                            help="internal: reached only through exchange-to-exchange bindings")
        parser.add_argument("--argument", action="append", default=[], type=_argument,
                            metavar="KEY=VALUE", help="an exchange argument (repeatable; VALUE "
                            "as JSON when it parses, else text), e.g. alternate-exchange=ae")
    if command in ("bind", "unbind"):
        parser.add_argument("source", help="source exchange")
        parser.add_argument("destination", help="destination stream (or exchange with --exchange)")
        parser.add_argument("--key", default="", help="binding key (default: empty)")
        parser.add_argument("--exchange", action="store_true",
                            help="the destination is an exchange")
    if command == "bind":
        parser.add_argument("--argument", action="append", default=[], type=_argument,
                            metavar="KEY=VALUE", help="a binding argument (repeatable), e.g. "
                            "x-match=any and header values for a headers exchange")
    if command == "bindings":
        parser.add_argument("--source", help="only bindings from this exchange")
        parser.add_argument("--destination", help="only bindings to this stream (or exchange "
                            "with --exchange)")
        parser.add_argument("--exchange", action="store_true",
                            help="--destination is an exchange")
        parser.add_argument("--key", help="only bindings with this key")
    if command in ("exchanges", "bindings"):
        parser.add_argument("--json", action="store_true", help="the broker's answer as JSON")
    add_connection_arguments(parser)


def _argument(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def run(args: argparse.Namespace) -> int:
    command = args.command
    try:
        with open_client(args) as client:
            if command == "declare-exchange":
                client.request("PUT", "/exchanges/" + path_segment(args.name), {
                    "type": args.type, "durable": True, "auto_delete": args.auto_delete,
                    "internal": args.internal, "arguments": dict(args.argument)}, ok=(204,))
                print(f"declared exchange {args.name} ({args.type})")
            elif command == "delete-exchange":
                client.request("DELETE", "/exchanges/" + path_segment(args.name), ok=(204,))
                print(f"deleted exchange {args.name}")
            elif command == "bind":
                kind = "exchange" if args.exchange else "queue"
                client.request("POST", "/bindings", {
                    "source": args.source, f"destination_{kind}": args.destination,
                    "binding_key": args.key, "arguments": dict(args.argument)}, ok=(204,))
                print(f"bound {args.destination} to {args.source} with key {args.key!r}")
            elif command == "unbind":
                return _unbind(client, args)
            elif command == "exchanges":
                _print(client.request("GET", "/exchanges", ok=(200,))[1], args.json,
                       ("name", "type", "durable", "auto_delete", "internal", "arguments"))
            else:
                query = _query(args.source, args.destination, args.exchange, args.key)
                _print(client.request("GET", "/bindings" + query, ok=(200,))[1], args.json,
                       ("source", "destination", "destination_type", "binding_key", "arguments"))
    except ManagementError as exc:
        reason = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str)
        return fail(command, f"the broker answered {exc.status}: {reason}")
    except ClientError as exc:
        return fail(command, exc)
    return 0


def _query(source: str | None, destination: str | None, exchange: bool, key: str | None) -> str:
    fields = {"src": source, ("dste" if exchange else "dstq"): destination, "key": key}
    given = {k: v for k, v in fields.items() if v is not None}
    return "?" + urlencode(given) if given else ""


def _unbind(client: Any, args: argparse.Namespace) -> int:
    """RabbitMQ's DELETE takes a binding's location: find it (every binding with that source,
    destination and key, whatever its arguments) and delete each."""
    query = _query(args.source, args.destination, args.exchange, args.key)
    found = client.request("GET", "/bindings" + query, ok=(200,))[1] or []
    for binding in found:
        client.request("DELETE", binding["location"], ok=(204,))
    if not found:
        print(f"no binding of {args.destination} to {args.source} with key {args.key!r}: "
              f"nothing unbound")
    else:
        print(f"unbound {args.destination} from {args.source} with key {args.key!r}")
    return 0


def _print(rows: list[dict], as_json: bool, columns: tuple[str, ...]) -> None:
    if as_json:
        json.dump(rows, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
        return
    print("\t".join(columns))
    for row in rows:
        row = dict(row)
        for kind in ("queue", "exchange"):  # a binding's destination, as RabbitMQ names it
            if f"destination_{kind}" in row:
                row["destination"] = row[f"destination_{kind}"]
                row["destination_type"] = "stream" if kind == "queue" else "exchange"
        print("\t".join(_cell(row.get(c)) for c in columns))


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str) if value else ""
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)
