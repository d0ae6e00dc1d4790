"""Publishing over a real connection: outcomes, stored bytes, rejections, pre-settled."""

from __future__ import annotations

import os

import pytest
from proton import Message, symbol
from proton.utils import LinkDetached

from tests.broker.amqp import Client, annotations, offset, Delivery

from amqp_stream.testing import BrokerProcess
from storage import OffsetSpec


def _stored(broker, name: str) -> list[bytes]:
    """The records of a stream as stored on disk (read from its files alone)."""
    from storage import open_reader
    root = broker.data_dir / "streams"
    for d in root.iterdir():
        meta = (d / "stream.json")
        if meta.is_file() and f'"name": "{name}"' in meta.read_text():
            out = []
            with open_reader(str(d / "log"), OffsetSpec.first()) as reader:
                while (chunk := reader.read_chunk()) is not None:
                    out.extend(bytes(b) for _, b in chunk.records)
            return out
    raise AssertionError(f"no directory for {name}")


def test_publish_is_accepted_and_stored_verbatim_without_delivery_annotations(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        m = Message(body="hello", annotations={"x-stream-filter-value": "red"},
                    instructions={"x-opt-da": 1}, properties={"k": 1}, durable=True)
        assert c.publish(stream_name, [m]) == [Delivery.ACCEPTED]
        assert c.info(stream_name)["message_count"] == 1
    stored = _stored(broker, stream_name)
    assert len(stored) == 1
    expected = Message(body="hello", annotations={"x-stream-filter-value": "red"},
                       properties={"k": 1}, durable=True).encode()
    assert stored[0] == expected


def test_non_string_filter_value_is_rejected_and_others_go_on(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        bad = Message(body="x", annotations={"x-stream-filter-value": 42}).encode()
        assert c.send_bytes(sender, bad) == Delivery.REJECTED
        cond = c.last_delivery.remote.condition
        assert cond is not None and cond.name == "amqp:invalid-field"
        assert c.send_bytes(sender, Message(body="ok").encode()) == Delivery.ACCEPTED
        assert c.info(stream_name)["message_count"] == 1


def test_garbage_transfer_bytes_are_rejected(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        assert c.send_bytes(sender, b"\x00\x53\x77\xa1\xff garbage") == Delivery.REJECTED
        assert c.last_delivery.remote.condition.name == "amqp:decode-error"
        assert c.send_bytes(sender, Message(body="fine").encode()) == Delivery.ACCEPTED


def test_oversize_message_is_rejected(tmp_path):
    b = BrokerProcess(tmp_path / "data", extra_args=["--max-message-size", "1000"]).start()
    try:
        with Client(b.url) as c:
            c.declare("s")
            sender = c.sender("s")
            big = Message(body=b"x" * 5000).encode()  # several frames? at least > limit
            assert c.send_bytes(sender, big) == Delivery.REJECTED
            assert c.last_delivery.remote.condition.name == "amqp:link:message-size-exceeded"
            assert c.send_bytes(sender, Message(body=b"y" * 100).encode()) == Delivery.ACCEPTED
            assert c.info("s")["message_count"] == 1
    finally:
        b.close()


def test_oversize_multi_frame_message_is_rejected_and_presettled_oversize_dropped(tmp_path):
    """A message over the limit that arrives in many transfers is rejected once it is complete
    (nothing of it kept meanwhile); a pre-settled one is dropped; both leave the link working."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--max-message-size", "20000"]).start()
    try:
        with Client(b.url) as c:
            c.declare("s")
            sender = c.sender("s")
            big = Message(body=os.urandom(300_000)).encode()
            assert c.send_bytes(sender, big) == Delivery.REJECTED
            assert c.last_delivery.remote.condition.name == "amqp:link:message-size-exceeded"
            settled = c.conn.create_sender("/queues/s", name="presettled", options=[_AtMostOnce()])
            settled.send(Message(body=os.urandom(300_000)))
            settled.send(Message(body=b"small"))
            assert c.send_bytes(sender, Message(body=b"y" * 100).encode()) == Delivery.ACCEPTED
            stored = _stored(b, "s")
            assert len(stored) == 2 and all(len(x) < 200 for x in stored)
    finally:
        b.close()


def test_aborted_delivery_is_dropped_and_the_next_one_stored(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        link = sender.link
        c.conn.wait(lambda: link.credit > 0, msg="waiting for credit")
        dlv = link.delivery(b"aborted-1")
        link.send(Message(body=os.urandom(200_000)).encode()[:150_000])
        c.conn.wait(lambda: link.queued == 0, msg="waiting for the first part to go", timeout=10)
        dlv.abort()
        assert c.send_bytes(sender, Message(body=b"after").encode()) == Delivery.ACCEPTED
        stored = _stored(broker, stream_name)
        assert len(stored) == 1
        msg = Message()
        msg.decode(stored[0])
        assert msg.body == b"after"


def test_large_multi_frame_message_round_trips(broker, stream_name):
    body = os.urandom(300_000)
    with Client(broker.url) as c:
        c.declare(stream_name)
        assert c.publish(stream_name, [Message(body=body)]) == [Delivery.ACCEPTED]
        r = c.receiver(stream_name, [(symbol("o"), offset("first"))], credit=1)
        msg = r.receive(timeout=15)
        assert msg.body == body
        assert annotations(msg)["x-stream-offset"] == 0


def test_presettled_publishing(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name, options=[_AtMostOnce()])
        for i in range(50):
            sender.send(Message(body=f"m{i}"))
        r = c.receiver(stream_name, [(symbol("o"), offset("first"))], credit=100)
        got = [r.receive(timeout=15).body for _ in range(50)]
        assert got == [f"m{i}" for i in range(50)]


def _AtMostOnce():
    from proton.reactor import AtMostOnce
    return AtMostOnce()


def test_publisher_to_unknown_stream_is_refused_with_not_found(broker):
    with Client(broker.url) as c:
        with pytest.raises(LinkDetached) as info:
            c.sender("no-such-stream-here")
        assert "amqp:not-found" in str(info.value)
        # the connection still works
        c.declare("after-refusal-" + str(os.getpid()))


def test_publisher_credit_is_granted_and_topped_up(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        c.conn.wait(lambda: sender.link.credit > 0)
        assert sender.link.credit == 170
        for i in range(400):  # more than the initial credit: needs top-ups
            sender.send(Message(body=i))
        assert c.info(stream_name)["message_count"] == 400


def test_delete_detaches_publisher_and_removes_files(broker, stream_name):
    with Client(broker.url) as c, Client(broker.url) as other:
        c.declare(stream_name)
        sender = other.sender(stream_name)
        sender.send(Message(body="x"))
        stream_dirs = {d.name for d in (broker.data_dir / "streams").iterdir()}
        assert c.delete(stream_name) == 1
        with pytest.raises(LinkDetached) as info:
            other.conn.wait(lambda: False, timeout=10)
        assert "amqp:resource-deleted" in str(info.value)
        after = {d.name for d in (broker.data_dir / "streams").iterdir()}
        assert len(stream_dirs - after) == 1
        # the name can be declared again, empty
        c.declare(stream_name)
        assert c.info(stream_name)["message_count"] == 0


class _SmallDiskBroker(BrokerProcess):
    """A broker whose files may not grow beyond ~200 KB (RLIMIT_FSIZE): writes fail for real
    with EFBIG, as they would with ENOSPC on a full disk."""

    def command(self):
        return ["sh", "-c", 'ulimit -f 400 && exec "$@"', "sh", *super().command()]


def test_disk_full_rejects_with_resource_limit_and_the_broker_keeps_serving(tmp_path):
    b = _SmallDiskBroker(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("full")
            c.declare("other")
            sender = c.sender("full")
            outcomes = []
            for _i in range(40):
                outcomes.append(c.send_bytes(sender, Message(body=os.urandom(10_000)).encode()))
                if outcomes[-1] == Delivery.REJECTED:
                    break
            assert outcomes[-1] == Delivery.REJECTED
            assert c.last_delivery.remote.condition.name == "amqp:resource-limit-exceeded"
            accepted = outcomes.count(Delivery.ACCEPTED)
            assert accepted >= 1
            # what was accepted is readable; other streams and the management node still work
            r = c.receiver("full", [(symbol("o"), offset("first"))], credit=100)
            assert len([r.receive(timeout=15) for _ in range(accepted)]) == accepted
            assert c.publish("other", [Message(body="small")]) == [Delivery.ACCEPTED]
    finally:
        b.close()


class _WindowPublisher:
    """An asynchronous publisher that keeps the broker's whole credit window in flight (as the
    official clients do), counting outcomes; used to load the settle path."""

    def __init__(self, url: str, address: str, messages: list[bytes]):
        from proton.handlers import MessagingHandler

        outer = self

        class Handler(MessagingHandler):
            def __init__(self):
                super().__init__(auto_settle=True)
                self.sent = 0

            def on_start(self, event):
                conn = event.container.connect(url)
                event.container.create_sender(conn, address)

            def on_sendable(self, event):
                s = event.sender
                while s.credit and self.sent < len(messages):
                    s.delivery(str(self.sent))
                    s.send(messages[self.sent])
                    s.advance()
                    self.sent += 1

            def on_accepted(self, event):
                outer.accepted += 1
                self._done(event)

            def on_rejected(self, event):
                outer.rejected += 1
                self._done(event)

            def _done(self, event):
                if outer.accepted + outer.rejected == len(messages):
                    event.connection.close()

        self.accepted = self.rejected = 0
        self.handler = Handler()

    def run(self) -> None:
        from proton.reactor import Container
        Container(self.handler).run()


def test_a_full_window_of_unsettled_publishes_is_all_accepted(broker, stream_name):
    """Regression: settling thousands of in-flight deliveries from the writer thread's
    callbacks once crashed proton-C (a Delivery wrapper freed on the writer thread)."""
    with Client(broker.url) as c:
        c.declare(stream_name)
    messages = [Message(body=i, annotations={"x-stream-filter-value": str(i % 3)}).encode()
                for i in range(6000)]
    p = _WindowPublisher(broker.url, f"/queues/{stream_name}", messages)
    p.run()
    assert (p.accepted, p.rejected) == (6000, 0)
    with Client(broker.url) as c:
        assert c.info(stream_name)["message_count"] == 6000
        r = c.receiver(stream_name, [(symbol("o"), offset("first"))], credit=500)
        offsets = [annotations(r.receive(timeout=15))["x-stream-offset"] for _ in range(6000)]
        assert offsets == list(range(6000))


def test_anonymous_terminus_routes_by_to(broker, stream_name):
    """A null target address: each message's ``to`` says where it goes (RabbitMQ's v2 format),
    answered as rabbit_amqp_session does: a stream that is not there is the default exchange
    routing nowhere (released); no ``to``, a bad one, a missing exchange: rejected."""
    a, b = stream_name + "-a", stream_name + "-b"
    with Client(broker.url) as c:
        c.declare(a)
        c.declare(b)
        sender = c.conn.create_sender(None, name="anon")
        assert c.send_bytes(sender, Message(address=f"/queues/{a}", body=1).encode()) == Delivery.ACCEPTED
        assert c.send_bytes(sender, Message(address=f"/queues/{b}", body=2).encode()) == Delivery.ACCEPTED
        assert c.send_bytes(sender, Message(address="/queues/missing-" + stream_name, body=3).encode()) == Delivery.RELEASED
        assert c.send_bytes(sender, Message(body=4).encode()) == Delivery.REJECTED
        assert c.last_delivery.remote.condition.name == "amqp:precondition-failed"
        assert c.last_delivery.remote.condition.description == "anonymous terminus requires 'to' address to be set"
        assert c.send_bytes(sender, Message(address="/exchanges/amq.default", body=5).encode()) == Delivery.REJECTED
        assert c.last_delivery.remote.condition.description == "bad 'to' address string: /exchanges/amq.default"
        assert c.send_bytes(sender, Message(address="/exchanges/missing", body=6).encode()) == Delivery.REJECTED
        assert c.last_delivery.remote.condition.name == "amqp:not-found"
        assert c.last_delivery.remote.condition.description == "no exchange 'missing' in vhost '/'"
        assert c.info(a)["message_count"] == 1 and c.info(b)["message_count"] == 1
