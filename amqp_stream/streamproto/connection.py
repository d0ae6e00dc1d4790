"""The server side of one stream-protocol connection, as a state machine over bytes (h11-style).

Strategy: the adapter owns the socket and every decision about users, streams and messages;
this object owns the rules of the conversation. Feed it what the socket read
(``receive_data``), take events out (``next_event``: a decoded frame, ``NEED_DATA``,
``PAUSED`` or ``ConnectionClosed``), and turn each answer into bytes with ``send``. The rules
are RabbitMQ's (``rabbit_stream_reader.erl``):

- Handshake, in this order: PeerProperties -> SaslHandshake -> SaslAuthenticate (repeated
  while the answer is a SASL challenge) -> the server's Tune, which ``send`` appends to a
  successful SaslAuthenticateResponse -> the client's Tune (may be left out) -> Open. A
  handshake request pauses the event stream (``PAUSED``) until the adapter has answered it,
  so a pipelined next request is judged in the state the answer leads to.
- Before Open succeeds, anything out of order, a frame that does not decode and a frame above
  ``initial_frame_max`` close the connection without a word (``RemoteProtocolError`` with an
  empty ``reply``). Heartbeats are accepted at any time.
- Once open: a frame that does not decode, an unknown key or version, or a command the client
  may not send gets Close(UNKNOWN_FRAME, "unknown frame"). A frame above the negotiated frame
  max is taken up to ``frame_hard_max`` (RabbitMQ up to 4.2.6 takes any size); above that
  (and above the frame max when it is larger) it gets Close(FRAME_TOO_LARGE, "frame too
  large"), as RabbitMQ 4.2.7 answers a frame above frame_max. After a Close of ours only the client's
  CloseResponse is read; everything else is dropped.
- A client's Close pauses the event stream; answering it ends the connection.
- ExchangeCommandVersions from the client decides the Deliver version (2 if the client lists
  Deliver with max version 2).

States are ``State`` values; ``State.CLOSED`` means: write what the last call returned, then
close the socket.
"""

from __future__ import annotations

import enum
import struct
from typing import NoReturn

from amqp_stream.streamproto import frames as f
from amqp_stream.streamproto.constants import (
    DEFAULT_FRAME_HARD_MAX,
    DEFAULT_FRAME_MAX,
    DEFAULT_HEARTBEAT,
    DEFAULT_INITIAL_FRAME_MAX,
    Key,
    ResponseCode,
)
from amqp_stream.streamproto.errors import FrameError, LocalProtocolError, RemoteProtocolError
from storage.kept import KeptBuffers

__all__ = ["ServerConnection", "State", "NEED_DATA", "PAUSED", "ConnectionClosed"]


class State(enum.Enum):
    AWAIT_PEER_PROPERTIES = "await-peer-properties"
    PEER_PROPERTIES_EXCHANGED = "peer-properties-exchanged"
    AUTHENTICATING = "authenticating"
    TUNING = "tuning"            # our Tune sent; the client's Tune or Open next
    TUNED = "tuned"              # the client's Tune received; Open next
    OPEN = "open"
    CLOSE_SENT = "close-sent"    # our Close sent; waiting for the client's answer
    CLOSED = "closed"


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
"""``next_event``: no complete frame buffered; call ``receive_data`` first."""
PAUSED = _Sentinel("PAUSED")
"""``next_event``: a handshake request or a Close waits for the adapter's answer (``send``)."""


