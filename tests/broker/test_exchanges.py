"""Exchanges and bindings over AMQP 1.0, against a real broker process with proton: the
``/management`` requests as RabbitMQ 4.2's rabbit_amqp_management answers them (codes and
texts), publishing to ``/exchanges/...`` targets and ``to`` addresses as rabbit_amqp_session
routes them, and the definitions surviving a SIGKILL."""

from __future__ import annotations

import uuid

import pytest
from proton import Message, symbol
from proton.utils import LinkDetached

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import OFFSET, Client, Delivery, offset


def _name(stream_name: str, suffix: str) -> str:
    return f"{stream_name}-{suffix}"


def test_declare_get_delete_exchange_as_rabbitmq(broker, stream_name):
    x = _name(stream_name, "x")
    with Client(broker.url) as c:
        assert c.request("PUT", f"/exchanges/{x}", {"type": "topic"})[:2] == (204, None)
        assert c.request("PUT", f"/exchanges/{x}", {"type": "topic", "durable": True})[:2] == (204, None)
        # other arguments are not compared, alternate-exchange is (rabbit_exchange)
        assert c.request("PUT", f"/exchanges/{x}", {"type": "topic", "arguments": {"a": 1}})[0] == 204
        assert c.request("PUT", f"/exchanges/{x}", {"type": "fanout"})[:2] == (
            409, f"inequivalent arg 'type' for exchange '{x}' in vhost '/': received 'fanout' "
                 f"but current is 'topic'")
        assert c.request("PUT", f"/exchanges/{x}", {"type": "topic", "auto_delete": True})[:2] == (
            409, f"inequivalent arg 'auto_delete' for exchange '{x}' in vhost '/': received "
                 f"'true' but current is 'false'")
        assert c.request("PUT", f"/exchanges/{x}",
                         {"type": "topic", "arguments": {"alternate-exchange": "ae"}})[0] == 409
        status, body, _ = c.request("GET", f"/exchanges/{x}")
        assert (status, body) == (200, {"name": x, "type": "topic", "durable": True,
                                        "auto_delete": False, "internal": False, "arguments": {}})
        status, listing, _ = c.request("GET", "/exchanges")
        names = {e["name"]: e["type"] for e in listing}
        assert status == 200 and names[x] == "topic" and names[""] == "direct"
        assert names["amq.fanout"] == "fanout" and names["amq.headers"] == "headers"
        assert c.request("DELETE", f"/exchanges/{x}")[:2] == (204, None)
        assert c.request("DELETE", f"/exchanges/{x}")[:2] == (204, None)  # ensure_deleted
        assert c.request("GET", f"/exchanges/{x}")[:2] == (
            404, f"exchange '{x}' in vhost '/' not found")


@pytest.mark.parametrize("method, path, body, expected", [
    ("PUT", "/exchanges/amq.mine", {}, (403, "exchange 'amq.mine' in vhost '/' starts with "
                                            "reserved prefix 'amq.'")),
    ("PUT", "/exchanges/amq.direct", {"type": "direct"}, (204, None)),  # exists as asked
    ("PUT", "/exchanges/amq.direct", {"type": "fanout"}, (409, None)),
    ("PUT", "/exchanges/", {}, (403, "operation not permitted on the default exchange")),
    ("PUT", "/exchanges/e-bad-type", {"type": "nope"}, (400, "unknown exchange type 'nope'")),
    ("PUT", "/exchanges/e-bad-prop", {"colour": "red"}, (400, None)),
    ("PUT", "/exchanges/a%0Ab", {}, (400, "Bad name 'a\nb': line feed and carriage return "
                                          "characters not allowed")),
    ("DELETE", "/exchanges/amq.fanout", None, (403, "exchange 'amq.fanout' in vhost '/' starts "
                                                    "with reserved prefix 'amq.'")),
    ("DELETE", "/exchanges/", None, (403, "operation not permitted on the default exchange")),
    ("DELETE", "/exchanges/x%0Dx", None, (400, "Bad name 'x\rx': line feed and carriage return "
                                                "characters not allowed")),
    ("DELETE", "/bindings/src=e1;dstq=q1;invalidkey=k1;args=", None,
     (400, "bad binding path segment 'src=e1;dstq=q1;invalidkey=k1;args='")),
    ("POST", "/bindings", {"source": "", "destination_queue": "q", "binding_key": "k",
                           "arguments": {}}, (403, "operation not permitted on the default exchange")),
    ("POST", "/bindings", {"source": "amq.fanout", "destination_exchange": "", "binding_key": "k",
                           "arguments": {}}, (403, "operation not permitted on the default exchange")),
    ("POST", "/bindings", {"source": "amq.direct", "destination_queue": "no-such-stream",
                           "binding_key": "k", "arguments": {}},
     (400, "no queue 'no-such-stream' in vhost '/'")),
    ("POST", "/bindings", {"source": "no-such-x", "destination_exchange": "amq.fanout",
                           "binding_key": "k", "arguments": {}},
     (400, "no exchange 'no-such-x' in vhost '/'")),
    ("POST", "/bindings", {"source": "amq.direct", "binding_key": "k"}, (400, None)),
    ("GET", "/bindings?src=amq.direct&key=k", None,
     (400, "missing 'dste' or 'dstq' in query: {'src': 'amq.direct', 'key': 'k'}")),
])
def test_refusals_as_rabbitmq(broker, method, path, body, expected):
    """rabbitmq_amqp_client's management_SUITE cases, as far as a stream broker has them."""
    with Client(broker.url) as c:
        status, answer, _ = c.request(method, path, body)
        assert status == expected[0], (status, answer)
        if expected[1] is not None:
            assert answer == expected[1]
        elif status >= 400:
            assert isinstance(answer, str) and answer


