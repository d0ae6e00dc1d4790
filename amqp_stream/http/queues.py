"""``/api/queues``, ``/api/exchanges``, ``/api/bindings``: streams (RabbitMQ's queues of type
``stream``), the exchanges and bindings of ``amqp_stream.definitions`` (super streams).

Declare, delete and bind go through the core as the protocols' commands do, so the same
checks answer (``arguments.validate``, ``Definitions``), and they need the permissions the AMQP
management node asks for (``management.check_resource``, ``check_binding``); refusals come back
as RabbitMQ's status codes (``errors.from_broker``). Listings without a vhost show nothing to a
user who may not use ``/`` (``users.Users.sees_vhost``)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from amqp_stream.amqp.management import check_binding, check_resource, validate_declare
from amqp_stream.definitions import EXCHANGE, QUEUE, Binding, Exchange
from amqp_stream.http.errors import bad_request, not_found, reply
from amqp_stream.http.body import read_json
from amqp_stream.http.state import VHOST, BrokerState

__all__ = ["queue_json", "exchange_json", "binding_json", "routes"]


def queue_json(entry: Any, node: str, cluster: Any = None) -> dict[str, Any]:
    """A stream as RabbitMQ's stream queue (``rabbit_stream_queue`` info keys), plus
    ``first_offset`` (the first offset retention kept) and ``segments_bytes`` (the size of
    its segment files). In a cluster (``cluster``: the node's ``ClusterNode``) ``leader``,
    ``members`` and ``online`` are the stream's layout, by node name, ``online`` the members
    that are alive."""
    first, nxt, messages = entry.counts()
    stream = entry.stream
    leader, members, online = node, [node], [node]
    layout = cluster.layout(entry.name) if cluster is not None else None
    if layout is not None:
        leader, members = layout.leader, list(layout.members)
        online = [m for m in members if m in cluster.view.nodes]
    return {"name": entry.name, "vhost": VHOST, "type": "stream", "durable": True,
            "auto_delete": False, "exclusive": False, "arguments": dict(entry.arguments),
            "node": leader, "leader": leader, "members": members, "online": online,
            "state": "running", "messages": messages, "messages_ready": messages,
            "messages_unacknowledged": 0, "consumers": len(entry.consumers),
            "segments": len(stream.segment_starts()), "committed_offset": nxt - 1,
            "committed_chunk_id": stream.committed_chunk_id, "first_offset": first,
            "segments_bytes": _segments_bytes(entry.directory / "log"),
            "policy": None, "operator_policy": None, "effective_policy_definition": {}}


def _segments_bytes(log_dir: Path) -> int:
    try:
        with os.scandir(log_dir) as files:
            return sum(f.stat().st_size for f in files if f.name.endswith(".segment"))
    except OSError:  # the stream is being deleted
        return 0


def exchange_json(exchange: Exchange) -> dict[str, Any]:
    return {**exchange.to_json(), "vhost": VHOST, "user_who_performed_action": "rmq-internal"}


def properties_key(binding: Binding) -> str:
    """RabbitMQ's ``properties_key``: the routing key, and a digest of the arguments when
    there are any (RabbitMQ's digest differs: a client only passes the value back)."""
    if not binding.arguments:
        return binding.routing_key or "~"
    digest = hashlib.sha1(json.dumps(binding.arguments, sort_keys=True, default=str).encode())
    return f"{binding.routing_key}~{digest.hexdigest()[:22]}"


def binding_json(binding: Binding) -> dict[str, Any]:
    return {**binding.to_json(), "vhost": VHOST, "properties_key": properties_key(binding)}


def _default_bindings(state: BrokerState) -> list[dict[str, Any]]:
    """The default exchange's binding of every stream (RabbitMQ lists them too)."""
    return [binding_json(Binding("", name, name)) for name in sorted(state.core.registry.entries)]


def _exchange_body(name: str, body: Any) -> Exchange:
    body = body or {}
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    kind = body.get("type")
    if not isinstance(kind, str):
        raise bad_request("the exchange type is missing ('type')")
    flags = {}
    for key, default in (("durable", True), ("auto_delete", False), ("internal", False)):
        value = body.get(key, default)
        if not isinstance(value, bool):
            raise bad_request(f"{key} must be true or false")
        flags[key] = value
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise bad_request("arguments must be a JSON object")
    return Exchange(name, kind, flags["durable"], flags["auto_delete"], flags["internal"],
                    arguments)


def _binding_body(source: str, kind: str, destination: str, body: Any) -> Binding:
    body = body or {}
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    key, arguments = body.get("routing_key", ""), body.get("arguments") or {}
    if not isinstance(key, str) or not isinstance(arguments, dict):
        raise bad_request("routing_key must be a string and arguments a JSON object")
    return Binding(source, destination, key, arguments, QUEUE if kind == "q" else EXCHANGE)


def routes(state: BrokerState, add: Any) -> None:
    core = state.core
    users = state.users

    def allow(request: web.Request) -> Any:
        return users.resource_allow(request["user"], VHOST)

    def listed(request: web.Request, items: list[Any]) -> web.Response:
        return reply(items if users.sees_vhost(request["user"], VHOST) else [])

    def entry_of(request: web.Request) -> Any:
        state.check_vhost(request.match_info["vhost"])
        entry = core.get(request.match_info["name"])
        if entry is None:
            raise not_found()
        return entry

    async def list_queues(request: web.Request) -> web.Response:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])
        entries = [core.registry.entries[n] for n in sorted(core.registry.entries)]
        stats = state.message_stats()
        return listed(request, [{**queue_json(e, state.node, core.cluster),
                                 "message_stats": stats.get(e.name, {})} for e in entries])

    async def get_queue(request: web.Request) -> web.Response:
        entry = entry_of(request)
        return reply({**queue_json(entry, state.node, core.cluster),
                      "message_stats": state.message_stats().get(entry.name, {})})

    async def put_queue(request: web.Request) -> web.Response:
        state.check_vhost(request.match_info["vhost"])
        check_resource(allow(request), "PUT", request.match_info["name"])
        arguments = validate_declare(await read_json(request))
        created = core.declare(request.match_info["name"], arguments)
        return web.Response(status=201 if created else 204)

    async def delete_queue(request: web.Request) -> web.Response:
        entry = entry_of(request)
        check_resource(allow(request), "DELETE", entry.name)
        if request.query.get("if-unused") == "true" and entry.consumers:
            raise bad_request(f"queue '{entry.name}' in use")
        if request.query.get("if-empty") == "true" and entry.counts()[2]:
            raise bad_request(f"queue '{entry.name}' not empty")
        core.delete(entry.name)
        return web.Response(status=204)

    async def queue_bindings(request: web.Request) -> web.Response:
        name = entry_of(request).name
        found = [binding_json(b) for b in core.definitions.bindings
                 if b.destination_type == QUEUE and b.destination == name]
        return reply([binding_json(Binding("", name, name)), *found])

    def exchange_of(request: web.Request) -> Exchange:
        state.check_vhost(request.match_info["vhost"])
        exchange = core.definitions.exchange(request.match_info["name"])
        if exchange is None:
            raise not_found()
        return exchange

    async def list_exchanges(request: web.Request) -> web.Response:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])
        return listed(request, [exchange_json(x) for x in core.definitions.all_exchanges()])

    async def get_exchange(request: web.Request) -> web.Response:
        return reply(exchange_json(exchange_of(request)))

    async def put_exchange(request: web.Request) -> web.Response:
        state.check_vhost(request.match_info["vhost"])
        check_resource(allow(request), "PUT", request.match_info["name"])
        exchange = _exchange_body(request.match_info["name"], await read_json(request))
        created = core.definitions.declare_exchange(exchange)
        return web.Response(status=201 if created else 204)

    async def delete_exchange(request: web.Request) -> web.Response:
        state.check_vhost(request.match_info["vhost"])
        check_resource(allow(request), "DELETE", request.match_info["name"])
        if not core.definitions.delete_exchange(request.match_info["name"]):
            raise not_found()
        return web.Response(status=204)

    async def exchange_source_bindings(request: web.Request) -> web.Response:
        return reply([binding_json(b) for b in core.definitions.bindings_from(exchange_of(request).name)])

    async def list_bindings(request: web.Request) -> web.Response:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])
        return listed(request, _default_bindings(state)
                      + [binding_json(b) for b in core.definitions.bindings])

    def between(request: web.Request) -> tuple[str, str, str]:
        info = request.match_info
        state.check_vhost(info["vhost"])
        return info["source"], info["kind"], info["destination"]

    async def get_between(request: web.Request) -> web.Response:
        source, kind, destination = between(request)
        dtype = QUEUE if kind == "q" else EXCHANGE
        return reply([binding_json(b) for b in core.definitions.bindings_from(source)
                      if b.destination_type == dtype and b.destination == destination])

    async def post_binding(request: web.Request) -> web.Response:
        source, kind, destination = between(request)
        check_binding(allow(request), source, destination)
        binding = _binding_body(source, kind, destination, await read_json(request))
        core.definitions.bind(binding)
        # each segment encoded, as RabbitMQ's rabbit_mgmt_format:url: the vhost "/" and keys
        # such as "eu.#" must stay one segment, or GET/DELETE of the location misses
        segments = (VHOST, source, kind, destination, properties_key(binding))
        location = "/api/bindings/{}/e/{}/{}/{}/{}".format(*(quote(s, safe="") for s in segments))
        return web.Response(status=201, headers={"Location": location})

    async def get_binding(request: web.Request) -> web.Response:
        binding = _find_binding(request)
        return reply(binding_json(binding))

    async def delete_binding(request: web.Request) -> web.Response:
        binding = _find_binding(request)
        check_binding(allow(request), binding.source, binding.destination)
        core.definitions.unbind(binding)
        return web.Response(status=204)

    def _find_binding(request: web.Request) -> Binding:
        source, kind, destination = between(request)
        dtype = QUEUE if kind == "q" else EXCHANGE
        for b in core.definitions.bindings_from(source):
            if (b.destination_type == dtype and b.destination == destination
                    and properties_key(b) == request.match_info["props"]):
                return b
        raise not_found()

    add("GET", "/api/queues", list_queues)
    add("GET", "/api/queues/{vhost}", list_queues)
    add("GET", "/api/queues/{vhost}/{name}", get_queue)
    add("PUT", "/api/queues/{vhost}/{name}", put_queue)
    add("DELETE", "/api/queues/{vhost}/{name}", delete_queue)
    add("GET", "/api/queues/{vhost}/{name}/bindings", queue_bindings)
    add("GET", "/api/exchanges", list_exchanges)
    add("GET", "/api/exchanges/{vhost}", list_exchanges)
    add("GET", "/api/exchanges/{vhost}/{name}", get_exchange)
    add("PUT", "/api/exchanges/{vhost}/{name}", put_exchange)
    add("DELETE", "/api/exchanges/{vhost}/{name}", delete_exchange)
    add("GET", "/api/exchanges/{vhost}/{name}/bindings/source", exchange_source_bindings)
    add("GET", "/api/bindings", list_bindings)
    add("GET", "/api/bindings/{vhost}", list_bindings)
    add("GET", "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}", get_between)
    add("POST", "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}", post_binding)
    add("GET", "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}/{props}", get_binding)
    add("DELETE", "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}/{props}",
        delete_binding)
