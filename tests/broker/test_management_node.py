"""The /management node over a real connection (HTTP over AMQP, as RabbitMQ 4.2 answers it)."""

from __future__ import annotations

from proton import Link, Message, symbol
from proton.reactor import AtMostOnce

from tests.broker.amqp import Client, RawFilter, Settled, arrived, offset, queue_address


def test_declare_info_redeclare_conflict_delete(broker, stream_name):
    with Client(broker.url) as c:
        args = {"x-queue-type": "stream", "x-max-age": "7D", "x-stream-filter-size-bytes": 32}
        status, body, _ = c.request("PUT", queue_address(stream_name), {"durable": True, "arguments": args})
        assert status == 201
        assert body["name"] == stream_name and body["type"] == "stream" and body["durable"] is True
        assert body["arguments"] == args
        assert body["first_offset"] == body["next_offset"] == 0
        status, body, _ = c.request("PUT", queue_address(stream_name), {"arguments": args})
        assert status == 200
        status, body, _ = c.request("PUT", queue_address(stream_name),
                                    {"arguments": {"x-queue-type": "stream", "x-max-age": "1D"}})
        assert status == 409
        info = c.info(stream_name)
        for key in ("name", "durable", "auto_delete", "exclusive", "type", "arguments",
                    "message_count", "consumer_count", "leader", "replicas"):
            assert key in info
        assert c.delete(stream_name) == 0
        status, body, _ = c.request("GET", queue_address(stream_name))
        assert status == 404
        status, body, _ = c.request("DELETE", queue_address(stream_name))
        assert status == 200 and body == {"message_count": 0}


def test_offsets_and_counts_in_info(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        for i in range(3):
            sender.send(Message(body=i))
        r = c.conn.create_receiver(queue_address(stream_name), credit=1)
        info = c.info(stream_name)
        assert (info["first_offset"], info["next_offset"], info["message_count"]) == (0, 3, 3)
        assert info["consumer_count"] == 1
        r.close()


def test_bad_requests_get_4xx_and_the_node_keeps_answering(broker, stream_name):
    with Client(broker.url) as c:
        cases = [
            ("PUT", queue_address(stream_name), {"arguments": {"x-queue-type": "classic"}}, 400),
            ("PUT", queue_address(stream_name), {"arguments": {"x-max-age": "10 days"}}, 400),
            ("PUT", queue_address(stream_name), {"arguments": {"x-stream-filter-size-bytes": 300}}, 400),
            ("PUT", queue_address(stream_name), {"arguments": {"x-max-length-bytes": -1}}, 400),
            ("PUT", queue_address(stream_name), {"arguments": {"x-max-length": 10}}, 400),
            ("PUT", queue_address(stream_name), {"exclusive": True}, 400),
            ("PUT", queue_address(stream_name), {"durable": False}, 400),
            ("PUT", queue_address(stream_name), "not a map", 400),
            ("PUT", "/queues/", None, 400),
            ("PUT", "/queues/amq.reserved", None, 403),
            ("PUT", "/queues/bad%zzescape", None, 400),
            ("GET", "/not-a-path", None, 400),
            ("PUT", "/exchanges/e1", {"type": "nope"}, 400),
            ("POST", "/bindings", {"source": "e1"}, 400),
            ("PATCH", queue_address(stream_name), None, 405),
        ]
        for method, path, body, expected in cases:
            status, answer, _ = c.request(method, path, body)
            assert status == expected, (method, path, body, status, answer)
            assert isinstance(answer, str) and answer
        c.declare(stream_name)
        status, answer, _ = c.request("DELETE", queue_address(stream_name) + "/messages")
        assert status == 400 and "purge" in answer


def test_names_are_percent_decoded(broker, stream_name):
    name = stream_name + " ü/é?"
    with Client(broker.url) as c:
        c.declare(name)
        assert c.info(name)["name"] == name
        sender = c.sender(name)
        assert sender.link.remote_target.address == queue_address(name)
        sender.send(Message(body="x"))
        assert c.info(name)["message_count"] == 1


def test_management_request_without_subject_gets_400(broker):
    with Client(broker.url) as c:
        c.request("GET", "/queues/x")  # opens the pair
        sender, receiver = c._mgmt
        sender.send(Message(id="m1", address="/queues/x", reply_to="$me", body=None))
        reply = receiver.receive(timeout=15)
        receiver.accept()
        assert reply.subject == "400"


def test_retention_arguments_reach_storage(broker, stream_name):
    """x-max-length-bytes with small segments: old segments go, first_offset moves on."""
    with Client(broker.url) as c:
        c.declare(stream_name, {"x-queue-type": "stream", "x-max-length-bytes": 20_000,
                                "x-stream-max-segment-size-bytes": 5_000})
        sender = c.sender(stream_name)
        for _i in range(60):
            sender.send(Message(body=b"x" * 1000))
        info = c.info(stream_name)
        assert info["next_offset"] == 60
        assert 0 < info["first_offset"] < 60
        assert info["message_count"] == info["next_offset"] - info["first_offset"]
        r = c.conn.create_receiver(queue_address(stream_name), credit=100,
                                   options=[RawFilter([(symbol("o"), offset("first"))])])
        first = r.receive(timeout=15)
        assert first.annotations["x-stream-offset"] == info["first_offset"]


def test_replies_come_settled_to_a_reply_link_that_asked_for_it(broker):
    """RabbitMQ's management clients attach the pair with ``snd-settle-mode`` settled and never
    settle a reply: an unsettled one would stay in the broker's engine as long as the link."""
    with Client(broker.url) as c:
        name = "settled-pair"
        sender = c.conn.create_sender("/management", name=name, options=[AtMostOnce()])
        receiver = c.conn.create_receiver("/management", name=name, credit=10,
                                          options=[Settled()])
        assert receiver.link.remote_snd_settle_mode == Link.SND_SETTLED
        for k in range(3):
            sender.send(Message(id=f"m{k}", address="/queues/x", subject="GET", reply_to="$me"))
        replies = arrived(receiver, 3)
        assert [m.correlation_id for m, _ in replies] == ["m0", "m1", "m2"]
        assert all(d.settled for _, d in replies)
