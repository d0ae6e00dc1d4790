"""RabbitMQ's stream protocol: publishing (confirms, sub-entry batches), consuming (offset
specs, credit per chunk, stage-1 filtering), stored offsets and deduplication (StoreOffset,
QueryOffset, named publishers, QueryPublisherSequence) and interoperability with the AMQP 1.0
listener.

Rules from PROTOCOL.adoc (Publish, PublishConfirm, Subscribe, Deliver, Credit) and RabbitMQ's
stream filtering docs; messages are AMQP 1.0 encoded as RabbitMQ's stream clients send them.
Records are counted from chunk headers; ``Chunk.records()`` opens a chunk where a test needs
the messages.
"""

from __future__ import annotations

import zlib

import pytest
from proton import Message, symbol

from conformance.amqp import offset_spec, stream_filter
from conformance.conftest import unique_name
from conformance.streamclient import OK, offset_at, offset_first, offset_last, offset_next

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stream(request, target):
    """A fresh stream, created over the stream protocol (deleted after the test)."""
    name = unique_name(request)
    with target.stream_connect() as admin:
        assert admin.create_stream(name) == OK
    yield name
    if target.stream_url is None:
        return
    try:
        with target.stream_connect() as admin:
            admin.delete_stream(name)
    except Exception:  # noqa: BLE001 - cleanup must not hide the test's own failure
        pass


def amqp(i: int, **kw) -> bytes:
    return Message(body=f"m{i}", properties={"i": i}, **kw).encode()


def body(data: bytes) -> str:
    m = Message()
    m.decode(data)
    return m.body


def chunks_until(client, records: int, timeout: float = 10.0) -> list:
    """Chunks received until they hold ``records`` records, granting one credit per chunk."""
    got, n = [], 0
    while n < records:
        chunk = client.next_chunk(timeout)
        client.credit(chunk.subscription_id, 1)
        got.append(chunk)
        n += chunk.num_records
    return got


def test_publish_is_confirmed_and_consumed_with_offsets(sclient, stream):
    """Every publishing id is confirmed; a subscriber from first gets the records with
    consecutive offsets, chunk ids matching the offsets of their first record."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(i, amqp(i)) for i in range(100)])
    assert sclient.wait_confirms(1, range(100)) == {i: OK for i in range(100)}
    assert sclient.subscribe(1, stream, offset_first(), credit=1) == OK
    chunks = chunks_until(sclient, 100)
    assert all(len(c.data) == c.data_length and zlib.crc32(c.data) == c.crc for c in chunks)
    records = [r for c in chunks for r in c.records()]
    assert [o for o, _ in records] == list(range(100))
    assert [body(d) for _, d in records] == [f"m{i}" for i in range(100)]


def test_sub_entry_batches_give_each_message_an_offset(sclient, stream):
    """A sub-entry batch (plain or gzip) is one publishing id; its messages get one offset
    each, whether the broker delivers the batch as it came or opened."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish_sub_batch(1, 1, [amqp(i) for i in range(5)])
    sclient.publish_sub_batch(1, 2, [amqp(i) for i in range(5, 8)], gzip=True)
    assert sclient.wait_confirms(1, [1, 2]) == {1: OK, 2: OK}
    assert sclient.subscribe(1, stream, offset_first(), credit=10) == OK
    chunks = chunks_until(sclient, 8)
    records = [r for c in chunks for r in c.records()]
    assert [(o, body(d)) for o, d in records] == [(i, f"m{i}") for i in range(8)]


