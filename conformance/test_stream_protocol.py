"""RabbitMQ's stream protocol (port 5552): connection, streams, bad input.

Rules from PROTOCOL.adoc of rabbitmq-server (deps/rabbitmq_stream/docs) and what
rabbit_stream_reader.erl answers; response codes by their RabbitMQ names. Every test speaks
through ``conformance.streamclient`` only.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from conformance.conftest import unique_name
from conformance.streamclient import OK, StreamClient

pytestmark = pytest.mark.timeout(60)

STREAM_DOES_NOT_EXIST, SUBSCRIPTION_ID_ALREADY_EXISTS, SUBSCRIPTION_ID_DOES_NOT_EXIST = 2, 3, 4
STREAM_ALREADY_EXISTS, STREAM_NOT_AVAILABLE = 5, 6
AUTHENTICATION_FAILURE, VHOST_ACCESS_FAILURE, UNKNOWN_FRAME, FRAME_TOO_LARGE = 8, 12, 13, 14
PRECONDITION_FAILED, PUBLISHER_DOES_NOT_EXIST = 17, 18


@pytest.fixture
def sname(request, target):
    """A unique stream name; deleted after the test if it exists."""
    value = unique_name(request)
    yield value
    if target.stream_url is None:
        return
    try:
        with target.stream_connect() as c:
            c.delete_stream(value)
    except Exception:  # noqa: BLE001 - cleanup must not hide the test's own failure
        pass


def test_handshake_says_rabbitmq_and_advertises_where_to_connect(sclient, target):
    """PeerProperties answers product/version (clients decide features from the version);
    Open answers advertised_host/advertised_port (PROTOCOL.adoc, Open)."""
    assert sclient.server_properties["product"] == "RabbitMQ"
    assert tuple(int(x) for x in sclient.server_properties["version"].split(".")[:2]) >= (3, 9)
    assert "PLAIN" in sclient.mechanisms
    assert set(sclient.connection_properties) >= {"advertised_host", "advertised_port"}
    assert int(sclient.connection_properties["advertised_port"]) > 0
    assert sclient.server_tune is not None and sclient.server_tune[0] > 0


def test_wrong_password_fails_authentication(target):
    """SaslAuthenticate with a wrong PLAIN password: AUTHENTICATION_FAILURE, then the server
    closes the connection (rabbit_stream_reader)."""
    c = target.stream_connect(handshake=False)
    host, port, user, password, vhost = target.stream_address()
    c.request(17, struct.pack(">i", 0))  # PeerProperties, no properties
    c.request(18, b"")  # SaslHandshake
    code = c.authenticate("PLAIN", b"\0" + user.encode() + b"\0" + b"not-" + password.encode())
    assert code == AUTHENTICATION_FAILURE
    assert c.wait_closed().code is None


def test_unknown_vhost_is_refused(target):
    """Open of a virtual host that does not exist: VHOST_ACCESS_FAILURE."""
    host, port, user, password, _ = target.stream_address()
    with pytest.raises(ConnectionError, match=f"code {VHOST_ACCESS_FAILURE}"):
        StreamClient(host, port, user, password, vhost="no-such-vhost")


def test_create_delete_and_their_codes(sclient, sname):
    """Create: OK, then STREAM_ALREADY_EXISTS; Delete: OK, then STREAM_DOES_NOT_EXIST."""
    assert sclient.create_stream(sname) == OK
    assert sclient.create_stream(sname) == STREAM_ALREADY_EXISTS
    assert sclient.delete_stream(sname) == OK
    assert sclient.delete_stream(sname) == STREAM_DOES_NOT_EXIST


def test_create_takes_rabbitmq_argument_names(sclient, sname):
    """Create's arguments are the queue arguments without ``x-`` (PROTOCOL.adoc, Create)."""
    assert sclient.create_stream(sname, {"max-length-bytes": "1000000", "max-age": "1h",
                                         "stream-max-segment-size-bytes": "500000"}) == OK


@pytest.mark.extension
def test_create_with_a_bad_argument_is_precondition_failed(sclient, sname):
    """A value a stream cannot take: PRECONDITION_FAILED (RabbitMQ 4.x's validation answer;
    3.10 drops the connection for some of them)."""
    assert sclient.create_stream(sname, {"max-length-bytes": "lots"}) == PRECONDITION_FAILED
    assert sclient.create_stream(sname, {"stream-max-segment-size-bytes": "-3"}) == \
        PRECONDITION_FAILED
    assert sclient.metadata([sname])[1][sname][0] == STREAM_DOES_NOT_EXIST


