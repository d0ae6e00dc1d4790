"""Link credit and flow: filtered-out messages use no credit, fairness, the end of the stream.

Rules from amqp-interface.md "Consuming" (credit, fairness, waiting at the end, drain,
dispositions), the AMQP 1.0 spec (transport §2.6.7 flow control, drain) and RabbitMQ
(rabbitmq.com/docs/stream-filtering: filtered messages do not count against credit;
rabbit_stream_queue yields after 200 non-matching messages).
"""

from __future__ import annotations

import pytest
from proton import Delivery, Message, symbol

from conformance.amqp import address, app_properties_filter, offset_spec, sql_filter, stream_filter

pytestmark = pytest.mark.timeout(180)


def bodies(received) -> list:
    return [r.message.body for r in received]


def test_sql_filtered_messages_use_no_credit(client, stream):
    """With credit 3, the first 3 matching messages arrive although non-matching ones come
    between them; credit is then used up (amqp-interface.md: a dropped message uses no credit)."""
    client.publish(stream, [Message(body=i, properties={"red": i % 10 == 0}) for i in range(100)])
    c = client.consumer(address(stream), [offset_spec("first"), sql_filter("red")], credit=3)
    assert bodies(c.receive(3)) == [0, 10, 20]
    assert c.link.credit == 0
    c.flow(2)
    assert bodies(c.receive(2)) == [30, 40]
    assert bodies(c.drain(10)) == [50, 60, 70, 80, 90]
    c.close()
    assert bodies(client.read(stream, [sql_filter("red")])) == list(range(0, 100, 10))


def test_stage1_skipped_chunks_use_no_credit(client, stream):
    """Chunks skipped by stage 1 use no credit (amqp-interface.md "Consuming")."""
    msgs = []
    for i in range(40):
        v = "hit" if i % 8 == 0 else f"miss-{i}"
        msgs.append(Message(body=i, annotations={symbol("x-stream-filter-value"): v},
                            properties={"v": v}))
    client.publish(stream, msgs, each=True)
    c = client.consumer(address(stream), [offset_spec("first"), stream_filter("hit"),
                                          sql_filter("v = 'hit'")], credit=2)
    assert bodies(c.receive(2)) == [0, 8]
    assert c.link.credit == 0
    c.flow(3)
    assert bodies(c.receive(3)) == [16, 24, 32]


def test_offset_start_inside_chunk_uses_no_credit(client, stream):
    """Records below a start offset inside a chunk are dropped without using credit
    (amqp-interface.md "Consuming")."""
    client.publish(stream, [Message(body=i) for i in range(50)])
    c = client.consumer(address(stream), [offset_spec(40)], credit=2)
    assert [r.offset for r in c.receive(2)] == [40, 41]
    assert c.link.credit == 0


def test_waits_at_end_and_wakes_on_new_messages(client, stream):
    """At the end of the stream the consumer keeps its credit and waits; a new message wakes it
    (amqp-interface.md "Consuming")."""
    client.publish(stream, [Message(body="a"), Message(body="b")])
    c = client.consumer(address(stream), [offset_spec("first")], credit=5)
    assert bodies(c.receive(2)) == ["a", "b"]
    client.pump(0.3)
    assert c.take() == []
    assert c.link.credit == 3
    client.publish(stream, [Message(body="c")])
    assert bodies(c.receive(1)) == ["c"]
    client.publish(stream, [Message(body="d"), Message(body="e")])
    assert bodies(c.receive(2)) == ["d", "e"]
    assert c.link.credit == 0


def test_filtered_tail_wakes_only_for_matches(client, stream):
    """A filtered consumer waiting at the end gets only the new matching message."""
    c = client.consumer(address(stream), [offset_spec("next"), sql_filter("k = 'yes'")], credit=5)
    client.publish(stream, [Message(body=i, properties={"k": "no"}) for i in range(20)])
    client.publish(stream, [Message(body="hit", properties={"k": "yes"})])
    assert bodies(c.receive(1)) == ["hit"]
    assert c.link.credit == 4


