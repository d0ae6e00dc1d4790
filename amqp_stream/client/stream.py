"""A small blocking client of RabbitMQ's stream protocol, for our load tool
(``amqp-stream perf --protocol stream``), ``amqp-stream consume --super-stream`` and the
stream-protocol benchmark.

Why our own: a load generator must not be the limit of what it measures, and the Python stream
clients decode every message. Frames are the broker's own codec (``amqp_stream.streamproto``:
one layout in one place); the hot paths stay on bytes:

- publishing sends Publish frames the caller encoded once (``publish_frame``) and counts
  confirms from each PublishConfirm's count field;
- consuming counts records from each delivered chunk's header; without a chunk callback the
  chunk's bytes are not even looked at (a reused receive buffer, nothing allocated per read),
  with one the whole Deliver frame is handed over.

Super streams and single active consumer: ``partitions``/``route`` ask the broker; a
ConsumerUpdate the broker sends is queued in ``updates`` (never answered from inside ``pump``,
which may run inside another request) for the caller to answer with ``answer_update``.

Plain TCP only. Heartbeats are declined at Tune (the client is never idle long enough to need
them). URLs: ``rabbitmq-stream://[user:password@]host[:port][/vhost]`` as RabbitMQ's clients
write them.
"""

from __future__ import annotations

import collections
import select
import socket
import struct
import urllib.parse
from typing import Callable, Iterable, Mapping, Sequence

from amqp_stream.client.errors import ClientError
from amqp_stream.streamproto import (
    RESPONSE_FLAG, Close, ConsumerUpdate, ConsumerUpdateResponse, Create, CreateSuperStream,
    Credit, DeclarePublisher, Delete, DeleteSuperStream, Key, OffsetSpec, OffsetType, Open,
    Partitions, PeerProperties, QueryOffset, QueryPublisherSequence, Response, ResponseCode, Route,
    SaslAuthenticate, SaslHandshake, StoreOffset, StreamStats, Subscribe, Tune, Unsubscribe,
)
from amqp_stream.streamproto import Publish as PublishFrame
from amqp_stream.streamproto.frames import FRAME_HEAD, decode, encode
from amqp_stream.streamproto.traffic import CHUNK_HEADER, PUBLISH_HEAD

__all__ = ["StreamClient", "parse_stream_url", "publish_frame", "offset_spec", "DEFAULT_STREAM_URL"]

DEFAULT_STREAM_URL = "rabbitmq-stream://127.0.0.1:5552"
READ_SIZE = 4 << 20
_U32 = struct.Struct(">I").unpack_from
_IOV_MAX = 1024  # buffers a sendmsg takes at most (Linux)


