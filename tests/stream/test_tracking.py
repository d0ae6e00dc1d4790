"""Stored offsets and publisher references on the stream listener beyond what the conformance
suite checks against RabbitMQ: references over 255 bytes (RabbitMQ 3.11+'s answers), and a
stream whose writer failed for real answering queries with INTERNAL_ERROR without dropping the
connection or the broker, and one reference shared with the AMQP 1.0 extension."""

from __future__ import annotations

import os

from proton import Message

from amqp_stream.streamproto import ResponseCode
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient
from storage.format import SEGMENT_HEADER_BYTES
from tests.broker.amqp import Client, Delivery
from tests.broker.test_dedup import send


def connect(b: BrokerProcess) -> StreamClient:
    return StreamClient("127.0.0.1", b.stream_port)


def test_references_over_255_bytes(tmp_path):
    """DeclarePublisher refuses one (PRECONDITION_FAILED); StoreOffset drops it; the queries
    answer "nothing stored" for it, as for any reference that was never stored."""
    long = "r" * 256
    with BrokerProcess(tmp_path / "data") as b, connect(b) as c:
        assert c.create_stream("s") == OK
        assert c.declare_publisher(1, "s", long) == ResponseCode.PRECONDITION_FAILED
        assert c.declare_publisher(1, "s", "r" * 255) == OK
        c.store_offset(long, "s", 5)
        assert c.query_offset(long, "s")[0] == ResponseCode.NO_OFFSET
        assert c.query_offset("", "s")[0] == ResponseCode.NO_OFFSET
        assert c.query_publisher_sequence(long, "s") == (OK, 0)
        c.store_offset("ok", "s", 5)
        assert c.query_offset("ok", "s") == (OK, 5)


class _SmallDiskBroker(BrokerProcess):
    """Files may not grow beyond 200 KB (RLIMIT_FSIZE): a write past it fails with EFBIG."""

    def command(self):
        return ["sh", "-c", 'ulimit -f 400 && exec "$@"', "sh", *super().command()]


def test_a_failed_writer_answers_queries_with_internal_error(tmp_path):
    """A write error on a stream whose segment was cut below its committed end (the disk full
    and the file damaged): the writer cannot reopen it, so its tracking state may be ahead of
    the disk; QueryOffset and QueryPublisherSequence answer INTERNAL_ERROR, StoreOffset is
    dropped, and the connection and the other streams go on."""
    with _SmallDiskBroker(tmp_path / "data") as b, connect(b) as c:
        assert c.create_stream("s") == OK
        assert c.create_stream("other") == OK
        assert c.declare_publisher(1, "s", "p") == OK
        c.publish(1, [(1, b"small")])
        assert c.wait_confirms(1, [1]) == {1: OK}
        c.store_offset("c", "s", 0)
        assert c.query_offset("c", "s") == (OK, 0)
        segments = list((b.data_dir / "streams" / "s" / "log").glob("*.segment"))
        assert len(segments) == 1
        os.truncate(segments[0], SEGMENT_HEADER_BYTES)
        c.publish(1, [(2, os.urandom(300_000))])  # past the file size limit
        assert c.wait_confirms(1, [2]) == {2: ResponseCode.INTERNAL_ERROR}
        assert c.query_offset("c", "s")[0] == ResponseCode.INTERNAL_ERROR
        assert c.query_publisher_sequence("p", "s")[0] == ResponseCode.INTERNAL_ERROR
        c.store_offset("c", "s", 1)
        assert c.query_offset("c", "other")[0] == ResponseCode.NO_OFFSET
        assert c.declare_publisher(2, "other", "p") == OK
        c.publish(2, [(1, b"elsewhere")])
        assert c.wait_confirms(2, [1]) == {1: OK}
        assert c.query_publisher_sequence("p", "other") == (OK, 1)
    assert "Traceback" not in b.log_text()


def test_one_reference_is_deduplicated_across_the_two_protocols(tmp_path):
    """A stream-protocol producer and an AMQP 1.0 publisher link (the extension) with the same
    reference share one sequence per stream."""
    with BrokerProcess(tmp_path / "data") as b, connect(b) as c:
        assert c.create_stream("x") == OK
        assert c.declare_publisher(1, "x", "shared") == OK
        c.publish(1, [(i, Message(body=f"m{i}").encode()) for i in (1, 2, 3)])
        assert c.wait_confirms(1, [1, 2, 3]) == {i: OK for i in (1, 2, 3)}
        with Client(b.url) as amqp:
            assert send(amqp, "x", "shared", [(2, "a2"), (4, "a4")]) == [Delivery.ACCEPTED] * 2
        assert c.query_publisher_sequence("shared", "x") == (OK, 4)
        c.publish(1, [(4, Message(body="m4").encode()), (5, Message(body="m5").encode())])
        assert c.wait_confirms(1, [4, 5]) == {4: OK, 5: OK}
        assert c.subscribe(1, "x", credit=10) == OK
        got: list[str] = []
        while len(got) < 5:
            chunk = c.next_chunk()
            c.credit(1, 1)
            for _, data in chunk.records():
                m = Message()
                m.decode(data)
                got.append(m.body)
        assert got == ["m1", "m2", "m3", "a4", "m5"]
