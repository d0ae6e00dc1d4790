"""What listens at an address that did not answer as AMQP: the stream protocol, HTTP, TLS.

Why: pointing `--url` at the stream-protocol port (5552) or the metrics port gave proton's raw
framing error, or a 30-second timeout; a user cannot tell from that what they reached. After a
failed connect, one short probe says which listener it looks like. The probe is a stream-protocol
PeerProperties frame followed by a blank line, which each kind of listener answers in its own way:
an AMQP listener with its protocol header (it refuses any other), a stream-protocol listener with
a PeerPropertiesResponse, an HTTP server with a status line or an error page (the blank line ends a request), a TLS
server with an alert record.
"""

from __future__ import annotations

import socket
import time
import urllib.parse

from amqp_stream.streamproto import RESPONSE_FLAG, Key, PeerProperties, encode

__all__ = ["identify", "listener_hint"]

_PROBE = encode(PeerProperties(1, {"product": "amqp-stream probe"})) + b"\r\n\r\n"


def identify(host: str, port: int, timeout: float = 2.0) -> str | None:
    """``amqp``, ``stream``, ``http``, ``tls``, ``other`` (something answered), or None when
    nothing could be learnt (refused, silent)."""
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(_PROBE)
            deadline = time.monotonic() + timeout
            while len(answer) < 8 and time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                data = sock.recv(64)
                if not data:
                    break
                answer += data
    except OSError:
        pass  # refused, reset or silent: judge what came, if anything
    if not answer:
        return None
    if answer.startswith(b"AMQP"):
        return "amqp"
    if answer.startswith(b"HTTP/") or answer.lstrip()[:1] == b"<":
        return "http"  # a status line, or an HTML error page (the probe read as HTTP/0.9)
    if answer[:2] == b"\x15\x03":  # a TLS alert record (version 3.x)
        return "tls"
    if len(answer) >= 6 and int.from_bytes(answer[4:6], "big") == RESPONSE_FLAG | Key.PEER_PROPERTIES:
        return "stream"
    return "other"


def listener_hint(url: str) -> str:
    """A sentence for a failed connect to ``url``, naming what answers there, or nothing when it
    answers as an AMQP listener (or not at all)."""
    parts = urllib.parse.urlsplit(url if "://" in url else "amqp://" + url)
    tls = parts.scheme == "amqps"
    try:
        port = parts.port or (5671 if tls else 5672)
    except ValueError:
        return ""
    kind = identify(parts.hostname or "127.0.0.1", port)
    if kind == "amqp":
        return "; it answers as a plain AMQP listener: use amqp://" if tls else ""
    return {
        "stream": "; it answers as a RabbitMQ stream-protocol listener (the broker's --stream-port, "
                  "default 5552), not AMQP 1.0: use the AMQP port (--port, default 5672)",
        "http": "; it answers as an HTTP server (the broker's metrics port?), not AMQP 1.0: use "
                "the AMQP port (--port, default 5672)",
        "tls": "" if tls else "; it answers with TLS: use amqps://",
        "other": "; whatever listens there does not answer as AMQP 1.0",
    }.get(kind or "", "")
