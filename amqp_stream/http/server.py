"""The aiohttp site of the management API on the broker's loop, and what every request passes.

Every request: basic auth (``users.Users``; 401 with ``WWW-Authenticate`` without it), then
what the user's tags allow on the route (``users.Users.authorise``), then the route; any
refusal becomes RabbitMQ's ``{"error", "reason"}`` JSON (``errors``), unknown paths included.
Bounds, so that no client of this port can cost the broker more than a socket:
- a body above ``MAX_BODY`` bytes is refused with 413 before it is read in full;
- a body must arrive within ``--handshake-timeout`` seconds (408);
- a connection must send its first request within ``--handshake-timeout`` seconds, and one
  that sends nothing for ``KEEPALIVE`` seconds between requests is closed (``_sweep``: aiohttp
  bounds neither the headers' arrival nor a keep-alive connection's next request);
- header lines and counts are aiohttp's defaults (8190 bytes, 128 headers; 400 beyond).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from amqp_stream.errors import BrokerError
from amqp_stream.http import connections, overview, queues, streams, ui, users
from amqp_stream.http.errors import ERRORS, ApiError, error_response, from_broker
from amqp_stream.http.state import STATE, BrokerState

__all__ = ["ManagementServer", "MAX_BODY", "KEEPALIVE"]

log = logging.getLogger("amqp_stream.http")

MAX_BODY = 1024 * 1024  # bytes: far above any definition a client sends, as RabbitMQ's default
KEEPALIVE = 60.0  # seconds a connection may wait between requests
SWEEP = 1.0  # seconds between looks at slow connections
REALM = 'Basic realm="RabbitMQ Management"'

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _credentials(header: str | None) -> tuple[str, str] | None:
    if not header or not header.startswith("Basic "):
        return None
    try:
        user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as RabbitMQ's JSON; authentication before any route (unknown paths included, as
    RabbitMQ answers 401 before 404)."""
    watch: _Watch = request.app[WATCH]
    watch.started(request.protocol)
    try:
        state = request.app[STATE]
        given = _credentials(request.headers.get("Authorization"))
        user = state.users.authenticate(*given, request.remote) if given else None
        if user is None:
            return error_response(401, ERRORS[401], "Login failed", {"WWW-Authenticate": REALM})
        request["user"] = user
        resource = request.match_info.route.resource
        if resource is not None:  # a route of ours (users.Users.authorise has the rules)
            state.users.authorise(user, request.method, resource.canonical,
                                  dict(request.match_info))
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.error, exc.reason)
    except BrokerError as exc:
        err = from_broker(exc)
        return error_response(err.status, err.error, err.reason)
    except web.HTTPException as exc:  # aiohttp's: no route (404), wrong method (405), 413 ...
        if exc.status < 400:
            raise
        return error_response(exc.status, ERRORS.get(exc.status, exc.reason), exc.reason)
    except Exception:
        log.exception("%s %s", request.method, request.path)
        return error_response(500, ERRORS[500], "internal error (see the broker's log)")
    finally:
        watch.done(request.protocol)


class _Watch:
    """Closes connections that are slow to send a request (see the module's docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, first_request: float):
        self.loop = loop
        self.first_request = first_request
        self.seen: dict[Any, tuple[float, bool, bool]] = {}  # handler -> (since, busy, served)
        self.server: web.Server | None = None
        self.timer: asyncio.TimerHandle | None = None

    def started(self, handler: Any) -> None:
        self.seen[handler] = (self.loop.time(), True, True)

    def done(self, handler: Any) -> None:
        self.seen[handler] = (self.loop.time(), False, True)

    def start(self, server: web.Server) -> None:
        self.server = server
        self.timer = self.loop.call_later(SWEEP, self._sweep)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _sweep(self) -> None:
        now = self.loop.time()
        assert self.server is not None
        open_now = set(self.server.connections)
        for handler in list(self.seen):
            if handler not in open_now:
                del self.seen[handler]
        for handler in open_now:
            since, busy, served = self.seen.setdefault(handler, (now, False, False))
            limit = KEEPALIVE if served else self.first_request
            if not busy and now - since > limit:
                transport = handler.transport
                if transport is not None:
                    log.info("HTTP client %s closed: no request in %.0f s",
                             transport.get_extra_info("peername"), limit)
                    transport.close()
                self.seen.pop(handler, None)
        self.timer = self.loop.call_later(SWEEP, self._sweep)


WATCH = web.AppKey("watch", _Watch)


def make_app(state: BrokerState, loop: asyncio.AbstractEventLoop) -> web.Application:
    app = web.Application(middlewares=[ui.public, _guard], client_max_size=MAX_BODY)
    app[STATE] = state
    app[WATCH] = _Watch(loop, state.config.handshake_timeout)

    def add(method: str, path: str, handler: Handler) -> None:
        """RabbitMQ accepts each path with and without a trailing slash."""
        app.router.add_route(method, path, handler)
        app.router.add_route(method, path + "/", handler)

    for module in (overview, users, queues, connections, streams, ui):
        module.routes(state, add)
    return app


class ManagementServer:
    """The management API on ``host:port`` on ``loop`` (the broker's, not yet running)."""

    def __init__(self, state: BrokerState, host: str, port: int):
        self.state, self.host, self.port = state, host, port
        self.runner: web.AppRunner | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Listen (raises ``OSError`` when the port is taken)."""
        app = make_app(self.state, loop)
        runner = web.AppRunner(app, handle_signals=False, access_log=None,
                               keepalive_timeout=KEEPALIVE, shutdown_timeout=0.5)
        loop.run_until_complete(runner.setup())
        try:
            loop.run_until_complete(web.TCPSite(runner, self.host, self.port,
                                                reuse_address=True).start())
        except BaseException:
            loop.run_until_complete(runner.cleanup())
            raise
        assert runner.server is not None
        app[WATCH].start(runner.server)
        self.runner = runner

    def stop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop listening and close the connections (shutdown; the loop still runs)."""
        runner, self.runner = self.runner, None
        if runner is not None:
            runner.app[WATCH].stop()
            loop.create_task(runner.cleanup())
