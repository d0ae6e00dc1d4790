"""streamproto.frames: round-trips of every frame, RabbitMQ's own bytes, rstream's codec, bad input."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from rstream import encoding as rs_encoding, schema as rs

from amqp_stream.streamproto import frames as f
from amqp_stream.streamproto.constants import Key, OffsetType, ResponseCode
from amqp_stream.streamproto.errors import FrameError, StreamProtocolError

from tests.streamproto import FIXTURES, FRAMES, RABBITMQ_FRAMES, any_frame

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def roundtrip(frame: f.Frame) -> f.Frame:
    data = f.encode(frame)
    assert struct.unpack_from(">I", data)[0] == len(data) - 4
    return f.decode(data[4:])


def test_every_registered_frame_has_a_strategy():
    assert set(f._REGISTRY.values()) == set(FRAMES)


@pytest.mark.parametrize("kind", list(FRAMES), ids=lambda k: k.__name__)
def test_roundtrip(kind):
    @SETTINGS
    @given(FRAMES[kind])
    def check(frame):
        back = roundtrip(frame)
        assert type(back) is kind
        assert back == frame
        assert f.encode(back) == f.encode(frame)

    check()


# ---- RabbitMQ 3.10's own bytes (captured with conformance/streamclient.py) ------------------
EXPECTED_KIND = {
    "handshake": (f.PeerPropertiesResponse, f.SaslHandshakeResponse, f.SaslAuthenticateResponse,
                  f.Tune, f.OpenResponse),
    "metadata": (f.MetadataResponse,), "publish-confirm": (f.PublishConfirm,),
    "publish-error": (f.PublishError,), "deliver": (f.Deliver,),
    "query-publisher-sequence": (f.QueryPublisherSequenceResponse,),
    "credit-error+query-offset-none": (f.CreditResponse, f.QueryOffsetResponse),
    "query-offset": (f.QueryOffsetResponse,), "metadata-update": (f.MetadataUpdate,),
    "server-close-unknown-frame": (f.Close,),
}


@pytest.mark.parametrize("label", sorted({e["label"] for e in RABBITMQ_FRAMES["frames"]}))
def test_rabbitmq_frames_decode_and_encode_byte_for_byte(label):
    raws = [bytes.fromhex(e["frame"]) for e in RABBITMQ_FRAMES["frames"] if e["label"] == label]
    decoded = [f.decode(raw[4:]) for raw in raws]
    assert tuple(type(d) for d in decoded) == EXPECTED_KIND.get(label, (f.Response,))
    assert [f.encode(d) for d in decoded] == raws


def test_rabbitmq_handshake_values():
    """What RabbitMQ 3.10 answered: its Tune, mechanisms, Open properties, peer properties."""
    raws = [bytes.fromhex(e["frame"]) for e in RABBITMQ_FRAMES["frames"] if e["label"] == "handshake"]
    peer, sasl, auth, tune, open_ = (f.decode(r[4:]) for r in raws)
    assert peer.properties["product"] == "RabbitMQ" and peer.properties["version"] == "3.10.8"
    assert sasl.mechanisms == ("PLAIN", "AMQPLAIN")
    assert auth == f.SaslAuthenticateResponse(auth.correlation_id, ResponseCode.OK)
    assert tune == f.Tune(1_048_576, 60)
    assert set(open_.properties) == {"advertised_host", "advertised_port"}


def test_rabbitmq_deliver_chunk_has_header_and_data_only():
    """RabbitMQ sends the chunk header and data section: no Bloom bytes, no trailer."""
    (raw,) = [bytes.fromhex(e["frame"]) for e in RABBITMQ_FRAMES["frames"] if e["label"] == "deliver"]
    deliver = f.decode(raw[4:])
    head = f.chunk_header(deliver.chunk)
    assert head.magic_version == 0x50 and head.chunk_type == 0
    assert len(deliver.chunk) == f.CHUNK_HEADER.size + head.data_length
    assert head.crc == zlib.crc32(deliver.chunk[f.CHUNK_HEADER.size:])
    assert head.trailer_length > 0      # counted in the header, not sent


# ---- rstream's encoder and decoder --------------------------------------------------------
def _rs_props(d):
    return [rs.Property(k, v) for k, v in d.items()]


def _chunk(messages: list[bytes], chunk_id: int = 40) -> bytes:
    data = b"".join(struct.pack(">I", len(m)) + m for m in messages)
    return f.CHUNK_HEADER.pack(0x50, 0, len(messages), len(messages), 1_700_000_000_000, 1,
                               chunk_id, zlib.crc32(data), len(data), 0, 0) + data


PAIRS = [
    (f.PeerProperties(7, {"product": "x", "version": "1.2"}),
     rs.PeerProperties(7, _rs_props({"product": "x", "version": "1.2"}))),
    (f.PeerPropertiesResponse(7, 1, {"product": "RabbitMQ"}),
     rs.PeerPropertiesResponse(7, 1, _rs_props({"product": "RabbitMQ"}))),
    (f.SaslHandshake(2), rs.SaslHandshake(2)),
    (f.SaslHandshakeResponse(2, 1, ("PLAIN", "AMQPLAIN")),
     rs.SaslHandshakeResponse(2, 1, ["PLAIN", "AMQPLAIN"])),
    (f.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest"),
     rs.SaslAuthenticate(3, "PLAIN", b"\0guest\0guest")),
    (f.SaslAuthenticateResponse(3, 1), rs.SaslAuthenticateResponse(3, 1)),
    (f.Tune(1_048_576, 60), rs.Tune(1_048_576, 60)),
    (f.Open(4, "/"), rs.Open(4, "/")),
    (f.OpenResponse(4, 1, {"advertised_host": "h", "advertised_port": "5552"}),
     rs.OpenResponse(4, 1, _rs_props({"advertised_host": "h", "advertised_port": "5552"}))),
    (f.Heartbeat(), rs.Heartbeat()),
    (f.Close(5, 1, "bye"), rs.Close(5, 1, "bye")),
    (f.Response(Key.CLOSE, 5, 1), rs.CloseResponse(5, 1)),
    (f.Create(6, "s", {"max-age": "10s"}), rs.Create(6, "s", _rs_props({"max-age": "10s"}))),
    (f.Response(Key.CREATE_STREAM, 6, 5), rs.CreateResponse(6, 5)),
    (f.Delete(8, "s"), rs.Delete(8, "s")),
    (f.Response(Key.DELETE_STREAM, 8, 2), rs.DeleteResponse(8, 2)),
    (f.DeclarePublisher(9, 1, "ref", "s"), rs.DeclarePublisher(9, 1, "ref", "s")),
    (f.Response(Key.DECLARE_PUBLISHER, 9, 1), rs.DeclarePublisherResponse(9, 1)),
    (f.QueryPublisherSequence(10, "ref", "s"), rs.QueryPublisherSequence(10, "ref", "s")),
    (f.QueryPublisherSequenceResponse(10, 1, 99), rs.QueryPublisherSequenceResponse(10, 1, 99)),
    (f.DeletePublisher(11, 1), rs.DeletePublisher(11, 1)),
    (f.Response(Key.DELETE_PUBLISHER, 11, 18), rs.DeletePublisherResponse(11, 18)),
    (f.PublishConfirm(1, (1, 2, 2**64 - 1)), rs.PublishConfirm(1, [1, 2, 2**64 - 1])),
    (f.PublishError(1, ((3, 18), (4, 6))),
     rs.PublishError(1, [rs.PublishingError(3, 18), rs.PublishingError(4, 6)])),
    (f.Metadata(12, ("a", "b")), rs.Metadata(12, ["a", "b"])),
    (f.MetadataResponse(12, (f.Broker(0, "localhost", 5552),),
                        (f.StreamMetadata("a", 1, 0, (0,)), f.StreamMetadata("b", 2, 0xFFFF, ()))),
     rs.MetadataResponse(12, [rs.Broker(0, "localhost", 5552)],
                         [rs.StreamMetadata("a", 1, 0, [0]), rs.StreamMetadata("b", 2, 0xFFFF, [])])),
    (f.MetadataUpdate(6, "a"), rs.MetadataUpdate(rs.MetadataInfo(6, "a"))),
    (f.Subscribe(13, 1, "s", f.OffsetSpec.offset(5), 10, {"filter.0": "eu"}),
     rs.Subscribe(13, 1, "s", rs.OffsetSpec.from_params(rs.OffsetType.OFFSET, 5), 10,
                  _rs_props({"filter.0": "eu"}))),
    (f.Subscribe(13, 1, "s", f.OffsetSpec.timestamp(-5), 10, {"match-unfiltered": "true"}),
     rs.Subscribe(13, 1, "s", rs.OffsetSpec.from_params(rs.OffsetType.TIMESTAMP, -5), 10,
                  _rs_props({"match-unfiltered": "true"}))),
    (f.Subscribe(13, 1, "s", f.OffsetSpec.next(), 1, {"a": "b"}),
     rs.Subscribe(13, 1, "s", rs.OffsetSpec.from_params(rs.OffsetType.NEXT, None), 1,
                  _rs_props({"a": "b"}))),
    (f.Response(Key.SUBSCRIBE, 13, 3), rs.SubscribeResponse(13, 3)),
    (f.Unsubscribe(14, 1), rs.Unsubscribe(14, 1)),
    (f.Response(Key.UNSUBSCRIBE, 14, 4), rs.UnsubscribeResponse(14, 4)),
    (f.StoreOffset("ref", "s", 77), rs.StoreOffset("ref", "s", 77)),
    (f.QueryOffset(15, "ref", "s"), rs.QueryOffset(15, "ref", "s")),
    (f.QueryOffsetResponse(15, 19, 0), rs.QueryOffsetResponse(15, 19, 0)),
    (f.Credit(1, 65535), rs.Credit(1, 65535)),
    (f.CreditResponse(4, 1), rs.CreditResponse(4, 1)),
    (f.Route(16, "key", "super"), rs.SuperStreamRoute(16, "key", "super")),
    (f.RouteResponse(16, 1, ("s-0",)), rs.SuperStreamRouteResponse(16, 1, ["s-0"])),
    (f.Partitions(17, "super"), rs.SuperStreamPartitions(17, "super")),
    (f.PartitionsResponse(17, 2, ()), rs.SuperStreamPartitionsResponse(17, 2, [])),
    (f.ExchangeCommandVersions(18, ((Key.PUBLISH, 1, 2),)),
     rs.ExchangeCommandVersionRequest(18, [rs.FrameHandlerInfo(2, 1, 2)])),
    (f.ExchangeCommandVersionsResponse(18, 1, ((1, 1, 1), (2, 1, 2))),
     rs.ExchangeCommandVersionResponse(18, 1, [rs.FrameHandlerInfo(1, 1, 1),
                                               rs.FrameHandlerInfo(2, 1, 2)])),
    (f.ConsumerUpdate(19, 1, True), rs.ConsumerUpdateResponse(19, 1, 1)),
    (f.CreateSuperStream(20, "super", ("super-0", "super-1"), ("0", "1"), {"max-age": "1h"}),
     rs.CreateSuperStream(20, "super", ["super-0", "super-1"], ["0", "1"],
                          _rs_props({"max-age": "1h"}))),
    (f.Response(Key.CREATE_SUPER_STREAM, 20, 1), rs.CreateSuperStreamResponse(20, 1)),
    (f.DeleteSuperStream(21, "super"), rs.DeleteSuperStream(21, "super")),
    (f.Response(Key.DELETE_SUPER_STREAM, 21, 1), rs.DeleteSuperStreamResponse(21, 1)),
    (f.Deliver(3, _chunk([b"one", b"two"])), None),
]


FROM_SERVER = (f.PublishConfirm, f.PublishError, f.MetadataUpdate, f.Heartbeat, f.Close, f.Tune,
               f.ConsumerUpdate)


def rs_encode(frame: rs.Frame) -> bytes:
    """rstream's bytes for ``frame``; its encoder (a client's) never sets the response bit."""
    data = bytearray(rs_encoding.encode_frame(frame))
    if rs.registry.get((True, frame.key)) is type(frame):
        data[4] |= 0x80
    return bytes(data)


def _labels() -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for ours, _ in PAIRS:
        name = type(ours).__name__ if not isinstance(ours, f.Response) else (
            f"Response-{Key(ours.command).name}")
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


LABELS = _labels()
RSTREAM_FRAMES = json.loads((FIXTURES / "rstream-1.1.1.json").read_text())


@pytest.mark.parametrize("label,ours", list(zip(LABELS, [p[0] for p in PAIRS], strict=True)))
def test_saved_rstream_bytes(label, ours):
    """The bytes rstream 1.1.1 wrote for each frame (Deliver: ours, which rstream decoded)."""
    assert f.encode(ours).hex() == RSTREAM_FRAMES[label]


def test_saved_rstream_bytes_are_rstreams():
    """The fixture file is what the installed rstream writes (regenerate it if not)."""
    for label, (ours, theirs) in zip(LABELS, PAIRS, strict=True):
        assert RSTREAM_FRAMES[label] == (rs_encode(theirs) if theirs else f.encode(ours)).hex()


@pytest.mark.parametrize("ours,theirs", PAIRS, ids=lambda p: type(p).__name__)
def test_same_bytes_as_rstream(ours, theirs):
    if theirs is None:      # rstream has no encoder for it: its decoder must accept ours
        return
    assert f.encode(ours) == rs_encode(theirs)
    assert f.decode(rs_encode(theirs)[4:]) == ours
    if ours.key & 0x8000 or isinstance(ours, FROM_SERVER):   # what rstream reads
        assert rs_encoding.decode_frame(f.encode(ours)[4:]) == theirs


def test_rstream_decodes_our_deliver():
    chunk = _chunk([b"one", b"two", b"three"], chunk_id=40)
    data = f.encode(f.Deliver(3, chunk))
    assert data == f.deliver_head(3, len(chunk)) + chunk
    frame = rs_encoding.decode_frame(data[4:])
    assert frame.subscription_id == 3 and frame.chunk_first_offset == 40
    assert frame.get_messages() == [b"one", b"two", b"three"]


@pytest.mark.parametrize("version", [1, 2])
def test_publish_like_rstream(version):
    messages = [rs.Message(1, "eu" if version == 2 else None, b"a"),
                rs.Message(2, "us" if version == 2 else None, b"bc")]
    theirs = rs_encoding.encode_publish(rs.Publish(4, messages), version)
    ours = f.Publish(4, tuple((m.publishing_id, m.filter_value, m.data, None) for m in messages),
                     version)
    assert f.encode(ours) == theirs
    assert f.decode(theirs[4:]) == ours


def test_sub_entry_batch_like_rstream():
    inner = b"".join(struct.pack(">I", len(m)) + m for m in (b"x", b"yy"))
    theirs = rs_encoding.encode_frame(rs.PublishSubBatching(
        publisher_id=2, number_of_root_messages=1, publishing_id=9, compress_type=0x80 | (0 << 4),
        subbatching_message_count=2, uncompressed_data_size=len(inner),
        compressed_data_size=len(inner), messages=inner))
    frame = f.decode(theirs[4:])
    assert frame == f.Publish(2, ((9, None, inner, (0, 2, len(inner))),))
    assert f.encode(frame) == theirs


def test_consumer_update_response_like_rstream():
    theirs = rs_encode(rs.ConsumerUpdateServerResponse(
        5, 1, rs.OffsetSpecification(OffsetType.OFFSET, 12)))
    assert f.decode(theirs[4:]) == f.ConsumerUpdateResponse(5, 1, f.OffsetSpec.offset(12))


@pytest.mark.parametrize("kind", [0, OffsetType.FIRST, OffsetType.LAST, OffsetType.NEXT])
def test_consumer_update_response_without_value_like_rstream(kind):
    """rstream writes a 64-bit value for every type; RabbitMQ ignores it where none belongs."""
    theirs = rs_encode(rs.ConsumerUpdateServerResponse(5, 1, rs.OffsetSpecification(kind, 0)))
    assert f.decode(theirs[4:]) == f.ConsumerUpdateResponse(5, 1, f.OffsetSpec(kind))


def test_subscribe_without_properties_and_rstreams_empty_list():
    """RabbitMQ leaves the property array out when empty; rstream writes a count of 0."""
    ours = f.Subscribe(1, 2, "s", f.OffsetSpec.first(), 3)
    theirs = rs_encoding.encode_frame(rs.Subscribe(1, 2, "s", rs.OffsetSpec.from_params(
        rs.OffsetType.FIRST, None), 3, []))
    assert f.encode(ours)[4:] == theirs[4:-4] and theirs[-4:] == b"\0\0\0\0"
    assert f.decode(theirs[4:]) == ours


# ---- the traffic path ---------------------------------------------------------------------
def test_publish_bodies_are_views_of_the_frame():
    content = f.encode(f.Publish(1, ((1, None, b"abc", None), (2, None, b"de", None))))[4:]
    frame = f.decode(content)
    views = [m[2] for m in frame.messages]
    assert all(isinstance(v, memoryview) and v.obj is content for v in views)
    assert [bytes(v) for v in views] == [b"abc", b"de"]


def test_deliver_head_v2():
    chunk = _chunk([b"z"])
    assert f.deliver_head(7, len(chunk), 40) + chunk == f.encode(f.Deliver(7, chunk, 40))
    frame = f.decode(f.encode(f.Deliver(7, chunk, 40))[4:])
    assert frame.version == 2 and frame.committed_chunk_id == 40 and bytes(frame.chunk) == chunk


# ---- bad input: named cases -----------------------------------------------------------------
def _content(frame: f.Frame) -> bytes:
    return f.encode(frame)[4:]


BAD = {
    "empty": b"",
    "key only": b"\x00\x07",
    "unknown key": struct.pack(">HH", 0x7F, 1),
    "unknown version": struct.pack(">HHI", Key.CREATE_STREAM, 9, 1) + b"\0\1s\0\0\0\0",
    "response key the client never gets": struct.pack(">HHIH", 0x8000 | Key.PUBLISH, 1, 1, 1),
    "truncated string": _content(f.Delete(1, "stream"))[:-2],
    "trailing byte": _content(f.Delete(1, "s")) + b"\0",
    "null string (RabbitMQ: a length of 65535)": struct.pack(">HHIh", Key.DELETE_STREAM, 1, 1, -1),
    "invalid utf-8": struct.pack(">HHIH", Key.DELETE_STREAM, 1, 1, 2) + b"\xff\xfe",
    "array count beyond the frame": struct.pack(">HHIi", Key.METADATA, 1, 1, 1_000_000),
    "negative array count": struct.pack(">HHIi", Key.METADATA, 1, 1, -3),
    "offset type 9": struct.pack(">HHIB", Key.SUBSCRIBE, 1, 1, 1) + b"\0\1s" + struct.pack(">HH", 9, 1),
    "offset type 0 in Subscribe": struct.pack(">HHIB", Key.SUBSCRIBE, 1, 1, 1) + b"\0\1s" + struct.pack(">HH", 0, 1),
    "publish count above messages": (_content(f.Publish(1, ((1, None, b"a", None),)))[:5] + b"\0\0\0\2"
                                     + _content(f.Publish(1, ((1, None, b"a", None),)))[9:]),
    "publish message past the end": struct.pack(">HHBiQI", Key.PUBLISH, 1, 1, 1, 1, 100) + b"short",
    "publish v2 with a sub-entry batch": struct.pack(">HHBiQhI", Key.PUBLISH, 2, 1, 1, 1, -1, 0x8000_0000),
    "publish negative count": struct.pack(">HHBi", Key.PUBLISH, 1, 1, -1),
    "publish v2 filter past the end": struct.pack(">HHBiQh", Key.PUBLISH, 2, 1, 1, 1, -2),
    "confirm count mismatch": struct.pack(">HHBiQ", Key.PUBLISH_CONFIRM, 1, 1, 2, 1),
    "boolean 2": struct.pack(">HHIBB", Key.CONSUMER_UPDATE, 1, 1, 1, 2),
    "plain response too long": struct.pack(">HHIHB", 0x8000 | Key.CREATE_STREAM, 1, 1, 1, 0),
    "deliver v3": struct.pack(">HHB", Key.DELIVER, 3, 1),
    "tune too short": struct.pack(">HHI", Key.TUNE, 1, 1),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_frames_raise_frame_error(name):
    with pytest.raises(FrameError) as info:
        f.decode(BAD[name])
    assert info.value.code == ResponseCode.UNKNOWN_FRAME
    assert isinstance(info.value, StreamProtocolError) and isinstance(info.value, ValueError)


def test_long_strings_as_rabbitmq_reads_them():
    """RabbitMQ reads string lengths unsigned: 40,000 bytes is a valid stream name there."""
    frame = f.Delete(1, "x" * 40_000)
    assert roundtrip(frame) == frame
    assert f.encode(frame)[12:14] == struct.pack(">H", 40_000)


def test_chunk_header_of_a_short_chunk():
    with pytest.raises(FrameError):
        f.chunk_header(b"\x50" * 47)


def test_encode_refuses_values_the_layout_cannot_hold():
    with pytest.raises(ValueError):
        f.encode(f.Delete(1, "x" * 70_000))
    with pytest.raises(ValueError):
        f.encode(f.Publish(1, ((1, "fv", b"a", None),), 1))
    with pytest.raises(struct.error):
        f.encode(f.Credit(1, 70_000))


@pytest.mark.parametrize("request_,expected", [
    (f.Route(1, "k", "super"), f.RouteResponse(1, 13)),
    (f.Partitions(2, "super"), f.PartitionsResponse(2, 13)),
    (f.Create(3, "s"), f.Response(Key.CREATE_STREAM, 3, 13)),
    (f.QueryOffset(4, "r", "s"), f.QueryOffsetResponse(4, 13, 0)),
    (f.StreamStats(5, "s"), f.StreamStatsResponse(5, 13)),
    (f.Metadata(6, ("a",)), f.MetadataResponse(6, (), (f.StreamMetadata("a", 13, 0xFFFF, ()),))),
    (f.CreateSuperStream(7, "x", (), ()), f.Response(Key.CREATE_SUPER_STREAM, 7, 13)),
    (f.Open(8, "/"), f.OpenResponse(8, 13)),
])
def test_error_response(request_, expected):
    assert f.error_response(request_, 13) == expected
    roundtrip(expected)


@pytest.mark.parametrize("frame", [f.Credit(1, 1), f.Publish(1, ()), f.StoreOffset("r", "s", 1),
                                   f.Response(Key.CREATE_STREAM, 1, 1)])
def test_error_response_of_unanswered_frames(frame):
    with pytest.raises(ValueError):
        f.error_response(frame, 13)


@SETTINGS
@given(any_frame)
def test_any_frame_roundtrips(frame):
    assert roundtrip(frame) == frame
