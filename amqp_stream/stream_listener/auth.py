"""Who may use the stream listener: SASL PLAIN and ANONYMOUS, decided in Python.

Strategy: the AMQP listener lets proton (and Cyrus) check passwords; the stream protocol
carries SASL in its own frames, so the decision is made here, from the same settings:
- with a users file (``--users``), PLAIN against it (``security.read_users``; passwords
  compared with ``hmac.compare_digest``);
- ANONYMOUS exactly when the AMQP listener offers it (``security.prepare`` decided: no users
  file, or ``--allow-anonymous``; never on a non-loopback address without that flag);
- with no users file, RabbitMQ's default user ``guest``/``guest`` over PLAIN, from loopback
  peers only (RabbitMQ's ``loopback_users``): the stream clients speak PLAIN only, and
  ``guest`` is what they send by default. A ``guest`` from another machine gets RabbitMQ's
  ``SASL_AUTHENTICATION_FAILURE_LOOPBACK``.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from amqp_stream.security import read_users
from amqp_stream.streamproto import ResponseCode

__all__ = ["Authenticator", "GUEST"]

GUEST = ("guest", "guest")


def peer_is_loopback(address: Any) -> bool:
    try:
        host = address[0] if isinstance(address, tuple) else ""
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except (ValueError, IndexError, AttributeError):
        return isinstance(address, str)  # a Unix socket


class Authenticator:
    def __init__(self, config: Any, security: Any):
        self.users: dict[str, str] = read_users(config.users_file) if config.users_file else {}
        offered = security.mechanisms.split() if security is not None else ["ANONYMOUS"]
        self.anonymous = "ANONYMOUS" in offered
        self.mechanisms: tuple[str, ...] = ("PLAIN", "ANONYMOUS") if self.anonymous else ("PLAIN",)

    def check(self, mechanism: str, data: bytes, peer_address: Any) -> tuple[int, str | None]:
        """(response code, user) for one SaslAuthenticate."""
        if mechanism == "ANONYMOUS":
            if self.anonymous:
                return ResponseCode.OK, "anonymous"
            return ResponseCode.SASL_MECHANISM_NOT_SUPPORTED, None
        if mechanism != "PLAIN":
            return ResponseCode.SASL_MECHANISM_NOT_SUPPORTED, None
        parts = data.split(b"\0")
        if len(parts) != 3:
            return ResponseCode.SASL_ERROR, None
        try:
            user, password = parts[1].decode("utf-8"), parts[2].decode("utf-8")
        except UnicodeDecodeError:
            return ResponseCode.SASL_ERROR, None
        if self.users:
            expected = self.users.get(user)
            ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
            return (ResponseCode.OK, user) if ok and expected is not None else (
                ResponseCode.AUTHENTICATION_FAILURE, None)
        if not hmac.compare_digest(f"{user}\0{password}".encode(), "\0".join(GUEST).encode()):
            return ResponseCode.AUTHENTICATION_FAILURE, None
        if not peer_is_loopback(peer_address):
            return ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK, None
        return ResponseCode.OK, user
