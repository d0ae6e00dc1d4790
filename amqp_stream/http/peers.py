"""The other cluster nodes' management API, asked on behalf of a request: RabbitMQ's
``/api/connections`` lists the whole cluster's connections and its DELETE closes one wherever
it is, so a node lists its own and asks each live peer for theirs.

Why HTTP: each node advertises its management port in ZooKeeper (``layout.Node``); the peer's
own handler then applies its own rules (who may see or close what) under the caller's
credentials (the ``Authorization`` header, passed on; users are the cluster's, in ZooKeeper),
and answers in RabbitMQ's shapes already. A request to a peer carries ``?local=true`` so that
the peer answers for itself only. A peer that does not answer within ``TIMEOUT`` is left out:
a listing shows the nodes that answered, as RabbitMQ's does while a node is down.
The calls are aiohttp's, on the loop: nothing blocks it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web

from amqp_stream.http.state import BrokerState

__all__ = ["is_local", "gather", "first", "TIMEOUT", "LOCAL"]

log = logging.getLogger(__name__)

TIMEOUT = 2.0  # seconds a peer has to answer
LOCAL = "local"  # the query parameter of a request a peer answers for itself only


def is_local(request: web.Request) -> bool:
    """Whether ``request`` asks this node alone (a peer's, or a user's ``?local=true``)."""
    return request.query.get(LOCAL) == "true"


def _peers(state: BrokerState) -> list[tuple[str, str]]:
    """(name, base URL) of every live node but this one that advertises its management API."""
    cluster = state.core.cluster
    if cluster is None:
        return []
    return [(name, f"http://{node.host}:{node.management_port}")
            for name, node in sorted(cluster.view.nodes.items())
            if name != cluster.name and node.management_port]


def _headers(request: web.Request) -> dict[str, str]:
    auth = request.headers.get("Authorization")
    return {"Authorization": auth} if auth else {}


async def _ask(session: aiohttp.ClientSession, method: str, url: str,
               headers: dict[str, str]) -> tuple[int, Any]:
    async with session.request(method, url, headers=headers, params={LOCAL: "true"}) as resp:
        body = await resp.json() if resp.content_type == "application/json" else None
        return resp.status, body


def _path(request: web.Request) -> str:
    """The request's path as sent (percent-encoded: a vhost ``%2F``, a connection's name)."""
    return request.raw_path.split("?", 1)[0]


async def _ask_all(state: BrokerState, request: web.Request
                   ) -> list[tuple[str, tuple[int, Any]]]:
    """(peer, (status, JSON body or None)) of each live peer that answered ``request``'s
    method and path in time; none on a single node or for a request marked local."""
    peers = [] if is_local(request) else _peers(state)
    if not peers:
        return []
    method, path = request.method, _path(request)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        answers = await asyncio.gather(
            *(_ask(session, method, base + path, _headers(request)) for _, base in peers),
            return_exceptions=True)
    out = []
    for (name, _), answer in zip(peers, answers, strict=True):
        if isinstance(answer, BaseException):
            log.info("management: node %s left out of %s %s: %r", name, method, path, answer)
        else:
            out.append((name, answer))
    return out


async def gather(state: BrokerState, request: web.Request) -> list[Any]:
    """The items of the peers' answers to ``request`` (a GET of a JSON list), in node
    order."""
    out: list[Any] = []
    for name, (status, body) in await _ask_all(state, request):
        if status == 200 and isinstance(body, list):
            out.extend(body)
        else:
            log.info("management: node %s answered %s with %d", name, request.path, status)
    return out


async def first(state: BrokerState, request: web.Request) -> tuple[int, Any] | None:
    """The first peer's answer to ``request`` (its method and path) that is not 404 (the
    peer holding the object: 200, 204, or its refusal); None when no peer that answers
    holds it."""
    return next((answer for _, answer in await _ask_all(state, request) if answer[0] != 404),
                None)