def test_metadata_names_a_leader_for_streams_that_exist(sclient, sname):
    """Metadata: per stream a code; a stream that exists has a leader among the brokers."""
    assert sclient.create_stream(sname) == OK
    brokers, streams = sclient.metadata([sname, sname + "-missing"])
    code, leader, _ = streams[sname]
    assert code == OK and leader in {ref for ref, _, _ in brokers}
    assert all(port > 0 and host for _, host, port in brokers)
    assert streams[sname + "-missing"][0] == STREAM_DOES_NOT_EXIST


@pytest.mark.rabbitmq313
def test_stream_stats_and_command_versions(sclient, sname):
    """StreamStats of an existing stream; ExchangeCommandVersions lists Publish up to v2 at
    index 1 (rstream reads that entry)."""
    assert sclient.create_stream(sname) == OK
    code, stats = sclient.stream_stats(sname)
    assert code == OK and {"first_chunk_id", "committed_chunk_id"} <= set(stats)
    assert sclient.stream_stats(sname + "-missing")[0] == STREAM_DOES_NOT_EXIST
    code, versions = sclient.exchange_command_versions([(8, 1, 2)])
    assert code == OK and versions[1] == (2, 1, 2)


def test_publisher_and_subscription_codes(sclient, sname):
    """DeclarePublisher on a missing stream: STREAM_DOES_NOT_EXIST; DeletePublisher of an
    unknown id: PUBLISHER_DOES_NOT_EXIST; a subscription id twice:
    SUBSCRIPTION_ID_ALREADY_EXISTS; Unsubscribe of an unknown id:
    SUBSCRIPTION_ID_DOES_NOT_EXIST; Credit for an unknown id: a CreditResponse with that code."""
    assert sclient.declare_publisher(1, sname) == STREAM_DOES_NOT_EXIST
    assert sclient.delete_publisher(7) == PUBLISHER_DOES_NOT_EXIST
    assert sclient.subscribe(1, sname) == STREAM_DOES_NOT_EXIST
    assert sclient.create_stream(sname) == OK
    assert sclient.subscribe(1, sname) == OK
    assert sclient.subscribe(1, sname) == SUBSCRIPTION_ID_ALREADY_EXISTS
    assert sclient.unsubscribe(9) == SUBSCRIPTION_ID_DOES_NOT_EXIST
    sclient.credit(9, 1)
    sclient.unsubscribe(1)  # a round trip: the credit error came before this answer
    assert sclient.pushed.credit_errors == [(SUBSCRIPTION_ID_DOES_NOT_EXIST, 9)]


def test_publish_with_an_unknown_publisher_gets_publish_errors(sclient):
    """Publish for a publisher id never declared: PublishError PUBLISHER_DOES_NOT_EXIST for
    each message."""
    sclient.publish(42, [(1, b"a"), (2, b"b")])
    assert sclient.wait_confirms(42, [1, 2]) == {1: PUBLISHER_DOES_NOT_EXIST,
                                                 2: PUBLISHER_DOES_NOT_EXIST}


def test_deleting_a_stream_tells_its_subscribers_and_publishers(sconnect, sname):
    """A deleted stream's clients get MetadataUpdate STREAM_NOT_AVAILABLE
    (rabbit_stream_reader, on the stream's leader going away)."""
    admin, user = sconnect(), sconnect()
    assert admin.create_stream(sname) == OK
    assert user.declare_publisher(1, sname) == OK
    assert user.subscribe(1, sname) == OK
    assert admin.delete_stream(sname) == OK
    deadline = time.monotonic() + 10
    while not user.pushed.metadata_updates:
        user._read_frame(deadline)
    assert user.pushed.metadata_updates[0] == (STREAM_NOT_AVAILABLE, sname)
    # the ids are free again once the stream is gone
    assert admin.create_stream(sname) == OK
    assert user.declare_publisher(1, sname) == OK
    assert user.subscribe(1, sname) == OK


