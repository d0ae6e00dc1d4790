"""Fuzzers whose only rule is "parse or raise the protocol error": no other exception, memory bounded."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from amqp_stream.streamproto import (
    NEED_DATA,
    PAUSED,
    ConnectionClosed,
    FrameError,
    RemoteProtocolError,
    ServerConnection,
    State,
)
from amqp_stream.streamproto import frames as f

from tests.streamproto import any_frame
from tests.streamproto.test_connection import handshake

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_or_frame_error(content: bytes) -> None:
    try:
        frame = f.decode(content)
    except FrameError as e:
        assert e.code is not None
        return
    assert isinstance(frame, f.Frame)
    f.encode(frame)      # whatever decodes, encodes


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes(content):
    decode_or_frame_error(content)


@st.composite
def mutated(draw):
    """A valid frame's content with bytes changed, cut or added."""
    content = bytearray(f.encode(draw(any_frame))[4:])
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "add"]))
        if action == "flip" and content:
            i = draw(st.integers(0, len(content) - 1))
            content[i] = draw(st.integers(0, 255))
        elif action == "cut" and content:
            del content[draw(st.integers(0, len(content) - 1)):]
        else:
            content += draw(st.binary(min_size=1, max_size=8))
    return bytes(content)


@SETTINGS
@given(mutated())
def test_mutated_frames(content):
    decode_or_frame_error(content)


@st.composite
def byte_stream(draw):
    """Frames, valid or mutated, with sizes sometimes wrong, split at random points."""
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            parts.append(f.encode(draw(any_frame)))
        else:
            content = draw(mutated())
            size = draw(st.sampled_from([len(content), len(content) + 3, 2**31, 0]))
            parts.append(f.FRAME_SIZE.pack(size) + content)
    data = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=5)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def drive(conn: ServerConnection, pieces: list[bytes]) -> None:
    """Feed ``pieces``; answer handshake requests; only protocol errors may come out."""
    for piece in pieces:
        conn.receive_data(piece)
        while True:
            try:
                event = conn.next_event()
            except RemoteProtocolError as e:
                assert conn.state in (State.CLOSED, State.CLOSE_SENT)
                assert e.code is not None
                if conn.state is State.CLOSED:
                    return
                continue
            if event is NEED_DATA:
                limit = conn._limit or 2**32
                assert conn.buffered < 4 + limit
                break
            if isinstance(event, ConnectionClosed):
                return
            if event is PAUSED:
                conn.send(f.error_response(_pending_request(conn), 1))
                continue
            assert isinstance(event, f.Frame)


def _pending_request(conn: ServerConnection) -> f.Frame:
    """A request of the kind the connection waits on (to answer it with OK)."""
    kind = conn._pending
    samples = {f.PeerProperties: f.PeerProperties(1), f.SaslHandshake: f.SaslHandshake(1),
               f.SaslAuthenticate: f.SaslAuthenticate(1, "PLAIN", b""), f.Open: f.Open(1, "/"),
               f.Close: f.Close(1, 1, "")}
    return samples[kind]


@SETTINGS
@given(byte_stream())
def test_connection_before_open(pieces):
    drive(ServerConnection(), pieces)


@SETTINGS
@given(byte_stream())
def test_connection_when_open(pieces):
    conn = ServerConnection(frame_max=4096)
    handshake(conn)
    drive(conn, pieces)
