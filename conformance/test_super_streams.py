"""Super streams on RabbitMQ's stream protocol: CreateSuperStream, DeleteSuperStream, Partitions,
Route, and bad input.

Rules from PROTOCOL.adoc of rabbitmq-server (deps/rabbitmq_stream/docs) and what
rabbit_stream_reader.erl and rabbit_stream_manager.erl answer (RabbitMQ 3.13+, where
CreateSuperStream arrived): a super stream is a direct exchange whose bindings to the partition
streams carry the binding keys and the partition order; Partitions lists the bound streams in
that order; Route asks the exchange. Codes by their RabbitMQ names.
"""

from __future__ import annotations

import pytest

from conformance.conftest import unique_name
from conformance.streamclient import OK

pytestmark = [pytest.mark.timeout(60), pytest.mark.rabbitmq313]

STREAM_DOES_NOT_EXIST, STREAM_ALREADY_EXISTS, INTERNAL_ERROR, PRECONDITION_FAILED = 2, 5, 15, 17


@pytest.fixture
def super_name(request, target):
    """A unique super stream name; the super stream (and its partitions) deleted after."""
    value = unique_name(request)
    yield value
    if target.stream_url is None:
        return
    try:
        with target.stream_connect() as c:
            code, partitions = c.partitions(value)
            c.delete_super_stream(value)
            for p in partitions:  # streams a test made under these names
                c.delete_stream(p)
    except Exception:  # noqa: BLE001 - cleanup must not hide the test's own failure
        pass


def _parts(name: str, n: int = 3) -> list[str]:
    return [f"{name}-{i}" for i in range(n)]


def _exists(sclient, stream: str) -> bool:
    """Whether ``stream`` exists, from Metadata (its per-stream code)."""
    return sclient.metadata([stream])[1][stream][0] == OK


def test_create_makes_partitions_and_delete_removes_them(sclient, super_name):
    """CreateSuperStream: OK, the partition streams exist, Partitions lists them; a second
    CreateSuperStream of the name: STREAM_ALREADY_EXISTS (reference_already_exists, the
    exchange is there); DeleteSuperStream: OK, the partitions are gone, Partitions and
    DeleteSuperStream then answer STREAM_DOES_NOT_EXIST."""
    parts = _parts(super_name)
    assert sclient.create_super_stream(super_name, parts, ["0", "1", "2"]) == OK
    assert all(_exists(sclient, p) for p in parts)
    assert sclient.partitions(super_name) == (OK, parts)
    assert sclient.create_super_stream(super_name, _parts(super_name + "x"), ["0", "1", "2"]) \
        == STREAM_ALREADY_EXISTS
    assert not _exists(sclient, f"{super_name}x-0")  # nothing of the refused one was made
    assert sclient.delete_super_stream(super_name) == OK
    assert not any(_exists(sclient, p) for p in parts)
    assert sclient.partitions(super_name)[0] == STREAM_DOES_NOT_EXIST
    assert sclient.delete_super_stream(super_name) == STREAM_DOES_NOT_EXIST


def test_partitions_come_in_partition_order_not_name_order(sclient, super_name):
    """Partitions sorts the bindings by their x-stream-partition-order (the position given at
    creation; rabbit_stream_utils:sort_partitions), whatever the names."""
    parts = [f"{super_name}-c", f"{super_name}-a", f"{super_name}-b"]
    assert sclient.create_super_stream(super_name, parts, ["k1", "k2", "k3"]) == OK
    assert sclient.partitions(super_name) == (OK, parts)


def test_route_by_binding_key(sclient, super_name):
    """Route answers the partitions whose binding key equals the routing key (a direct
    exchange); a key that matches nothing: OK and no stream (no_route); a super stream that
    does not exist: STREAM_DOES_NOT_EXIST."""
    parts = _parts(super_name)
    assert sclient.create_super_stream(super_name, parts, ["amer", "emea", "apac"]) == OK
    assert sclient.route("emea", super_name) == (OK, [parts[1]])
    assert sclient.route("apac", super_name) == (OK, [parts[2]])
    assert sclient.route("nowhere", super_name) == (OK, [])
    assert sclient.route("emea", super_name + "-missing")[0] == STREAM_DOES_NOT_EXIST


def test_arguments_are_given_to_every_partition(sclient, super_name):
    """CreateSuperStream's arguments are Create's (without ``x-``), applied to each partition;
    an invalid one (a Bloom filter size outside 16..255) fails a partition's creation and what
    was made is rolled back. The code is INTERNAL_ERROR: rabbit_stream_manager:create answers a
    bare ``validation_failed``, which rabbit_stream_reader's create_super_stream clause does not
    match as ``{validation_failed, Msg}`` and answers with its catch-all."""
    parts = _parts(super_name, 2)
    assert sclient.create_super_stream(super_name, parts, ["0", "1"],
                                       {"stream-filter-size-bytes": "300"}) == INTERNAL_ERROR
    assert not any(_exists(sclient, p) for p in parts)
    assert sclient.partitions(super_name)[0] == STREAM_DOES_NOT_EXIST
    assert sclient.create_super_stream(super_name, parts, ["0", "1"],
                                       {"max-length-bytes": "1000000"}) == OK
    assert all(_exists(sclient, p) for p in parts)


