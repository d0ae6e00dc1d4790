"""``amqp-stream list streams|connections|consumers|publishers|users [COLUMN ...]``: the
broker's objects as ``rabbitmqctl list_*`` and ``rabbitmq-streams list_stream_*`` print them,
read from the management HTTP API.

Why the HTTP API: it is the one place that sees both protocols' connections and consumers, it
answers with RabbitMQ's field names (so the columns are RabbitMQ's info keys), and it applies
the user's tags (a management user lists its own connections, as with RabbitMQ). Columns are
chosen by name after the kind; without any, the defaults are rabbitmqctl's (``list_queues``:
name messages; ``list_connections``: user peer_host peer_port state; ``list_consumers``: its
keys less the channel pid and activity status; ``list_users``: user tags;
``rabbitmq-streams list_stream_publishers``: its keys less the connection pid and node). An
unknown column is a usage error (exit 2) naming the valid ones. ``--format table`` prints a
header and tab-separated rows (lists and maps as JSON), ``json`` one JSON array of objects.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

from amqp_stream.commands.connect import fail
from amqp_stream.words import did_you_mean

__all__ = ["add_arguments", "run", "KINDS", "DEFAULT_MANAGEMENT_URL", "ApiClient", "ApiError"]

DEFAULT_MANAGEMENT_URL = "http://127.0.0.1:15672"

Row = dict[str, Any]
Column = Callable[[Row], Any]


def _key(name: str) -> Column:
    return lambda row: row.get(name)


def _queue(row: Row) -> Any:
    return (row.get("queue") or {}).get("name")


def _details(row: Row, key: str) -> Any:
    details = row.get("connection_details") or row.get("channel_details") or {}
    return details.get(key)


def _columns(*names: str, **special: Column) -> dict[str, Column]:
    return {**{n: _key(n) for n in names}, **special}


# kind -> (API path, columns (name -> value of a row), default columns)
KINDS: dict[str, tuple[str, dict[str, Column], tuple[str, ...]]] = {
    "streams": ("/api/queues", _columns(
        "name", "messages", "type", "vhost", "durable", "arguments", "consumers", "segments",
        "committed_offset", "first_offset", "leader", "members", "online", "node", "state"),
        ("name", "messages")),
    "connections": ("/api/connections", _columns(
        "name", "user", "peer_host", "peer_port", "host", "port", "protocol", "ssl",
        "ssl_protocol", "state",
        "vhost", "node", "client_properties", "user_provided_name", "frame_max", "timeout",
        "auth_mechanism", "connected_at", "channels", "channel_max", "recv_oct", "recv_cnt",
        "send_oct", "send_cnt", "send_pend", "container_id"),
        ("user", "peer_host", "peer_port", "state")),
    "consumers": ("/api/consumers", _columns(
        "consumer_tag", "ack_required", "prefetch_count", "active", "activity_status", "arguments",
        queue_name=_queue, connection_name=lambda r: _details(r, "connection_name"),
        user=lambda r: _details(r, "user"), node=lambda r: _details(r, "node"),
        offset=_key("offset"), offset_lag=_key("offset_lag"),
        credits=_key("credits"), messages_consumed=_key("consumed")),
        ("queue_name", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments")),
    "publishers": ("/api/stream/publishers", _columns(
        "publisher_id", "reference", stream=_queue,
        connection_name=lambda r: _details(r, "name"), node=lambda r: _details(r, "node"),
        user=lambda r: _details(r, "user"), messages_published=_key("published"),
        messages_confirmed=_key("confirmed"), messages_errored=_key("errored")),
        ("publisher_id", "stream", "reference", "messages_published", "messages_confirmed",
         "messages_errored")),
    "users": ("/api/users", _columns(
        "tags", "hashing_algorithm", "limits", user=_key("name")),
        ("user", "tags")),
}

STREAM_TAG = "stream.subid-"  # a stream subscription's consumer tag in /api/consumers
STREAM_FIELDS = ("credits", "consumed")  # a subscription's, from /api/stream/consumers


class ApiError(Exception):
    """A request the API did not answer with 2xx, or could not be made (``status`` 0)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


