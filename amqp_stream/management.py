"""The ``/management`` node's request handling (HTTP over AMQP), as pure functions.

Strategy: a request is (method, path, body) taken from the message's ``subject``, ``to`` and
amqp-value body; the answer is a ``Response`` (status code and body) that the server adapter puts
in a message with ``correlation-id`` = the request's ``message-id``. Everything the node decides
(paths, argument validation, 201/200/409/400/404/501) lives here and is tested without a socket;
the streams themselves are reached through the small ``Streams`` protocol (the registry).

Behaviour follows RabbitMQ 4.2's rabbit_amqp_management for stream queues (see
../shared/design/amqp-interface.md); exchanges and bindings are not supported by this broker and
answer 501 with a message that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import bloom
from amqp_stream import addresses
from storage import StorageError, parse_interval_ms

__all__ = ["Response", "ManagementError", "Streams", "handle", "validate_declare",
           "equivalent_arguments", "STREAM_ARGUMENTS"]

MAX_SEGMENT_SIZE = 3_000_000_000

# arguments a stream understands (others that RabbitMQ defines for other queue types are refused)
STREAM_ARGUMENTS = ("x-queue-type", "x-max-length-bytes", "x-max-age",
                    "x-stream-max-segment-size-bytes", "x-stream-filter-size-bytes",
                    "x-initial-cluster-size", "x-leader-locator")
_NOT_FOR_STREAMS = ("x-max-length", "x-message-ttl", "x-expires", "x-dead-letter-exchange",
                    "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-overflow",
                    "x-max-priority", "x-single-active-consumer", "x-queue-mode",
                    "x-delivery-limit", "x-max-in-memory-length", "x-max-in-memory-bytes",
                    "x-queue-master-locator", "x-queue-version")


@dataclass(frozen=True)
class Response:
    status: int
    body: Any = None


class ManagementError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


class Streams(Protocol):
    def exists(self, name: str) -> bool: ...
    def arguments(self, name: str) -> dict: ...
    def create(self, name: str, arguments: dict) -> None: ...
    def delete(self, name: str) -> int | None: ...
    def info(self, name: str) -> dict: ...


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_declare(body: Any) -> dict:
    """The stream arguments of a ``PUT /queues/<q>`` body, normalised; ``ManagementError(400)``
    for anything a stream cannot be."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ManagementError(400, f"declare body must be a map, not {type(body).__name__}")
    for key in body:
        if not isinstance(key, str):
            raise ManagementError(400, f"declare body key {key!r} is not a string")
    for prop, required in (("durable", True), ("exclusive", False), ("auto_delete", False)):
        if prop in body:
            if not isinstance(body[prop], bool):
                raise ManagementError(400, f"{prop} must be a boolean")
            if body[prop] is not required:
                raise ManagementError(400, f"PRECONDITION_FAILED: a stream is always "
                                           f"{'durable' if prop == 'durable' else 'not ' + prop}")
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise ManagementError(400, "arguments must be a map")
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if not isinstance(key, str):
            raise ManagementError(400, f"argument name {key!r} is not a string")
        key = str(key)
        if key in _NOT_FOR_STREAMS:
            raise ManagementError(400, f"PRECONDITION_FAILED: argument {key} is not supported "
                                       f"by stream queues")
        if key == "x-queue-type":
            if value != "stream":
                raise ManagementError(400, f"x-queue-type {value!r} is not supported: this broker "
                                           f"has stream queues only")
        elif key == "x-max-length-bytes":
            if not _is_int(value) or value < 0:
                raise ManagementError(400, f"x-max-length-bytes must be an integer >= 0, not {value!r}")
        elif key == "x-max-age":
            try:
                ok = isinstance(value, str) and parse_interval_ms(value, rabbitmq=True) > 0
            except StorageError:
                ok = False
            if not ok:
                raise ManagementError(400, f"x-max-age must look like 7D, 12h or 30m (> 0), not {value!r}")
        elif key == "x-stream-max-segment-size-bytes":
            if not _is_int(value) or not 0 < value <= MAX_SEGMENT_SIZE:
                raise ManagementError(400, f"x-stream-max-segment-size-bytes must be an integer "
                                           f"in 1..{MAX_SEGMENT_SIZE}, not {value!r}")
        elif key == "x-stream-filter-size-bytes":
            if not _is_int(value) or not bloom.MIN_SIZE <= value <= bloom.MAX_SIZE:
                raise ManagementError(400, f"x-stream-filter-size-bytes must be an integer in "
                                           f"{bloom.MIN_SIZE}..{bloom.MAX_SIZE}, not {value!r}")
        elif key == "x-initial-cluster-size":
            if not _is_int(value) or value < 1:
                raise ManagementError(400, f"x-initial-cluster-size must be an integer >= 1, not {value!r}")
        elif key == "x-leader-locator":
            if value not in ("client-local", "balanced"):
                raise ManagementError(400, "x-leader-locator must be client-local or balanced")
        elif not isinstance(value, (str, int, float, bool)) or isinstance(value, bytes):
            raise ManagementError(400, f"argument {key} has an unsupported type {type(value).__name__}")
        out[key] = _plain(value)
    out.setdefault("x-queue-type", "stream")
    return out


def _plain(value: Any) -> Any:
    """Drop proton's subclasses (symbol, long, ...) so arguments persist and compare simply."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def equivalent_arguments(existing: dict, requested: dict) -> bool:
    return {k: _plain(v) for k, v in existing.items()} == {k: _plain(v) for k, v in requested.items()}


def handle(method: Any, path: Any, body: Any, streams: Streams) -> Response:
    """Answer one request; never raises for bad input."""
    try:
        return _handle(method, path, body, streams)
    except ManagementError as exc:
        return Response(exc.status, exc.text)


def _handle(method: Any, path: Any, body: Any, streams: Streams) -> Response:
    if not isinstance(method, str) or not isinstance(path, str):
        raise ManagementError(400, "a request needs subject (the HTTP method) and to (the path)")
    method = method.upper()
    try:
        address = addresses.parse(path)
    except addresses.AddressError as exc:
        raise ManagementError(400, str(exc)) from None
    if address.kind in ("exchange", "bindings"):
        raise ManagementError(501, f"{method} {path}: exchanges and bindings are not supported by "
                                   f"this broker (streams only; publish to /queues/<name>)")
    if address.kind == "queue_messages":
        if method == "DELETE":
            if not streams.exists(address.name):
                raise ManagementError(404, f"queue '{address.name}' not found")
            raise ManagementError(400, f"purge is not supported for stream '{address.name}': "
                                       f"streams are not purged (use retention, or delete the stream)")
        raise ManagementError(405, f"{method} is not allowed on {path}")
    if address.kind != "queue":
        raise ManagementError(400, f"unsupported management path {path!r}")
    name = address.name
    if method == "PUT":
        if name.startswith("amq."):
            raise ManagementError(403, f"ACCESS_REFUSED: queue name '{name}' contains reserved prefix 'amq.'")
        arguments = validate_declare(body)
        if streams.exists(name):
            if not equivalent_arguments(streams.arguments(name), arguments):
                raise ManagementError(409, f"PRECONDITION_FAILED: stream '{name}' exists with "
                                           f"other arguments")
            return Response(200, streams.info(name))
        streams.create(name, arguments)
        return Response(201, streams.info(name))
    if method == "GET":
        if not streams.exists(name):
            raise ManagementError(404, f"queue '{name}' not found")
        return Response(200, streams.info(name))
    if method == "DELETE":
        count = streams.delete(name)
        return Response(200, {"message_count": int(count or 0)})
    raise ManagementError(405, f"{method} is not allowed on {path}")
