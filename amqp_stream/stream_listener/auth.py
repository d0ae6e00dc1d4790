"""Who may use the stream listener: SASL PLAIN and ANONYMOUS, decided in Python.

Strategy: the AMQP listener lets proton (and Cyrus, asking ``amqp_stream.saslauthd``) check
passwords; the stream protocol carries SASL in its own frames, so the decision is made here,
against the same user store (``amqp_stream.users``: the users file's users and the stored ones):
- PLAIN against the store (``UserStore.authenticate``: RabbitMQ's salted hashes);
- ANONYMOUS exactly when the AMQP listener offers it (``security.prepare`` decided: no users
  file, or ``--allow-anonymous``; never on a non-loopback address without that flag);
- the stored ``guest`` (RabbitMQ's first user) from loopback peers only (RabbitMQ's
  ``loopback_users``): the stream clients send guest/guest by default. A ``guest`` from another
  machine gets RabbitMQ's ``SASL_AUTHENTICATION_FAILURE_LOOPBACK``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from amqp_stream.streamproto import ResponseCode
from amqp_stream.users import GUEST, UserStore

__all__ = ["Authenticator"]


def peer_is_loopback(address: Any) -> bool:
    try:
        host = address[0] if isinstance(address, tuple) else ""
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except (ValueError, IndexError, AttributeError):
        return isinstance(address, str)  # a Unix socket


class Authenticator:
    def __init__(self, store: UserStore | None, security: Any):
        self.store = store
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
            name, password = parts[1].decode("utf-8"), parts[2].decode("utf-8")
        except UnicodeDecodeError:
            return ResponseCode.SASL_ERROR, None
        user = self.store.authenticate(name, password) if self.store is not None else None
        if user is None:
            return ResponseCode.AUTHENTICATION_FAILURE, None
        if name == GUEST and not user.from_users_file and not peer_is_loopback(peer_address):
            return ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK, None
        return ResponseCode.OK, name
