"""A small blocking client of RabbitMQ's stream protocol (port 5552) for the conformance suite.

Why a client of its own: the suite must be pointable at any broker (this project's, RabbitMQ),
so it uses none of the project's code; writing the frames a second time, independently of
``amqp_stream.streamproto``, also cross-checks that codec. It speaks plain sockets: one
connection, requests answered in order of correlation id, everything the server pushes
(Deliver, PublishConfirm, PublishError, MetadataUpdate, Close) kept in per-kind queues that a
test reads with a timeout. Chunks are never decoded message by message unless a test asks
(``Chunk.records``): record counts come from the chunk header.

Layouts follow PROTOCOL.adoc of rabbitmq-server (frame = u32 size, u16 key, u16 version, ...;
strings with an i16 length, arrays with an i32 count).
"""

from __future__ import annotations

import collections
import itertools
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence
from urllib.parse import unquote, urlsplit

__all__ = ["StreamClient", "Chunk", "ServerClosed", "OK", "offset_first", "offset_last",
           "offset_next", "offset_at", "offset_timestamp", "offset_none", "parse_stream_url",
           "ConsumerUpdate"]

OK = 1
RESPONSE = 0x8000
# command keys
DECLARE_PUBLISHER, PUBLISH, PUBLISH_CONFIRM, PUBLISH_ERROR = 1, 2, 3, 4
QUERY_PUBLISHER_SEQUENCE, DELETE_PUBLISHER, SUBSCRIBE, DELIVER = 5, 6, 7, 8
CREDIT, STORE_OFFSET, QUERY_OFFSET, UNSUBSCRIBE = 9, 10, 11, 12
CREATE, DELETE, METADATA, METADATA_UPDATE = 13, 14, 15, 16
PEER_PROPERTIES, SASL_HANDSHAKE, SASL_AUTHENTICATE, TUNE, OPEN, CLOSE, HEARTBEAT = (
    17, 18, 19, 20, 21, 22, 23)
ROUTE, PARTITIONS, CONSUMER_UPDATE = 24, 25, 26
EXCHANGE_COMMAND_VERSIONS, STREAM_STATS, CREATE_SUPER_STREAM, DELETE_SUPER_STREAM = 27, 28, 29, 30

_HEAD = struct.Struct(">IHH")
_CHUNK = struct.Struct(">BBHIqQQIIIB3x")


def offset_first() -> bytes:
    return struct.pack(">H", 1)


def offset_last() -> bytes:
    return struct.pack(">H", 2)


def offset_next() -> bytes:
    return struct.pack(">H", 3)


def offset_at(offset: int) -> bytes:
    return struct.pack(">HQ", 4, offset)


def offset_timestamp(ms: int) -> bytes:
    return struct.pack(">Hq", 5, ms)


def offset_none() -> bytes:
    """ConsumerUpdate's answer from a consumer that steps down (no offset)."""
    return struct.pack(">H", 0)


def _s(text: str | None) -> bytes:
    """A string; ``None`` (length -1) only where RabbitMQ takes it: Publish v2's filter value."""
    if text is None:
        return b"\xff\xff"
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=31)
    return c.compress(data) + c.flush()


def _map(pairs: Mapping[str, str]) -> bytes:
    return struct.pack(">i", len(pairs)) + b"".join(_s(k) + _s(v) for k, v in pairs.items())