class ConnectionClosed:
    """``next_event``: the client closed its side (``receive_data(b"")``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConnectionClosed)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "ConnectionClosed()"


_PRE_AUTH: dict[State, dict[type, State | None]] = {
    # state -> {frame class the client may send: the state it leads to (None: the answer decides)}
    State.AWAIT_PEER_PROPERTIES: {f.PeerProperties: State.PEER_PROPERTIES_EXCHANGED},
    State.PEER_PROPERTIES_EXCHANGED: {f.PeerProperties: State.PEER_PROPERTIES_EXCHANGED,
                                      f.SaslHandshake: State.AUTHENTICATING},
    State.AUTHENTICATING: {f.SaslHandshake: State.AUTHENTICATING, f.SaslAuthenticate: None},
    State.TUNING: {f.Tune: State.TUNED, f.Open: None},
    State.TUNED: {f.Open: None},
}
_ANSWERED_PRE_AUTH = {f.PeerProperties: f.PeerPropertiesResponse,
                      f.SaslHandshake: f.SaslHandshakeResponse,
                      f.SaslAuthenticate: f.SaslAuthenticateResponse, f.Open: f.OpenResponse}

_FROM_CLIENT_WHEN_OPEN = frozenset({
    f.DeclarePublisher, f.Publish, f.QueryPublisherSequence, f.DeletePublisher, f.Subscribe,
    f.Credit, f.StoreOffset, f.QueryOffset, f.Unsubscribe, f.Create, f.Delete, f.Metadata,
    f.SaslAuthenticate, f.Close, f.Heartbeat, f.Route, f.Partitions, f.ExchangeCommandVersions,
    f.StreamStats, f.CreateSuperStream, f.DeleteSuperStream, f.ConsumerUpdateResponse,
})
_FROM_SERVER_WHEN_OPEN = frozenset({
    f.Response, f.QueryPublisherSequenceResponse, f.CreditResponse, f.QueryOffsetResponse,
    f.MetadataResponse, f.MetadataUpdate, f.RouteResponse, f.PartitionsResponse,
    f.ConsumerUpdate, f.ExchangeCommandVersionsResponse, f.StreamStatsResponse,
    f.ResolveOffsetSpecResponse, f.PublishConfirm, f.PublishError, f.Deliver, f.Heartbeat,
    f.Close, f.SaslAuthenticateResponse,
})

_COMPACT_AT = 1 << 16
#: a frame at least this large (content) is gathered into a buffer of its own, allocated once
#: at its size, and decoded from there (``_big``)
BIG_FRAME = 1 << 16
#: large frames' buffers (``_gather``), reused once nothing holds them: at most
#: ``FRAMES_KEPT`` buffers, ``FRAMES_KEPT_BYTES`` in all, stay allocated. The bytes bound the
#: memory; the count only keeps frames of ~256 KiB from meeting it first (the Spark sink's are
#: ~230 KB, 35 of them in flight a task; with 32 the rest were fresh memory each)
FRAMES_KEPT = 128
FRAMES_KEPT_BYTES = 32 << 20
_FRAMES = KeptBuffers(FRAMES_KEPT, FRAMES_KEPT_BYTES)

_CREDIT = struct.Struct(">IHHBH")  # a Credit frame whole: size, key, version, subscription, credit


class ServerConnection:
    """One connection's protocol state, server side.

    Args:
        frame_max: the frame max the server proposes in Tune (0: no limit).
        heartbeat: the heartbeat (seconds) the server proposes in Tune (0: none).
        initial_frame_max: the frame size ceiling until Open succeeds (bounds what an
            unauthenticated peer can make us buffer).
        frame_hard_max: once open, frames up to this size are taken even above the
            negotiated frame max (0: the frame max is the limit).

    After the handshake, ``frame_max`` and ``heartbeat`` hold the negotiated values,
    ``deliver_version`` the Deliver version the client accepts, ``client_properties`` what
    the client sent in PeerProperties.
    """

    def __init__(self, frame_max: int = DEFAULT_FRAME_MAX, heartbeat: int = DEFAULT_HEARTBEAT,
                 initial_frame_max: int = DEFAULT_INITIAL_FRAME_MAX,
                 frame_hard_max: int = DEFAULT_FRAME_HARD_MAX):
        self.state = State.AWAIT_PEER_PROPERTIES
        self.server_frame_max, self.server_heartbeat = frame_max, heartbeat
        self.initial_frame_max = initial_frame_max
        self.frame_hard_max = frame_hard_max
        self.frame_max, self.heartbeat = frame_max, heartbeat
        self.deliver_version = 1
        self.client_properties: dict[str, str] = {}
        self._limit = initial_frame_max
        self._buf = bytearray()
        self._start = 0
        # a large frame's content as it comes (its size field left out), and how much of it
        # has come: the frame is decoded from this buffer, which the decoded frame (a Publish's
        # messages, held by storage until written) then owns; a new one for each large frame
        self._big: bytearray | None = None
        self._got = 0
        self._eof = False
        self._pending: type[f.Frame] | None = None     # the handshake request (or Close) awaiting an answer
        self._correlation = 0

    # ---- inbound --------------------------------------------------------------------------
    def receive_data(self, data: bytes | memoryview) -> None:
        """Add bytes read from the socket (copied: a view of a reused buffer will do);
        ``b""`` means the client closed its side."""
        if not data:
            self._eof = True
        elif self.state is not State.CLOSED:
            big = self._big
            if big is not None:
                got = self._got
                take = min(len(data), len(big) - got)
                big[got:got + take] = data[:take]
                self._got = got + take
                if take == len(data):
                    return
                data = data[take:]
            self._buf += data

    @property
    def incoming(self) -> int:
        """The declared size of the frame at the head of the input (0: not even its size yet),
        so the adapter can make room before a large one is read whole."""
        if self._big is not None:
            return len(self._big)
        if len(self._buf) - self._start < 4:
            return 0
        return int(f.FRAME_SIZE.unpack_from(self._buf, self._start)[0])

    @property
    def buffered(self) -> int:
        """Bytes received and not yet turned into events (stop reading while this is large)."""
        return len(self._buf) - self._start + self._got

    def credit_frame(self, data: bytes | bytearray | memoryview, n: int) -> tuple[int, int] | None:
        """(subscription id, credit) when the ``n`` bytes received, ``data[:n]``, are one
        whole Credit frame that ``next_event`` would return now (open, nothing buffered or
        awaiting an answer), taken without buffering or decoding it; else None (then
        ``receive_data`` them). A consumer's commonest frame, often alone in a read: a
        filtered read in round robin is one per ten chunks."""
        if (n != _CREDIT.size or self.state is not State.OPEN or self._pending is not None
                or len(self._buf) != self._start or self._big is not None):
            return None
        size, key, version, subscription_id, credit = _CREDIT.unpack_from(data)
        if size != _CREDIT.size - 4 or key != Key.CREDIT or version != 1:
            return None
        return subscription_id, credit

    def next_event(self) -> object:
        """The next event: a frame (``frames.*``), ``NEED_DATA``, ``PAUSED`` or
        ``ConnectionClosed()``.

        Raises ``RemoteProtocolError`` when the client broke the protocol; its ``reply`` is
        what to write before closing the socket (``state`` is then ``CLOSE_SENT`` or
        ``CLOSED``).
        """
        while True:
            if self.state is State.CLOSED:
                return ConnectionClosed()
            if self._pending is not None:
                return PAUSED
            content = self._next_frame()
            if content is None:
                if self._eof:
                    self.state = State.CLOSED
                    return ConnectionClosed()
                return NEED_DATA
            event = self._event(content)
            if event is not None:
                return event

    def _next_frame(self) -> bytes | bytearray | None:
        big = self._big
        if big is not None:
            if self._got < len(big):
                return None
            self._big, self._got = None, 0
            return big
        buf, start = self._buf, self._start
        if len(buf) - start < 4:
            return None
        size = f.FRAME_SIZE.unpack_from(buf, start)[0]
        if self._limit and size > self._limit:
            self._fail(f"frame of {size} bytes above the maximum of {self._limit}",
                       ResponseCode.FRAME_TOO_LARGE, "frame too large")
        end = start + 4 + size
        if len(buf) < end:
            if size >= BIG_FRAME:
                self._gather(size)
            return None
        content = bytes(memoryview(buf)[start + 4:end])     # one copy; the view dies here
        if end == len(buf):
            buf.clear()
            self._start = 0
        elif end > _COMPACT_AT:
            del buf[:end]
            self._start = 0
        else:
            self._start = end
        return content

    def _gather(self, size: int) -> None:
        """Go on with the large frame at the head of the input (``size`` bytes, not all here)
        in a buffer of its own, so that its bytes are copied once, into memory allocated
        once (and kept, ``storage.kept``): the input buffer would grow by reallocation as
        they come, and the frame be copied out of it whole. Fresh pages cost ~3 µs each on a VM that gives freed memory
        back to its host (``bench.page_cost``), so each copy of a 1 MiB frame into fresh
        memory costs ~0.8 ms in page faults."""
        buf, start = self._buf, self._start
        have = len(buf) - start - 4
        big = _FRAMES.take(size)
        big[:have] = memoryview(buf)[start + 4:]
        self._big, self._got = big, have
        buf.clear()
        self._start = 0

    def _event(self, content: bytes | bytearray) -> object | None:
        state = self.state
        try:
            frame = f.decode(content)
        except FrameError as e:
            if state is State.CLOSE_SENT:
                return None
            self._fail(str(e), ResponseCode.UNKNOWN_FRAME, "unknown frame")
        kind = type(frame)
        if state is State.OPEN:
            if kind not in _FROM_CLIENT_WHEN_OPEN:
                self._fail(f"{kind.__name__} from the client on an open connection",
                           ResponseCode.UNKNOWN_FRAME, "unknown frame")
            if kind is f.Close:
                self._pending = f.Close
            elif isinstance(frame, f.ExchangeCommandVersions):
                for key, _, max_version in frame.versions:
                    if key == Key.DELIVER and max_version >= 2:
                        self.deliver_version = 2
            return frame
        if state is State.CLOSE_SENT:
            if isinstance(frame, f.Response) and frame.command == Key.CLOSE:
                self.state = State.CLOSED
                return frame
            return None
        if kind is f.Heartbeat:
            return frame
        allowed = _PRE_AUTH[state]
        if kind not in allowed:
            self._fail(f"{kind.__name__} in state {state.value}", ResponseCode.UNKNOWN_FRAME)
        following = allowed[kind]
        if isinstance(frame, f.Tune):
            self._tune(frame)
        else:
            self._pending = kind
            if isinstance(frame, f.PeerProperties):
                self.client_properties = dict(frame.properties)
        if following is not None:
            self.state = following
        return frame

    def _tune(self, tune: f.Tune) -> None:
        """The client's Tune: 0 on either side means no limit (RabbitMQ's negotiation)."""
        ours, theirs = self.server_frame_max, tune.frame_max
        self.frame_max = ours if theirs == 0 else theirs if ours == 0 else min(ours, theirs)
        self.heartbeat = tune.heartbeat

    def _fail(self, message: str, code: int, reason: str | None = None) -> NoReturn:
        """Raise the client's fault: a Close frame once open, a silent close before."""
        if self.state is State.OPEN and reason is not None:
            close = f.Close(1, code, reason)
            self.state = State.CLOSE_SENT
            raise RemoteProtocolError(message, code, f.encode(close))
        self.state = State.CLOSED
        raise RemoteProtocolError(message, code, b"")

    # ---- outbound -------------------------------------------------------------------------
    def next_correlation_id(self) -> int:
        """A correlation id for a request of the server's own (Close, ConsumerUpdate)."""
        self._correlation += 1
        return self._correlation

    def send(self, frame: f.Frame) -> bytes:
        """The bytes of ``frame``, after checking the protocol allows it now.

        Answers to handshake requests move the state: a successful SaslAuthenticateResponse
        returns the server's Tune too; an OpenResponse with code OK opens the connection,
        any other code (and a failed authentication) closes it. Raises
        ``LocalProtocolError`` for a frame the server may not send in this state.
        """
        kind = type(frame)
        state = self.state
        if state is State.CLOSED:
            raise LocalProtocolError(f"cannot send {kind.__name__}: the connection is closed")
        pending = self._pending
        if pending is not None and _ANSWERED_PRE_AUTH.get(pending) is kind:
            return self._answer_handshake(frame)
        if isinstance(frame, f.Response) and pending is f.Close and frame.command == Key.CLOSE:
            self._pending = None
            self.state = State.CLOSED
            return f.encode(frame)
        if kind is f.Close:
            self.state = State.CLOSE_SENT
            self._pending = None
            return f.encode(frame)
        if kind is f.Heartbeat and state is not State.CLOSE_SENT:
            return f.encode(frame)
        if state is not State.OPEN or kind not in _FROM_SERVER_WHEN_OPEN:
            raise LocalProtocolError(f"cannot send {kind.__name__} in state {state.value}")
        if (isinstance(frame, f.Deliver) and frame.committed_chunk_id is not None
                and self.deliver_version < 2):
            raise LocalProtocolError("Deliver v2 to a client that did not ask for it")
        if isinstance(frame, f.SaslAuthenticateResponse) and frame.code not in (
                ResponseCode.OK, ResponseCode.SASL_CHALLENGE):
            self.state = State.CLOSED       # a failed re-authentication ends the connection
        return f.encode(frame)

    def _answer_handshake(self, frame: f.Frame) -> bytes:
        kind = type(frame)
        data = f.encode(frame)
        self._pending = None
        code = frame.code  # type: ignore[attr-defined]  # every handshake answer has one
        if kind is f.SaslAuthenticateResponse:
            if code == ResponseCode.OK:
                if self.state is State.AUTHENTICATING:
                    self.state = State.TUNING
                    data += f.encode(f.Tune(self.server_frame_max, self.server_heartbeat))
            elif code != ResponseCode.SASL_CHALLENGE:
                self.state = State.CLOSED
        elif kind is f.OpenResponse:
            if code == ResponseCode.OK:
                self.state = State.OPEN
                # 0 is "no limit" for frame_max and "none" for the hard max: either way the
                # larger one rules (both 0: no limit)
                self._limit = max(self.frame_max, self.frame_hard_max)
            else:
                self.state = State.CLOSED
        elif code != ResponseCode.OK:
            self.state = State.CLOSED
        return data

    def deliver_head(self, subscription_id: int, chunk_length: int,
                     committed_chunk_id: int | None = None) -> bytes:
        """The bytes before a chunk sent as a Deliver (then write the chunk, e.g. with
        ``os.sendfile``). Pass ``committed_chunk_id`` always: it is sent (Deliver v2) only
        to a client that accepts Deliver v2."""
        if self.state is not State.OPEN:
            raise LocalProtocolError(f"cannot deliver in state {self.state.value}")
        if self.deliver_version == 2 and committed_chunk_id is None:
            raise LocalProtocolError("Deliver v2 needs the committed chunk id")
        return f.deliver_head(subscription_id, chunk_length,
                              committed_chunk_id if self.deliver_version == 2 else None)
