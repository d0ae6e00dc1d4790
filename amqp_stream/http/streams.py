"""``/api/stream/...``: the stream plugin's management extension (``rabbitmq_stream_management``):
stream connections, their publishers and consumers (subscriptions); a user without the
monitoring or administrator tag sees only their own (``users.Users.own``). In a cluster the
stream connections, publishers and consumers are the whole cluster's (``peers``), as in
``connections``: each row names its node, and a connection held elsewhere is answered
there."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from aiohttp import web

from amqp_stream.http import filtering, peers
from amqp_stream.http.connections import activity_status, connection_json, elsewhere
from amqp_stream.http.errors import not_found, reply
from amqp_stream.http.state import VHOST, BrokerState, Conn

__all__ = ["stream_connection_json", "publisher_json", "subscription_json", "routes"]

Handler = Callable[[web.Request], Awaitable[web.Response]]


def connection_details(conn: Conn, node: str) -> dict[str, Any]:
    """``rabbit_stream_mgmt_db:augment_connection_pid``."""
    return {"name": conn.name, "user": conn.user, "node": node, "peer_port": conn.peer_port,
            "peer_host": conn.peer_host}


def stream_connection_json(conn: Conn, node: str, octets: dict[str, Any] | None = None
                           ) -> dict[str, Any]:
    out = connection_json(conn, node, octets)
    out["heartbeat"] = conn.timeout
    out["publishers"] = len(conn.obj.publishers)
    out["consumers"] = len(conn.obj.subscriptions)
    return out


def publisher_json(conn: Conn, node: str, pub: Any) -> dict[str, Any]:
    """A stream publisher as ``rabbit_stream_metrics:publisher_updated`` records it: messages
    received in its Publish frames, confirmed, and refused (PublishError), since it was
    declared."""
    return {"connection_details": connection_details(conn, node),
            "queue": {"name": pub.entry.name, "vhost": VHOST}, "publisher_id": pub.id,
            "reference": pub.reference or "", "published": pub.published,
            "confirmed": pub.confirmed, "errored": pub.errored}


def consumer_offset(sub: Any) -> int:
    """``rabbit_stream_utils:consumer_offset``: the last offset the subscription was sent (or
    passed over: a chunk that stage 1 skipped), or, before it was sent any, the offset it
    waits at."""
    return sub.next_offset - 1 if sub.sent_messages else sub.next_offset


def subscription_json(conn: Conn, node: str, sub: Any) -> dict[str, Any]:
    """A subscription as ``rabbit_stream_metrics:consumer_updated`` records it: its credits,
    the messages it was sent (``consumed``), its offset, how far the committed end is beyond
    it; and, as this broker's extension, its filter and what filtering saved it."""
    end = int(sub.entry.stream.next_offset)
    return {"connection_details": connection_details(conn, node),
            "queue": {"name": sub.entry.name, "vhost": VHOST}, "subscription_id": sub.id,
            "credits": sub.credit, "consumed": sub.sent_messages, "offset": consumer_offset(sub),
            "offset_lag": max(0, end - sub.next_offset), "active": sub.active,
            "activity_status": activity_status(sub.active, sub.properties),
            "properties": dict(sub.properties),
            # this broker's extension: the filter and what it saved (``filtering``)
            "filter": filtering.stream_filter(sub.properties),
            "filtering": filtering.savings(sub)}


def routes(state: BrokerState, add: Any) -> None:
    node = state.node
    users = state.users

    def own(request: web.Request, pairs: Any) -> list[Any]:
        """The (Conn, publisher or subscription) pairs of the requesting user (everyone's for a
        monitor)."""
        return users.own(request["user"], pairs, lambda pair: pair[0].user)

    def vhost(request: web.Request) -> None:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])

    def conn_of(request: web.Request) -> Conn:
        vhost(request)
        name = request.match_info["name"]
        conn = next((c for c in state.stream_connections() if c.name == name), None)
        if conn is None:
            raise not_found()
        users.require_owner(request["user"], request.method, conn.user)
        return conn

    async def connections(request: web.Request) -> web.Response:
        vhost(request)
        mine = users.own(request["user"], state.stream_connections(), lambda c: c.user)
        octets = state.octet_stats()
        local = [stream_connection_json(c, node, octets.get(c.name)) for c in mine]
        return reply(local + await peers.gather(state, request))

    def held_here(handler: Handler) -> Handler:
        """``handler`` for a connection of this node; one held by another node is answered
        there (``elsewhere``)."""
        async def answer(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            if not any(c.name == name for c in state.stream_connections()):
                vhost(request)
                return await elsewhere(state, request)
            return await handler(request)
        return answer

    @held_here
    async def connection(request: web.Request) -> web.Response:
        conn = conn_of(request)
        return reply(stream_connection_json(conn, node, state.octet_stats().get(conn.name)))

    @held_here
    async def delete_connection(request: web.Request) -> web.Response:
        state.close(conn_of(request))
        return web.Response(status=204)

    @held_here
    async def connection_publishers(request: web.Request) -> web.Response:
        conn = conn_of(request)
        return reply([publisher_json(conn, node, p) for p in list(conn.obj.publishers.values())
                      if not p.closed])

    @held_here
    async def connection_consumers(request: web.Request) -> web.Response:
        conn = conn_of(request)
        return reply([subscription_json(conn, node, s)
                      for s in list(conn.obj.subscriptions.values()) if not s.closed])

    async def publishers(request: web.Request) -> web.Response:
        vhost(request)
        stream = request.match_info.get("stream")
        local = [publisher_json(c, node, p) for c, p in own(request, state.stream_publishers())
                 if stream is None or p.entry.name == stream]
        return reply(local + await peers.gather(state, request))

    async def consumers(request: web.Request) -> web.Response:
        vhost(request)
        local = [subscription_json(c, node, s)
                 for c, s in own(request, state.stream_subscriptions())]
        return reply(local + await peers.gather(state, request))

    add("GET", "/api/stream/connections", connections)
    add("GET", "/api/stream/connections/{vhost}", connections)
    add("GET", "/api/stream/connections/{vhost}/{name}", connection)
    add("DELETE", "/api/stream/connections/{vhost}/{name}", delete_connection)
    add("GET", "/api/stream/connections/{vhost}/{name}/publishers", connection_publishers)
    add("GET", "/api/stream/connections/{vhost}/{name}/consumers", connection_consumers)
    add("GET", "/api/stream/publishers", publishers)
    add("GET", "/api/stream/publishers/{vhost}", publishers)
    add("GET", "/api/stream/publishers/{vhost}/{stream}", publishers)
    add("GET", "/api/stream/consumers", consumers)
    add("GET", "/api/stream/consumers/{vhost}", consumers)
