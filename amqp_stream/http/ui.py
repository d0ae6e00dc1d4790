"""The web UI at ``/`` (static files under ``static/``, shipped as package data) and its one
endpoint of its own: a stream's stored consumer offsets, listed and reset.

Why the static files need no login: the page must load to show its login form; it holds no
data, every figure comes from the JSON API with the credentials typed there. A 401 to the
page's own requests (``X-Requested-With: XMLHttpRequest``) goes without ``WWW-Authenticate``,
so the browser shows the page's login error rather than its own password dialog (RabbitMQ's
management UI sends no such header at all).

Offsets (``/api/stream/offsets[/{vhost}[/{stream}]]``, this broker's extension, as the AMQP
management node's ``/queues/<q>/tracking`` and ``/offsets/<consumer>`` paths): GET lists
``[{"stream", "consumer", "offset", "lag"}]`` (every stream's, or one's); PUT ``.../{consumer}`` with ``{"offset": n}`` stores n,
with ``{"spec": "first"|"last"|"next"|<offset>}`` stores the offset before where a consumer
starting there would read first (as ``amqp-stream reset-offset``).
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

from aiohttp import web

from amqp_stream.amqp import tracking
from amqp_stream.amqp.source_filters import parse_start
from amqp_stream.errors import BadRequest, Forbidden
from amqp_stream.http.body import read_json
from amqp_stream.http.errors import ERRORS, ApiError, bad_request, error_response, not_found, reply
from amqp_stream.http.state import BrokerState
from amqp_stream.users import READ
from storage import StorageError, StreamClosedError

__all__ = ["routes", "public", "offsets_json", "FILES"]

# file name -> content type: the only files served (read once, at the first request)
FILES = {"index.html": "text/html", "ui.js": "text/javascript", "ui.css": "text/css"}
_cache: dict[str, bytes] = {}


def _file(name: str) -> web.Response:
    body = _cache.get(name)
    if body is None:
        body = _cache[name] = resources.files(__package__).joinpath("static", name).read_bytes()
    return web.Response(body=body, content_type=FILES[name], charset="utf-8",
                        headers={"Cache-Control": "no-cache"})


async def index(request: web.Request) -> web.Response:
    return _file("index.html")


async def static(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    if name not in FILES:  # answered here: public routes do not pass the guard's error handling
        return error_response(404, ERRORS[404], "Not Found")
    return _file(name)


_PUBLIC = (index, static)


@web.middleware
async def public(request: web.Request, handler: Any) -> web.StreamResponse:
    """Before the server's guard: the UI's files without a login; no ``WWW-Authenticate`` on
    a 401 to the UI's own requests (see the module's docstring)."""
    route = request.match_info.route
    if route is not None and route.handler in _PUBLIC:
        return await route.handler(request)
    response = await handler(request)
    if response.status == 401 and request.headers.get("X-Requested-With") == "XMLHttpRequest":
        response.headers.popall("WWW-Authenticate", None)
    return response


def offsets_json(entry: Any) -> list[dict[str, Any]]:
    """A stream's stored consumer offsets, with each name's lag (committed end - 1 - stored,
    as ``amqp_stream_consumer_name_lag_messages``)."""
    stream = entry.stream
    end = int(stream.next_offset)
    try:
        stored = tracking.listing(stream)["offsets"]
    except StreamClosedError as exc:
        raise ApiError(500, f"stream '{entry.name}': {exc}") from None
    return [{"stream": entry.name, "consumer": name, "offset": offset,
             "lag": max(0, end - 1 - offset)} for name, offset in stored.items()]


def routes(state: BrokerState, add: Any) -> None:
    core = state.core

    def may_read(request: web.Request, stream: str) -> bool:
        """Querying and storing a consumer offset need read on the stream (as the stream
        protocol's QueryOffset and StoreOffset, ``rabbit_stream_reader``)."""
        try:
            state.users.resource_allow(request["user"], "/")(READ, stream)
            return True
        except Forbidden:
            return False

    def stream_of(request: web.Request) -> Any:
        state.check_vhost(request.match_info["vhost"])
        entry = core.get(request.match_info["stream"])
        if entry is None:
            raise not_found(f"no stream '{request.match_info['stream']}'")
        state.users.resource_allow(request["user"], "/")(READ, entry.name)
        return entry

    async def list_offsets(request: web.Request) -> web.Response:
        return reply(offsets_json(stream_of(request)))

    async def all_offsets(request: web.Request) -> web.Response:
        if "vhost" in request.match_info:
            state.check_vhost(request.match_info["vhost"])
        out: list[dict[str, Any]] = []
        for name in sorted(core.registry.entries):
            entry = core.get(name)
            if entry is not None and not entry.deleted and may_read(request, name):
                out += offsets_json(entry)
        return reply(out)

    async def put_offset(request: web.Request) -> web.Response:
        entry = stream_of(request)
        name = request.match_info["consumer"]
        body = await read_json(request)
        if not isinstance(body, dict) or not ("offset" in body) ^ ("spec" in body):
            raise bad_request('store an offset with {"offset": <n>}, or move one with '
                              '{"spec": "first"|"last"|"next"|<offset>}')
        stream = entry.stream
        try:
            if "spec" in body:
                spec = parse_start(body["spec"], now_ms=int(time.time() * 1000))
                offset = max(tracking.resume_offset(stream, spec) - 1, 0)
            else:
                offset = body["offset"]
                if type(offset) is not int or not 0 <= offset < 1 << 64:
                    raise bad_request("offset must be an integer in 0..2^64-1")
            leader = core.offsets_elsewhere(entry.name)  # a replica: stored on the leader
            (stream if leader is None else leader).store_offset(name, offset)
        except BadRequest as exc:
            raise bad_request(exc.description) from None
        except StreamClosedError as exc:
            raise ApiError(500, f"stream '{entry.name}': {exc}") from None
        except StorageError as exc:  # a name or value out of range
            raise bad_request(str(exc)) from None
        return reply({"consumer": name, "offset": offset})

    add("GET", "/", index)
    add("GET", "/ui/{file}", static)
    add("GET", "/api/stream/offsets", all_offsets)
    add("GET", "/api/stream/offsets/{vhost}", all_offsets)
    add("GET", "/api/stream/offsets/{vhost}/{stream}", list_offsets)
    add("PUT", "/api/stream/offsets/{vhost}/{stream}/{consumer}", put_offset)
