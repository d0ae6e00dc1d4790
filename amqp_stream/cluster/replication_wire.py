"""The replication connection's frames: pure functions over bytes (no sockets here).

A replica connects to its leader's replication port (one connection per stream), says which
stream, which epoch it knows and what its log holds; the leader answers where the replica's
log must end (it truncates there) and streams chunks from that offset as they lie on disk;
the replica answers with its durable tail after each batch it appends; the leader tells it the
commit end as it moves (it bounds the replica's own consumers). Every frame::

    0        4      5
    +--------+------+---------------------------------+
    | length | type | payload (length - 1 bytes)      |     length: u32, big-endian
    +--------+------+---------------------------------+

    HELLO  1  replica -> leader   u8 version (1) | u16 n, stream (UTF-8) | u16 n, node name |
                                  u64 epoch the replica knows | u64 its local end |
                                  u16 k, k x (u64 epoch, u64 id of its last chunk of that
                                  epoch), newest first (osiris's epoch offsets)
    START  2  leader -> replica   u64 leader's epoch | u64 offset the replica's log must end
                                  at (truncate there, chunks follow from it) |
                                  u64 commit end | i64 commit chunk id | u8 flags (bit 0:
                                  reset: drop the whole log and start it at that offset, the
                                  leader keeping nothing of what the two logs share)
    REFUSE 3  leader -> replica   u16 code | u16 n, reason (UTF-8); the connection closes
    CHUNK  4  leader -> replica   u8 flags (bit 0: first chunk of a segment) | the chunk,
                                  whole, as on disk (header, filter, data, trailer)
    COMMIT 5  leader -> replica   u64 commit end | i64 commit chunk id
    ACK    6  replica -> leader   u64 durable end | i64 id of its last chunk
    ADMIN  7  operator <-> node   a JSON object (UTF-8): instead of HELLO, an operator's
                                  request (``stream status``, a leadership transfer); the
                                  node answers with one ADMIN frame and closes
    CHALLENGE 8  node -> peer     u8 version | 32-byte nonce: the node's first frame
    AUTH   9  peer -> node        32-byte nonce | 32-byte HMAC-SHA256 proof of the cluster
                                  secret (``auth.py``); before HELLO or ADMIN
    WELCOME 10 node -> peer       32-byte HMAC-SHA256: the node's proof of the secret

A connection: CHALLENGE, AUTH, WELCOME (or REFUSE ``REFUSE_AUTH`` and close), then HELLO ...
or ADMIN ... as above.

A CHUNK frame's head (``chunk_head``) goes out by ``send``, its chunk by ``os.sendfile``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

__all__ = [
    "VERSION", "HELLO", "START", "REFUSE", "CHUNK", "COMMIT", "ACK", "HEAD", "MAX_FRAME",
    "REFUSE_NOT_LEADER", "REFUSE_UNKNOWN_STREAM", "REFUSE_STALE_EPOCH", "REFUSE_BAD_FRAME",
    "Hello", "Start", "WireError", "encode_hello", "decode_hello", "encode_start",
    "decode_start", "encode_refuse", "decode_refuse", "chunk_head", "encode_commit",
    "decode_position", "encode_ack", "frames", "frame_views", "ADMIN", "encode_admin",
    "decode_admin", "CHALLENGE", "AUTH", "WELCOME", "REFUSE_AUTH", "encode_challenge",
    "decode_challenge", "encode_auth", "decode_auth", "encode_welcome",
]

VERSION = 1
HELLO, START, REFUSE, CHUNK, COMMIT, ACK, ADMIN = 1, 2, 3, 4, 5, 6, 7
CHALLENGE, AUTH, WELCOME = 8, 9, 10
_NONCE = 32
HEAD = struct.Struct(">IB")  # length (type + payload), type
_POSITION = struct.Struct(">Qq")  # an end and a chunk id (COMMIT, ACK)
_START = struct.Struct(">QQQqB")
_EPOCH_END = struct.Struct(">QQ")
MAX_FRAME = 64 << 20  # a chunk is at most 8 MiB of data plus filter and trailer: far above

REFUSE_NOT_LEADER = 1
REFUSE_UNKNOWN_STREAM = 2
REFUSE_STALE_EPOCH = 3
REFUSE_BAD_FRAME = 4
REFUSE_AUTH = 5


class WireError(ValueError):
    """Bytes that are not a frame of this protocol."""


@dataclass(frozen=True)
class Hello:
    stream: str
    node: str
    epoch: int
    end: int
    epochs: tuple[tuple[int, int], ...]  # (epoch, last chunk id), newest first


@dataclass(frozen=True)
class Start:
    epoch: int
    offset: int
    commit: int
    commit_chunk: int
    reset: bool = False


def _frame(kind: int, payload: bytes) -> bytes:
    return HEAD.pack(len(payload) + 1, kind) + payload


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise WireError("a name is at most 65535 bytes")
    return struct.pack(">H", len(raw)) + raw


def _read_text(buf: memoryview, at: int) -> tuple[str, int]:
    if at + 2 > len(buf):
        raise WireError("short frame")
    (n,) = struct.unpack_from(">H", buf, at)
    end = at + 2 + n
    if end > len(buf):
        raise WireError("short frame")
    return bytes(buf[at + 2:end]).decode("utf-8"), end


def encode_hello(h: Hello) -> bytes:
    body = [bytes([VERSION]), _text(h.stream), _text(h.node), struct.pack(">QQH", h.epoch, h.end,
                                                                           len(h.epochs))]
    body += [_EPOCH_END.pack(e, c) for e, c in h.epochs]
    return _frame(HELLO, b"".join(body))


def decode_hello(payload: bytes | memoryview) -> Hello:
    buf = memoryview(payload)
    try:
        if not buf or buf[0] != VERSION:
            raise WireError(f"replication version {buf[0] if buf else None}, expected {VERSION}")
        stream, at = _read_text(buf, 1)
        node, at = _read_text(buf, at)
        epoch, end, k = struct.unpack_from(">QQH", buf, at)
        at += 18
        epochs = tuple(_EPOCH_END.unpack_from(buf, at + 16 * i) for i in range(k))
        if at + 16 * k != len(buf):
            raise WireError("trailing bytes in HELLO")
    except (struct.error, UnicodeDecodeError) as exc:
        raise WireError(f"bad HELLO: {exc}") from None
    return Hello(stream, node, epoch, end, epochs)


def encode_start(s: Start) -> bytes:
    return _frame(START, _START.pack(s.epoch, s.offset, s.commit, s.commit_chunk, int(s.reset)))


def decode_start(payload: bytes | memoryview) -> Start:
    if len(payload) != _START.size:
        raise WireError("bad START")
    epoch, offset, commit, chunk, flags = _START.unpack(payload)
    return Start(epoch, offset, commit, chunk, bool(flags & 1))


def encode_refuse(code: int, reason: str) -> bytes:
    return _frame(REFUSE, struct.pack(">H", code) + _text(reason[:1000]))


def decode_refuse(payload: bytes | memoryview) -> tuple[int, str]:
    buf = memoryview(payload)
    if len(buf) < 2:
        raise WireError("bad REFUSE")
    (code,) = struct.unpack_from(">H", buf, 0)
    reason, _ = _read_text(buf, 2)
    return code, reason


def chunk_head(size: int, first: bool) -> bytes:
    """The bytes before a chunk of ``size`` bytes sent as it lies on disk."""
    return HEAD.pack(size + 2, CHUNK) + (b"\x01" if first else b"\x00")


def encode_commit(end: int, chunk_id: int) -> bytes:
    return _frame(COMMIT, _POSITION.pack(end, chunk_id))


def encode_ack(end: int, chunk_id: int) -> bytes:
    return _frame(ACK, _POSITION.pack(end, chunk_id))


def decode_position(payload: bytes | memoryview) -> tuple[int, int]:
    """A COMMIT's or an ACK's (end, chunk id)."""
    if len(payload) != _POSITION.size:
        raise WireError("bad COMMIT/ACK")
    end, chunk_id = _POSITION.unpack(payload)
    return end, chunk_id


def encode_admin(doc: dict) -> bytes:
    return _frame(ADMIN, json.dumps(doc).encode("utf-8"))


def decode_admin(payload: bytes | memoryview) -> dict:
    try:
        doc = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"bad ADMIN: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError("bad ADMIN: not a JSON object")
    return doc


def encode_challenge(nonce: bytes) -> bytes:
    return _frame(CHALLENGE, bytes([VERSION]) + nonce)


def decode_challenge(payload: bytes | memoryview) -> bytes:
    if len(payload) != 1 + _NONCE:
        raise WireError("bad CHALLENGE")
    if payload[0] != VERSION:
        raise WireError(f"replication version {payload[0]}, expected {VERSION}")
    return bytes(payload[1:])


def encode_auth(nonce: bytes, proof: bytes) -> bytes:
    return _frame(AUTH, nonce + proof)


def decode_auth(payload: bytes | memoryview) -> tuple[bytes, bytes]:
    """An AUTH's (nonce, proof)."""
    if len(payload) != 2 * _NONCE:
        raise WireError("bad AUTH")
    return bytes(payload[:_NONCE]), bytes(payload[_NONCE:])


