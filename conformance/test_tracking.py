"""Offset tracking and deduplication over AMQP 1.0: this project's extension (docs/broker.md
"Offset tracking and deduplication"; RabbitMQ 4.2 offers both on the stream protocol only, so
every test here is marked `extension`).

A named publisher (attach property `x-publisher-reference`, or the target
`/queues/<s>/publishers/<reference>`) numbers its messages with the message annotation
`x-publishing-id`; a message whose id is not above the last one stored for the reference is
accepted and not stored (RabbitMQ's stream-protocol deduplication). A named consumer (attach
property `x-consumer-name`, or the source `/queues/<s>/consumers/<name>`) starts after the
offset stored for its name and the broker stores the highest offset it accepted (at detach at
the latest). The management node reads and writes both (`/queues/<q>/offsets/<name>`,
`/queues/<q>/sequences/<reference>`, `/queues/<q>/tracking`).
"""

from __future__ import annotations

import pytest
from proton import Delivery, Message, symbol, ulong

from conformance.amqp import LinkDetached, address, offset_spec

pytestmark = [pytest.mark.extension, pytest.mark.timeout(120)]

FIRST = [offset_spec("first")]


def numbered(pid: int | None, body: str) -> Message:
    ann = {} if pid is None else {symbol("x-publishing-id"): ulong(pid)}
    return Message(body=body, annotations=ann)


def publish_as(client, target: str, items, properties: dict | None = None) -> list:
    pub = client.publisher(target, properties=properties)
    try:
        return [d.remote_state for d in pub.send_each([numbered(pid, body) for pid, body in items])]
    finally:
        pub.close()


def reference(ref: str) -> dict:
    return {symbol("x-publisher-reference"): ref}


def consumer_name(name: str) -> dict:
    return {symbol("x-consumer-name"): name}


def bodies(received) -> list:
    return [r.message.body for r in received]


def test_a_named_publishers_retry_is_accepted_and_not_stored(client, stream):
    """Ids not above the last stored one for the reference are accepted, not stored; the
    management node answers the last id (docs/broker.md, extension)."""
    accepted = [Delivery.ACCEPTED] * 3
    assert publish_as(client, address(stream), [(1, "a"), (2, "b"), (3, "c")], reference("r")) == accepted
    assert publish_as(client, address(stream), [(2, "b"), (3, "c"), (4, "d")], reference("r")) == accepted
    # another reference and an unnamed link are independent
    assert publish_as(client, address(stream), [(1, "x")], reference("other")) == [Delivery.ACCEPTED]
    client.publish(stream, [Message(body="plain")])
    assert bodies(client.read(stream)) == ["a", "b", "c", "d", "x", "plain"]
    r = client.request("GET", f"{address(stream)}/sequences/r")
    assert (r.status, r.body) == (200, {"sequence": 4})
    r = client.request("GET", f"{address(stream)}/sequences/unknown")
    assert (r.status, r.body) == (200, {"sequence": 0})


def test_the_target_address_names_a_publisher(client, stream):
    """`/queues/<s>/publishers/<reference>` is the same named publisher as the attach property
    (for clients that cannot set attach properties)."""
    target = f"{address(stream)}/publishers/job%2F1"
    assert publish_as(client, target, [(1, "a"), (2, "b")]) == [Delivery.ACCEPTED] * 2
    assert publish_as(client, address(stream), [(2, "b"), (3, "c")], reference("job/1")) == \
        [Delivery.ACCEPTED] * 2
    assert bodies(client.read(stream)) == ["a", "b", "c"]


def test_a_named_publishers_message_needs_a_publishing_id(client, stream):
    """Without `x-publishing-id` the message is rejected with amqp:invalid-field."""
    pub = client.publisher(address(stream), properties=reference("r"))
    try:
        (d,) = pub.send([numbered(None, "no id")])
        assert d.remote_state == Delivery.REJECTED
        assert d.remote.condition.name == "amqp:invalid-field"
    finally:
        pub.close()


def test_a_named_consumer_resumes_after_what_it_accepted(client, stream):
    """A consumer name starts after its stored offset (its offset spec is for when none is
    stored); only `accepted` moves it; detaching stores it."""
    client.publish(stream, [Message(body=f"m{i}") for i in range(6)], each=True)
    c = client.consumer(address(stream), FIRST, credit=3, properties=consumer_name("app"))
    assert bodies(c.receive(3)) == ["m0", "m1", "m2"]
    c.close()
    r = client.request("GET", f"{address(stream)}/offsets/app")
    assert (r.status, r.body) == (200, {"offset": 2})
    c = client.consumer(address(stream), FIRST, credit=2, properties=consumer_name("app"))
    assert bodies(c.receive(2, settle=Delivery.RELEASED)) == ["m3", "m4"]
    c.close()
    c = client.consumer(address(stream), FIRST, credit=10, properties=consumer_name("app"))
    assert bodies(c.receive(3)) == ["m3", "m4", "m5"]  # released ones were not stored
    c.close()
    # a name never stored starts at its offset spec
    c = client.consumer(address(stream), [offset_spec(4)], credit=10, properties=consumer_name("new"))
    assert bodies(c.receive(2)) == ["m4", "m5"]
    c.close()


def test_the_source_address_names_a_consumer(client, stream):
    """`/queues/<s>/consumers/<name>` is the same named consumer as the attach property; both
    given must agree, else the link is refused."""
    client.publish(stream, [Message(body=f"m{i}") for i in range(4)], each=True)
    source = f"{address(stream)}/consumers/by%20address"
    c = client.consumer(source, FIRST, credit=2)
    assert bodies(c.receive(2)) == ["m0", "m1"]
    c.close()
    c = client.consumer(address(stream), FIRST, credit=10, properties=consumer_name("by address"))
    assert bodies(c.receive(2)) == ["m2", "m3"]
    c.close()
    with pytest.raises(LinkDetached):
        client.consumer(source, FIRST, credit=1, properties=consumer_name("someone else"))


def test_offsets_through_the_management_node(client, stream):
    """PUT `{"offset": n}` stores; PUT `{"spec": ...}` moves a name to where a link with that
    spec starts (the one before it is stored); GET `/queues/<q>/tracking` lists everything."""
    client.publish(stream, [Message(body=f"m{i}") for i in range(5)], each=True)
    base = address(stream)
    assert client.request("GET", f"{base}/offsets/app").status == 404
    assert client.request("PUT", f"{base}/offsets/app", {"offset": ulong(1)}).body == {"offset": 1}
    c = client.consumer(base, FIRST, credit=10, properties=consumer_name("app"))
    assert bodies(c.receive(3, settle=None)) == ["m2", "m3", "m4"]
    c.close()
    r = client.request("PUT", f"{base}/offsets/app", {"spec": ulong(3)})
    assert (r.status, r.body) == (200, {"offset": 2, "resumes_at": 3})
    c = client.consumer(base, FIRST, credit=10, properties=consumer_name("app"))
    assert bodies(c.receive(2, settle=None)) == ["m3", "m4"]
    c.close()
    assert client.request("PUT", f"{base}/offsets/app", {"spec": "last"}).body == {"offset": 3, "resumes_at": 4}
    assert client.request("PUT", f"{base}/offsets/app", {"spec": "nonsense"}).status == 400
    assert publish_as(client, base, [(9, "p")], reference("pub")) == [Delivery.ACCEPTED]
    r = client.request("GET", f"{base}/tracking")
    assert (r.status, r.body) == (200, {"offsets": {"app": 3}, "sequences": {"pub": 9}})