def test_bind_list_unbind(broker, stream_name):
    x, y = _name(stream_name, "x"), _name(stream_name, "y")
    with Client(broker.url) as c:
        c.declare(stream_name)
        assert c.request("PUT", f"/exchanges/{x}", {"type": "direct"})[0] == 204
        assert c.request("PUT", f"/exchanges/{y}", {"type": "fanout"})[0] == 204
        for key in ("k 1", "k2"):
            assert c.request("POST", "/bindings", {
                "source": x, "destination_queue": stream_name, "binding_key": key,
                "arguments": {}})[:2] == (204, None)
        assert c.request("POST", "/bindings", {  # the same again: no second binding
            "source": x, "destination_queue": stream_name, "binding_key": "k2",
            "arguments": {}})[0] == 204
        assert c.request("POST", "/bindings", {
            "source": y, "destination_exchange": x, "binding_key": "", "arguments": {"a": 1}})[0] == 204
        status, found, _ = c.request("GET", f"/bindings?src={x}&dstq={stream_name}&key=k+1")
        assert status == 200 and found == [{
            "source": x, "destination_queue": stream_name, "binding_key": "k 1", "arguments": {},
            "location": f"/bindings/src={x};dstq={stream_name};key=k%201;args="}]
        # our extension: any subset of source, destination and key
        assert len(c.request("GET", f"/bindings?dstq={stream_name}")[1]) == 2
        [e2e] = c.request("GET", f"/bindings?src={y}")[1]
        assert e2e["destination_exchange"] == x and e2e["location"].startswith(
            f"/bindings/src={y};dste={x};key=;args=") and not e2e["location"].endswith("args=")
        assert c.request("DELETE", found[0]["location"])[:2] == (204, None)
        assert c.request("DELETE", found[0]["location"])[:2] == (204, None)  # none: still 204
        assert [b["binding_key"] for b in c.request("GET", f"/bindings?dstq={stream_name}")[1]] == ["k2"]
        assert c.request("DELETE", e2e["location"])[0] == 204
        assert c.request("GET", f"/bindings?src={y}")[1] == []
        # a stream deleted on its own takes its bindings with it (as RabbitMQ's queue)
        c.delete(stream_name)
        assert c.request("GET", f"/bindings?src={x}")[1] == []
        # an exchange deleted takes its bindings, both ways
        c.declare(stream_name)
        c.request("POST", "/bindings", {"source": y, "destination_exchange": x, "binding_key": "",
                                        "arguments": {}})
        c.request("POST", "/bindings", {"source": x, "destination_queue": stream_name,
                                        "binding_key": "k", "arguments": {}})
        assert c.request("DELETE", f"/exchanges/{x}")[0] == 204
        assert c.request("GET", f"/bindings?src={y}")[1] == []
        assert c.request("GET", f"/bindings?dstq={stream_name}")[1] == []
        c.request("DELETE", f"/exchanges/{y}")


