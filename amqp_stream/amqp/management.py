"""The ``/management`` node's request handling (HTTP over AMQP), as pure functions.

Strategy: a request is (method, path, body) taken from the message's ``subject``, ``to`` and
amqp-value body; the answer is a ``Response`` (status code and body) that the server adapter puts
in a message with ``correlation-id`` = the request's ``message-id``. Everything the node decides
(paths, the declare body's form, 201/200/400/404/405/501) lives here and is tested without a
socket; the stream arguments' rules are ``amqp_stream.arguments``'s, and the streams are reached
through the small ``Streams`` protocol (the broker's core), whose ``BrokerError``s become
statuses.

Behaviour follows RabbitMQ 4.2's rabbit_amqp_management for stream queues (see
../shared/design/amqp-interface.md); exchanges and bindings are not supported by this broker and
answer 501 with a message that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from amqp_stream import arguments as stream_arguments
from amqp_stream.amqp import addresses
from amqp_stream.errors import BadRequest, BrokerError, NotAllowed, NotFound, NotImplementedByBroker

__all__ = ["Response", "Streams", "handle", "validate_declare"]


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


def handle(method: Any, path: Any, body: Any, streams: Streams) -> Response:
    """Answer one request; never raises for bad input."""
    try:
        return _handle(method, path, body, streams)
    except BrokerError as exc:
        return Response(exc.status, exc.description)


def _handle(method: Any, path: Any, body: Any, streams: Streams) -> Response:
    if not isinstance(method, str) or not isinstance(path, str):
        raise BadRequest("a request needs subject (the HTTP method) and to (the path)")
    method = method.upper()
    try:
        address = addresses.parse(path)
    except addresses.AddressError as exc:
        raise BadRequest(str(exc)) from None
    if address.kind in ("exchange", "bindings"):
        raise NotImplementedByBroker(f"{method} {path}: exchanges and bindings are not supported by "
                                   f"this broker (streams only; publish to /queues/<name>)")
    if address.kind == "queue_messages":
        if method == "DELETE":
            if not streams.exists(address.name):
                raise NotFound(f"queue '{address.name}' not found")
            raise BadRequest(f"purge is not supported for stream '{address.name}': "
                                       f"streams are not purged (use retention, or delete the stream)")
        raise NotAllowed(f"{method} is not allowed on {path}")
    if address.kind != "queue":
        raise BadRequest(f"unsupported management path {path!r}")
    name = address.name
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
