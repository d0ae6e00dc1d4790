"""``/api/connections`` (AMQP 1.0 and stream connections side by side, as RabbitMQ lists them;
DELETE closes one) and ``/api/consumers`` (AMQP 1.0 consumer links and stream subscriptions).
A user without the monitoring or administrator tag sees only their own (``users.Users.own``).
In a cluster the connections and consumers are the whole cluster's, as RabbitMQ's: the other
nodes are asked for theirs (``peers``), and a connection held by another node is shown or
closed there."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from amqp_stream.http import filtering, peers
from amqp_stream.http.errors import not_found, reply
from amqp_stream.http.state import VHOST, BrokerState, Conn

__all__ = ["connection_json", "consumer_json", "channel_details", "elsewhere", "routes"]

CTAG_PREFIX = "stream.subid-"  # rabbit_stream_metrics' consumer tag of a subscription


def connection_json(conn: Conn, node: str, octets: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """RabbitMQ's connection object (``rabbit_mgmt_format``'s fields that apply); ``octets``
    is the connection's entry of ``BrokerState.octet_stats`` (``recv_oct``, ``send_oct`` and
    their rates), its counts alone with rates 0 when not given."""
    props = conn.client_properties
    out = {"name": conn.name, "node": node, "vhost": VHOST, "user": conn.user,
           "protocol": conn.protocol, "type": "network", "state": "running",
           "host": conn.host, "port": conn.port, "peer_host": conn.peer_host,
           "peer_port": conn.peer_port, "ssl": conn.ssl, "ssl_protocol": conn.ssl_protocol,
           "client_properties": props,
           "user_provided_name": props.get("connection_name"),
           "frame_max": conn.frame_max, "timeout": conn.timeout,
           "auth_mechanism": "PLAIN" if conn.user != "anonymous" else "ANONYMOUS",
           "connected_at": conn.connected_at, "channels": conn.channels,
           "channel_max": conn.channel_max, "recv_oct": conn.recv_oct,
           "recv_oct_details": {"rate": 0.0}, "send_oct": conn.send_oct,
           "send_oct_details": {"rate": 0.0}, "recv_cnt": conn.recv_cnt,
           "send_cnt": conn.send_cnt, "send_pend": conn.send_pend}
    if octets:
        out.update(octets)
    if conn.protocol != "stream" and "container_id" in props:
        out["container_id"] = props["container_id"]  # rabbit_amqp_reader's info key
    return out


def channel_details(conn: Conn, node: str) -> dict[str, Any]:
    """What RabbitMQ shows of a consumer's channel: a stream connection is its own channel."""
    return {"connection_name": conn.name, "name": conn.name, "node": node, "number": 0,
            "peer_host": conn.peer_host, "peer_port": conn.peer_port, "user": conn.user}


def consumer_json(conn: Conn, node: str, stream: str, tag: str, ack_required: bool,
                  active: bool, status: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"queue": {"name": stream, "vhost": VHOST}, "consumer_tag": tag,
            "channel_details": channel_details(conn, node), "ack_required": ack_required,
            "active": active, "activity_status": status, "exclusive": False,
            "prefetch_count": 0, "arguments": arguments}


def activity_status(active: bool, properties: dict[str, str]) -> str:
    """``rabbit_stream_utils:consumer_activity_status``."""
    if properties.get("single-active-consumer") != "true":
        return "up"
    return "single_active" if active else "waiting"


def extensions(consumer: Any, filter: dict[str, Any] | None) -> dict[str, Any]:
    """This broker's fields of a consumer (either protocol): the next offset it is sent, its
    lag, its filter and what filtering saved it (``filtering``)."""
    return {"offset": int(consumer.next_offset), "offset_lag": filtering.lag(consumer),
            "filter": filter, "filtering": filtering.savings(consumer)}


def all_consumers(state: BrokerState) -> list[dict[str, Any]]:
    node = state.node
    out = [{**consumer_json(conn, node, link.entry.name, str(link.link.name),
                            not link.presettled, True, "up", {}),
            **extensions(link, filtering.amqp_filter(link.filters))}
           for conn, link in state.amqp_consumers()]
    out += [{**consumer_json(conn, node, sub.entry.name, f"{CTAG_PREFIX}{sub.id}", False,
                             sub.active, activity_status(sub.active, sub.properties),
                             dict(sub.properties)),
             **extensions(sub, filtering.stream_filter(sub.properties))}
            for conn, sub in state.stream_subscriptions()]
    return out


async def elsewhere(state: BrokerState, request: web.Request) -> web.Response:
    """A connection this node does not hold: the answer of the peer that holds it (its JSON,
    its 204, or its refusal); 404 when no peer that answers holds it."""
    answer = await peers.first(state, request)
    if answer is None:
        raise not_found()
    status, body = answer
    return web.Response(status=status) if body is None else reply(body, status=status)


def routes(state: BrokerState, add: Any) -> None:
    users = state.users

    def conn_of(request: web.Request) -> Conn:
        conn = state.connection(request.match_info["name"])
        if conn is None:
            raise not_found()
        users.require_owner(request["user"], request.method, conn.user)
        return conn

    async def list_connections(request: web.Request) -> web.Response:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])
        mine = users.own(request["user"], state.connections(), lambda c: c.user)
        octets = state.octet_stats()
        local = [connection_json(c, state.node, octets.get(c.name)) for c in mine]
        return reply(local + await peers.gather(state, request))

    async def get_connection(request: web.Request) -> web.Response:
        if state.connection(request.match_info["name"]) is None:
            return await elsewhere(state, request)
        conn = conn_of(request)
        return reply(connection_json(conn, state.node, state.octet_stats().get(conn.name)))

    async def delete_connection(request: web.Request) -> web.Response:
        if state.connection(request.match_info["name"]) is None:
            return await elsewhere(state, request)
        state.close(conn_of(request))
        return web.Response(status=204)

    async def channels(request: web.Request) -> web.Response:
        if state.connection(request.match_info["name"]) is None:
            return await elsewhere(state, request)
        conn_of(request)
        return reply([])

    async def consumers(request: web.Request) -> web.Response:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])
        local = users.own(request["user"], all_consumers(state),
                          lambda c: c["channel_details"]["user"])
        return reply(local + await peers.gather(state, request))

    add("GET", "/api/connections", list_connections)
    add("GET", "/api/vhosts/{vhost}/connections", list_connections)
    add("GET", "/api/connections/{name}", get_connection)
    add("DELETE", "/api/connections/{name}", delete_connection)
    add("GET", "/api/connections/{name}/channels", channels)
    add("GET", "/api/consumers", consumers)
    add("GET", "/api/consumers/{vhost}", consumers)