def test_sub_entry_batches_are_stored_as_they_came(sclient, stream):
    """RabbitMQ stores a sub-entry batch as one entry of its records (compressed as it came)
    and delivers it so: the chunk counts 2 entries for the 2 batches, 8 records."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish_sub_batch(1, 1, [amqp(i) for i in range(5)])
    sclient.publish_sub_batch(1, 2, [amqp(i) for i in range(5, 8)], gzip=True)
    assert sclient.wait_confirms(1, [1, 2]) == {1: OK, 2: OK}
    assert sclient.subscribe(1, stream, offset_first(), credit=10) == OK
    chunks = chunks_until(sclient, 8)
    assert (sum(c.num_entries for c in chunks), sum(c.num_records for c in chunks)) == (2, 8)


@pytest.mark.rabbitmq4
def test_sub_entry_batches_reach_amqp_consumers_as_messages(client, sclient, stream):
    """AMQP 1.0 consumers get a stored sub-entry batch's messages one by one, with offsets."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish_sub_batch(1, 1, [amqp(i) for i in range(4)], gzip=True)
    assert sclient.wait_confirms(1, [1]) == {1: OK}
    assert [(r.offset, r.message.body) for r in client.read(stream)] == [
        (i, f"m{i}") for i in range(4)]


def test_offset_specs(sclient, stream):
    """offset N: the chunk holding N comes whole (the client drops what is below N); last: the
    last chunk; next: only what comes later."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(i, amqp(i)) for i in range(10)])
    sclient.wait_confirms(1, range(10))
    sclient.publish(1, [(i, amqp(i)) for i in range(10, 15)])
    sclient.wait_confirms(1, range(10, 15))
    assert sclient.subscribe(1, stream, offset_at(12), credit=5) == OK
    first = sclient.next_chunk()
    assert first.chunk_id <= 12 < first.chunk_id + first.num_records
    assert sclient.subscribe(2, stream, offset_last(), credit=5) == OK
    last = sclient.next_chunk()
    assert last.chunk_id + last.num_records == 15
    assert sclient.subscribe(3, stream, offset_next(), credit=5) == OK
    sclient.publish(1, [(15, amqp(15))])
    later = sclient.next_chunk()
    while later.subscription_id != 3:  # subscriptions 1 and 2 get it too
        later = sclient.next_chunk()
    assert (later.chunk_id, later.num_records) == (15, 1)


def test_credit_is_counted_in_chunks(sclient, stream):
    """Each Deliver uses one credit: with credit 1 one chunk comes, the next only after a
    Credit."""
    assert sclient.declare_publisher(1, stream) == OK
    for i in range(3):  # three confirmed publishes: three chunks
        sclient.publish(1, [(i, amqp(i))])
        sclient.wait_confirms(1, [i])
    assert sclient.subscribe(1, stream, offset_first(), credit=1) == OK
    assert sclient.next_chunk().chunk_id == 0
    with pytest.raises(TimeoutError):
        sclient.next_chunk(timeout=0.5)
    sclient.credit(1, 2)
    assert [sclient.next_chunk().chunk_id for _ in range(2)] == [1, 2]


def test_a_subscriber_at_the_end_gets_what_comes_later(sconnect, stream):
    """A subscription that reached the end is woken when another connection publishes."""
    consumer, producer = sconnect(), sconnect()
    assert consumer.subscribe(1, stream, offset_first(), credit=10) == OK
    assert producer.declare_publisher(1, stream) == OK
    producer.publish(1, [(i, amqp(i)) for i in range(3)])
    producer.wait_confirms(1, range(3))
    records = [r for c in chunks_until(consumer, 3) for r in c.records()]
    assert [o for o, _ in records] == [0, 1, 2]


@pytest.mark.rabbitmq313
def test_filter_values_select_chunks(sclient, stream):
    """Publish v2 filter values; a subscription with filter.0 gets no chunk that holds only
    other values, and with match-unfiltered also the chunks of messages without a value."""
    assert sclient.declare_publisher(1, stream) == OK
    batches = [("red", 0), ("blue", 10), (None, 20), ("red", 30)]
    for value, start in batches:
        sclient.publish(1, [(start + i, amqp(start + i), value) for i in range(10)], version=2)
        sclient.wait_confirms(1, range(start, start + 10))
    assert sclient.subscribe(1, stream, offset_first(), credit=10,
                             properties={"filter.0": "red"}) == OK
    red = chunks_until(sclient, 20)
    assert sorted({c.chunk_id for c in red}) == [0, 30]
    assert sclient.subscribe(2, stream, offset_first(), credit=10,
                             properties={"filter.0": "blue", "match-unfiltered": "true"}) == OK
    blue = chunks_until(sclient, 20)
    assert sorted({c.chunk_id for c in blue}) == [10, 20]


@pytest.mark.rabbitmq313
def test_deliver_v2_only_to_clients_that_ask(sclient, stream):
    """Deliver v2 (with the committed chunk id) after ExchangeCommandVersions lists Deliver up
    to 2; v1 before."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(1, amqp(1))])
    sclient.wait_confirms(1, [1])
    assert sclient.subscribe(1, stream, offset_first(), credit=1) == OK
    assert sclient.next_chunk().committed_chunk_id is None
    assert sclient.exchange_command_versions([(8, 1, 2)])[0] == OK
    assert sclient.subscribe(2, stream, offset_first(), credit=1) == OK
    chunk = sclient.next_chunk()
    assert chunk.committed_chunk_id is not None and chunk.committed_chunk_id >= chunk.chunk_id