def parse_stream_url(url: str) -> tuple[str, int, str | None, str | None, str]:
    """(host, port, user, password, vhost) of a ``rabbitmq-stream://`` URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "rabbitmq-stream" or not parts.hostname:
        raise ClientError(f"not a stream-protocol URL: {url!r} (rabbitmq-stream://host:port)")
    try:
        port = parts.port or 5552
    except ValueError as exc:
        raise ClientError(f"bad port in {url!r}: {exc}") from None
    vhost = urllib.parse.unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    user = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password else None
    return parts.hostname, port, user, password, vhost


def publish_frame(publisher_id: int, messages: Sequence[tuple[int, str | None, bytes]]) -> bytes:
    """A Publish frame (v2 when any message has a filter value) of (publishing id, filter
    value, AMQP message bytes)."""
    v2 = any(value is not None for _, value, _ in messages)
    return encode(PublishFrame(publisher_id, tuple((i, v, data, None) for i, v, data in messages),
                               2 if v2 else 1))


class StreamClient:
    """One connection. Requests (create, subscribe...) block for their response; ``pump``
    reads what came and counts it: ``confirmed``, ``errors`` (messages refused),
    ``records`` and ``chunks`` delivered, ``end`` (the offset after the last record delivered),
    ``gone`` (deleted streams). A caller that must know which publishing ids were confirmed
    or refused (a cluster node forwarding publishes) passes ``on_confirm(publisher id, ids)``
    and ``on_error(publisher id, ((id, code), ...))``; the counts are kept either way. With
    ``auto_credit`` False no credit is given back per chunk: the caller gives it (``credit``),
    so a reader that keeps chunks bounds how many it holds."""

    def __init__(self, url: str = DEFAULT_STREAM_URL, *, user: str | None = None,
                 password: str | None = None, timeout: float = 30.0,
                 on_chunk: Callable[[memoryview], None] | None = None,
                 on_confirm: Callable[[int, Sequence[int]], None] | None = None,
                 on_error: Callable[[int, Sequence[tuple[int, int]]], None] | None = None,
                 product: str = "amqp-stream perf", auto_credit: bool = True):
        host, port, url_user, url_password, vhost = parse_stream_url(url)
        user = user or url_user or "guest"
        password = password if password is not None else (url_password or "guest")
        self.timeout = timeout
        self.on_chunk = on_chunk
        self.on_confirm = on_confirm
        self.on_error = on_error
        self.product = product
        self.auto_credit = auto_credit
        self.subscription = 0  # the subscription of the chunk ``on_chunk`` is handed
        self.updates: collections.deque[ConsumerUpdate] = collections.deque()
        self.confirmed = self.errors = self.records = self.chunks = self.received = 0
        self.end = 0  # the offset after the last record of the chunks delivered so far
        self._corr = 0
        self._space = memoryview(bytearray(READ_SIZE))
        self._carry = b""  # the start of a frame cut by the end of a read
        self._skip = 0  # bytes of a chunk still to come, not looked at
        self._credits: dict[int, int] = {}  # subscription -> credit to give back per chunk
        self.gone: set[str] = set()  # streams the broker said were deleted (MetadataUpdate)
        self.server_properties: dict[str, str] = {}
        self._waiting: int | None = None  # the correlation id of the request in flight
        self._answer: object = None
        self._tune: Tune | None = None
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {host}:{port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._handshake(user, password, vhost)
        except BaseException:
            self.sock.close()
            raise

    # -- requests ---------------------------------------------------------------------------
    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _send(self, frame: object) -> None:
        self.sock.sendall(encode(frame))  # type: ignore[arg-type]

    def _request(self, frame: object, corr: int) -> object:
        """Send ``frame`` and wait for the response with ``corr``; traffic in between
        (confirms, chunks) is counted as ``pump`` does."""
        self._send(frame)
        self._waiting, self._answer = corr, None
        while self._answer is None:
            if not self.pump(self.timeout):
                raise ClientError(f"no answer to {type(frame).__name__} in {self.timeout:.0f} s")
        answer, self._answer = self._answer, None
        return answer

    def _check(self, answer: object, what: str, ok: Iterable[int] = (ResponseCode.OK,)) -> int:
        code = getattr(answer, "code", ResponseCode.OK)
        if code not in ok:
            name = ResponseCode(code).name if code in ResponseCode._value2member_map_ else str(code)
            raise ClientError(f"{what}: the broker answered {name}", name)  # condition: the code's name
        return code

    def _handshake(self, user: str, password: str, vhost: str) -> None:
        corr = self._next_corr()
        answer = self._request(PeerProperties(corr, {"product": self.product}), corr)
        self._check(answer, "peer properties")
        self.server_properties = dict(getattr(answer, "properties", {}))
        corr = self._next_corr()
        mechanisms = getattr(self._request(SaslHandshake(corr), corr), "mechanisms", ())
        if "PLAIN" not in mechanisms:
            raise ClientError(f"the broker offers {list(mechanisms)}, not PLAIN")
        corr = self._next_corr()
        token = b"\0" + user.encode() + b"\0" + password.encode()
        self._check(self._request(SaslAuthenticate(corr, "PLAIN", token), corr), "authentication")
        while self._tune is None:  # the server proposes after authentication (maybe read already)
            if not self.pump(self.timeout):
                raise ClientError("the broker sent no Tune")
        self._send(Tune(self._tune.frame_max, 0))
        corr = self._next_corr()
        self._check(self._request(Open(corr, vhost), corr), f"open vhost {vhost!r}")

    @property
    def filtering(self) -> bool:
        """Whether the broker knows stream filtering (Publish v2, ``filter.N``): RabbitMQ 3.13
        and later, as the Node client decides it from the version it is told."""
        try:
            version = tuple(int(x) for x in self.server_properties.get("version", "").split(".")[:2])
        except ValueError:
            return False
        return version >= (3, 13)

    def create(self, stream: str, arguments: Mapping[str, str] | None = None) -> bool:
        """Create ``stream``; False when it existed already."""
        corr = self._next_corr()
        code = self._check(self._request(Create(corr, stream, dict(arguments or {})), corr),
                           f"create {stream!r}", (ResponseCode.OK, ResponseCode.STREAM_ALREADY_EXISTS))
        return code == ResponseCode.OK

    def delete(self, stream: str) -> None:
        corr = self._next_corr()
        self._check(self._request(Delete(corr, stream), corr), f"delete {stream!r}")

    def create_super_stream(self, name: str, partitions: Sequence[str],
                            binding_keys: Sequence[str],
                            arguments: Mapping[str, str] | None = None) -> None:
        """CreateSuperStream (RabbitMQ 3.13 and later; this broker)."""
        corr = self._next_corr()
        self._check(self._request(CreateSuperStream(corr, name, tuple(partitions),
                                                    tuple(binding_keys), dict(arguments or {})),
                                  corr), f"create super stream {name!r}")

    def delete_super_stream(self, name: str) -> None:
        corr = self._next_corr()
        self._check(self._request(DeleteSuperStream(corr, name), corr),
                    f"delete super stream {name!r}")

    def stats(self, stream: str) -> dict[str, int]:
        """StreamStats (RabbitMQ 3.11 and later; this broker)."""
        corr = self._next_corr()
        answer = self._request(StreamStats(corr, stream), corr)
        self._check(answer, f"stream stats of {stream!r}")
        return dict(getattr(answer, "stats", {}))

    def declare_publisher(self, publisher_id: int, stream: str, reference: str = "") -> None:
        corr = self._next_corr()
        self._check(self._request(DeclarePublisher(corr, publisher_id, reference, stream), corr),
                    f"declare a publisher on {stream!r}")

    def publisher_sequence(self, stream: str, reference: str) -> int:
        """The last publishing id the broker stored for ``reference`` on ``stream`` (0: none)."""
        corr = self._next_corr()
        answer = self._request(QueryPublisherSequence(corr, reference, stream), corr)
        self._check(answer, f"publisher sequence of {reference!r} on {stream!r}")
        return int(getattr(answer, "sequence", 0))

    def partitions(self, super_stream: str) -> list[str]:
        """The partition streams of ``super_stream``, in partition order."""
        corr = self._next_corr()
        answer = self._request(Partitions(corr, super_stream), corr)
        self._check(answer, f"partitions of super stream {super_stream!r}")
        return list(getattr(answer, "streams", ()))

    def route(self, routing_key: str, super_stream: str) -> list[str]:
        """The partitions ``routing_key`` goes to (none: no binding matches)."""
        corr = self._next_corr()
        answer = self._request(Route(corr, routing_key, super_stream), corr)
        self._check(answer, f"route {routing_key!r} in super stream {super_stream!r}")
        return list(getattr(answer, "streams", ()))

    def query_offset(self, reference: str, stream: str) -> int | None:
        """The offset stored for consumer ``reference`` on ``stream`` (None: none stored)."""
        corr = self._next_corr()
        answer = self._request(QueryOffset(corr, reference, stream), corr)
        code = self._check(answer, f"stored offset of {reference!r} on {stream!r}",
                           (ResponseCode.OK, ResponseCode.NO_OFFSET))
        return int(getattr(answer, "offset", 0)) if code == ResponseCode.OK else None

    def store_offset(self, reference: str, stream: str, offset: int) -> None:
        self._send(StoreOffset(reference, stream, offset))

    def answer_update(self, update: ConsumerUpdate, offset: OffsetSpec | None) -> None:
        """Answer a ConsumerUpdate: where an activated subscription starts (None for one
        that steps down)."""
        self._send(ConsumerUpdateResponse(update.correlation_id, ResponseCode.OK,
                                          offset or OffsetSpec(OffsetType.NONE)))

    @property
    def frame_max(self) -> int:
        """The largest frame the broker takes (from Tune; 0: no limit)."""
        return self._tune.frame_max if self._tune is not None else 0

    def subscribe(self, subscription_id: int, stream: str, offset: OffsetSpec, credit: int = 10,
                  properties: Mapping[str, str] | None = None) -> None:
        """Subscribe with ``credit`` chunks; every chunk received gives one credit back."""
        corr = self._next_corr()
        self._credits[subscription_id] = 1
        self._check(self._request(Subscribe(corr, subscription_id, stream, offset, credit,
                                            dict(properties or {})), corr),
                    f"subscribe to {stream!r}")

    def credit(self, subscription_id: int, chunks: int) -> None:
        """Give ``chunks`` more credit (for a client made with ``auto_credit`` False)."""
        self._send(Credit(subscription_id, chunks))

    def unsubscribe(self, subscription_id: int) -> None:
        corr = self._next_corr()
        self._check(self._request(Unsubscribe(corr, subscription_id), corr),
                    f"unsubscribe {subscription_id}")

    def send(self, data: bytes | memoryview) -> None:
        """Send encoded frames (``publish_frame``), or a part of one."""
        self.sock.sendall(data)

    def send_parts(self, parts: Sequence[bytes | memoryview]) -> None:
        """Send ``parts`` one after the other (frames as their buffers) in as few system calls
        as the kernel takes them (``sendmsg``), not one ``sendall`` a part."""
        views = [memoryview(p).cast("B") for p in parts]
        first = 0
        while first < len(views):
            sent = self.sock.sendmsg(views[first:first + _IOV_MAX])
            while first < len(views) and sent >= len(views[first]):
                sent -= len(views[first])
                first += 1
            if sent:
                views[first] = views[first][sent:]

    def close(self) -> None:
        """Close both ways (the broker's CloseResponse is awaited briefly), then the socket."""
        try:
            corr = self._next_corr()
            self._send(Close(corr, ResponseCode.OK, "done"))
            self._waiting, self._answer = corr, None
            while self._answer is None and self.pump(1.0):
                pass
        except (OSError, ClientError):
            pass
        finally:
            self.sock.close()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- traffic ----------------------------------------------------------------------------
    def pump(self, timeout: float | None) -> bool:
        """Read once (waiting up to ``timeout`` seconds; 0 = only what is there) and handle
        every whole frame; False when nothing came."""
        if timeout is not None:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return False
        try:
            n = self.sock.recv_into(self._space)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise ClientError(f"connection lost: {exc}") from None
        if not n:
            raise ClientError("the broker closed the connection")
        self.received += n
        pos = min(self._skip, n)
        self._skip -= pos
        if pos < n:
            self._frames(pos, n)
        return True

    def _frames(self, pos: int, n: int) -> None:
        """Handle the whole frames of ``self._space[pos:n]`` (after the one the previous read
        cut, if any) and keep the start of one this read cuts."""
        credits: dict[int, int] = {}
        carry, self._carry = self._carry, b""
        if carry:  # only the cut frame is joined: the rest of the read is handled where it is
            size = 4 + _U32(carry)[0] if len(carry) >= 4 else 0
            need = size - len(carry)
            frame = carry + bytes(self._space[pos:pos + need]) if size and 0 < need <= n - pos else b""
            if frame and self._walk(frame, 0, size, credits) == size:
                pos += need
            else:  # still cut (a frame longer than a read), or not handled: join what came
                carry += bytes(self._space[pos:n])
                end = self._walk(carry, 0, len(carry), credits)
                self._carry, pos = carry[end:], n
        if pos < n:
            end = self._walk(self._space, pos, n, credits)
            if end < n:
                self._carry = bytes(self._space[end:n])
        if credits and self.auto_credit:
            self.sock.sendall(b"".join(encode(Credit(sub, c * self._credits.get(sub, 1)))
                                       for sub, c in credits.items()))

    def _walk(self, buf: bytes | memoryview, pos: int, n: int, credits: dict[int, int]) -> int:
        """Handle the whole frames of ``buf[pos:n]`` (chunks counted in ``credits``); where the
        first frame not whole begins (``n``: none)."""
        while pos < n:
            left = n - pos
            if left < 8:
                break
            size, key, version = FRAME_HEAD.unpack_from(buf, pos)
            if key == Key.DELIVER:
                head = 9 + (8 if version == 2 else 0)  # size, key, version, subscription (+ id)
                whole = left >= 4 + size
                if left < head + CHUNK_HEADER.size or (self.on_chunk is not None and not whole):
                    break
                sub = buf[pos + 8]
                header = CHUNK_HEADER.unpack_from(buf, pos + head)
                records = header[3]
                self.records += records
                self.end = max(self.end, header[6] + records)  # chunk id + records
                self.chunks += 1
                credits[sub] = credits.get(sub, 0) + 1
                if self.on_chunk is not None:
                    self.subscription = sub
                    self.on_chunk(memoryview(buf)[pos + head:pos + 4 + size])
                elif not whole:  # the rest of the chunk is not looked at
                    self._skip = pos + 4 + size - n
                    pos = n
                    break
                pos += 4 + size
                continue
            if left < 4 + size:
                break
            if key == Key.PUBLISH_CONFIRM:
                publisher, count = PUBLISH_HEAD.unpack_from(buf, pos + 8)
                self.confirmed += count
                if self.on_confirm is not None:
                    self.on_confirm(publisher, struct.unpack_from(
                        f">{count}Q", buf, pos + 8 + PUBLISH_HEAD.size))
            else:
                self._frame(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        return pos

    def _frame(self, content: bytes) -> None:
        frame = decode(content)
        key = frame.key
        if key == Key.HEARTBEAT:
            self.sock.sendall(encode(frame))
        elif key == Key.PUBLISH_ERROR:
            self.errors += len(getattr(frame, "errors", ()))
            if self.on_error is not None:
                self.on_error(getattr(frame, "publisher_id", 0), getattr(frame, "errors", ()))
        elif isinstance(frame, Tune):
            self._tune = frame
        elif key == Key.CLOSE:
            corr = getattr(frame, "correlation_id", 0)
            self.sock.sendall(encode(Response(Key.CLOSE, corr, ResponseCode.OK)))
            raise ClientError(f"the broker closed the connection: {getattr(frame, 'reason', '')}")
        elif key == Key.METADATA_UPDATE:  # the stream was deleted: its subscriptions ended
            self.gone.add(getattr(frame, "stream", ""))
        elif isinstance(frame, ConsumerUpdate):
            self.updates.append(frame)
        elif key == RESPONSE_FLAG | Key.CREDIT:
            if getattr(frame, "code", 0) == ResponseCode.PRECONDITION_FAILED:
                return  # credit given back for chunks that came before a step-down (inactive now)
            raise ClientError(f"credit refused: {ResponseCode(getattr(frame, 'code', 0)).name}")
        elif key & RESPONSE_FLAG and getattr(frame, "correlation_id", None) == self._waiting:
            self._answer = frame


def offset_spec(text: str) -> OffsetSpec:
    """A stream-protocol offset spec from the CLI's words: first, last, next or an offset."""
    if text in ("first", "last", "next"):
        return OffsetSpec(getattr(OffsetType, text.upper()))
    return OffsetSpec.offset(int(text))