def _bind(c: Client, source: str, stream: str, key: str = "", arguments: dict | None = None) -> None:
    status, answer, _ = c.request("POST", "/bindings", {
        "source": source, "destination_queue": stream, "binding_key": key,
        "arguments": arguments or {}})
    assert status == 204, answer


def _bodies(c: Client, stream: str, count: int) -> list:
    r = c.receiver(stream, [(OFFSET, offset("first"))], credit=count + 10)
    try:
        return [r.receive(timeout=15).body for _ in range(count)]
    finally:
        r.close()


def test_publish_to_exchanges_routes_to_every_bound_stream(broker, stream_name):
    a, b, x, t, h = (_name(stream_name, s) for s in ("a", "b", "fan", "top", "hdr"))
    with Client(broker.url) as c:
        c.declare(a)
        c.declare(b)
        c.request("PUT", f"/exchanges/{x}", {"type": "fanout"})
        c.request("PUT", f"/exchanges/{t}", {"type": "topic"})
        c.request("PUT", f"/exchanges/{h}", {"type": "headers"})
        _bind(c, x, a)
        _bind(c, x, b)
        _bind(c, t, a, "eu.*")
        _bind(c, t, b, "#.orders")
        _bind(c, h, b, arguments={"x-match": "any", "region": "eu"})
        fan = c.conn.create_sender(f"/exchanges/{x}")
        assert c.send_bytes(fan, Message(body="both").encode()) == Delivery.ACCEPTED
        top = c.conn.create_sender(f"/exchanges/{t}/eu.orders")  # both bindings match
        assert c.send_bytes(top, Message(body="eu.orders").encode()) == Delivery.ACCEPTED
        nowhere = c.conn.create_sender(f"/exchanges/{t}/us.other")
        assert c.send_bytes(nowhere, Message(body="lost").encode()) == Delivery.RELEASED
        # /exchanges/<x> routes with the empty key (v2 addresses): the subject is not read
        keyless = c.conn.create_sender(f"/exchanges/{t}")
        assert c.send_bytes(keyless, Message(subject="eu.x", body="no").encode()) == Delivery.RELEASED
        _bind(c, h, a, arguments={"x-match": "all-with-x", "x-opt-tier": "gold"})
        hdr = c.conn.create_sender(f"/exchanges/{h}")
        gold = Message(annotations={symbol("x-opt-tier"): "gold"}, body="gold")
        assert c.send_bytes(hdr, gold.encode()) == Delivery.ACCEPTED  # annotations match too
        assert c.send_bytes(hdr, Message(properties={"region": "eu"}, body="hdr").encode()) == Delivery.ACCEPTED
        assert c.send_bytes(hdr, Message(properties={"region": "us"}, body="no").encode()) == Delivery.RELEASED
        anon = c.conn.create_sender(None, name="anon-" + stream_name)
        to = f"/exchanges/{t}/x.orders"
        assert c.send_bytes(anon, Message(address=to, body="anon").encode()) == Delivery.ACCEPTED
        default = c.conn.create_sender("/exchanges/amq.fanout")
        assert c.send_bytes(default, Message(body="unbound").encode()) == Delivery.RELEASED
        assert c.info(a)["message_count"] == 3 and c.info(b)["message_count"] == 4
        assert _bodies(c, a, 3) == ["both", "eu.orders", "gold"]
        assert _bodies(c, b, 4) == ["both", "eu.orders", "hdr", "anon"]
        for e in (x, t, h):
            c.request("DELETE", f"/exchanges/{e}")


def test_many_messages_fanned_out_all_accepted_and_stored(broker, stream_name):
    """Deliveries routed to 3 streams are accepted once each, after every stream has them."""
    x = _name(stream_name, "x")
    streams = [_name(stream_name, str(i)) for i in range(3)]
    with Client(broker.url) as c:
        c.request("PUT", f"/exchanges/{x}", {"type": "fanout"})
        for s in streams:
            c.declare(s)
            _bind(c, x, s)
        sender = c.conn.create_sender(f"/exchanges/{x}")
        deliveries = [sender.send(Message(body=i)) for i in range(500)]
        c.conn.wait(lambda: all(d.settled for d in deliveries), timeout=30, msg="outcomes")
        assert {d.remote_state for d in deliveries} == {Delivery.ACCEPTED}
        for s in streams:
            assert c.info(s)["message_count"] == 500
        c.request("DELETE", f"/exchanges/{x}")
    assert "mailbox call" not in broker.log_text()  # no settlement failed on the loop


