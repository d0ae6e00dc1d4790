"""Reading a request's JSON body within the HTTP API's bounds (see ``server``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from amqp_stream.http.errors import ApiError, bad_request
from amqp_stream.http.state import STATE

__all__ = ["read_json"]


async def read_json(request: web.Request) -> Any:
    """The request's JSON body (None when empty): 400 when it is not JSON, 408 when it does not
    arrive in time, 413 (aiohttp) above ``MAX_BODY``."""
    try:
        async with asyncio.timeout(request.app[STATE].config.handshake_timeout):
            raw = await request.read()
    except TimeoutError:
        raise ApiError(408, "the request body did not arrive in time") from None
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("payload not valid JSON") from None
