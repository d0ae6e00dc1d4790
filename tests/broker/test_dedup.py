"""Deduplication for named AMQP 1.0 publishers (an extension, ``amqp_stream.amqp.tracking``): a
link with the attach property ``x-publisher-reference`` whose messages carry a strictly
increasing ``x-publishing-id`` has a message not above the last stored id accepted and not
stored, across links, connections and a broker restart."""

from __future__ import annotations

import pytest
from proton import Message, symbol, ulong
from proton.reactor import LinkOption
from proton.utils import LinkDetached

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, Delivery
from tests.broker.test_publishing import _stored


class Named(LinkOption):
    def __init__(self, reference: object):
        self.reference = reference

    def apply(self, link) -> None:
        link.properties = {symbol("x-publisher-reference"): self.reference}


def message(pid: int | None, text: str) -> bytes:
    ann = {} if pid is None else {symbol("x-publishing-id"): ulong(pid)}
    return Message(body=text, annotations=ann).encode()


def send(c: Client, name: str, reference: object, items: list[tuple[int | None, str]]) -> list:
    sender = c.sender(name, options=Named(reference))
    try:
        return [c.send_bytes(sender, message(pid, text)) for pid, text in items]
    finally:
        sender.close()


def bodies(broker, name: str) -> list[str]:
    """The bodies stored in the stream, in order."""
    out = []
    for data in _stored(broker, name):
        m = Message()
        m.decode(data)
        out.append(m.body)
    return out


def test_a_retried_message_is_accepted_and_not_stored(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        first = send(c, stream_name, "pub-a", [(k, f"m{k}") for k in range(1, 6)])
        assert first == [Delivery.ACCEPTED] * 5
        # a new link (as after a lost connection) resends 3..5, then goes on with 6, 7
        again = send(c, stream_name, "pub-a", [(k, f"retry{k}") for k in range(3, 8)])
        assert again == [Delivery.ACCEPTED] * 5
        # another reference is independent; an unnamed link is never deduplicated
        assert send(c, stream_name, "pub-b", [(1, "b1")]) == [Delivery.ACCEPTED]
        assert c.publish(stream_name, [Message(body="plain")] * 2) == [Delivery.ACCEPTED] * 2
    assert bodies(broker, stream_name) == [
        "m1", "m2", "m3", "m4", "m5", "retry6", "retry7", "b1", "plain", "plain"]


def test_ids_out_of_order_within_a_link_are_duplicates_too(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        out = send(c, stream_name, "pub", [(10, "a"), (10, "dup"), (4, "old"), (11, "b")])
        assert out == [Delivery.ACCEPTED] * 4
    assert bodies(broker, stream_name) == ["a", "b"]


def test_a_named_publishers_message_without_a_publishing_id_is_rejected(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name, options=Named("pub"))
        assert c.send_bytes(sender, message(None, "x")) == Delivery.REJECTED
        assert c.last_delivery.remote.condition.name == "amqp:invalid-field"
        assert c.send_bytes(sender, message(1, "ok")) == Delivery.ACCEPTED
        sender.close()
    assert bodies(broker, stream_name) == ["ok"]


def test_a_bad_reference_refuses_the_link(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        with pytest.raises(LinkDetached, match="x-publisher-reference"):
            c.sender(stream_name, options=Named("x" * 256))


def test_the_last_publishing_id_survives_a_restart(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        with Client(broker.url) as c:
            c.declare("s")
            assert send(c, "s", "pub", [(1, "a"), (2, "b")]) == [Delivery.ACCEPTED] * 2
        broker.stop()
        broker.start()
        with Client(broker.url) as c:
            assert send(c, "s", "pub", [(2, "b again"), (3, "c")]) == [Delivery.ACCEPTED] * 2
        assert bodies(broker, "s") == ["a", "b", "c"]
    finally:
        broker.close()
