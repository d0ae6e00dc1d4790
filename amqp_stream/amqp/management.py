"""The ``/management`` node's request handling (HTTP over AMQP), as pure functions.

Strategy: a request is (method, path, body) taken from the message's ``subject``, ``to`` and
amqp-value body; the answer is a ``Response`` (status code and body) that the server adapter puts
in a message with ``correlation-id`` = the request's ``message-id``. Everything the node decides
(paths, the declare body's form, statuses) lives here and is tested without a
socket; the stream arguments' rules are ``amqp_stream.arguments``'s, and the streams are reached
through the small ``Streams`` protocol (the broker's core), whose ``BrokerError``s become
statuses.

Behaviour follows RabbitMQ 4.2's rabbit_amqp_management for stream queues; exchanges and
bindings are ``exchange_management``'s (over ``amqp_stream.definitions``). Our extensions:
consumer offsets and publisher sequences of a stream, one at a time or all (``_tracking``);
``GET /exchanges[/<x>]`` and ``GET /bindings`` by any of source, destination and key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from amqp_stream import arguments as stream_arguments
from amqp_stream.amqp import addresses, exchange_management, tracking
from amqp_stream.amqp.source_filters import parse_start
from amqp_stream.definitions import Definitions
from amqp_stream.errors import BadRequest, BrokerError, Forbidden, InternalError, NotAllowed, NotFound
from amqp_stream.users import CONFIGURE, READ, WRITE
from storage import StorageError, StreamClosedError

__all__ = ["Response", "Streams", "handle", "validate_declare", "check_resource", "check_binding"]


@dataclass(frozen=True)
class Response:
    status: int
    body: Any = None


class Streams(Protocol):
    """What the node needs of the broker's core (``amqp_stream.core.Core``)."""
    def exists(self, name: str) -> bool: ...
    def declare(self, name: str, arguments: dict) -> bool: ...
    def delete(self, name: str) -> int | None: ...
    def info(self, name: str) -> dict: ...
    def stream(self, name: str) -> Any: ...  # a StreamEntry (``.stream``: storage's Stream)
    def offsets_elsewhere(self, name: str) -> Any: ...  # the leader's, on a cluster replica
    definitions: Definitions


