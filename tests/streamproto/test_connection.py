"""streamproto.ServerConnection: the handshake table, RabbitMQ's answers to misbehaving clients."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream.streamproto import (
    NEED_DATA,
    PAUSED,
    ConnectionClosed,
    Key,
    LocalProtocolError,
    RemoteProtocolError,
    ResponseCode,
    ServerConnection,
    State,
)
from amqp_stream.streamproto import frames as f
from storage.kept import KeptBuffers

OK = ResponseCode.OK
PLAIN = b"\0guest\0guest"


def feed(conn: ServerConnection, *frames: f.Frame) -> None:
    conn.receive_data(b"".join(f.encode(x) for x in frames))


def events(conn: ServerConnection) -> list:
    out = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is PAUSED:
            return out
        out.append(event)
        if isinstance(event, ConnectionClosed):
            return out


def decode_all(data: bytes) -> list[f.Frame]:
    out, pos = [], 0
    while pos < len(data):
        size = f.FRAME_SIZE.unpack_from(data, pos)[0]
        out.append(f.decode(data[pos + 4:pos + 4 + size]))
        pos += 4 + size
    return out


def step(conn: ServerConnection, request: f.Frame, answer: f.Frame | None) -> bytes:
    """Send one client frame; check it comes out as the next event; send ``answer``."""
    feed(conn, request)
    assert conn.next_event() == request
    return conn.send(answer) if answer is not None else b""


CLIENT_TUNE = f.Tune(0, 30)


def handshake(conn: ServerConnection, upto: State = State.OPEN, client_tune: f.Tune = CLIENT_TUNE) -> None:
    steps = [
        (State.PEER_PROPERTIES_EXCHANGED, f.PeerProperties(1, {"product": "test"}),
         f.PeerPropertiesResponse(1, OK, {"product": "amqp-stream"})),
        (State.AUTHENTICATING, f.SaslHandshake(2), f.SaslHandshakeResponse(2, OK, ("PLAIN",))),
        (State.TUNING, f.SaslAuthenticate(3, "PLAIN", PLAIN), f.SaslAuthenticateResponse(3, OK)),
        (State.TUNED, client_tune, None),
        (State.OPEN, f.Open(4, "/"), f.OpenResponse(4, OK, {"advertised_host": "localhost"})),
    ]
    for state, request, answer in steps:
        if request is None:
            continue
        step(conn, request, answer)
        assert conn.state is state
        if state is upto:
            return


def test_full_handshake():
    conn = ServerConnection(frame_max=1_048_576, heartbeat=60)
    assert conn.state is State.AWAIT_PEER_PROPERTIES
    feed(conn, f.PeerProperties(1, {"product": "rstream", "version": "1.1"}))
    assert conn.next_event() == f.PeerProperties(1, {"product": "rstream", "version": "1.1"})
    assert conn.client_properties == {"product": "rstream", "version": "1.1"}
    assert conn.send(f.PeerPropertiesResponse(1, OK, {"product": "x"})) == f.encode(
        f.PeerPropertiesResponse(1, OK, {"product": "x"}))
    step(conn, f.SaslHandshake(2), f.SaslHandshakeResponse(2, OK, ("PLAIN",)))
    out = step(conn, f.SaslAuthenticate(3, "PLAIN", PLAIN), f.SaslAuthenticateResponse(3, OK))
    assert decode_all(out) == [f.SaslAuthenticateResponse(3, OK), f.Tune(1_048_576, 60)]
    assert conn.state is State.TUNING
    step(conn, f.Tune(65_536, 10), None)
    assert conn.state is State.TUNED and (conn.frame_max, conn.heartbeat) == (65_536, 10)
    step(conn, f.Open(4, "/"), f.OpenResponse(4, OK))
    assert conn.state is State.OPEN
    assert events(conn) == []


@pytest.mark.parametrize("ours,theirs,agreed", [
    (1_048_576, 0, 1_048_576), (0, 5000, 5000), (1_048_576, 4096, 4096),
    (4096, 1_048_576, 4096), (0, 0, 0)])
def test_frame_max_negotiation(ours, theirs, agreed):
    conn = ServerConnection(frame_max=ours, frame_hard_max=0)
    handshake(conn, client_tune=f.Tune(theirs, 0))
    assert conn.frame_max == agreed
    if agreed:      # enforced once open when there is no hard max beyond it
        conn.receive_data(f.FRAME_SIZE.pack(agreed + 1))
        with pytest.raises(RemoteProtocolError) as info:
            conn.next_event()
        assert info.value.code == ResponseCode.FRAME_TOO_LARGE


def test_open_without_the_clients_tune():
    """RabbitMQ accepts Open right after its Tune (state tuning -> opened)."""
    conn = ServerConnection()
    handshake(conn, upto=State.TUNING)
    step(conn, f.Open(4, "/"), f.OpenResponse(4, OK))
    assert conn.state is State.OPEN


def test_tune_answered_with_the_response_key():
    """The Java client answers Tune with key 0x8014, rstream with 0x0014: both are the Tune."""
    conn = ServerConnection()
    handshake(conn, upto=State.TUNING)
    data = bytearray(f.encode(f.Tune(4096, 5)))
    data[4] |= 0x80
    conn.receive_data(bytes(data))
    assert conn.next_event() == f.Tune(4096, 5)
    assert conn.state is State.TUNED


def test_pipelined_requests_wait_for_the_answer():
    conn = ServerConnection()
    feed(conn, f.PeerProperties(1), f.SaslHandshake(2))
    assert conn.next_event() == f.PeerProperties(1)
    assert conn.next_event() is PAUSED
    conn.send(f.PeerPropertiesResponse(1, OK))
    assert conn.next_event() == f.SaslHandshake(2)
    assert conn.next_event() is PAUSED


def test_byte_at_a_time():
    conn = ServerConnection()
    data = f.encode(f.PeerProperties(1, {"a": "b"}))
    for i in range(len(data) - 1):
        conn.receive_data(data[i:i + 1])
        assert conn.next_event() is NEED_DATA
    conn.receive_data(data[-1:])
    assert conn.next_event() == f.PeerProperties(1, {"a": "b"})


def test_sasl_challenge_round():
    conn = ServerConnection()
    handshake(conn, upto=State.AUTHENTICATING)
    step(conn, f.SaslAuthenticate(3, "SCRAM", b"first"),
         f.SaslAuthenticateResponse(3, ResponseCode.SASL_CHALLENGE, b"challenge"))
    assert conn.state is State.AUTHENTICATING
    out = step(conn, f.SaslAuthenticate(4, "SCRAM", b"final"), f.SaslAuthenticateResponse(4, OK))
    assert conn.state is State.TUNING and len(decode_all(out)) == 2


@pytest.mark.parametrize("code", [ResponseCode.AUTHENTICATION_FAILURE,
                                  ResponseCode.SASL_MECHANISM_NOT_SUPPORTED,
                                  ResponseCode.SASL_AUTHENTICATION_FAILURE_LOOPBACK])
def test_failed_authentication_closes(code):
    conn = ServerConnection()
    handshake(conn, upto=State.AUTHENTICATING)
    out = step(conn, f.SaslAuthenticate(3, "PLAIN", b"\0guest\0bad"),
               f.SaslAuthenticateResponse(3, code))
    assert decode_all(out) == [f.SaslAuthenticateResponse(3, code)]     # no Tune
    assert conn.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        conn.send(f.Heartbeat())


def test_refused_open_closes():
    conn = ServerConnection()
    handshake(conn, upto=State.TUNED)
    step(conn, f.Open(4, "other"), f.OpenResponse(4, ResponseCode.VHOST_ACCESS_FAILURE))
    assert conn.state is State.CLOSED


# RabbitMQ closes the socket without a word for anything out of order before Open.
_PRE_AUTH_FRAMES = [
    f.PeerProperties(9), f.SaslHandshake(9), f.SaslAuthenticate(9, "PLAIN", PLAIN),
    f.Tune(0, 0), f.Open(9, "/"), f.Create(9, "s"), f.Close(9, 1, "bye"),
    f.DeclarePublisher(9, 1, "", "s"), f.Credit(1, 1),
    f.ExchangeCommandVersions(9, ()),
]
_ALLOWED = {
    State.AWAIT_PEER_PROPERTIES: {f.PeerProperties},
    State.PEER_PROPERTIES_EXCHANGED: {f.PeerProperties, f.SaslHandshake},
    State.AUTHENTICATING: {f.SaslHandshake, f.SaslAuthenticate},
    State.TUNING: {f.Tune, f.Open},
    State.TUNED: {f.Open},
}
CASES = [(state, frame) for state in _ALLOWED for frame in _PRE_AUTH_FRAMES]


@pytest.mark.parametrize("state,frame", CASES,
                         ids=[f"{s.value}-{type(x).__name__}" for s, x in CASES])
def test_pre_auth_order(state, frame):
    conn = ServerConnection()
    handshake(conn, upto=state) if state is not State.AWAIT_PEER_PROPERTIES else None
    feed(conn, frame)
    if type(frame) in _ALLOWED[state]:
        assert conn.next_event() == frame
    else:
        with pytest.raises(RemoteProtocolError) as info:
            conn.next_event()
        assert info.value.reply == b""
        assert conn.state is State.CLOSED
        assert isinstance(conn.next_event(), ConnectionClosed)


@pytest.mark.parametrize("state", list(_ALLOWED))
def test_heartbeat_before_open(state):
    conn = ServerConnection()
    handshake(conn, upto=state) if state is not State.AWAIT_PEER_PROPERTIES else None
    feed(conn, f.Heartbeat())
    assert conn.next_event() == f.Heartbeat()
    assert conn.state is state


@pytest.mark.parametrize("name,data", [
    ("unknown key", f.COMMAND_HEAD.pack(0x7F, 1)),
    ("truncated", f.encode(f.PeerProperties(1, {"a": "b"}))[4:-1]),
    ("unknown version", f.COMMAND_HEAD.pack(Key.PEER_PROPERTIES, 2) + b"\0\0\0\1\0\0\0\0"),
])
def test_bad_frame_before_open_closes_silently(name, data):
    conn = ServerConnection()
    conn.receive_data(f.FRAME_SIZE.pack(len(data)) + data)
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.reply == b"" and info.value.code == ResponseCode.UNKNOWN_FRAME
    assert conn.state is State.CLOSED


def test_frame_above_the_initial_ceiling_before_open():
    conn = ServerConnection(initial_frame_max=8192)
    conn.receive_data(f.FRAME_SIZE.pack(8193) + b"\0\x11\0\1")
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.code == ResponseCode.FRAME_TOO_LARGE and info.value.reply == b""
    assert conn.buffered == 8 and conn.state is State.CLOSED


def test_initial_ceiling_holds_until_open():
    """The negotiated frame max applies only after Open (RabbitMQ 4.3's pre-auth ceiling)."""
    conn = ServerConnection(frame_max=1_048_576, initial_frame_max=8192)
    handshake(conn, upto=State.TUNED, client_tune=f.Tune(1_048_576, 0))
    conn.receive_data(f.encode(f.Open(4, "x" * 9000)))
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


# Once open: Close(UNKNOWN_FRAME) or Close(FRAME_TOO_LARGE), then only the client's answer counts.
@pytest.mark.parametrize("name,data,code,reason", [
    ("unknown key", f.COMMAND_HEAD.pack(0x7F, 1), ResponseCode.UNKNOWN_FRAME, "unknown frame"),
    ("unknown version", f.encode(f.Create(5, "s"))[4:6] + b"\0\7" + f.encode(f.Create(5, "s"))[8:],
     ResponseCode.UNKNOWN_FRAME, "unknown frame"),
    ("malformed", f.encode(f.Delete(5, "stream"))[4:-1], ResponseCode.UNKNOWN_FRAME,
     "unknown frame"),
    ("handshake command", f.encode(f.PeerProperties(5))[4:], ResponseCode.UNKNOWN_FRAME,
     "unknown frame"),
    ("server-only frame", f.encode(f.PublishConfirm(1, (1,)))[4:], ResponseCode.UNKNOWN_FRAME,
     "unknown frame"),
    ("Open again", f.encode(f.Open(5, "/"))[4:], ResponseCode.UNKNOWN_FRAME, "unknown frame"),
    ("ResolveOffsetSpec (not in RabbitMQ 4.2's list)",
     f.encode(f.ResolveOffsetSpec(5, "s", f.OffsetSpec.first()))[4:], ResponseCode.UNKNOWN_FRAME,
     "unknown frame"),
    ("too large", b"\0" * 5000, ResponseCode.FRAME_TOO_LARGE, "frame too large"),
])
def test_bad_frame_when_open_gets_a_close(name, data, code, reason):
    conn = ServerConnection(frame_max=4096, frame_hard_max=0)
    handshake(conn)
    conn.receive_data(f.FRAME_SIZE.pack(len(data)) + data)
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.code == code
    assert decode_all(info.value.reply) == [f.Close(1, code, reason)]
    assert conn.state is State.CLOSE_SENT
    if code != ResponseCode.FRAME_TOO_LARGE:
        feed(conn, f.Create(6, "ignored"), f.Heartbeat())
        assert conn.next_event() is NEED_DATA
        feed(conn, f.Response(Key.CLOSE, 1, OK))
        assert conn.next_event() == f.Response(Key.CLOSE, 1, OK)
        assert conn.state is State.CLOSED


@pytest.mark.parametrize("frame_max", [4096, 0])
def test_frames_above_frame_max_are_taken_up_to_the_hard_max(frame_max):
    """RabbitMQ up to 4.2.6 takes a frame of any size once open (rstream's send_batch makes
    one above frame_max); we take it up to ``frame_hard_max``, also when frame_max is 0 (no
    limit), and answer a larger one as RabbitMQ 4.2.7 answers one above frame_max."""
    conn = ServerConnection(frame_max=frame_max, frame_hard_max=20_000)
    handshake(conn, client_tune=f.Tune(frame_max, 0))
    messages = tuple((i, None, memoryview(b"m" * 100), None) for i in range(100))
    big = f.encode(f.Publish(1, messages, 1))
    assert 4096 < len(big) - 4 <= 20_000
    conn.receive_data(big[:10])
    assert conn.incoming == len(big) - 4 and conn.next_event() is NEED_DATA
    conn.receive_data(big[10:])
    event = conn.next_event()
    assert isinstance(event, f.Publish) and len(event.messages) == 100
    assert conn.incoming == 0
    conn.receive_data(f.FRAME_SIZE.pack(20_001))
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.code == ResponseCode.FRAME_TOO_LARGE
    assert decode_all(info.value.reply) == [f.Close(1, ResponseCode.FRAME_TOO_LARGE,
                                                    "frame too large")]
    assert conn.state is State.CLOSE_SENT


def test_the_hard_max_does_not_lift_the_ceiling_before_open():
    conn = ServerConnection(initial_frame_max=8192, frame_hard_max=1 << 20)
    conn.receive_data(f.FRAME_SIZE.pack(8193) + b"\0\x11\0\1")
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.reply == b"" and conn.state is State.CLOSED


def test_client_close():
    conn = ServerConnection()
    handshake(conn)
    feed(conn, f.Close(7, OK, "bye"), f.Create(8, "never seen"))
    assert conn.next_event() == f.Close(7, OK, "bye")
    assert conn.next_event() is PAUSED
    assert conn.send(f.Response(Key.CLOSE, 7, OK)) == f.encode(f.Response(Key.CLOSE, 7, OK))
    assert conn.state is State.CLOSED
    assert isinstance(conn.next_event(), ConnectionClosed)


def test_server_close():
    conn = ServerConnection()
    handshake(conn)
    corr = conn.next_correlation_id()
    conn.send(f.Close(corr, ResponseCode.INTERNAL_ERROR, "shutting down"))
    assert conn.state is State.CLOSE_SENT
    with pytest.raises(LocalProtocolError):
        conn.send(f.Response(Key.CREATE_STREAM, 3, OK))
    feed(conn, f.Response(Key.CLOSE, corr, OK))
    assert conn.next_event() == f.Response(Key.CLOSE, corr, OK)
    assert conn.state is State.CLOSED


def test_dropped_socket():
    """rstream never sends Close: it just closes the socket."""
    conn = ServerConnection()
    handshake(conn)
    data = f.encode(f.Create(5, "s"))
    conn.receive_data(data[:7])
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), ConnectionClosed)
    assert conn.state is State.CLOSED


