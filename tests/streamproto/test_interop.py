"""ServerConnection over a real loopback socket, against two independent clients.

The server side here is a script (no streams behind it): it shows how an adapter drives the
state machine and checks that the conformance suite's own client and rstream, each with its
own codec, complete the handshake and exchange commands with it byte for byte.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import zlib

from rstream import Producer

from amqp_stream.streamproto import (
    COMMAND_VERSIONS,
    NEED_DATA,
    PAUSED,
    ConnectionClosed,
    Key,
    RemoteProtocolError,
    ResponseCode,
    ServerConnection,
    State,
)
from amqp_stream.streamproto import frames as f
from conformance import streamclient

OK = ResponseCode.OK


def chunk_of(chunk_id: int, messages: list[bytes]) -> bytes:
    data = b"".join(struct.pack(">I", len(m)) + m for m in messages)
    return f.CHUNK_HEADER.pack(0x50, 0, len(messages), len(messages), 1_700_000_000_000, 1,
                               chunk_id, zlib.crc32(data), len(data), 0, 0) + data


class ScriptedServer:
    """Accepts one connection and answers each event with ``answer(conn, event)``."""

    def __init__(self, answer):
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.events: list = []
        self.errors: list[RemoteProtocolError] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        sock, _ = self.listener.accept()
        conn = ServerConnection(frame_max=1_048_576, heartbeat=0)
        with sock:
            while conn.state is not State.CLOSED:
                data = sock.recv(65536)
                conn.receive_data(data)
                while True:
                    try:
                        event = conn.next_event()
                    except RemoteProtocolError as e:
                        self.errors.append(e)
                        sock.sendall(e.reply)
                        if conn.state is State.CLOSED:
                            return
                        continue
                    if event is NEED_DATA or event is PAUSED:
                        break
                    self.events.append(event)
                    if isinstance(event, ConnectionClosed):
                        return
                    for out in self.answer(conn, event):
                        sock.sendall(out if isinstance(out, bytes) else conn.send(out))

    def join(self) -> None:
        self.thread.join(10)
        self.listener.close()
        assert not self.thread.is_alive()


def broker_like(conn: ServerConnection, event: f.Frame) -> list:
    """Answers as a broker with one stream "s" would, without storing anything."""
    if isinstance(event, f.PeerProperties):
        return [f.PeerPropertiesResponse(event.correlation_id, OK,
                                         {"product": "amqp-stream", "version": "4.2.0"})]
    if isinstance(event, f.SaslHandshake):
        return [f.SaslHandshakeResponse(event.correlation_id, OK, ("PLAIN",))]
    if isinstance(event, f.SaslAuthenticate):
        good = event.mechanism == "PLAIN" and event.data == b"\0guest\0guest"
        return [f.SaslAuthenticateResponse(
            event.correlation_id, OK if good else ResponseCode.AUTHENTICATION_FAILURE)]
    if isinstance(event, f.Open):
        return [f.OpenResponse(event.correlation_id, OK,
                               {"advertised_host": "127.0.0.1", "advertised_port": "5552"})]
    if isinstance(event, f.ExchangeCommandVersions):
        return [f.ExchangeCommandVersionsResponse(event.correlation_id, OK, COMMAND_VERSIONS)]
    if isinstance(event, f.Create):
        code = OK if event.stream == "s" else ResponseCode.STREAM_ALREADY_EXISTS
        return [f.Response(Key.CREATE_STREAM, event.correlation_id, code)]
    if isinstance(event, f.DeclarePublisher):
        return [f.Response(Key.DECLARE_PUBLISHER, event.correlation_id, OK)]
    if isinstance(event, f.Publish):
        if event.publish_version == 2:
            conn.published = [bytes(m[2]) for m in event.messages]     # type: ignore[attr-defined]
        return [f.PublishConfirm(event.publisher_id, tuple(m[0] for m in event.messages))]
    if isinstance(event, f.Subscribe):
        chunk = chunk_of(0, getattr(conn, "published", []))
        return [f.Response(Key.SUBSCRIBE, event.correlation_id, OK),
                conn.deliver_head(event.subscription_id, len(chunk), 0) + chunk]
    if isinstance(event, f.Metadata):
        return [f.MetadataResponse(event.correlation_id, (f.Broker(0, "127.0.0.1", 5552),), tuple(
            f.StreamMetadata(s, OK, 0, ()) if s == "s"
            else f.StreamMetadata(s, ResponseCode.STREAM_DOES_NOT_EXIST, 0xFFFF, ())
            for s in event.streams))]
    if isinstance(event, f.Close):
        return [f.Response(Key.CLOSE, event.correlation_id, OK)]
    if isinstance(event, (f.Heartbeat, f.Tune, f.Credit, f.Response)):
        return []
    return [f.error_response(event, ResponseCode.UNKNOWN_FRAME)]


def test_conformance_client_against_the_state_machine():
    server = ScriptedServer(broker_like)
    client = streamclient.StreamClient("127.0.0.1", server.port, timeout=5)
    assert client.server_properties["product"] == "amqp-stream"
    assert client.server_tune == (1_048_576, 0)
    assert client.connection_properties == {"advertised_host": "127.0.0.1",
                                            "advertised_port": "5552"}
    assert client.create_stream("s") == OK
    assert client.create_stream("t") == ResponseCode.STREAM_ALREADY_EXISTS
    code, versions = client.exchange_command_versions([(Key.DELIVER, 1, 2)])
    assert code == OK and versions[1] == (Key.PUBLISH, 1, 2)
    assert client.declare_publisher(1, "s") == OK
    client.publish(1, [(1, b"one", "eu"), (2, b"two", None)], version=2)
    assert client.wait_confirms(1, [1, 2]) == {1: OK, 2: OK}
    client.publish_sub_batch(1, 3, [b"x", b"yy"], gzip=True)
    assert client.wait_confirms(1, [3]) == {3: OK}
    assert client.subscribe(3, "s", streamclient.offset_first(), 1,
                            {"filter.0": "eu", "match-unfiltered": "true"}) == OK
    chunk = client.next_chunk()
    assert (chunk.subscription_id, chunk.committed_chunk_id, chunk.num_records) == (3, 0, 2)
    assert chunk.records() == [(0, b"one"), (1, b"two")]
    brokers, streams = client.metadata(["s", "gone"])
    assert brokers == [(0, "127.0.0.1", 5552)]
    assert streams == {"s": (OK, 0, []), "gone": (ResponseCode.STREAM_DOES_NOT_EXIST, 0xFFFF, [])}
    assert client.query_offset("ref", "s") == (ResponseCode.UNKNOWN_FRAME, 0)    # error_response
    assert client.close() == OK
    server.join()
    publish = next(e for e in server.events if isinstance(e, f.Publish))
    assert publish.publish_version == 2
    assert [(m[0], m[1]) for m in publish.messages] == [(1, "eu"), (2, None)]
    batch = [e for e in server.events if isinstance(e, f.Publish)][1]
    ((publishing_id, filter_value, data, (compression, records, uncompressed)),) = batch.messages
    assert (publishing_id, filter_value, compression, records, uncompressed) == (3, None, 1, 2, 11)
    assert zlib.decompress(data, 31) == b"\0\0\0\1x\0\0\0\2yy"
    subscribe = next(e for e in server.events if isinstance(e, f.Subscribe))
    assert subscribe.offset_spec == f.OffsetSpec.first()
    assert subscribe.properties == {"filter.0": "eu", "match-unfiltered": "true"}
    assert server.errors == []


def test_conformance_client_sees_a_close_for_a_bad_frame():
    server = ScriptedServer(broker_like)
    client = streamclient.StreamClient("127.0.0.1", server.port, timeout=5)
    client.send_raw(struct.pack(">IHH", 4, 0x7F, 1))
    closed = client.wait_closed()
    assert (closed.code, closed.reason) == (ResponseCode.UNKNOWN_FRAME, "unknown frame")
    server.join()
    assert [e.code for e in server.errors] == [ResponseCode.UNKNOWN_FRAME]
    assert server.events[-2:] == [f.Response(Key.CLOSE, 1, OK), ConnectionClosed()]  # answered


def test_rstream_handshake_and_create():
    server = ScriptedServer(broker_like)

    async def run() -> None:
        producer = Producer("127.0.0.1", server.port, username="guest", password="guest")
        await producer.start()
        await producer.create_stream("s")
        await producer.close()

    asyncio.run(asyncio.wait_for(run(), 10))
    server.join()
    kinds = [type(e) for e in server.events]
    assert kinds[:5] == [f.PeerProperties, f.SaslHandshake, f.SaslAuthenticate, f.Tune, f.Open]
    assert f.Create in kinds
    assert server.errors == []