def test_links_to_missing_or_deleted_exchanges(broker, stream_name):
    x = _name(stream_name, "x")
    with Client(broker.url) as c:
        with pytest.raises(LinkDetached, match="no exchange 'no-such-x' in vhost '/'"):
            c.conn.create_sender("/exchanges/no-such-x/k")
        with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
            c.conn.create_sender("/exchanges/amq.rabbitmq.trace")  # internal
        c.declare(stream_name)
        c.request("PUT", f"/exchanges/{x}", {"type": "direct"})
        _bind(c, x, stream_name, "k")
        sender = c.conn.create_sender(f"/exchanges/{x}/k")
        assert c.send_bytes(sender, Message(body=1).encode()) == Delivery.ACCEPTED
        assert c.request("DELETE", f"/exchanges/{x}")[0] == 204  # in use: deleted all the same
        link = sender.link
        dlv = link.delivery(uuid.uuid4().bytes)
        link.send(Message(body=2).encode())
        link.advance()
        with pytest.raises(LinkDetached, match=f"amqp:not-found.*no exchange '{x}'"):
            c.conn.wait(lambda: False, timeout=15, msg="the detach")
        assert dlv.settled and dlv.remote_state == Delivery.RELEASED
        assert c.info(stream_name)["message_count"] == 1


def test_definitions_survive_sigkill(tmp_path):
    with BrokerProcess(tmp_path / "data") as proc:
        with Client(proc.url) as c:
            c.declare("s")
            assert c.request("PUT", "/exchanges/orders", {"type": "topic"})[0] == 204
            _bind(c, "orders", "s", "eu.#")
        proc.kill()
        proc.start()
        with Client(proc.url) as c:
            assert c.request("GET", "/exchanges/orders")[1]["type"] == "topic"
            [b] = c.request("GET", "/bindings?src=orders")[1]
            assert (b["destination_queue"], b["binding_key"]) == ("s", "eu.#")
            sender = c.conn.create_sender("/exchanges/orders/eu.paris")
            assert c.send_bytes(sender, Message(body=1).encode()) == Delivery.ACCEPTED
            assert c.info("s")["message_count"] == 1


def test_super_stream_over_amqp_and_a_partition_deleted_on_its_own(broker, stream_name):
    """A super stream made over the stream protocol is a direct exchange to AMQP 1.0:
    /exchanges/<ss>/<key> publishes to the partition bound with that key. Deleting one
    partition stream on its own (AMQP DELETE /queues/<p>, as RabbitMQ allows) drops its binding
    only: the exchange and the other partitions stay, and its key routes nowhere (released)."""
    from amqp_stream.client.stream import StreamClient

    ss = stream_name + "-ss"
    with StreamClient(broker.stream_url) as sc:
        sc.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["0", "1"])
    with Client(broker.url) as c:
        assert c.request("GET", f"/exchanges/{ss}")[1]["arguments"] == {"x-super-stream": True}
        sender = c.conn.create_sender(f"/exchanges/{ss}/1")
        assert c.send_bytes(sender, Message(body="p1").encode()) == Delivery.ACCEPTED
        assert c.info(f"{ss}-1")["message_count"] == 1 and c.info(f"{ss}-0")["message_count"] == 0
        assert c.delete(f"{ss}-1") == 1
        assert [b["destination_queue"] for b in c.request("GET", f"/bindings?src={ss}")[1]] == [
            f"{ss}-0"]
        assert c.send_bytes(sender, Message(body="gone").encode()) == Delivery.RELEASED
    with StreamClient(broker.stream_url) as sc:
        sc.delete_super_stream(ss)


