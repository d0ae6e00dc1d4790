"""Real HTTP requests to a broker's management API (urllib: no client library between the test
and the wire)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from amqp_stream.testing import BrokerProcess

__all__ = ["Answer", "call", "quote"]

GUEST = ("guest", "guest")


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def quote(name: str) -> str:
    """A path segment as clients send it (``/`` as ``%2F``)."""
    return urllib.parse.quote(name, safe="")


def call(broker: BrokerProcess, method: str, path: str, body: Any = None,
         auth: tuple[str, str] | None = GUEST, raw: bytes | None = None,
         timeout: float = 30) -> Answer:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(broker.management_url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.read(), dict(response.headers))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, exc.read(), dict(exc.headers))
