"""The stream protocol's super stream commands: CreateSuperStream, DeleteSuperStream, Route,
Partitions, answered as ``rabbit_stream_reader`` of RabbitMQ 4.2 answers them.

Strategy: the work is ``amqp_stream.super_streams``' (all or nothing, for every protocol); this
module maps frames to it and its refusals to RabbitMQ's codes. The adapter's ``handle`` turns a
raised ``BrokerError`` into the frame's error answer with its ``stream_code``:
``BadRequest`` -> PRECONDITION_FAILED (validation_failed), ``AlreadyExists`` ->
STREAM_ALREADY_EXISTS, ``NotFound`` -> STREAM_DOES_NOT_EXIST, ``Forbidden`` ->
ACCESS_REFUSED (also for the permissions ``rabbit_stream_utils`` checks: managing a super
stream needs configure and read on its exchange, configure and write on each partition;
Route write, Partitions read or write on the exchange). Route answers OK with no stream when nothing matches (RabbitMQ's
``no_route``). Deleting a super stream ends every publisher and subscription on its partitions;
their connections get a MetadataUpdate each (``Core.delete``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from amqp_stream import super_streams
from amqp_stream.errors import Forbidden
from amqp_stream.users import CONFIGURE, READ, WRITE
from amqp_stream.streamproto import Key, ResponseCode
from amqp_stream.streamproto import frames as f

__all__ = ["handlers"]

log = logging.getLogger("amqp_stream.stream_listener")


def handlers(core: Any, allow: Callable[[Any, str, str], None]) -> dict[type, Callable[[Any, Any], None]]:
    """The adapter's dispatch entries: frame class -> ``handler(conn, frame)``. ``allow(conn,
    what, name)`` raises ``Forbidden`` where the connection's user lacks a permission."""

    def manage(conn: Any, name: str, streams: Sequence[str]) -> None:
        """``check_super_stream_management_permitted``: configure the exchange and each
        partition, read the exchange (the bindings' source), write each partition."""
        allow(conn, CONFIGURE, name)
        for stream in streams:
            allow(conn, CONFIGURE, stream)
        allow(conn, READ, name)
        for stream in streams:
            allow(conn, WRITE, stream)

    def create(conn: Any, frame: f.CreateSuperStream) -> None:
        manage(conn, frame.name, frame.partitions)
        super_streams.create(core, frame.name, frame.partitions, frame.binding_keys,
                             dict(frame.arguments))
        log.info("super stream %r created by %s", frame.name, conn.peer)
        conn.send(f.Response(Key.CREATE_SUPER_STREAM, frame.correlation_id, ResponseCode.OK))

    def delete(conn: Any, frame: f.DeleteSuperStream) -> None:
        allow(conn, CONFIGURE, frame.name)
        manage(conn, frame.name, super_streams.partitions(core, frame.name))
        super_streams.delete(core, frame.name)
        log.info("super stream %r deleted by %s", frame.name, conn.peer)
        conn.send(f.Response(Key.DELETE_SUPER_STREAM, frame.correlation_id, ResponseCode.OK))

    def route(conn: Any, frame: f.Route) -> None:
        allow(conn, WRITE, frame.super_stream)
        streams = super_streams.route(core, frame.super_stream, frame.routing_key)
        conn.send(f.RouteResponse(frame.correlation_id, ResponseCode.OK, tuple(streams)))

    def partitions(conn: Any, frame: f.Partitions) -> None:
        try:
            allow(conn, READ, frame.super_stream)
        except Forbidden:
            allow(conn, WRITE, frame.super_stream)
        streams = super_streams.partitions(core, frame.super_stream)
        conn.send(f.PartitionsResponse(frame.correlation_id, ResponseCode.OK, tuple(streams)))

    return {f.CreateSuperStream: create, f.DeleteSuperStream: delete, f.Route: route,
            f.Partitions: partitions}