def test_open_connection_commands_and_answers():
    conn = ServerConnection()
    handshake(conn)
    requests = [f.Create(5, "s", {"max-age": "1h"}), f.DeclarePublisher(6, 1, "", "s"),
                f.Publish(1, ((1, None, b"m", None),)), f.Subscribe(7, 1, "s", f.OffsetSpec.first(), 10),
                f.Credit(1, 5), f.StoreOffset("r", "s", 1), f.Metadata(8, ("s",)),
                f.Heartbeat(), f.ConsumerUpdateResponse(9, OK, f.OffsetSpec.next())]
    feed(conn, *requests)
    assert events(conn) == requests
    for answer in [f.Response(Key.CREATE_STREAM, 5, OK), f.PublishConfirm(1, (1,)),
                   f.MetadataUpdate(ResponseCode.STREAM_NOT_AVAILABLE, "s"),
                   f.CreditResponse(ResponseCode.SUBSCRIPTION_ID_DOES_NOT_EXIST, 2),
                   f.PublishError(1, ((2, ResponseCode.PUBLISHER_DOES_NOT_EXIST),)),
                   f.ConsumerUpdate(conn.next_correlation_id(), 1, True), f.Heartbeat()]:
        assert conn.send(answer) == f.encode(answer)


@pytest.mark.parametrize("frame", [f.Create(1, "s"), f.Tune(1, 1), f.Publish(1, ())])
def test_client_frames_cannot_be_sent(frame):
    conn = ServerConnection()
    handshake(conn)
    with pytest.raises(LocalProtocolError):
        conn.send(frame)


