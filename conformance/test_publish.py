"""Publishing: outcomes, what is stored, and what a delivery carries back.

Rules from amqp-interface.md "Publishing" and "Consuming" (x-stream-offset), the AMQP 1.0
spec (messaging §3.2 sections, §3.4 outcomes) and RabbitMQ's stream docs (what is stored).
"""

from __future__ import annotations

import uuid

import pytest
from proton import Delivery, Message, symbol, timestamp, ubyte, uint, ulong

from conformance.amqp import LinkDetached, address

pytestmark = pytest.mark.timeout(120)


def test_unsettled_publish_is_accepted(client, stream):
    """Each message of an unsettled publisher gets the `accepted` outcome once stored
    (amqp-interface.md "Publishing": Outcome)."""
    deliveries = client.publish(stream, [Message(body=f"m{i}") for i in range(50)])
    assert [d.remote_state for d in deliveries] == [Delivery.ACCEPTED] * 50
    assert [r.message.body for r in client.read(stream)] == [f"m{i}" for i in range(50)]


def test_presettled_publish_is_stored(client, stream):
    """Pre-settled publishers are allowed (fire and forget) (amqp-interface.md "Publishing")."""
    pub = client.publisher(address(stream), settled=True)
    pub.send([Message(body=f"p{i}") for i in range(20)])
    pub.close()
    # a confirmed message after them proves they were read first (same link order)
    client.publish(stream, [Message(body="last")])
    bodies = [r.message.body for r in client.read(stream)]
    assert bodies == [f"p{i}" for i in range(20)] + ["last"]


def test_publisher_attach_echoes_target_address(client, stream):
    """The attach reply echoes the exact target address (amqp-interface.md "Addresses")."""
    pub = client.publisher(address(stream))
    assert pub.link.remote_target.address == address(stream)
    assert pub.link.credit > 0
    pub.close()


def test_publisher_to_missing_stream_is_refused_not_found(client, name):
    """Attaching to an unknown stream refuses the link with amqp:not-found
    (amqp-interface.md "Addresses")."""
    with pytest.raises(LinkDetached) as info:
        client.publisher(address(name))
    assert info.value.condition == "amqp:not-found"


def test_delivery_annotations_are_not_stored(client, stream):
    """Delivery annotations are for one hop and are not stored (amqp-interface.md
    "Publishing": what is stored; AMQP 1.0 messaging §3.2.2)."""
    m = Message(body="da", instructions={symbol("x-opt-hop"): "only this hop"})
    client.publish(stream, [m])
    (got,) = client.read(stream)
    assert not got.message.instructions
    assert got.message.body == "da"


def test_message_sections_round_trip(client, stream):
    """Header, message annotations, properties, application properties and body come
    back unchanged (proton's Message has no footer API), plus x-stream-offset (amqp-interface.md "Consuming": the rest of the
    message unchanged)."""
    mid = uuid.uuid4()
    m = Message(
        body={"k": [1, 2.5, "s"]}, durable=True, priority=7, ttl=60.0, first_acquirer=True,
        id=mid, correlation_id=ulong(42), subject="subj", reply_to="/queues/r", content_type="text/x",
        content_encoding="enc", group_id="g", group_sequence=9, reply_to_group_id="rg",
        creation_time=1_700_000_000.5, expiry_time=1_800_000_000.0,
        annotations={symbol("x-custom"): "ann", symbol("x-n"): 5},
        properties={"s": "v", "i": 3, "u": uint(4), "b": True, "bin": b"\x00\x01", "ts": timestamp(1234)},
    )
    client.publish(stream, [m])
    (got,) = client.read(stream)
    g = got.message
    assert g.body == m.body
    assert (g.durable, g.priority, g.ttl, g.first_acquirer) == (True, 7, 60.0, True)
    assert (g.id, g.correlation_id, g.subject, g.reply_to) == (mid, 42, "subj", "/queues/r")
    assert (g.content_type, g.content_encoding, g.group_id, g.group_sequence, g.reply_to_group_id) == \
        ("text/x", "enc", "g", 9, "rg")
    assert (g.creation_time, g.expiry_time) == (1_700_000_000.5, 1_800_000_000.0)
    assert g.properties == m.properties
    assert type(g.properties["u"]) is uint and type(g.properties["ts"]) is timestamp
    assert g.annotations["x-custom"] == "ann" and g.annotations["x-n"] == 5


def test_deliveries_carry_x_stream_offset_as_long(client, stream):
    """Every delivery has message annotation x-stream-offset, an AMQP long, dense from 0 for
    a fresh stream of plain publishes (amqp-interface.md "Consuming"; RabbitMQ streams docs)."""
    client.publish(stream, [Message(body=str(i)) for i in range(10)])
    got = client.read(stream)
    assert [r.offset for r in got] == list(range(10))
    assert all(type(r.offset) is int for r in got)  # proton decodes ulong as proton.ulong


@pytest.mark.parametrize("value", [42, b"bytes", symbol("sym"), ubyte(1)], ids=repr)
def test_non_string_filter_value_never_crashes(client, stream, value):
    """A filter value that is not a string is a client error: rejected with
    amqp:invalid-field or stored as unfiltered; the link and the broker keep working
    (amqp-interface.md "Publishing": Filter value)."""
    pub = client.publisher(address(stream))
    (d,) = pub.send([Message(body="odd", annotations={symbol("x-stream-filter-value"): value})])
    assert d.remote_state in (Delivery.ACCEPTED, Delivery.REJECTED)
    if d.remote_state == Delivery.REJECTED:
        assert d.remote.condition is None or d.remote.condition.name == "amqp:invalid-field"
    (ok,) = pub.send([Message(body="fine")])
    assert ok.remote_state == Delivery.ACCEPTED
    pub.close()
    bodies = [r.message.body for r in client.read(stream)]
    assert bodies[-1] == "fine"
    assert bodies in (["fine"], ["odd", "fine"])


def test_publish_after_stream_deleted_is_not_accepted(client, connect, new_stream):
    """A message that cannot be stored because the stream was deleted is not accepted: it is
    rejected with an error condition, or the broker detaches the publisher with an error
    (amqp-interface.md "Publishing": Outcome; RabbitMQ detaches with amqp:resource-deleted)."""
    name = new_stream()
    pub = client.publisher(address(name))
    (ok,) = pub.send([Message(body="stored")])
    assert ok.remote_state == Delivery.ACCEPTED
    admin = connect()
    assert admin.delete(name).status == 200
    try:
        (d,) = pub.send([Message(body="too late")], timeout=10)
    except LinkDetached as exc:
        assert exc.condition is not None
    else:
        assert d.remote_state == Delivery.REJECTED
        assert d.remote.condition is not None
    # the connection still works for everything else
    other = new_stream()
    client.publish(other, [Message(body="fine")])
    assert [r.message.body for r in client.read(other)] == ["fine"]