# -- interoperability with the AMQP 1.0 listener --------------------------------------------
@pytest.mark.rabbitmq4
def test_amqp_published_messages_reach_stream_subscribers_with_their_offsets(client, sclient,
                                                                             stream):
    """A message published over AMQP 1.0 is delivered over the stream protocol as stored, at
    the offset an AMQP consumer sees."""
    client.publish(stream, [Message(body=f"a{i}", properties={"i": i}) for i in range(5)])
    by_amqp = [(r.offset, r.message.body) for r in client.read(stream)]
    assert sclient.subscribe(1, stream, offset_first(), credit=10) == OK
    by_stream = [(o, body(d)) for c in chunks_until(sclient, 5) for o, d in c.records()]
    assert by_stream == by_amqp == [(i, f"a{i}") for i in range(5)]


@pytest.mark.rabbitmq4
def test_stream_published_messages_reach_amqp_consumers_with_their_offsets(client, sclient,
                                                                           stream):
    """The other way: published over the stream protocol, read over AMQP 1.0 with
    x-stream-offset equal to the record's offset."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(i, amqp(i)) for i in range(5)])
    assert sclient.wait_confirms(1, range(5)) == {i: OK for i in range(5)}
    got = [(r.offset, r.message.body, r.props["i"]) for r in client.read(stream)]
    assert got == [(i, f"m{i}", i) for i in range(5)]


@pytest.mark.rabbitmq313
@pytest.mark.rabbitmq4
def test_filter_values_work_across_the_listeners(client, sclient, stream):
    """A Publish v2 filter value selects chunks for AMQP consumers (rabbitmq:stream-filter),
    and an AMQP x-stream-filter-value selects chunks for stream subscribers (filter.N)."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(i, amqp(i), "left") for i in range(5)], version=2)
    sclient.wait_confirms(1, range(5))
    client.publish(stream, [Message(body=f"r{i}", annotations={
        symbol("x-stream-filter-value"): "right"}) for i in range(5)])
    sclient.publish(1, [(5, amqp(5), "other")], version=2)
    sclient.wait_confirms(1, [5])
    left = client.read(stream, [offset_spec("first"), stream_filter("left")])
    assert {r.message.body for r in left} == {f"m{i}" for i in range(5)}
    assert sclient.subscribe(1, stream, offset_first(), credit=10,
                             properties={"filter.0": "right"}) == OK
    chunk = sclient.next_chunk()
    assert [body(d) for _, d in chunk.records()] == [f"r{i}" for i in range(5)]
    with pytest.raises(TimeoutError):
        sclient.next_chunk(timeout=0.5)