def test_nothing_but_handshake_answers_before_open():
    conn = ServerConnection()
    handshake(conn, upto=State.TUNED)
    with pytest.raises(LocalProtocolError):
        conn.send(f.PublishConfirm(1, (1,)))
    with pytest.raises(LocalProtocolError):
        conn.deliver_head(1, 100)
    with pytest.raises(LocalProtocolError):      # no request is waiting for this answer
        conn.send(f.PeerPropertiesResponse(1, OK))


def test_deliver_version_follows_exchange_command_versions():
    conn = ServerConnection()
    handshake(conn)
    assert conn.deliver_version == 1
    assert conn.deliver_head(1, 60, 40) == f.deliver_head(1, 60)     # v1: no committed id
    with pytest.raises(LocalProtocolError):
        conn.send(f.Deliver(1, b"\0" * 60, 40))
    feed(conn, f.ExchangeCommandVersions(5, ((Key.DELIVER, 1, 2), (Key.PUBLISH, 1, 2))))
    assert isinstance(conn.next_event(), f.ExchangeCommandVersions)
    assert conn.deliver_version == 2
    assert conn.deliver_head(1, 60, 40) == f.deliver_head(1, 60, 40)
    with pytest.raises(LocalProtocolError):
        conn.deliver_head(1, 60)