def test_x_cc_adds_routing_keys(broker, stream_name):
    """The x-cc message annotation (a list of strings) routes with more keys, as
    rabbit_amqp_session's lookup_routing_key; another value is amqp:invalid-field: the message
    rejected on the anonymous terminus, released and the link detached on an exchange link."""
    a, b, x = (_name(stream_name, s) for s in ("a", "b", "x"))
    with Client(broker.url) as c:
        c.declare(a)
        c.declare(b)
        c.request("PUT", f"/exchanges/{x}", {"type": "direct"})
        _bind(c, x, a, "k1")
        _bind(c, x, b, "k2")
        sender = c.conn.create_sender(f"/exchanges/{x}/k1")
        cc = Message(body="both", annotations={symbol("x-cc"): ["k2", "k1"]})
        assert c.send_bytes(sender, cc.encode()) == Delivery.ACCEPTED
        assert (c.info(a)["message_count"], c.info(b)["message_count"]) == (1, 1)
        anon = c.conn.create_sender(None, name="anon-" + stream_name)
        bad = Message(address=f"/exchanges/{x}/k1", body="bad", annotations={symbol("x-cc"): "k2"})
        assert c.send_bytes(anon, bad.encode()) == Delivery.REJECTED
        assert c.last_delivery.remote.condition.name == "amqp:invalid-field"
        link = sender.link
        dlv = link.delivery(uuid.uuid4().bytes)
        link.send(Message(body="bad", annotations={symbol("x-cc"): 7}).encode())
        link.advance()
        with pytest.raises(LinkDetached, match="amqp:invalid-field.*x-cc"):
            c.conn.wait(lambda: False, timeout=15, msg="the detach")
        assert dlv.settled and dlv.remote_state == Delivery.RELEASED
        assert (c.info(a)["message_count"], c.info(b)["message_count"]) == (1, 1)
        c.request("DELETE", f"/exchanges/{x}")


def test_alternate_exchange_takes_what_routes_nowhere(broker, stream_name):
    """As rabbit_exchange:route1: a message its exchange routes nowhere goes to the exchange's
    alternate-exchange, and on to that one's own; a cycle of alternates ends (released); an
    exchange that routes to another exchange has routed, even if that one routes nowhere."""
    a, b, x, ae1, ae2, c1, c2, y, z = (_name(stream_name, s) for s in (
        "a", "b", "x", "ae1", "ae2", "c1", "c2", "y", "z"))
    with Client(broker.url) as c:
        c.declare(a)
        c.declare(b)
        c.request("PUT", f"/exchanges/{ae2}", {"type": "fanout"})
        c.request("PUT", f"/exchanges/{ae1}", {"type": "direct",
                                                "arguments": {"alternate-exchange": ae2}})
        c.request("PUT", f"/exchanges/{x}", {"type": "direct",
                                              "arguments": {"alternate-exchange": ae1}})
        _bind(c, x, a, "k")
        _bind(c, ae2, b)
        sender = c.conn.create_sender(f"/exchanges/{x}/k")
        assert c.send_bytes(sender, Message(body="routed").encode()) == Delivery.ACCEPTED
        other = c.conn.create_sender(f"/exchanges/{x}/other")
        assert c.send_bytes(other, Message(body="via ae2").encode()) == Delivery.ACCEPTED
        assert (c.info(a)["message_count"], c.info(b)["message_count"]) == (1, 1)
        assert _bodies(c, b, 1) == ["via ae2"]
        _bind(c, ae1, a, "other")  # now the first alternate routes it: ae2 is not asked
        assert c.send_bytes(other, Message(body="via ae1").encode()) == Delivery.ACCEPTED
        assert (c.info(a)["message_count"], c.info(b)["message_count"]) == (2, 1)
        c.request("PUT", f"/exchanges/{c1}", {"type": "fanout", "arguments": {"alternate-exchange": c2}})
        c.request("PUT", f"/exchanges/{c2}", {"type": "fanout", "arguments": {"alternate-exchange": c1}})
        cycle = c.conn.create_sender(f"/exchanges/{c1}")
        assert c.send_bytes(cycle, Message(body="lost").encode()) == Delivery.RELEASED
        c.request("PUT", f"/exchanges/{z}", {"type": "fanout"})
        c.request("PUT", f"/exchanges/{y}", {"type": "fanout", "arguments": {"alternate-exchange": ae2}})
        status, answer, _ = c.request("POST", "/bindings", {
            "source": y, "destination_exchange": z, "binding_key": "", "arguments": {}})
        assert status == 204, answer
        to_z = c.conn.create_sender(f"/exchanges/{y}")
        assert c.send_bytes(to_z, Message(body="lost too").encode()) == Delivery.RELEASED
        assert (c.info(a)["message_count"], c.info(b)["message_count"]) == (2, 1)
        for e in (x, ae1, ae2, c1, c2, y, z):
            c.request("DELETE", f"/exchanges/{e}")