@pytest.mark.extension
def test_sql_filter_subscription_property(sclient, stream):
    """Extension: Subscribe property ``sql-filter``; only matching records are delivered, in
    chunks rebuilt from runs of matching records whose first offsets are the records'."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(i, amqp(i)) for i in range(30)])
    sclient.wait_confirms(1, range(30))
    assert sclient.subscribe(1, stream, offset_first(), credit=10,
                             properties={"sql-filter": "i BETWEEN 3 AND 5 OR i = 20"}) == OK
    chunks = chunks_until(sclient, 4)
    assert [(c.chunk_id, c.num_records) for c in chunks] == [(3, 3), (20, 1)]
    assert all(zlib.crc32(c.data) == c.crc for c in chunks)
    assert [(o, body(d)) for c in chunks for o, d in c.records()] == [
        (3, "m3"), (4, "m4"), (5, "m5"), (20, "m20")]


@pytest.mark.extension
def test_property_filter_subscription_properties(sclient, stream):
    """Extension: Subscribe properties ``property.<field>`` and ``application-property.<key>``
    (amqp:properties-filter and amqp:application-properties-filter, string references)."""
    assert sclient.declare_publisher(1, stream) == OK
    sclient.publish(1, [(i, Message(body=f"m{i}", subject="even" if i % 2 == 0 else "odd",
                                    properties={"region": "eu-1" if i < 4 else "us"}).encode())
                        for i in range(8)])
    sclient.wait_confirms(1, range(8))
    assert sclient.subscribe(1, stream, offset_first(), credit=10, properties={
        "property.subject": "even", "application-property.region": "&p:eu"}) == OK
    chunks = chunks_until(sclient, 2)
    assert [(o, body(d)) for c in chunks for o, d in c.records()] == [(0, "m0"), (2, "m2")]
    assert sclient.subscribe(2, stream, offset_first(), credit=10,
                             properties={"property.subject": "even", "sql-filter": "TRUE"}) == 17


# -- stored offsets and deduplication (RabbitMQ 3.9 on) --------------------------------------
STREAM_DOES_NOT_EXIST, PRECONDITION_FAILED, NO_OFFSET = 0x02, 0x11, 0x13


def records_of(client, stream: str, count: int, subscription_id: int = 1) -> list[str]:
    """The bodies of the first ``count`` records of ``stream`` (subscribing from first)."""
    assert client.subscribe(subscription_id, stream, offset_first(), credit=10) == OK
    return [body(d) for c in chunks_until(client, count) for _, d in c.records()][:count]


def test_stored_offsets_are_answered_on_every_connection(sconnect, stream):
    """QueryOffset: NO_OFFSET before any StoreOffset, then the last offset stored for that
    name (StoreOffset has no response), on this connection and another one."""
    one, two = sconnect(), sconnect()
    assert one.query_offset("reader", stream)[0] == NO_OFFSET
    one.store_offset("reader", stream, 5)
    one.store_offset("other", stream, 1)
    one.store_offset("reader", stream, 9)
    assert one.query_offset("reader", stream) == (OK, 9)
    assert two.query_offset("reader", stream) == (OK, 9)
    assert two.query_offset("other", stream) == (OK, 1)
    assert two.query_offset("nobody", stream)[0] == NO_OFFSET


def test_offsets_of_a_missing_stream(sclient, stream):
    """QueryOffset on a stream that does not exist: STREAM_DOES_NOT_EXIST; StoreOffset there is
    dropped (it has no response) and the connection goes on."""
    assert sclient.query_offset("reader", stream + "-missing")[0] == STREAM_DOES_NOT_EXIST
    sclient.store_offset("reader", stream + "-missing", 3)
    assert sclient.query_offset("reader", stream)[0] == NO_OFFSET


def test_a_named_publishers_repeated_ids_are_confirmed_not_stored(sclient, stream):
    """A publisher declared with a reference: a message whose publishing id is not above the
    last one stored for the reference (nor above one before it in the same frame) is confirmed
    and not stored; QueryPublisherSequence answers the last id stored."""
    assert sclient.query_publisher_sequence("p", stream) == (OK, 0)
    assert sclient.declare_publisher(1, stream, "p") == OK
    sclient.publish(1, [(i, amqp(i)) for i in range(1, 11)])
    assert sclient.wait_confirms(1, range(1, 11)) == {i: OK for i in range(1, 11)}
    assert sclient.query_publisher_sequence("p", stream) == (OK, 10)
    sclient.publish(1, [(i, amqp(i)) for i in [*range(5, 16), 14, 16]])
    assert sclient.wait_confirms(1, range(5, 17)) == {i: OK for i in range(5, 17)}
    assert sclient.query_publisher_sequence("p", stream) == (OK, 16)
    assert records_of(sclient, stream, 16) == [f"m{i}" for i in range(1, 17)]


def test_a_publisher_sequence_outlives_its_connection(sconnect, stream):
    """Another connection declaring the same reference later is deduplicated against what
    the first one stored; an unnamed publisher is not deduplicated."""
    first = sconnect()
    assert first.declare_publisher(1, stream, "p") == OK
    first.publish(1, [(i, amqp(i)) for i in range(1, 6)])
    assert first.wait_confirms(1, range(1, 6)) == {i: OK for i in range(1, 6)}
    first.close()
    second = sconnect()
    assert second.query_publisher_sequence("p", stream) == (OK, 5)
    assert second.declare_publisher(1, stream, "p") == OK
    second.publish(1, [(i, amqp(i)) for i in range(3, 8)])
    assert second.wait_confirms(1, range(3, 8)) == {i: OK for i in range(3, 8)}
    assert second.declare_publisher(2, stream) == OK
    second.publish(2, [(1, amqp(100)), (1, amqp(101))])
    assert second.wait_confirms(2, [1]) == {1: OK}
    assert records_of(second, stream, 9) == [f"m{i}" for i in [*range(1, 8), 100, 101]]


def test_a_reference_is_declared_once_per_connection_and_stream(sclient, stream):
    """A second publisher with a reference already declared on this connection for this stream
    is refused with PRECONDITION_FAILED; the first keeps working."""
    assert sclient.declare_publisher(1, stream, "p") == OK
    assert sclient.declare_publisher(2, stream, "p") == PRECONDITION_FAILED
    sclient.publish(1, [(1, amqp(1))])
    assert sclient.wait_confirms(1, [1]) == {1: OK}


def test_query_publisher_sequence_of_a_missing_stream(sclient, stream):
    assert sclient.query_publisher_sequence("p", stream + "-missing")[0] == STREAM_DOES_NOT_EXIST


def test_a_named_publishers_sub_entry_batches_are_deduplicated_by_their_publishing_id(
        sclient, stream):
    """A sub-entry batch is one publishing id: a batch with an id already stored is confirmed
    and dropped whole."""
    assert sclient.declare_publisher(1, stream, "b") == OK
    sclient.publish_sub_batch(1, 1, [amqp(i) for i in range(5)])
    assert sclient.wait_confirms(1, [1]) == {1: OK}
    sclient.publish_sub_batch(1, 1, [amqp(i) for i in range(50, 53)], gzip=True)
    assert sclient.wait_confirms(1, [1]) == {1: OK}
    sclient.publish_sub_batch(1, 2, [amqp(i) for i in range(5, 8)], gzip=True)
    assert sclient.wait_confirms(1, [2]) == {2: OK}
    assert sclient.query_publisher_sequence("b", stream) == (OK, 2)
    assert records_of(sclient, stream, 8) == [f"m{i}" for i in range(8)]


def test_a_new_reference_takes_publishing_id_0(sclient, stream):
    """A reference with nothing stored takes any first id, 0 too (osiris's writer tracking);
    QueryPublisherSequence then answers 0, and a second 0 is a duplicate."""
    assert sclient.declare_publisher(1, stream, "zero") == OK
    sclient.publish(1, [(0, amqp(0))])
    assert sclient.wait_confirms(1, [0]) == {0: OK}
    sclient.publish(1, [(0, amqp(100)), (1, amqp(1))])
    assert sclient.wait_confirms(1, [0, 1]) == {0: OK, 1: OK}
    assert sclient.query_publisher_sequence("zero", stream) == (OK, 1)
    assert records_of(sclient, stream, 2) == ["m0", "m1"]