def test_drain_at_end_uses_up_credit(client, stream):
    """Drain at the end of the stream uses up the credit and answers with a flow of credit 0;
    nothing more arrives until new credit (amqp-interface.md; AMQP 1.0 §2.6.7)."""
    client.publish(stream, [Message(body=i) for i in range(3)])
    c = client.consumer(address(stream), [offset_spec("first")])
    assert bodies(c.drain(10)) == [0, 1, 2]
    assert c.link.credit == 0
    client.publish(stream, [Message(body=3)])
    client.pump(0.3)
    assert c.take() == []
    c.flow(1)
    assert bodies(c.receive(1)) == [3]


def test_drain_with_filter_matching_nothing(client, stream):
    """Draining a filtered link whose filter matches nothing scans to the end and reports
    credit 0 (amqp-interface.md "Consuming")."""
    client.publish(stream, [Message(body=i, properties={"k": i}) for i in range(300)])
    c = client.consumer(address(stream), [offset_spec("first"), sql_filter("k < 0")])
    assert c.drain(50) == []
    assert c.link.credit == 0


def test_fairness_between_filtered_links(connect, new_stream):
    """A consumer scanning many non-matching messages yields so another link is served before
    its scan ends (amqp-interface.md "Consuming": fairness; RabbitMQ yields after 200).

    Both links get their credit in the same burst of frames; the busy link's only match is the
    last of 10,000 messages, so the other link's first delivery must arrive before it."""
    big, small = new_stream(), new_stream()
    loader = connect()
    n = 10_000
    pub = loader.publisher(address(big), settled=True)
    pub.send([Message(body=i, properties={"last": i == n - 1}) for i in range(n)])
    pub.close()
    loader.publish(big, [Message(body="sync")])  # confirmed after all pre-settled ones
    loader.publish(small, [Message(body=f"s{i}", properties={"k": "x"}) for i in range(5)])

    client = connect()
    busy = client.consumer(address(big), [offset_spec("first"), sql_filter("last")])
    light = client.consumer(address(small), [offset_spec("first"), app_properties_filter({"k": "x"})])
    busy.link.flow(1)
    light.link.flow(5)
    (match,) = busy.receive(1, timeout=60)
    first_light = light.receive(1)[0]
    assert match.message.body == n - 1
    assert first_light.arrival < match.arrival, "the busy link's scan starved the other link"


def test_dispositions_do_not_consume(client, stream):
    """Accept, release, reject and modify are acknowledged but change nothing: the stream is
    not consumed (amqp-interface.md "Consuming")."""
    client.publish(stream, [Message(body=i) for i in range(4)])
    outcomes = [Delivery.ACCEPTED, Delivery.RELEASED, Delivery.REJECTED, Delivery.MODIFIED]
    c = client.consumer(address(stream), [offset_spec("first")], credit=4)
    got = c.receive(4, settle=None)
    for r, outcome in zip(got, outcomes, strict=True):
        r.delivery.update(outcome)
        r.delivery.settle()
    client.pump(0.2)
    assert c.link.state & c.link.REMOTE_ACTIVE
    c.close()
    assert bodies(client.read(stream)) == [0, 1, 2, 3]


def test_a_receiver_asking_for_settled_gets_settled_deliveries(client, stream):
    """A receiver that asks for `snd-settle-mode` settled (at most once) never settles what it
    gets, so the broker must send every delivery settled (AMQP 1.0 §2.7.3, the receiver's
    desired sender settle mode; RabbitMQ's `rabbit_amqp_session` then consumes with no_ack)."""
    client.publish(stream, [Message(body=i) for i in range(5)])
    c = client.consumer(address(stream), [offset_spec("first")], credit=5, settled=True)
    got = c.receive(5, settle=None)
    assert bodies(got) == [0, 1, 2, 3, 4]
    assert all(r.delivery.settled for r in got)
    c.close()
