"""Single active consumer on RabbitMQ's stream protocol (3.11+): Subscribe properties
``single-active-consumer``, ``name`` and ``super-stream``, and the server's ConsumerUpdate.

Rules from PROTOCOL.adoc of rabbitmq-server (deps/rabbitmq_stream/docs: ConsumerUpdate, "the
client answers with the offset to start from"), rabbit_stream_reader.erl (a single active
consumer without a name: PRECONDITION_FAILED; nothing is delivered to an inactive one) and
rabbit_stream_sac_coordinator.erl: on a stream, the first member of a group is active and is
told so (ConsumerUpdate active=true); the others wait, told nothing; when the active one goes
(Unsubscribe, Close, a dropped connection) the next in order of arrival is activated. On a super
stream partition the active member is the one at (partition index mod members), in order of
arrival; a change first tells the active member to step down (active=false) and activates the
new one once it has answered.
"""

from __future__ import annotations

import socket
import struct

import pytest

from conformance.conftest import unique_name
from conformance.streamclient import OK, offset_at, offset_first, offset_next

pytestmark = [pytest.mark.timeout(60), pytest.mark.rabbitmq311]

PRECONDITION_FAILED = 17
QUIET_S = 1.0  # how long an inactive member is watched for frames it must not get


def _sac(name: str, super_stream: str | None = None) -> dict[str, str]:
    props = {"single-active-consumer": "true", "name": name}
    if super_stream is not None:
        props["super-stream"] = super_stream
    return props


def _publish(c, stream: str, count: int) -> None:
    """``count`` messages, confirmed one by one: one chunk each (offsets 0..count-1)."""
    assert c.declare_publisher(9, stream) == OK
    for i in range(count):
        c.publish(9, [(i, b"\x00Sw\xa1\x01" + bytes([0x30 + i % 10]))])
        assert c.wait_confirms(9, [i]) == {i: OK}


def _nothing_comes(c) -> bool:
    """True when neither a chunk nor a ConsumerUpdate arrives within ``QUIET_S``."""
    try:
        c.next_consumer_update(timeout=QUIET_S)
        return False
    except TimeoutError:
        return not c.pushed.chunks


def test_a_single_active_consumer_needs_a_name(sclient, stream):
    """``single-active-consumer=true`` without ``name``: PRECONDITION_FAILED (rabbit_stream_reader:
    "a single active consumer must have a name")."""
    assert sclient.subscribe(1, stream, properties={"single-active-consumer": "true"}) \
        == PRECONDITION_FAILED
    # the subscription id was not taken
    assert sclient.subscribe(1, stream) == OK


def test_only_the_first_member_is_active_and_told_so(sconnect, stream):
    """The first member gets ConsumerUpdate(active=true) for its subscription and, once it has
    answered with an offset, chunks from there; the second member of the group gets neither."""
    first, second = sconnect(), sconnect()
    _publish(first, stream, 3)
    assert first.subscribe(4, stream, offset_next(), credit=10, properties=_sac("g")) == OK
    update = first.next_consumer_update()
    assert (update.subscription_id, update.active) == (4, True)
    assert second.subscribe(5, stream, offset_first(), credit=10, properties=_sac("g")) == OK
    first.answer_consumer_update(update, offset_at(1))  # the answer, not Subscribe's offset, counts
    chunk = first.next_chunk()
    assert (chunk.subscription_id, chunk.chunk_id) == (4, 1)
    assert _nothing_comes(second)


def test_members_of_other_groups_are_active_each(sconnect, stream):
    """Groups are per name: two names on one stream, two active consumers; a subscription with
    ``single-active-consumer=false`` is an ordinary one (no ConsumerUpdate, chunks at once)."""
    a, b, plain = sconnect(), sconnect(), sconnect()
    _publish(a, stream, 1)
    for c, name in ((a, "g1"), (b, "g2")):
        assert c.subscribe(1, stream, offset_first(), credit=5, properties=_sac(name)) == OK
        update = c.next_consumer_update()
        assert update.active
        c.answer_consumer_update(update, offset_first())
        assert c.next_chunk().chunk_id == 0
    assert plain.subscribe(1, stream, offset_first(), credit=5,
                           properties={"single-active-consumer": "false", "name": "g1"}) == OK
    assert plain.next_chunk().chunk_id == 0
    assert not plain.pushed.consumer_updates