class _Cursor:
    """Reads a frame's fields in order."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        value = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return value

    def strings(self) -> list[str | None]:
        return [self.string() for _ in range(self.take(">i"))]

    def pairs(self) -> dict[str, str | None]:
        return {self.string(): self.string() for _ in range(self.take(">i"))}

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


class ServerClosed(Exception):
    """The server closed the connection (with a Close frame: ``code`` and ``reason``)."""

    def __init__(self, code: int | None = None, reason: str | None = None):
        super().__init__(f"server closed the connection (code {code}, {reason!r})")
        self.code, self.reason = code, reason


@dataclass
class Chunk:
    """One Deliver: the osiris chunk header's fields and the bytes that followed it."""

    subscription_id: int
    committed_chunk_id: int | None
    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    chunk_id: int
    crc: int
    data_length: int
    trailer_length: int
    bloom_size: int
    data: bytes

    def records(self) -> list[tuple[int, bytes]]:
        """(offset, message) of each record; sub-entry batches (uncompressed or gzip) opened."""
        out, pos, offset = [], 0, self.chunk_id
        for _ in range(self.num_entries):
            (head,) = struct.unpack_from(">I", self.data, pos)
            if head & 0x8000_0000 == 0:
                out.append((offset, self.data[pos + 4:pos + 4 + head]))
                pos += 4 + head
                offset += 1
                continue
            kind, count, _, size = struct.unpack_from(">BHII", self.data, pos)
            body = self.data[pos + 11:pos + 11 + size]
            compression = (kind >> 4) & 7
            if compression == 1:
                body = zlib.decompress(body, 31)        # gzip
            elif compression:
                raise ValueError(f"sub-entry batch with compression {compression}")
            inner = 0
            for _ in range(count):
                (n,) = struct.unpack_from(">I", body, inner)
                out.append((offset, body[inner + 4:inner + 4 + n]))
                inner += 4 + n
                offset += 1
            pos += 11 + size
        return out


def parse_stream_url(url: str) -> tuple[str, int, str, str, str]:
    """``rabbitmq-stream://user:password@host:port/vhost`` -> host, port, user, password, vhost."""
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    return (parts.hostname or "127.0.0.1", parts.port or 5552, unquote(parts.username or "guest"),
            unquote(parts.password or "guest"), vhost)


@dataclass
class ConsumerUpdate:
    """The server's ConsumerUpdate request (single active consumer), to answer with
    ``StreamClient.answer_consumer_update``."""

    correlation_id: int
    subscription_id: int
    active: bool


@dataclass
class _Pushed:
    chunks: collections.deque = field(default_factory=collections.deque)
    confirms: dict = field(default_factory=lambda: collections.defaultdict(list))
    errors: dict = field(default_factory=lambda: collections.defaultdict(list))
    metadata_updates: list = field(default_factory=list)
    credit_errors: list = field(default_factory=list)
    consumer_updates: collections.deque = field(default_factory=collections.deque)


