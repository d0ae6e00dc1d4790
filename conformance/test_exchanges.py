"""Exchanges and bindings: the management node's requests and publishing through exchanges.

Rules from RabbitMQ 4.2's AMQP 1.0 docs (rabbitmq.com/docs/amqp, "Address v2" and "HTTP over
AMQP") and sources: deps/rabbit/src/rabbit_amqp_management.erl (paths, bodies, status codes,
texts; its tests in deps/rabbitmq_amqp_client/test/management_SUITE.erl) and
deps/rabbit/src/rabbit_amqp_session.erl (target addresses, routing, the outcome of an
unroutable message). Exchange and binding names carry a random part: against a shared broker
each test cleans up what it made.
"""

from __future__ import annotations

import uuid

import pytest
from proton import Delivery, Message

from conformance.amqp import LinkDetached, address

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def exchange(client, request):
    """Declare exchanges (`exchange(type) -> name`); all are deleted after the test."""
    made: list[str] = []

    def _declare(kind: str = "direct", **fields) -> str:
        name = f"conf-x-{request.node.name[:30]}-{uuid.uuid4().hex[:8]}"
        r = client.request("PUT", f"/exchanges/{name}", {"type": kind, **fields})
        assert r.status == 204, r.body
        made.append(name)
        return name

    yield _declare
    for name in made:
        client.request("DELETE", f"/exchanges/{name}")


def _bind(client, source: str, stream: str, key: str = "", arguments: dict | None = None) -> None:
    r = client.request("POST", "/bindings", {"source": source, "destination_queue": stream,
                                             "binding_key": key, "arguments": arguments or {}})
    assert r.status == 204, r.body


def test_declare_is_204_and_redeclare_checks_type_durable_auto_delete_internal(client, exchange):
    """PUT /exchanges/<x> answers 204 with no body, again for an equal redeclare; another type
    is 409 with rabbit_misc's "inequivalent arg" text (management_SUITE
    declare_exchange_inequivalent_fields); arguments other than alternate-exchange are not
    compared (rabbit_exchange:assert_args_equivalence)."""
    x = exchange("direct")
    r = client.request("PUT", f"/exchanges/{x}", {"type": "direct", "durable": True})
    assert (r.status, r.body) == (204, None)
    assert client.request("PUT", f"/exchanges/{x}",
                          {"type": "direct", "arguments": {"any": "thing"}}).status == 204
    r = client.request("PUT", f"/exchanges/{x}", {"type": "fanout"})
    assert (r.status, r.body) == (409, f"inequivalent arg 'type' for exchange '{x}' in vhost "
                                       f"'/': received 'fanout' but current is 'direct'")


def test_delete_is_204_even_when_there_is_none(client, exchange):
    """DELETE /exchanges/<x> is rabbit_exchange:ensure_deleted: 204 whether it existed or not."""
    x = exchange("topic")
    assert client.request("DELETE", f"/exchanges/{x}").status == 204
    assert client.request("DELETE", f"/exchanges/{x}").status == 204


@pytest.mark.parametrize("method, path, status, text", [
    ("PUT", "/exchanges/amq.conformance", 403,
     "exchange 'amq.conformance' in vhost '/' starts with reserved prefix 'amq.'"),
    ("DELETE", "/exchanges/amq.fanout", 403,
     "exchange 'amq.fanout' in vhost '/' starts with reserved prefix 'amq.'"),
    ("DELETE", "/exchanges/", 403, "operation not permitted on the default exchange"),
    ("DELETE", "/exchanges/x%0Dx", 400,
     "Bad name 'x\rx': line feed and carriage return characters not allowed"),
    ("DELETE", "/bindings/src=e1;dstq=q1;invalidkey=k1;args=", 400,
     "bad binding path segment 'src=e1;dstq=q1;invalidkey=k1;args='"),
])
def test_reserved_and_bad_names(client, method, path, status, text):
    """management_SUITE: declare_exchange_amq_prefix, delete_default_exchange,
    delete_exchange_amq_prefix, delete_exchange_carriage_return,
    unbind_bad_binding_path_segment."""
    r = client.request(method, path, {} if method == "PUT" else None)
    assert (r.status, r.body) == (status, text)


def test_predeclared_exchange_redeclared_as_it_is_is_204(client):
    """amq.direct exists in every virtual host: an equal declare succeeds."""
    assert client.request("PUT", "/exchanges/amq.direct", {"type": "direct"}).status == 204


def test_binding_refusals(client, stream, name):
    """management_SUITE bind_missing_queue (400 "no queue ..."), bind_source_default_exchange and
    bind_destination_default_exchange (403)."""
    r = client.request("POST", "/bindings", {"source": "amq.direct", "destination_queue": name,
                                             "binding_key": "k", "arguments": {}})
    assert (r.status, r.body) == (400, f"no queue '{name}' in vhost '/'")
    r = client.request("POST", "/bindings", {"source": "", "destination_queue": stream,
                                             "binding_key": "k", "arguments": {}})
    assert (r.status, r.body) == (403, "operation not permitted on the default exchange")
    r = client.request("POST", "/bindings", {"source": "amq.fanout", "destination_exchange": "",
                                             "binding_key": "k", "arguments": {}})
    assert (r.status, r.body) == (403, "operation not permitted on the default exchange")