def test_close_from_the_client_is_answered(target):
    """Close: the server answers OK and closes the socket."""
    c = target.stream_connect()
    assert c.close() == OK


def test_heartbeats_come_when_asked_for(target):
    """With a heartbeat negotiated in Tune, the server sends Heartbeat frames when idle."""
    c = target.stream_connect(heartbeat=1)
    try:
        deadline = time.monotonic() + 10
        while c.heartbeats == 0:
            c._read_frame(deadline)
        assert c.heartbeats >= 1
    finally:
        c.close()


# -- bad input: that connection only ---------------------------------------------------------
def _still_serving(target, sname: str) -> None:
    with target.stream_connect() as c:
        assert c.create_stream(sname) == OK
        assert c.metadata([sname])[1][sname][0] == OK


def test_unknown_command_closes_with_unknown_frame(sclient, target, sname):
    """An unknown command key once open: Close UNKNOWN_FRAME; others are served."""
    sclient.send_frame(0x7ABC, 1, struct.pack(">I", 1))
    assert sclient.wait_closed().code == UNKNOWN_FRAME
    _still_serving(target, sname)


def test_malformed_frame_closes_with_unknown_frame(sclient, target, sname):
    """A frame whose content does not match its command's layout: Close UNKNOWN_FRAME."""
    sclient.send_frame(13, 1, struct.pack(">I", 5) + b"\x00\x40ab")  # Create, name runs over
    assert sclient.wait_closed().code == UNKNOWN_FRAME
    _still_serving(target, sname)


@pytest.mark.rabbitmq313
def test_oversized_frame_closes_with_frame_too_large(sclient, target, sname):
    """A frame of 32 MiB, above the negotiated frame max and any broker's own hard limit:
    Close FRAME_TOO_LARGE, as RabbitMQ 4.2.7 answers (3.10 and 4.2 up to 4.2.6 check no size
    and just wait for the rest). A frame only a little above frame_max is not a test of
    conformance: RabbitMQ up to 4.2.6 stores it, 4.2.7 refuses it."""
    sclient.send_raw(struct.pack(">IHH", 32 << 20, 2, 1) + b"\0" * 1000)
    assert sclient.wait_closed().code == FRAME_TOO_LARGE
    _still_serving(target, sname)


def test_a_command_before_authentication_drops_the_socket(target, sname):
    """Anything out of the handshake order is answered by closing the socket, no frame."""
    c = target.stream_connect(handshake=False)
    c.send_frame(13, 1, struct.pack(">I", 1) + struct.pack(">H", 1) + b"x" + struct.pack(">i", 0))
    assert c.wait_closed().code is None
    _still_serving(target, sname)


def test_a_client_that_drops_its_socket_leaves_nothing_behind(target, sname):
    """rstream never sends Close: dropping the socket mid-subscription must free its ids and
    leave the stream usable."""
    host, port, user, password, _ = target.stream_address()
    with target.stream_connect() as c:
        assert c.create_stream(sname) == OK
    for _ in range(3):
        c = StreamClient(host, port, user, password)
        assert c.declare_publisher(1, sname) == OK and c.subscribe(1, sname) == OK
        c.sock.shutdown(socket.SHUT_RDWR)
        c.sock.close()
    with target.stream_connect() as c:
        assert c.declare_publisher(1, sname) == OK
        c.publish(1, [(1, b"after")])
        assert c.wait_confirms(1, [1]) == {1: OK}


@pytest.mark.rabbitmq4
def test_created_streams_have_the_amqp_arguments(sclient, client, sname):
    """Create's arguments are the x- queue arguments an AMQP client sees (typed as there), and
    a stream declared over AMQP is one the stream protocol finds."""
    assert sclient.create_stream(sname, {"max-length-bytes": "1000000", "max-age": "1h"}) == OK
    info = client.info(sname)
    assert info.status == 200
    assert info.body["arguments"]["x-max-length-bytes"] == 1_000_000
    assert info.body["arguments"]["x-max-age"] == "1h"
    assert client.declare(sname + "-amqp").status == 201
    try:
        assert sclient.metadata([sname + "-amqp"])[1][sname + "-amqp"][0] == OK
        assert sclient.create_stream(sname + "-amqp") == STREAM_ALREADY_EXISTS
    finally:
        client.delete(sname + "-amqp")
