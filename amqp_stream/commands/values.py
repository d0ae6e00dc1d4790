"""Decoded AMQP values as the commands print them: JSON, or a message body as text.

Why one place: `consume` (messages from the broker) and `read` (records of a stream directory)
print the same messages, and should print them the same way.
"""

from __future__ import annotations

import base64
import decimal
import json
import uuid
from typing import Any

__all__ = ["jsonable", "body_text"]


def jsonable(value: Any) -> Any:
    """A decoded AMQP value as JSON: binary as UTF-8 text when it is, else `base64:...`."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(data).decode()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, str):
        return str(value)
    return repr(value)


def body_text(body: Any) -> str:
    """A body as text: a string as it is, binary as UTF-8 (invalid bytes replaced), any other
    value as JSON."""
    if isinstance(body, str):
        return body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body).decode("utf-8", "replace")
    return json.dumps(jsonable(body), ensure_ascii=False)
