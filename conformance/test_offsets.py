"""Offset specs: where a consumer starts.

Rules from amqp-interface.md "Consuming" (rabbitmq:stream-offset-spec, start inside a chunk),
storage-format.md "Reading" (first, last, next, offset N, timestamp, interval) and RabbitMQ's
stream docs (rabbitmq.com/docs/streams "Offset specification"; amqp_client_SUITE stream tests).

A publisher that waits for each outcome before sending the next message puts each message in a
chunk of its own (a chunk is confirmed only once written); a pipelined batch may share chunks.
"""

from __future__ import annotations

import time

import pytest
from proton import Message, byte, int32, short, timestamp, ubyte, uint, ulong, ushort

from conformance.amqp import LinkDetached, address, offset_spec

pytestmark = pytest.mark.timeout(120)


def bodies(received) -> list:
    return [r.message.body for r in received]


def offsets(received) -> list[int]:
    return [r.offset for r in received]


def test_no_offset_spec_means_next(client, stream):
    """No offset spec means `next`: only messages published after the attach
    (amqp-interface.md source filter table)."""
    client.publish(stream, [Message(body="old")])
    c = client.consumer(address(stream), None, credit=10)
    client.publish(stream, [Message(body="new")])
    assert bodies(c.receive(1)) == ["new"]
    assert c.drain() == []


def test_first(client, stream):
    """`first` starts at the first chunk of the stream (storage-format.md "Reading")."""
    client.publish(stream, [Message(body=i) for i in range(30)])
    assert offsets(client.read(stream, [offset_spec("first")])) == list(range(30))


def test_first_as_string(client, stream):
    """Offset spec names may be given as string or symbol (amqp-interface.md table)."""
    client.publish(stream, [Message(body=i) for i in range(3)], each=True)
    got = client.read(stream, [offset_spec("first", as_symbol=False)])
    assert offsets(got) == [0, 1, 2]


def test_last_single_message_chunks(client, stream):
    """`last` starts at the last chunk; with one message per chunk that is the last message
    (storage-format.md "Reading"; RabbitMQ streams docs: last = last chunk)."""
    client.publish(stream, [Message(body=i) for i in range(5)], each=True)
    assert offsets(client.read(stream, [offset_spec("last")])) == [4]


def test_last_delivers_the_whole_last_chunk(client, stream):
    """`last` delivers the last chunk whole: a contiguous run ending at the last offset that
    starts after everything confirmed one by one before the batch (storage-format.md)."""
    client.publish(stream, [Message(body=i) for i in range(3)], each=True)
    client.publish(stream, [Message(body=i) for i in range(3, 203)])
    got = offsets(client.read(stream, [offset_spec("last")]))
    assert got, "last delivered nothing"
    assert got == list(range(got[0], 203))
    assert got[0] >= 3


def test_next_only_new_messages(client, stream):
    """`next` delivers only what is written after the attach (storage-format.md)."""
    client.publish(stream, [Message(body="before")])
    c = client.consumer(address(stream), [offset_spec("next")], credit=5)
    assert c.drain() == []
    c.flow(5)
    client.publish(stream, [Message(body="after")])
    assert bodies(c.receive(1)) == ["after"]


def test_offset_n_drops_records_below_n(client, stream):
    """Offset N starts in the chunk holding N, records below N are dropped (amqp-interface.md
    "Consuming": start offset inside a chunk)."""
    client.publish(stream, [Message(body=i) for i in range(100)])
    got = client.read(stream, [offset_spec(ulong(57))])
    assert offsets(got) == list(range(57, 100))
    assert bodies(got) == list(range(57, 100))


@pytest.mark.parametrize("make", [ulong, int, uint, int32, ushort, short, ubyte, byte],
                         ids=lambda t: t.__name__)
def test_offset_any_integer_type(client, stream, make):
    """The offset may be any AMQP integer type (amqp-interface.md table)."""
    client.publish(stream, [Message(body=i) for i in range(6)])
    assert offsets(client.read(stream, [offset_spec(make(4))])) == [4, 5]


def test_offset_zero_and_beyond_end(client, stream):
    """Offset 0 is the start; an offset beyond the end means `next` (storage-format.md)."""
    client.publish(stream, [Message(body=i) for i in range(4)])
    assert offsets(client.read(stream, [offset_spec(ulong(0))])) == [0, 1, 2, 3]
    c = client.consumer(address(stream), [offset_spec(ulong(1000))], credit=5)
    assert c.drain() == []
    c.flow(1)
    client.publish(stream, [Message(body="later")])
    got = c.receive(1)
    assert bodies(got) == ["later"] and offsets(got) == [4]


def test_timestamp(client, stream):
    """A timestamp T starts at the first chunk whose timestamp >= T (storage-format.md;
    RabbitMQ streams docs). Margins of 300 ms keep chunk times apart."""
    client.publish(stream, [Message(body=f"a{i}") for i in range(5)], each=True)
    time.sleep(0.3)
    t = int(time.time() * 1000)
    time.sleep(0.3)
    client.publish(stream, [Message(body=f"b{i}") for i in range(5)], each=True)
    assert bodies(client.read(stream, [offset_spec(timestamp(t))])) == [f"b{i}" for i in range(5)]
    # before the start means first; after the end means next
    assert len(client.read(stream, [offset_spec(timestamp(1000))])) == 10
    assert client.read(stream, [offset_spec(timestamp(int(time.time() * 1000) + 3_600_000))]) == []


def test_interval(client, stream):
    """An interval string (`10m`, units Y M D h m s) means timestamp now - interval
    (amqp-interface.md table; RabbitMQ streams docs)."""
    client.publish(stream, [Message(body="old")], each=True)
    time.sleep(5)  # "old" is >= 5 s old at the attach; "new" has 3 s to be attached to
    client.publish(stream, [Message(body=f"new{i}") for i in range(3)], each=True)
    assert bodies(client.read(stream, [offset_spec("3s")])) == ["new0", "new1", "new2"]
    assert bodies(client.read(stream, [offset_spec("10m")])) == ["old", "new0", "new1", "new2"]
    assert bodies(client.read(stream, [offset_spec("1D")])) == ["old", "new0", "new1", "new2"]


@pytest.mark.parametrize("spec", ["bogus", "10x", "-5", ""])
def test_unparseable_offset_refuses_link(client, stream, spec):
    """An unparseable offset string refuses the link: attach with null source, then detach
    with an error (amqp-interface.md "Consuming": hard failure)."""
    with pytest.raises(LinkDetached) as info:
        client.consumer(address(stream), [offset_spec(spec)], credit=1)
    assert info.value.condition is not None
    # the connection is still usable
    client.publish(stream, [Message(body="ok")])
    assert bodies(client.read(stream)) == ["ok"]


def test_consumer_on_missing_stream_is_refused_not_found(client, name):
    """Attaching a consumer to an unknown stream refuses the link with amqp:not-found
    (amqp-interface.md "Addresses")."""
    with pytest.raises(LinkDetached) as info:
        client.consumer(address(name), [offset_spec("first")], credit=1)
    assert info.value.condition == "amqp:not-found"
