"""Management node (HTTP over AMQP): declare, get, delete, purge, argument validation.

Rules from amqp-interface.md "Management node" and RabbitMQ's AMQP 1.0 management protocol
(rabbitmq.com/docs/amqp, "HTTP over AMQP"; deps/rabbit/src/rabbit_amqp_management.erl).
"""

from __future__ import annotations

import pytest

from conformance.amqp import Message, address

pytestmark = pytest.mark.timeout(120)


def test_declare_new_stream_is_201_with_queue_info(client, name):
    """PUT /queues/<q> of a new stream answers 201 and the queue info map
    (amqp-interface.md, management table)."""
    r = client.declare(name, {"x-max-length-bytes": 10_000_000})
    assert r.status == 201, r.body
    assert r.body["name"] == name
    assert r.body["type"] == "stream"
    assert r.body["durable"] is True
    assert r.body["arguments"]["x-max-length-bytes"] == 10_000_000
    assert r.message.correlation_id is not None
    assert r.message.properties.get("http:response") == "1.1"


def test_declare_again_with_equal_arguments_is_200(client, stream):
    """Re-declaring with equal arguments is 200 (amqp-interface.md, management table)."""
    r = client.declare(stream)
    assert r.status == 200, r.body
    assert r.body["name"] == stream


def test_declare_again_with_other_arguments_is_409(client, new_stream):
    """Re-declaring with different arguments is 409 (amqp-interface.md; RabbitMQ
    PRECONDITION_FAILED maps to 409 in rabbit_amqp_management)."""
    name = new_stream({"x-max-age": "1D"})
    r = client.declare(name, {"x-max-age": "2D"})
    assert r.status == 409, r.body


@pytest.mark.parametrize("arguments", [
    {"x-max-age": "10x"},
    {"x-max-age": "0s"},
    {"x-max-age": "1.5h"},
    {"x-max-length-bytes": -1},
    {"x-max-length-bytes": "big"},
    {"x-stream-filter-size-bytes": 15},
    {"x-stream-filter-size-bytes": 256},
    {"x-stream-max-segment-size-bytes": 3_000_000_001},
], ids=lambda a: f"{next(iter(a))}={next(iter(a.values()))}")
def test_invalid_stream_argument_is_400(client, name, arguments):
    """Invalid stream arguments are refused with 400 and a reason (amqp-interface.md "Stream
    arguments"; RabbitMQ's rabbit_stream_queue argument checks)."""
    r = client.declare(name, arguments)
    assert r.status == 400, r.body
    assert isinstance(r.body, str) and r.body, "400 without a reason"
    assert client.info(name).status == 404


@pytest.mark.parametrize("fields", [{"durable": False}, {"exclusive": True}, {"auto_delete": True}],
                         ids=lambda f: next(iter(f)))
def test_stream_must_be_durable_not_exclusive_not_auto_delete(client, name, fields):
    """A stream is durable, not exclusive, not auto-delete; asking otherwise is 400
    (amqp-interface.md "Stream arguments")."""
    r = client.declare(name, **fields)
    assert r.status == 400, r.body
    assert client.info(name).status == 404


@pytest.mark.parametrize("arguments", [
    {"x-max-age": "7D"}, {"x-max-age": "1Y"}, {"x-max-age": "30m"},
    {"x-stream-filter-size-bytes": 16}, {"x-stream-filter-size-bytes": 255},
    {"x-stream-max-segment-size-bytes": 1_000_000}, {"x-initial-cluster-size": 3},
], ids=lambda a: f"{next(iter(a))}={next(iter(a.values()))}")
def test_valid_stream_arguments_are_accepted(client, name, arguments):
    """Valid arguments at the edges of their ranges are accepted (amqp-interface.md "Stream
    arguments": filter size 16..255, x-max-age units Y M D h m s, x-initial-cluster-size
    accepted)."""
    r = client.declare(name, arguments)
    assert r.status == 201, r.body
    assert r.body["arguments"] == {"x-queue-type": "stream", **arguments}


def test_get_queue_info(client, stream):
    """GET /queues/<q> answers 200 with the keys RabbitMQ sends (amqp-interface.md)."""
    r = client.info(stream)
    assert r.status == 200, r.body
    for key in ("name", "durable", "auto_delete", "exclusive", "type", "arguments",
                "message_count", "consumer_count", "leader", "replicas"):
        assert key in r.body, key
    assert r.body["name"] == stream
    assert r.body["type"] == "stream"
    assert r.body["exclusive"] is False and r.body["auto_delete"] is False


def test_get_missing_is_404(client, name):
    """GET of a stream that does not exist is 404 (amqp-interface.md)."""
    assert client.info(name).status == 404


def test_delete_answers_200_with_message_count_and_removes(client, name):
    """DELETE /queues/<q> is 200 with {message_count}; afterwards GET is 404
    (amqp-interface.md; RabbitMQ returns the message count of the deleted queue)."""
    assert client.declare(name).status == 201
    client.publish(name, [Message(body=f"m{i}") for i in range(3)])
    r = client.delete(name)
    assert r.status == 200, r.body
    assert "message_count" in r.body
    assert client.info(name).status == 404


def test_delete_missing_is_200(client, name):
    """Deleting a stream that does not exist is 200 (amqp-interface.md; RabbitMQ's delete is
    idempotent)."""
    r = client.delete(name)
    assert r.status == 200, r.body


def test_purge_of_stream_is_400(client, stream):
    """DELETE /queues/<q>/messages is 400 for a stream: streams are not purged
    (amqp-interface.md; RabbitMQ: "purge not supported by stream queues")."""
    client.publish(stream, [Message(body="keep me")])
    r = client.request("DELETE", address(stream) + "/messages")
    assert r.status == 400, r.body
    assert [m.message.body for m in client.read(stream)] == ["keep me"]


def test_percent_encoded_name_round_trip(client, name):
    """Stream names are percent-encoded in addresses; unreserved characters stay as is
    (amqp-interface.md "Addresses")."""
    odd = name + " a/b é"
    assert client.declare(odd).status == 201
    try:
        assert client.info(odd).body["name"] == odd
        assert client.info(name).status == 404  # not the same stream as the plain prefix
        client.publish(odd, [Message(body="x")])
        assert [m.message.body for m in client.read(odd)] == ["x"]
    finally:
        client.delete(odd)


@pytest.mark.extension
def test_info_reports_first_and_next_offset(client, stream):
    """Extension keys first_offset / next_offset in GET /queues/<q> (DEVELOPING.md
    "amqp_stream": first_offset == next_offset for an empty stream)."""
    r = client.info(stream)
    assert r.body["first_offset"] == r.body["next_offset"] == 0
    client.publish(stream, [Message(body=str(i)) for i in range(5)])
    r = client.info(stream)
    assert (r.body["first_offset"], r.body["next_offset"]) == (0, 5)
