"""RabbitMQ's error answers: ``{"error": ..., "reason": ...}`` with its status codes.

Handlers raise ``ApiError`` (or a core ``BrokerError``, mapped by ``from_broker``); the server's
middleware turns both, and aiohttp's own refusals (no route, wrong method, body too large),
into this JSON.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from amqp_stream.errors import BrokerError

__all__ = ["ApiError", "not_found", "bad_request", "from_broker", "error_response", "reply", "ERRORS"]

# status -> RabbitMQ's "error" word (rabbit_mgmt_util); others use the HTTP reason phrase
ERRORS = {400: "bad_request", 401: "not_authorised", 403: "not_authorised",
          404: "Object Not Found", 405: "Method Not Allowed", 408: "timeout",
          413: "Request Entity Too Large", 500: "internal_server_error",
          501: "not_implemented"}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, error: str | None = None):
        super().__init__(reason)
        self.status, self.reason = status, reason
        self.error = error or ERRORS.get(status, "error")


def not_found(reason: str = "Not Found") -> ApiError:
    return ApiError(404, reason)


def bad_request(reason: str) -> ApiError:
    return ApiError(400, reason)


def from_broker(exc: BrokerError) -> ApiError:
    """A refusal of the core as the management API answers it: 404 for what does not exist,
    401 ``not_authorised`` for an access refused (a permission, a reserved name: RabbitMQ's
    ``with_channel`` turns the channel's ACCESS_REFUSED into that), 400 for everything else
    (RabbitMQ answers a declare with other arguments, 'inequivalent arg', with 400 too)."""
    if exc.status == 403:
        return ApiError(401, exc.description, "not_authorised")
    status = exc.status if exc.status in (404, 501) else 400
    return ApiError(status, exc.description)


def error_response(status: int, error: str, reason: str, headers: Any = None) -> web.Response:
    return web.json_response({"error": error, "reason": reason}, status=status, headers=headers)


def _dumps(data: Any) -> str:
    return json.dumps(data, default=str)  # argument values the core keeps as objects


def reply(data: Any, status: int = 200) -> web.Response:
    """A JSON answer (every route's)."""
    return web.json_response(data, status=status, dumps=_dumps)