def test_re_authentication_when_open():
    conn = ServerConnection()
    handshake(conn)
    out = step(conn, f.SaslAuthenticate(9, "PLAIN", PLAIN), f.SaslAuthenticateResponse(9, OK))
    assert decode_all(out) == [f.SaslAuthenticateResponse(9, OK)]       # no second Tune
    assert conn.state is State.OPEN
    step(conn, f.SaslAuthenticate(10, "PLAIN", b"\0guest\0bad"),
         f.SaslAuthenticateResponse(10, ResponseCode.AUTHENTICATION_FAILURE))
    assert conn.state is State.CLOSED


def test_large_publish_frame_is_one_copy():
    conn = ServerConnection(frame_max=0)
    handshake(conn, client_tune=f.Tune(0, 0))
    publish = f.Publish(1, tuple((i, None, b"x" * 100, None) for i in range(5000)))
    data = f.encode(publish)
    for i in range(0, len(data), 65536):
        conn.receive_data(data[i:i + 65536])
    event = conn.next_event()
    assert event == publish
    assert conn.buffered == 0


def _spanned_publish(first: int, count: int = 700) -> f.Publish:
    """A v2 Publish of messages of varying sizes with values of one length (the Spark sink's
    frames: ``SpannedEntries``), above ``BIG_FRAME``."""
    return f.Publish(1, tuple((i, f"r{i % 7:02d}", bytes([i % 251]) * (80 + i % 97), None)
                              for i in range(first, first + count)), 2)


