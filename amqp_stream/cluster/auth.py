"""The replication port's authentication: a secret shared by the cluster's nodes, proven by a
challenge-response, as RabbitMQ's nodes prove the Erlang cookie on the distribution port.

Why: whoever reaches a replication port could otherwise take every stream's log as a
"replica" or send operator requests (a leadership transfer). The secret never crosses the
wire: the node that accepts a connection sends a random nonce (CHALLENGE); the peer answers
with its own nonce and HMAC-SHA256(secret, "client" label | both nonces) (AUTH) before its
HELLO or ADMIN; the node checks it (``hmac.compare_digest``) and proves the secret back with
HMAC-SHA256(secret, "server" label | both nonces) (WELCOME), so a replica or an operator does
not take chunks or answers from a node that lacks it. The labels differ so that a proof cannot
be reflected. Nothing after the handshake is signed or encrypted (as Erlang distribution
without TLS): the port must still be kept on a network the cluster trusts.

Where the secret comes from (``docs/cluster.md``): ``--cluster-secret`` (config file,
``AMQP_STREAM_CLUSTER_SECRET``); otherwise a ZooKeeper cluster's ``PATH/secret`` znode, made
with a random value by the first node that starts (as the Erlang cookie is generated on first
start); a ``--cluster-static`` file's ``"secret"``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket

from amqp_stream.cluster import replication_wire as wire

__all__ = ["AuthError", "NONCE", "HANDSHAKE_FRAME", "new_secret", "secret_bytes", "FrameReader",
           "client_auth", "check_auth", "check_welcome", "send_challenge"]

NONCE = 32
HANDSHAKE_FRAME = 2048  # CHALLENGE, AUTH, WELCOME and a REFUSE are far shorter
_CLIENT = b"amqp-stream replication: client proof\x00"
_SERVER = b"amqp-stream replication: server proof\x00"


class AuthError(wire.WireError):
    """The peer did not prove the cluster's secret (or asked without trying)."""


def new_secret() -> str:
    """A fresh random secret (256 bits), for a cluster that has none yet."""
    return secrets.token_urlsafe(32)


def secret_bytes(value: str | bytes, where: str) -> bytes:
    """``value`` as the HMAC key; an empty one is refused (``where`` names its source)."""
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if not raw.strip():
        raise ValueError(f"the cluster secret from {where} is empty")
    return raw


def _mac(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, label + server_nonce + client_nonce, hashlib.sha256).digest()


class FrameReader:
    """Whole frames from a blocking socket, one at a time; bytes read past a frame are kept
    for the next one (``rest``)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()

    def next(self, what: str, limit: int = wire.MAX_FRAME) -> tuple[int, bytes]:
        """The next frame; ``WireError`` when the peer closes first or announces a frame
        longer than ``limit`` (before the proof: nothing large is buffered for a stranger)."""
        while True:
            if len(self.buf) >= wire.HEAD.size and wire.HEAD.unpack_from(self.buf)[0] > limit:
                raise wire.WireError(f"a frame longer than {limit} bytes as {what}")
            got, at = wire.frames(self.buf)
            if got:
                kind, payload = got[0]
                del self.buf[:4 + 1 + len(payload)]
                return kind, payload
            data = self.sock.recv(65536)
            if not data:
                raise wire.WireError(f"closed before {what}")
            self.buf += data

    def rest(self) -> bytes:
        return bytes(self.buf)


def send_challenge(sock: socket.socket) -> bytes:
    """The accepting side's first frame: a fresh nonce (returned)."""
    nonce = os.urandom(NONCE)
    sock.sendall(wire.encode_challenge(nonce))
    return nonce


def client_auth(reader: FrameReader, secret: bytes) -> tuple[bytes, bytes]:
    """The connecting side: read the CHALLENGE; returns the AUTH frame to send (before
    HELLO or ADMIN) and the WELCOME payload the node must answer with."""
    kind, payload = reader.next("the challenge", HANDSHAKE_FRAME)
    if kind == wire.REFUSE:
        code, reason = wire.decode_refuse(payload)
        raise AuthError(f"refused ({code}): {reason}")
    if kind != wire.CHALLENGE:
        raise wire.WireError(f"frame type {kind} instead of the challenge")
    server_nonce = wire.decode_challenge(payload)
    client_nonce = os.urandom(NONCE)
    proof = _mac(secret, _CLIENT, server_nonce, client_nonce)
    return (wire.encode_auth(client_nonce, proof),
            _mac(secret, _SERVER, server_nonce, client_nonce))


def check_auth(secret: bytes, server_nonce: bytes, kind: int, payload: bytes) -> bytes:
    """The accepting side: the WELCOME frame to send when ``(kind, payload)`` is an AUTH
    proving ``secret`` for ``server_nonce``; ``AuthError`` otherwise."""
    if kind != wire.AUTH:
        raise AuthError(f"frame type {kind} without authenticating first (a node or a "
                        "command without the cluster secret, or an older version)")
    client_nonce, proof = wire.decode_auth(payload)
    if not hmac.compare_digest(proof, _mac(secret, _CLIENT, server_nonce, client_nonce)):
        raise AuthError("wrong cluster secret")
    return wire.encode_welcome(_mac(secret, _SERVER, server_nonce, client_nonce))


def check_welcome(kind: int, payload: bytes, expected: bytes) -> None:
    """The connecting side: the node's answer to AUTH must prove the secret too."""
    if kind == wire.REFUSE:
        code, reason = wire.decode_refuse(payload)
        raise AuthError(f"refused ({code}): {reason}")
    if kind != wire.WELCOME:
        raise wire.WireError(f"frame type {kind} instead of the node's proof")
    if not hmac.compare_digest(bytes(payload), expected):
        raise AuthError("the node did not prove the cluster secret (a different secret)")
