"""The section-order rule end to end (``amqp_stream.wire``): a message whose sections come in
another order (the Node amqp10 client sends properties before the message annotations) is
stored in AMQP order, so stage 1 finds its filter value, stage 2 reads it, and its deliveries
carry ``x-stream-offset``; one with a section twice is rejected, the section named."""

from __future__ import annotations

from proton import Message, symbol

from amqp_stream.wire import split_sections
from tests.broker.amqp import SQL, VALUES, Client, Delivery, Described, annotations, offset

OFFSET = symbol("rabbitmq:stream-offset-spec")


def out_of_order(value: str, i: int) -> bytes:
    """A message as the Node amqp10 client lays it out: header, properties, annotations, ..."""
    m = Message(durable=True, subject="orders", properties={"region": value, "i": i},
                annotations={symbol("x-stream-filter-value"): value}, body=f"m{i}")
    b = bytes(m.encode())
    parts = {code: b[start:end] for code, start, _, end in split_sections(b)}
    assert list(parts) == [0x70, 0x72, 0x73, 0x74, 0x77]
    return b"".join(parts[c] for c in (0x70, 0x73, 0x72, 0x74, 0x77))


def test_out_of_order_sections_are_filtered_and_delivered_with_their_offset(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        for i, value in enumerate(["eu", "us", "eu", "us"]):  # one chunk each (outcome waited)
            assert c.send_bytes(sender, out_of_order(value, i)) == Delivery.ACCEPTED
        sender.close()
        entries = {OFFSET: offset("first"), VALUES: Described(VALUES, "eu"),
                   SQL: Described(SQL, "region = 'eu' AND p.subject = 'orders'")}
        receiver = c.receiver(stream_name, entries)
        got = c.receive_all(receiver, 2)
        # stage 1 skipped the "us" chunks: each chunk's Bloom filter holds the value it was sent
        assert [m.properties["i"] for m in got] == [0, 2]
        for m in got:
            ann = annotations(m)
            assert ann["x-stream-filter-value"] == "eu"
            assert type(ann["x-stream-offset"]) is int  # one annotations section, as proton reads
            assert m.subject == "orders" and m.durable
        assert [annotations(m)["x-stream-offset"] for m in got] == [0, 2]


def test_a_duplicated_section_is_rejected_naming_it(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        b = out_of_order("eu", 0)
        ma = [b[s:e] for code, s, _, e in split_sections(b) if code == 0x72][0]
        assert c.send_bytes(sender, ma + b) == Delivery.REJECTED
        condition = c.last_delivery.remote.condition
        assert condition.name == "amqp:decode-error"
        assert "second message-annotations section" in condition.description
        assert c.send_bytes(sender, b) == Delivery.ACCEPTED  # the link goes on
        assert c.info(stream_name)["message_count"] == 1