def _read(conn: ServerConnection, data: bytes, size: int = 65521) -> list:
    """The events of ``data`` read in pieces that end inside frames, taken after each read
    (as the adapter does)."""
    got = []
    for i in range(0, len(data), size):
        conn.receive_data(data[i:i + size])
        got += events(conn)
    return got


def test_large_frames_are_gathered_into_buffers_reused_once_nothing_holds_them(monkeypatch):
    """A large frame is decoded from a buffer of its own (read in pieces, the next frame's
    head in the same read); that buffer is taken again for a later large frame only once
    nothing holds the first frame (its messages, what storage would make of them): a frame
    still held keeps its bytes."""
    from amqp_stream.streamproto import connection
    monkeypatch.setattr(connection, "_FRAMES", KeptBuffers(4, 1 << 24))
    conn = ServerConnection(frame_max=0)
    handshake(conn, client_tune=f.Tune(0, 0))
    publishes = [_spanned_publish(k * 1000) for k in range(4)]
    data = b"".join(map(f.encode, publishes[:2])) + f.encode(f.Heartbeat())
    assert len(f.encode(publishes[0])) > connection.BIG_FRAME
    first, second, beat = _read(conn, data)
    assert (first, second, beat) == (publishes[0], publishes[1], f.Heartbeat())
    assert type(first.messages).__name__ == "SpannedEntries"
    held = first.messages.src
    assert type(held) is bytearray and second.messages.src is not held
    freed = id(second.messages.src)  # (its id: a reference would hold it; _FRAMES keeps it)
    del second
    (third,) = _read(conn, f.encode(publishes[2]))
    assert third == publishes[2]
    assert id(third.messages.src) == freed  # reused: nothing held it
    assert first == publishes[0]             # still held: not overwritten
    del first, held, third
    (fourth,) = _read(conn, f.encode(publishes[3]))
    assert fourth == publishes[3]
    assert connection._FRAMES.holds(fourth.messages.src)
    assert conn.buffered == 0