def test_a_partition_name_taken_by_a_stream_is_refused_and_nothing_is_made(sclient, super_name):
    """A partition that exists already as a stream: STREAM_ALREADY_EXISTS ("there is already a
    queue named ..."), checked before anything is made: no exchange (Partitions answers
    STREAM_DOES_NOT_EXIST), no other partition, and the stream is untouched."""
    parts = _parts(super_name)
    assert sclient.create_stream(parts[1]) == OK
    assert sclient.create_super_stream(super_name, parts, ["0", "1", "2"]) == STREAM_ALREADY_EXISTS
    assert sclient.partitions(super_name)[0] == STREAM_DOES_NOT_EXIST
    assert not _exists(sclient, parts[0]) and not _exists(sclient, parts[2])
    assert _exists(sclient, parts[1])
    assert sclient.delete_stream(parts[1]) == OK


def test_a_super_stream_named_like_a_stream_is_allowed(sclient, super_name):
    """A super stream is an exchange: a stream (a queue) of the same name does not collide
    (validate_super_stream_creation checks the exchange and the partitions only). Both live on;
    the stream is no partition."""
    assert sclient.create_stream(super_name) == OK
    try:
        parts = _parts(super_name, 2)
        assert sclient.create_super_stream(super_name, parts, ["0", "1"]) == OK
        assert sclient.partitions(super_name) == (OK, parts)
        assert _exists(sclient, super_name)
        assert sclient.delete_super_stream(super_name) == OK
        assert _exists(sclient, super_name)  # the stream of that name stays
    finally:
        sclient.delete_stream(super_name)


@pytest.mark.parametrize("partitions,keys", [
    (["{n}-0", "{n}-1"], ["0"]),              # counts differ
    (["{n}-0", "{n}-0"], ["0", "1"]),         # duplicate partition names
    (["amq.{n}"], ["0"]),                     # a reserved partition name
])
def test_bad_partitions_are_refused_and_nothing_is_made(sclient, super_name, partitions, keys):
    """validate_super_stream_creation: as many binding keys as partitions, no duplicate names,
    correct names (``amq.`` is reserved): else PRECONDITION_FAILED (validation_failed), and no
    super stream exists after."""
    parts = [p.format(n=super_name) for p in partitions]
    assert sclient.create_super_stream(super_name, parts, keys) == PRECONDITION_FAILED
    assert sclient.partitions(super_name)[0] == STREAM_DOES_NOT_EXIST
    assert not any(_exists(sclient, p) for p in set(parts))


def test_a_reserved_super_stream_name_is_refused(sclient, request):
    """rabbit_stream_utils:enforce_correct_name: an ``amq.`` name is not a correct name for a
    super stream: PRECONDITION_FAILED."""
    name = "amq." + unique_name(request)
    assert sclient.create_super_stream(name, [f"{name[4:]}-0"], ["0"]) == PRECONDITION_FAILED
    assert not _exists(sclient, f"{name[4:]}-0")


def test_deleting_a_partition_on_its_own_unbinds_it(sclient, super_name):
    """Delete of a partition stream is a stream deletion like any (rabbit_stream_manager:delete
    has no super stream check): OK; its binding goes with it, so Partitions lists the others
    and Route finds nothing for its key; the super stream is still there to delete."""
    parts = _parts(super_name)
    assert sclient.create_super_stream(super_name, parts, ["0", "1", "2"]) == OK
    assert sclient.delete_stream(parts[1]) == OK
    assert sclient.partitions(super_name) == (OK, [parts[0], parts[2]])
    assert sclient.route("1", super_name) == (OK, [])
    assert sclient.route("2", super_name) == (OK, [parts[2]])
    assert sclient.delete_super_stream(super_name) == OK
    assert not _exists(sclient, parts[0]) and not _exists(sclient, parts[2])


def test_the_super_stream_name_is_no_stream(sclient, super_name):
    """The super stream itself is an exchange, not a stream: publishing to or subscribing to
    its name is refused with STREAM_DOES_NOT_EXIST; its partitions take both."""
    parts = _parts(super_name, 2)
    assert sclient.create_super_stream(super_name, parts, ["0", "1"]) == OK
    assert sclient.declare_publisher(1, super_name) == STREAM_DOES_NOT_EXIST
    assert sclient.subscribe(1, super_name) == STREAM_DOES_NOT_EXIST
    assert sclient.declare_publisher(1, parts[0]) == OK
    assert sclient.subscribe(1, parts[1]) == OK


def test_messages_published_to_a_partition_are_read_from_it(sclient, super_name):
    """A partition is a stream: what is published to it is delivered from it, and only from it."""
    parts = _parts(super_name, 2)
    assert sclient.create_super_stream(super_name, parts, ["0", "1"]) == OK
    assert sclient.declare_publisher(1, parts[1]) == OK
    sclient.publish(1, [(1, b"\x00Sw\xa1\x01a"), (2, b"\x00Sw\xa1\x01b")])  # AMQP value "a", "b"
    assert sclient.wait_confirms(1, [1, 2]) == {1: OK, 2: OK}
    assert sclient.stream_stats(parts[0])[1]["committed_chunk_id"] == -1
    assert sclient.subscribe(2, parts[1], credit=5) == OK
    records = []
    while len(records) < 2:
        records += sclient.next_chunk().records()
    assert [body for _, body in records] == [b"\x00Sw\xa1\x01a", b"\x00Sw\xa1\x01b"]