class ApiClient:
    """GETs against the management API with basic auth (urllib: nothing to install)."""

    def __init__(self, url: str, user: str, password: str, timeout: float):
        self.url, self.timeout = url.rstrip("/"), timeout
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Authorization": self.auth})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("reason", exc.reason)
            except ValueError:
                reason = exc.reason
            if exc.code == 401:
                reason = (f"{reason}: the API takes users with a management tag "
                          f"(--user, --password)")
            raise ApiError(exc.code, f"{self.url} answered {exc.code}: {reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            raise ApiError(0, f"cannot reach the management API at {self.url}: {why} "
                              f"(--management-url; the broker's --management-port)") from None


def add_management_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("management API")
    g.add_argument("--management-url", metavar="URL",
                   default=os.environ.get("AMQP_STREAM_MANAGEMENT_URL", DEFAULT_MANAGEMENT_URL),
                   help="the management HTTP API (default: $AMQP_STREAM_MANAGEMENT_URL or "
                        "%(default)s)")
    g.add_argument("--user", default=os.environ.get("AMQP_STREAM_USER"),
                   help="user (default: $AMQP_STREAM_USER, else guest as rabbitmqadmin)")
    g.add_argument("--password", default=os.environ.get("AMQP_STREAM_PASSWORD"),
                   help="password (default: $AMQP_STREAM_PASSWORD, else guest)")
    g.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="seconds to wait for an answer (default: %(default)s)")


def _management_url(text: str) -> str:
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(f"not an http:// or https:// URL: {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=list(KINDS), help="what to list")
    parser.add_argument("columns", nargs="*", metavar="COLUMN",
                        help="columns to show (default: rabbitmqctl's; an unknown one is "
                             "refused with the valid ones listed)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="a header and tab-separated rows (the default), or one JSON array")
    add_management_arguments(parser)


def api_client(args: argparse.Namespace) -> ApiClient:
    url = _management_url(args.management_url)
    return ApiClient(url, args.user or "guest", args.password or "guest", args.timeout)


def _with_stream_fields(client: ApiClient, rows: list[Row]) -> list[Row]:
    """Stream subscriptions' credits and consumed count (``/api/stream/consumers``) on their
    rows of ``/api/consumers`` (whose offset and offset_lag are the next offset sent, for
    either protocol)."""
    by_key = {(_details(s, "name"), s.get("subscription_id")): s
              for s in client.get("/api/stream/consumers")}
    for row in rows:
        tag = str(row.get("consumer_tag", ""))
        if tag.startswith(STREAM_TAG) and tag[len(STREAM_TAG):].isdigit():
            sub = by_key.get((_details(row, "connection_name"), int(tag[len(STREAM_TAG):])))
            if sub is not None:
                row.update({k: sub.get(k) for k in STREAM_FIELDS})
    return rows


def cell(value: Any) -> str:
    """A table cell: text as is, true/false, lists and maps as JSON, nothing for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def run(args: argparse.Namespace) -> int:
    path, columns, defaults = KINDS[args.kind]
    chosen = args.columns or list(defaults)
    unknown = [c for c in chosen if c not in columns]
    if unknown:
        hint = did_you_mean(unknown[0], columns)
        print(f"amqp-stream list {args.kind}: error: unknown column {unknown[0]!r}{hint}; "
              f"valid columns: {', '.join(sorted(columns))}", file=sys.stderr)
        return 2
    try:
        client = api_client(args)
    except argparse.ArgumentTypeError as exc:
        print(f"amqp-stream list: error: --management-url: {exc}", file=sys.stderr)
        return 2
    try:
        rows = client.get(path)
        if args.kind == "consumers" and {"credits", "messages_consumed"} & set(chosen):
            rows = _with_stream_fields(client, rows)
    except ApiError as exc:
        return fail("list", exc)
    table = [{c: columns[c](row) for c in chosen} for row in rows]
    if args.format == "json":
        print(json.dumps(table, ensure_ascii=False, default=str))
        return 0
    print("\t".join(chosen))
    for row in table:
        print("\t".join(cell(row[c]) for c in chosen))
    return 0