@pytest.mark.parametrize("leave", ["unsubscribe", "close", "socket"])
def test_the_next_member_takes_over_when_the_active_one_leaves(sconnect, stream, leave):
    """When the active member unsubscribes, closes its connection or loses it (the socket
    dropped without a Close), the next member in order of arrival gets ConsumerUpdate(active=true)
    and chunks from the offset it answers; the third stays inactive."""
    active, second, third = sconnect(), sconnect(), sconnect()
    _publish(active, stream, 3)
    assert active.subscribe(1, stream, offset_first(), credit=5, properties=_sac("g")) == OK
    update = active.next_consumer_update()
    active.answer_consumer_update(update, offset_first())
    assert active.next_chunk().chunk_id == 0
    assert second.subscribe(2, stream, offset_first(), credit=5, properties=_sac("g")) == OK
    assert third.subscribe(3, stream, offset_first(), credit=5, properties=_sac("g")) == OK
    if leave == "unsubscribe":
        assert active.unsubscribe(1) == OK
    elif leave == "close":
        assert active.close() == OK
    else:
        active.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        active.sock.close()  # a reset, no Close frame
    update = second.next_consumer_update()
    assert (update.subscription_id, update.active) == (2, True)
    second.answer_consumer_update(update, offset_at(2))
    chunk = second.next_chunk()
    assert (chunk.subscription_id, chunk.chunk_id) == (2, 2)
    assert _nothing_comes(third)


def test_an_inactive_member_leaving_changes_nothing(sconnect, stream):
    """Unsubscribing a waiting member sends nothing to anyone; the active one goes on."""
    active, waiting = sconnect(), sconnect()
    _publish(active, stream, 1)
    assert active.subscribe(1, stream, offset_first(), credit=5, properties=_sac("g")) == OK
    active.answer_consumer_update(active.next_consumer_update(), offset_first())
    assert active.next_chunk().chunk_id == 0
    assert waiting.subscribe(1, stream, offset_first(), credit=5, properties=_sac("g")) == OK
    assert waiting.unsubscribe(1) == OK
    assert _nothing_comes(active)
    _publish(waiting, stream, 1)
    assert active.next_chunk().chunk_id == 1


@pytest.mark.rabbitmq313
def test_on_a_partition_the_member_at_index_mod_members_is_active(sconnect, request):
    """Partition 1 of a super stream with two members: the first is active alone, then the
    second one's arrival moves it (1 mod 2 = 1): the first gets ConsumerUpdate(active=false),
    answers, and only then the second gets ConsumerUpdate(active=true). Partition 0 stays with
    the first (0 mod 2 = 0). When the second leaves, the first is active on partition 1 again
    (told, and delivering from the offset it answers)."""
    admin, a, b = sconnect(), sconnect(), sconnect()
    name = unique_name(request)
    parts = [f"{name}-0", f"{name}-1"]
    assert admin.create_super_stream(name, parts, ["0", "1"]) == OK
    try:
        _publish(admin, parts[1], 4)
        for sub, part in enumerate(parts):
            assert a.subscribe(sub, part, offset_first(), credit=5, properties=_sac("g", name)) == OK
            update = a.next_consumer_update()
            assert (update.subscription_id, update.active) == (sub, True)
            a.answer_consumer_update(update, offset_first())
        assert [a.next_chunk().chunk_id for _ in range(4)] == [0, 1, 2, 3]
        for sub, part in enumerate(parts):
            assert b.subscribe(sub, part, offset_first(), credit=5, properties=_sac("g", name)) == OK
        step_down = a.next_consumer_update()
        assert (step_down.subscription_id, step_down.active) == (1, False)
        assert _nothing_comes(b)  # not before the active member has answered
        a.answer_consumer_update(step_down)
        update = b.next_consumer_update()
        assert (update.subscription_id, update.active) == (1, True)
        b.answer_consumer_update(update, offset_at(2))
        assert b.next_chunk().chunk_id == 2
        assert not a.pushed.consumer_updates  # partition 0 stayed
        # b leaves partition 1: a is its only member again
        assert b.unsubscribe(1) == OK
        update = a.next_consumer_update()
        assert (update.subscription_id, update.active) == (1, True)
        a.answer_consumer_update(update, offset_at(3))
        chunk = a.next_chunk()
        assert (chunk.subscription_id, chunk.chunk_id) == (1, 3)
        assert a.stream_stats(parts[1])[0] == OK  # and the connection goes on
    finally:
        admin.delete_super_stream(name)