def validate_declare(body: Any) -> dict:
    """The stream arguments of a ``PUT /queues/<q>`` body, normalised; ``BadRequest``
    for anything a stream cannot be."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequest(f"declare body must be a map, not {type(body).__name__}")
    for key in body:
        if not isinstance(key, str):
            raise BadRequest(f"declare body key {key!r} is not a string")
    for prop, required in (("durable", True), ("exclusive", False), ("auto_delete", False)):
        if prop in body:
            if not isinstance(body[prop], bool):
                raise BadRequest(f"{prop} must be a boolean")
            if body[prop] is not required:
                raise BadRequest(f"PRECONDITION_FAILED: a stream is always "
                                           f"{'durable' if prop == 'durable' else 'not ' + prop}")
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise BadRequest("arguments must be a map")
    return stream_arguments.validate(arguments)


Allow = Callable[[str, str], None]
"""``allow(what, name)``: raises ``Forbidden`` unless the requester may ``what``
(``users.CONFIGURE``/``WRITE``/``READ``) the resource ``name``."""


def _allow_all(what: str, name: str) -> None:
    pass


def handle(method: Any, path: Any, body: Any, streams: Streams, allow: Allow = _allow_all) -> Response:
    """Answer one request; never raises for bad input. Permissions as
    ``rabbit_amqp_management``: declare and delete need configure, GET any of the three, purge
    read; our tracking paths read (storing an offset too, as the stream protocol's
    StoreOffset); a refusal is 403."""
    try:
        return _handle(method, path, body, streams, allow)
    except BrokerError as exc:
        return Response(exc.status, exc.description)


def _any_access(allow: Allow, name: str) -> None:
    """``check_resource_any_access``: read, write or configure (the last refusal raised)."""
    for what in (READ, WRITE):
        try:
            return allow(what, name)
        except Forbidden:
            pass
    allow(CONFIGURE, name)


def check_resource(allow: Allow, method: str, name: str) -> None:
    """A queue's or an exchange's rule: declare and delete need configure, GET any access
    (the HTTP API checks PUT and DELETE with it too)."""
    if method in ("PUT", "DELETE"):
        allow(CONFIGURE, name)
    elif method == "GET":
        _any_access(allow, name)


def check_binding(allow: Allow, source: str, destination: str) -> None:
    """Binding or unbinding: write on the destination, read on the source
    (``rabbit_amqp_management:binding_action``'s checks)."""
    allow(WRITE, destination)
    allow(READ, source)


def _handle(method: Any, path: Any, body: Any, streams: Streams, allow: Allow) -> Response:
    if not isinstance(method, str) or not isinstance(path, str):
        raise BadRequest("a request needs subject (the HTTP method) and to (the path)")
    method = method.upper()
    if path == "/exchanges":  # our extension: all of them
        return Response(*exchange_management.list_exchanges(method, streams.definitions))
    try:
        address = addresses.parse(path)
    except addresses.AddressError as exc:
        raise BadRequest(str(exc)) from None
    if address.kind == "exchange":
        check_resource(allow, "GET" if method not in ("PUT", "DELETE") else method, address.name)
        return Response(*exchange_management.exchanges(method, address, body,
                                                       streams.definitions))
    if address.kind == "bindings":
        def may_bind(source: str, destination: str) -> None:
            check_binding(allow, source, destination)
        return Response(*exchange_management.bindings(method, address, body,
                                                      streams.definitions, may_bind))
    if address.kind == "queue_messages":
        if method == "DELETE":
            allow(READ, address.name)
            if not streams.exists(address.name):
                raise NotFound(f"queue '{address.name}' not found")
            raise BadRequest(f"purge is not supported for stream '{address.name}': "
                                       f"streams are not purged (use retention, or delete the stream)")
        raise NotAllowed(f"{method} is not allowed on {path}")
    if address.kind in ("queue_offset", "queue_sequence", "queue_tracking"):
        allow(READ, address.name)
        return _tracking(method, address, body, streams)
    if address.kind != "queue":
        raise BadRequest(f"unsupported management path {path!r}")
    name = address.name
    check_resource(allow, method, name)
    if method == "PUT":
        created = streams.declare(name, validate_declare(body))
        return Response(201 if created else 200, streams.info(name))
    if method == "GET":
        if not streams.exists(name):
            raise NotFound(f"queue '{name}' not found")
        return Response(200, streams.info(name))
    if method == "DELETE":
        count = streams.delete(name)
        return Response(200, {"message_count": int(count or 0)})
    raise NotAllowed(f"{method} is not allowed on {path}")


def _tracking(method: str, address: addresses.Address, body: Any, streams: Streams) -> Response:
    """Our extension: ``GET /queues/<q>/sequences/<reference>`` answers ``{"sequence": n}`` (0
    when unknown: RabbitMQ's QueryPublisherSequence); ``GET /queues/<q>/offsets/<consumer>``
    ``{"offset": n}`` (404 when none is stored: QueryOffset's no_offset); ``PUT`` there with
    ``{"offset": n}`` stores one (StoreOffset: queued like a publish, durable per the fsync
    policy right after), with ``{"spec": <offset spec>}`` moves the name to where a link with
    that ``rabbitmq:stream-offset-spec`` would start now (``tracking.resume_offset``; the offset
    before it is stored, 0 at least: a stored offset is the last one processed, as RabbitMQ's
    reset_offset stores 0) and answers ``{"offset": stored, "resumes_at": stored + 1}``;
    ``GET /queues/<q>/tracking`` lists every consumer offset and publisher sequence
    (``tracking.listing``)."""
    stream = streams.stream(address.name).stream
    key = address.key or ""
    try:
        if address.kind == "queue_tracking":
            if method != "GET":
                raise NotAllowed(f"{method} is not allowed on a stream's tracking")
            return Response(200, tracking.listing(stream))
        if address.kind == "queue_sequence":
            if method != "GET":
                raise NotAllowed(f"{method} is not allowed on a publisher sequence")
            return Response(200, {"sequence": stream.query_sequence(key)})
        if method == "GET":
            offset = stream.query_offset(key)
            if offset is None:
                raise NotFound(f"no offset stored for consumer '{key}' on stream '{address.name}'")
            return Response(200, {"offset": offset})
        if method == "PUT":
            # a cluster node that does not lead the stream stores it on the leader
            target = streams.offsets_elsewhere(address.name) or stream
            if isinstance(body, dict) and "spec" in body and "offset" not in body:
                spec = parse_start(body["spec"], now_ms=int(time.time() * 1000))
                stored = max(tracking.resume_offset(stream, spec) - 1, 0)
                target.store_offset(key, stored)
                return Response(200, {"offset": stored, "resumes_at": stored + 1})
            value = body.get("offset") if isinstance(body, dict) else None
            if type(value) is bool or not isinstance(value, int) or not 0 <= value < 1 << 64:
                raise BadRequest('store an offset with the body {"offset": <ulong>}, or move one '
                                 'with {"spec": <offset spec>}')
            target.store_offset(key, int(value))
            return Response(200, {"offset": int(value)})
        raise NotAllowed(f"{method} is not allowed on a consumer offset")
    except StreamClosedError as exc:
        raise InternalError(f"stream '{address.name}': {exc}") from None
    except StorageError as exc:  # a name or value out of range
        raise BadRequest(str(exc)) from None