@st.composite
def _frames_in_pieces(draw):
    """Publish frames (v1 of one size or not, v2 with values of one length or none; some
    above ``BIG_FRAME`` and above the negotiated frame max) and heartbeats, their bytes cut at
    random places, and which of the decoded frames the reader holds on to."""
    rnd = random.Random(draw(st.integers(0, 1 << 30)))
    frames: list[f.Frame] = []
    for k in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 4)) == 0:
            frames.append(f.Heartbeat())
            continue
        version = draw(st.sampled_from((1, 2)))
        count = draw(st.sampled_from((1, 300, 700, 3000)))
        size = draw(st.sampled_from((None, 0, 90, 150)))
        width = draw(st.sampled_from((0, 4, 30)))
        frames.append(f.Publish(k % 3, tuple(
            (k * 10_000 + i, f"{i % 7}".rjust(width, "v") if version == 2 and width else None,
             rnd.randbytes(rnd.randrange(200) if size is None else size), None)
            for i in range(count)), version))
    data = b"".join(map(f.encode, frames))
    cuts = sorted({rnd.randrange(1, len(data)) for _ in range(draw(st.integers(0, 30)))})
    return frames, data, cuts, draw(st.lists(st.booleans(), min_size=len(frames),
                                             max_size=len(frames))), draw(st.integers(1, 3))


@settings(max_examples=60, deadline=None)
@given(_frames_in_pieces())
def test_frames_read_in_random_pieces_are_the_frames_sent(case):
    """However the reads cut the frames (inside a size field, a large frame's first bytes with
    the frame before it, its last with the next one), each event is the frame sent; a large
    frame's kept buffer (``_FRAMES``: few here, so they are reused) is taken again only once
    no decoded frame holds it: the frames held to the end keep their bytes."""
    from amqp_stream.streamproto import connection
    frames, data, cuts, hold, kept = case
    default, connection._FRAMES = connection._FRAMES, KeptBuffers(kept, 1 << 24)
    try:
        conn = ServerConnection(frame_max=100_000)
        handshake(conn, client_tune=f.Tune(100_000, 0))
        got, held = 0, []
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            conn.receive_data(data[a:b])
            for event in events(conn):
                assert event == frames[got]
                if hold[got]:
                    held.append((got, event))
                got += 1
        assert got == len(frames) and conn.buffered == 0
        for k, event in held:
            assert event == frames[k]
    finally:
        connection._FRAMES = default
