"""``/api/overview``, ``/api/nodes``, ``/api/vhosts``: the broker as one node with one virtual
host (``/``). Other vhosts cannot be made (501): this broker has no virtual hosts yet."""

from __future__ import annotations

import os
import time
from typing import Any

from aiohttp import web

from amqp_stream import __version__
from amqp_stream.amqp.adapter import RABBITMQ_VERSION
from amqp_stream.http.errors import ApiError, not_found
from amqp_stream.http.state import VHOST, BrokerState

__all__ = ["overview_json", "node_json", "vhost_json", "routes"]

PRODUCT = "amqp-stream"


def totals(state: BrokerState) -> dict[str, Any]:
    """Counts the overview, the node and the vhost show."""
    entries = list(state.core.registry.entries.values())
    messages = sum(e.counts()[2] for e in entries)
    consumers = sum(len(e.consumers) for e in entries)
    return {"connections": sum(1 for _ in state.connections()), "queues": len(entries),
            "consumers": consumers, "exchanges": len(state.core.definitions.all_exchanges()),
            "messages": messages}


def user_totals(state: BrokerState, user: str) -> tuple[dict[str, Any], bool]:
    """RabbitMQ's overview for ``user`` (``rabbit_mgmt_db:overview``): a monitor sees it all;
    any other user its own connections, no consumer count, and streams, exchanges, messages
    and message rates only of the vhosts it may use (``filter_vhost``). The second value:
    whether ``/`` is among them."""
    counts = totals(state)
    users = state.users
    if users.is_monitor(user):
        return counts, True
    sees = users.sees_vhost(user, VHOST)
    counts = {**counts, "connections": len(users.own(user, state.connections(),
                                                      lambda c: c.user))}
    del counts["consumers"]
    if not sees:
        counts.update(queues=0, exchanges=0, messages=0)
    return counts, sees


def overview_json(state: BrokerState, counts: dict[str, Any], user: str,
                  sees_vhost: bool = True) -> dict[str, Any]:
    consumers = {"consumers": counts["consumers"]} if "consumers" in counts else {}
    return {
        "message_stats": state.message_stats()[""] if sees_vhost else {},
        "management_version": RABBITMQ_VERSION,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": PRODUCT,
        "product_version": __version__,
        "rates_mode": "basic",
        "cluster_name": state.node,
        "node": state.node,
        "erlang_version": "none",
        "erlang_full_version": "none",
        "disable_stats": False,
        "enable_queue_totals": True,
        "exchange_types": [{"name": t, "description": "", "enabled": True}
                           for t in ("direct", "fanout", "headers", "topic")],
        "object_totals": {"connections": counts["connections"], "channels": 0,
                          **consumers, "exchanges": counts["exchanges"],
                          "queues": counts["queues"]},
        "queue_totals": {"messages": counts["messages"], "messages_ready": counts["messages"],
                         "messages_unacknowledged": 0},
        "listeners": state.listeners,
        "contexts": [{"node": state.node, "description": "RabbitMQ Management",
                      "path": "/", "port": str(state.config.management_port)}],
        "statistics_db_event_queue": 0,
        "default_queue_type": "stream",
    }


def node_json(state: BrokerState) -> dict[str, Any]:
    try:
        fd_used = len(os.listdir("/proc/self/fd"))
    except OSError:
        fd_used = 0
    return {"name": state.node, "type": "disc", "running": True,
            "uptime": int((time.time() - state.started) * 1000),
            "os_pid": str(os.getpid()), "fd_used": fd_used,
            "processors": os.cpu_count() or 1, "being_drained": False,
            "applications": [], "partitions": [], "cluster_links": []}


def cluster_nodes_json(state: BrokerState) -> list[dict[str, Any]]:
    """This node, or in a cluster every node: the live ones (this one in full, the others as
    their advertised addresses say) and those that stream layouts name while they are down
    (``running`` false), as RabbitMQ lists a cluster's nodes."""
    cluster = state.core.cluster
    if cluster is None:
        return [node_json(state)]
    view = cluster.view
    named = set(view.nodes) | {m for layout in view.layouts.values() for m in layout.members}
    out = []
    for name in sorted(named):
        if name == cluster.name:
            out.append({**node_json(state), "name": name})
            continue
        peer = view.nodes.get(name)
        out.append({"name": name, "type": "disc", "running": peer is not None,
                    "being_drained": False, "applications": [], "partitions": [],
                    "cluster_links": [], **({"host": peer.host, "stream_port": peer.stream_port,
                                             "amqp_port": peer.amqp_port} if peer else {})})
    return out


def vhost_json(state: BrokerState, counts: dict[str, Any]) -> dict[str, Any]:
    return {"name": VHOST, "description": "Default virtual host", "tags": [],
            "default_queue_type": "stream", "metadata": {"description": "Default virtual host",
                                                         "tags": []},
            "tracing": False, "messages": counts["messages"],
            "messages_ready": counts["messages"], "messages_unacknowledged": 0,
            "cluster_state": {state.node: "running"}}


def routes(state: BrokerState, add: Any) -> None:
    async def overview(request: web.Request) -> web.Response:
        counts, sees = user_totals(state, request["user"])
        return web.json_response(overview_json(state, counts, request["user"], sees))

    async def nodes(request: web.Request) -> web.Response:
        return web.json_response(cluster_nodes_json(state))

    async def node(request: web.Request) -> web.Response:
        for found in cluster_nodes_json(state):
            if found["name"] == request.match_info["node"]:
                return web.json_response(found)
        raise not_found()

    async def vhosts(request: web.Request) -> web.Response:
        if not state.users.sees_vhost(request["user"], VHOST):  # filter_vhost
            return web.json_response([])
        return web.json_response([vhost_json(state, totals(state))])

    async def vhost(request: web.Request) -> web.Response:
        state.check_vhost(request.match_info["vhost"])
        return web.json_response(vhost_json(state, totals(state)))

    async def put_vhost(request: web.Request) -> web.Response:
        if request.match_info["vhost"] == VHOST:
            return web.Response(status=204)
        raise ApiError(501, "this broker has one virtual host, '/'; others cannot be created")

    async def delete_vhost(request: web.Request) -> web.Response:
        state.check_vhost(request.match_info["vhost"])
        raise ApiError(501, "the virtual host '/' cannot be deleted")

    add("GET", "/api/overview", overview)
    add("GET", "/api/nodes", nodes)
    add("GET", "/api/nodes/{node}", node)
    add("GET", "/api/vhosts", vhosts)
    add("GET", "/api/vhosts/{vhost}", vhost)
    add("PUT", "/api/vhosts/{vhost}", put_vhost)
    add("DELETE", "/api/vhosts/{vhost}", delete_vhost)