def test_bind_get_and_unbind_by_location(client, exchange, stream):
    """POST /bindings 204; GET /bindings?src=..&dstq=..&key=.. lists it with its location
    (/bindings/src=..;dstq=..;key=..;args=, args empty without arguments); DELETE of the
    location 204, and 204 again when it is gone (rabbit_amqp_management)."""
    x = exchange("direct")
    _bind(client, x, stream, "my key")
    r = client.request("GET", f"/bindings?src={x}&dstq={stream}&key=my%20key")
    location = f"/bindings/src={x};dstq={stream};key=my%20key;args="
    assert r.status == 200
    assert r.body == [{"source": x, "destination_queue": stream, "binding_key": "my key",
                       "arguments": {}, "location": location}]
    assert client.request("DELETE", location).status == 204
    assert client.request("GET", f"/bindings?src={x}&dstq={stream}&key=my%20key").body == []
    assert client.request("DELETE", location).status == 204


def test_publish_through_exchanges_stores_in_every_bound_stream(client, exchange, new_stream):
    """/exchanges/<x>/<key> publishes with that key, /exchanges/<x> with the empty key (v2
    addresses: the subject is not read), the anonymous terminus by each message's to; a
    message goes to every stream it routes to, accepted once all have it
    (rabbit_amqp_session)."""
    a, b = new_stream(), new_stream()
    topic, fan = exchange("topic"), exchange("fanout")
    _bind(client, topic, a, "eu.*")
    _bind(client, topic, b, "#.orders")
    _bind(client, fan, a)
    _bind(client, fan, b)
    pub = client.publisher(f"/exchanges/{topic}/eu.orders")
    assert [d.remote_state for d in pub.send([Message(body="both")])] == [Delivery.ACCEPTED]
    pub.close()
    pub = client.publisher(f"/exchanges/{fan}")
    assert [d.remote_state for d in pub.send([Message(body="fan", subject="ignored")])] == [
        Delivery.ACCEPTED]
    pub.close()
    anonymous = client.publisher(None)
    [d] = anonymous.send([Message(address=f"/exchanges/{topic}/eu.x", body="a only")])
    assert d.remote_state == Delivery.ACCEPTED
    anonymous.close()
    assert [r.message.body for r in client.read(a)] == ["both", "fan", "a only"]
    assert [r.message.body for r in client.read(b)] == ["both", "fan"]


def test_unroutable_is_released_and_missing_exchange_rejected(client, exchange, name):
    """An unroutable message is released (process_routing_confirm); on the anonymous terminus
    a missing exchange is rejected with amqp:not-found "no exchange ..." and a missing to with
    amqp:precondition-failed; attaching to a missing exchange is refused with amqp:not-found."""
    x = exchange("direct")
    pub = client.publisher(f"/exchanges/{x}/nobody")
    assert [d.remote_state for d in pub.send([Message(body="lost")])] == [Delivery.RELEASED]
    pub.close()
    anonymous = client.publisher(None)
    [d] = anonymous.send([Message(address=f"/exchanges/{name}", body="x")])
    assert d.remote_state == Delivery.REJECTED
    assert (d.remote.condition.name, d.remote.condition.description) == (
        "amqp:not-found", f"no exchange '{name}' in vhost '/'")
    [d] = anonymous.send([Message(body="no to")])
    assert d.remote_state == Delivery.REJECTED
    assert d.remote.condition.name == "amqp:precondition-failed"
    [d] = anonymous.send([Message(address=address(name), body="no stream")])
    assert d.remote_state == Delivery.RELEASED  # the default exchange routes to nothing
    anonymous.close()
    with pytest.raises(LinkDetached) as info:
        client.publisher(f"/exchanges/{name}/k")
    assert info.value.condition == "amqp:not-found"


@pytest.mark.extension
def test_get_exchange_and_list_all(client, exchange):
    """Extension: GET /exchanges/<x> (200, 404) and GET /exchanges (all, the predeclared ones
    included); RabbitMQ 4.2 has neither."""
    x = exchange("headers")
    r = client.request("GET", f"/exchanges/{x}")
    assert (r.status, r.body["type"], r.body["durable"]) == (200, "headers", True)
    r = client.request("GET", "/exchanges")
    kinds = {e["name"]: e["type"] for e in r.body}
    assert r.status == 200 and kinds[x] == "headers" and kinds["amq.topic"] == "topic"
    client.request("DELETE", f"/exchanges/{x}")
    assert client.request("GET", f"/exchanges/{x}").status == 404


@pytest.mark.extension
def test_list_bindings_by_any_of_source_destination_key(client, exchange, stream):
    """Extension: GET /bindings with only some of src, dstq/dste and key (RabbitMQ answers only
    with src, key and a destination)."""
    x, y = exchange("direct"), exchange("fanout")
    _bind(client, x, stream, "k1")
    _bind(client, y, stream)
    assert {b["source"] for b in client.request("GET", f"/bindings?dstq={stream}").body} == {x, y}
    assert [b["binding_key"] for b in client.request("GET", f"/bindings?src={x}").body] == ["k1"]