def encode_welcome(proof: bytes) -> bytes:
    return _frame(WELCOME, proof)


def frames(buf: bytearray | bytes, at: int = 0) -> tuple[list[tuple[int, bytes]], int]:
    """The whole frames in ``buf`` from ``at``: ``[(type, payload)]`` (copies: ``buf`` may
    be resized after) and the position after the last one (a partial frame stays for the
    next read)."""
    out = []
    n = len(buf)
    with memoryview(buf) as view:
        while at + HEAD.size <= n:
            length, kind = HEAD.unpack_from(view, at)
            if not 1 <= length <= MAX_FRAME:
                raise WireError(f"frame length {length}")
            end = at + 4 + length
            if end > n:
                break
            out.append((kind, bytes(view[at + HEAD.size:end])))
            at = end
    return out, at


def frame_views(data: bytes) -> tuple[list[tuple[int, memoryview]], int]:
    """``frames`` without copies, for immutable ``data``: each payload is a view into it."""
    out = []
    n = len(data)
    view = memoryview(data)
    at = 0
    while at + HEAD.size <= n:
        length, kind = HEAD.unpack_from(data, at)
        if not 1 <= length <= MAX_FRAME:
            raise WireError(f"frame length {length}")
        end = at + 4 + length
        if end > n:
            break
        out.append((kind, view[at + HEAD.size:end]))
        at = end
    return out, at