class StreamClient:
    """One connection: ``StreamClient(host, port)`` connects, authenticates (PLAIN) and opens.

    Request methods return the response code (and payload, where the command has one); they
    raise ``ServerClosed`` if the server closes instead, ``TimeoutError`` after ``timeout``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 5552, user: str = "guest",
                 password: str = "guest", vhost: str = "/", timeout: float = 10.0,
                 frame_max: int = 1_048_576, heartbeat: int = 0,
                 properties: Mapping[str, str] | None = None, handshake: bool = True,
                 record: bool = False):
        self.timeout = timeout
        self.received: list[bytes] | None = [] if record else None
        """With ``record``: every frame received, as sent (size prefix included)."""
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._corr = itertools.count(1)
        self._responses: dict[int, tuple[int, _Cursor]] = {}
        self.pushed = _Pushed()
        self.closed_by_server: ServerClosed | None = None
        self.server_properties: dict = {}
        self.mechanisms: list = []
        self.server_tune: tuple[int, int] | None = None
        self.connection_properties: dict = {}
        self.heartbeats = 0
        if handshake:
            self.handshake(user, password, vhost, frame_max, heartbeat, properties)

    # ---- handshake ------------------------------------------------------------------------
    def handshake(self, user: str, password: str, vhost: str = "/", frame_max: int = 1_048_576,
                  heartbeat: int = 0, properties: Mapping[str, str] | None = None) -> None:
        code, c = self.request(PEER_PROPERTIES, _map(properties or {"product": "conformance"}))
        self._check(code, "PeerProperties")
        self.server_properties = c.pairs()
        code, c = self.request(SASL_HANDSHAKE, b"")
        self._check(code, "SaslHandshake")
        self.mechanisms = c.strings()
        code = self.authenticate("PLAIN", b"\0" + user.encode() + b"\0" + password.encode())
        self._check(code, "SaslAuthenticate")
        deadline = time.monotonic() + self.timeout
        while self.server_tune is None:
            self._read_frame(deadline)
        server_max, server_heartbeat = self.server_tune
        agreed_max = min(frame_max, server_max) if server_max and frame_max else server_max or frame_max
        self.send_frame(TUNE, 1, struct.pack(">II", agreed_max, min(heartbeat, server_heartbeat)),
                        response=True)
        code, c = self.request(OPEN, _s(vhost))
        self._check(code, "Open")
        self.connection_properties = c.pairs() if c.left else {}

    def authenticate(self, mechanism: str, data: bytes) -> int:
        body = _s(mechanism) + struct.pack(">i", len(data)) + data
        return self.request(SASL_AUTHENTICATE, body)[0]

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != OK:
            raise ConnectionError(f"{what} answered with code {code}")

    # ---- requests -------------------------------------------------------------------------
    def create_stream(self, stream: str, arguments: Mapping[str, str] | None = None) -> int:
        return self.request(CREATE, _s(stream) + _map(arguments or {}))[0]

    def delete_stream(self, stream: str) -> int:
        return self.request(DELETE, _s(stream))[0]

    def declare_publisher(self, publisher_id: int, stream: str, reference: str = "") -> int:
        return self.request(DECLARE_PUBLISHER,
                            struct.pack(">B", publisher_id) + _s(reference) + _s(stream))[0]

    def delete_publisher(self, publisher_id: int) -> int:
        return self.request(DELETE_PUBLISHER, struct.pack(">B", publisher_id))[0]

    def query_publisher_sequence(self, reference: str, stream: str) -> tuple[int, int]:
        code, c = self.request(QUERY_PUBLISHER_SEQUENCE, _s(reference) + _s(stream))
        return code, c.take(">Q")

    def subscribe(self, subscription_id: int, stream: str, offset: bytes | None = None,
                  credit: int = 1, properties: Mapping[str, str] | None = None) -> int:
        body = (struct.pack(">B", subscription_id) + _s(stream) + (offset or offset_first())
                + struct.pack(">H", credit) + _map(properties or {}))
        return self.request(SUBSCRIBE, body)[0]

    def unsubscribe(self, subscription_id: int) -> int:
        return self.request(UNSUBSCRIBE, struct.pack(">B", subscription_id))[0]

    def metadata(self, streams: Sequence[str]) -> tuple[list, dict]:
        """(brokers [(reference, host, port)], {stream: (code, leader reference, [replicas])})."""
        body = struct.pack(">i", len(streams)) + b"".join(_s(s) for s in streams)
        c = self.request(METADATA, body, has_code=False)[1]
        brokers = [(c.take(">H"), c.string(), c.take(">I")) for _ in range(c.take(">i"))]
        found = {}
        for _ in range(c.take(">i")):
            name, code, leader = c.string(), c.take(">H"), c.take(">H")
            found[name] = (code, leader, [c.take(">H") for _ in range(c.take(">i"))])
        return brokers, found

    def query_offset(self, reference: str, stream: str) -> tuple[int, int]:
        code, c = self.request(QUERY_OFFSET, _s(reference) + _s(stream))
        return code, c.take(">Q")

    def exchange_command_versions(self, versions: Iterable[tuple[int, int, int]]
                                  ) -> tuple[int, list[tuple[int, int, int]]]:
        versions = list(versions)
        body = struct.pack(">i", len(versions)) + b"".join(struct.pack(">HHH", *v) for v in versions)
        code, c = self.request(EXCHANGE_COMMAND_VERSIONS, body)
        return code, [c.take(">HHH") for _ in range(c.take(">i"))]

    def stream_stats(self, stream: str) -> tuple[int, dict[str, int]]:
        code, c = self.request(STREAM_STATS, _s(stream))
        return code, {c.string(): c.take(">q") for _ in range(c.take(">i"))}

    def create_super_stream(self, name: str, partitions: Sequence[str], binding_keys: Sequence[str],
                            arguments: Mapping[str, str] | None = None) -> int:
        body = (_s(name) + struct.pack(">i", len(partitions)) + b"".join(_s(p) for p in partitions)
                + struct.pack(">i", len(binding_keys)) + b"".join(_s(k) for k in binding_keys)
                + _map(arguments or {}))
        return self.request(CREATE_SUPER_STREAM, body)[0]

    def delete_super_stream(self, name: str) -> int:
        return self.request(DELETE_SUPER_STREAM, _s(name))[0]

    def partitions(self, super_stream: str) -> tuple[int, list[str | None]]:
        code, c = self.request(PARTITIONS, _s(super_stream))
        return code, c.strings() if c.left else []

    def route(self, routing_key: str, super_stream: str) -> tuple[int, list[str | None]]:
        code, c = self.request(ROUTE, _s(routing_key) + _s(super_stream))
        return code, c.strings() if c.left else []

    def close(self, code: int = OK, reason: str = "") -> int | None:
        """Close politely; the server's answer code (None if it had closed already)."""
        try:
            if self.closed_by_server is None:
                return self.request(CLOSE, struct.pack(">H", code) + _s(reason))[0]
            return None
        except (ServerClosed, OSError):
            return None
        finally:
            self.sock.close()

    # ---- one-way commands -----------------------------------------------------------------
    def publish(self, publisher_id: int, messages: Iterable[tuple], version: int = 1) -> None:
        """``messages``: (publishing id, body) for v1; (publishing id, body, filter value or
        None) for v2."""
        parts = []
        count = 0
        for m in messages:
            count += 1
            if version == 1:
                parts.append(struct.pack(">QI", m[0], len(m[1])) + m[1])
            else:
                parts.append(struct.pack(">Q", m[0]) + _s(m[2]) + struct.pack(">I", len(m[1])) + m[1])
        self.send_frame(PUBLISH, version, struct.pack(">Bi", publisher_id, count) + b"".join(parts))

    def publish_sub_batch(self, publisher_id: int, publishing_id: int, messages: Sequence[bytes],
                          gzip: bool = False) -> None:
        """One sub-entry batch (Publish v1) of ``messages``, uncompressed or gzip (type 1)."""
        inner = b"".join(struct.pack(">I", len(m)) + m for m in messages)
        body = _gzip(inner) if gzip else inner
        head = struct.pack(">QBHII", publishing_id, 0x80 | ((1 if gzip else 0) << 4),
                           len(messages), len(inner), len(body))
        self.send_frame(PUBLISH, 1, struct.pack(">Bi", publisher_id, 1) + head + body)

    def credit(self, subscription_id: int, credit: int) -> None:
        self.send_frame(CREDIT, 1, struct.pack(">BH", subscription_id, credit))

    def store_offset(self, reference: str, stream: str, offset: int) -> None:
        self.send_frame(STORE_OFFSET, 1, _s(reference) + _s(stream) + struct.pack(">Q", offset))

    def heartbeat(self) -> None:
        self.send_frame(HEARTBEAT, 1, b"")

    # ---- waiting for what the server pushes ------------------------------------------------
    def wait_confirms(self, publisher_id: int, publishing_ids: Iterable[int]) -> dict[int, int]:
        """Wait until each id is confirmed or errored: {publishing id: OK or error code}."""
        wanted = set(publishing_ids)
        deadline = time.monotonic() + self.timeout
        outcome: dict[int, int] = {}
        while True:
            for pid in self.pushed.confirms.pop(publisher_id, []):
                outcome[pid] = OK
            for pid, code in self.pushed.errors.pop(publisher_id, []):
                outcome[pid] = code
            if wanted <= outcome.keys():
                return outcome
            self._read_frame(deadline)

    def next_chunk(self, timeout: float | None = None) -> Chunk:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.pushed.chunks:
            self._read_frame(deadline)
        return self.pushed.chunks.popleft()

    def next_consumer_update(self, timeout: float | None = None) -> ConsumerUpdate:
        """The next ConsumerUpdate the server sent (``TimeoutError`` if none comes)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.pushed.consumer_updates:
            self._read_frame(deadline)
        return self.pushed.consumer_updates.popleft()

    def answer_consumer_update(self, update: ConsumerUpdate, offset: bytes | None = None) -> None:
        """Answer OK with where the subscription starts (``offset_*``; none: stepping down)."""
        self.send_frame(CONSUMER_UPDATE, 1, struct.pack(">IH", update.correlation_id, OK)
                        + (offset or offset_none()), response=True)

    def wait_closed(self) -> ServerClosed:
        """Read until the server closes the connection; what it said (code None: no Close)."""
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                self._read_frame(deadline)
        except ServerClosed as e:
            return e

    # ---- frames ---------------------------------------------------------------------------
    def send_frame(self, key: int, version: int, content: bytes, response: bool = False) -> None:
        self.send_raw(_HEAD.pack(len(content) + 4, key | (RESPONSE if response else 0), version)
                      + content)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, key: int, body: bytes, has_code: bool = True) -> tuple[int, _Cursor]:
        corr = next(self._corr)
        self.send_frame(key, 1, struct.pack(">I", corr) + body)
        deadline = time.monotonic() + self.timeout
        while corr not in self._responses:
            self._read_frame(deadline)
        code, cursor = self._responses.pop(corr)
        if not has_code:
            cursor.pos -= 2
            return 0, cursor
        return code, cursor

    def _read_frame(self, deadline: float) -> None:
        while True:
            if len(self._buf) >= 4:
                (size,) = struct.unpack_from(">I", self._buf)
                if len(self._buf) >= 4 + size:
                    frame = bytes(self._buf[4:4 + size])
                    if self.received is not None:
                        self.received.append(bytes(self._buf[:4 + size]))
                    del self._buf[:4 + size]
                    self._dispatch(frame)
                    return
            if self.closed_by_server is not None:
                raise self.closed_by_server
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from the server in time")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError("no frame from the server in time") from None
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed_by_server = self.closed_by_server or ServerClosed()
                raise self.closed_by_server
            self._buf += data

    def _dispatch(self, frame: bytes) -> None:
        key, version = struct.unpack_from(">HH", frame)
        c = _Cursor(frame, 4)
        if key & RESPONSE:
            command = key & ~RESPONSE
            if command == TUNE:
                self.server_tune = c.take(">II")
            elif command == CREDIT:
                self.pushed.credit_errors.append(c.take(">HB"))
            else:
                corr = c.take(">I")
                code = c.take(">H") if c.left >= 2 else 0
                self._responses[corr] = (code, c)
        elif key == TUNE:
            self.server_tune = c.take(">II")
        elif key == DELIVER:
            sub = c.take(">B")
            committed = c.take(">Q") if version == 2 else None
            head = _CHUNK.unpack_from(frame, c.pos)
            data = frame[c.pos + _CHUNK.size:]
            self.pushed.chunks.append(Chunk(sub, committed, head[1], head[2], head[3], head[4],
                                            head[6], head[7], head[8], head[9], head[10], data))
        elif key == PUBLISH_CONFIRM:
            publisher, count = c.take(">Bi")
            self.pushed.confirms[publisher].extend(c.take(">Q") for _ in range(count))
        elif key == PUBLISH_ERROR:
            publisher, count = c.take(">Bi")
            self.pushed.errors[publisher].extend(c.take(">QH") for _ in range(count))
        elif key == CONSUMER_UPDATE:
            corr, sub, active = c.take(">IBB")
            self.pushed.consumer_updates.append(ConsumerUpdate(corr, sub, bool(active)))
        elif key == METADATA_UPDATE:
            code = c.take(">H")
            self.pushed.metadata_updates.append((code, c.string()))
        elif key == HEARTBEAT:
            self.heartbeats += 1
        elif key == CLOSE:
            corr, code = c.take(">IH")
            reason = c.string()
            self.closed_by_server = ServerClosed(code, reason)
            try:
                self.sock.sendall(_HEAD.pack(10, CLOSE | RESPONSE, 1) + struct.pack(">IH", corr, OK))
            except OSError:
                pass
        else:
            raise ValueError(f"unexpected frame key 0x{key:04x} version {version}")

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
