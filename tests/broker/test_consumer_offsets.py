"""Named AMQP 1.0 consumers (an extension, ``amqp_stream.amqp.tracking``): a receiver link with
the attach property ``x-consumer-name`` starts after the offset stored for that name and
stores the highest offset the client accepted (every ``STORE_EVERY`` acceptances and at
detach); the management node reads it."""

from __future__ import annotations

from proton import Message, symbol
from proton.reactor import LinkOption

from amqp_stream.amqp.tracking import STORE_EVERY
from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, annotations, offset

FIRST = [(symbol("rabbitmq:stream-offset-spec"), offset("first"))]  # overridden once stored


class Named(LinkOption):
    def __init__(self, name: str):
        self.name = name

    def apply(self, link) -> None:
        link.properties = {symbol("x-consumer-name"): self.name}


def offsets_of(messages) -> list[int]:
    return [annotations(m)["x-stream-offset"] for m in messages]


def test_a_named_consumer_resumes_after_what_it_accepted(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        c.publish(stream_name, [Message(body=f"m{k}") for k in range(10)])
        r = c.receiver(stream_name, FIRST, options=[Named("reader")], credit=4)
        got = [r.receive(timeout=15) for _ in range(4)]
        for _ in range(3):  # accepts the first three; the fourth stays unsettled
            r.accept()
        # proton's BlockingReceiver settles in order: accept() three times = m0..m2
        r.close()
        status, body, _ = c.request("GET", f"/queues/{stream_name}/offsets/reader")
        first = offsets_of(got)
        assert (status, body) == (200, {"offset": first[2]})
        r = c.receiver(stream_name, FIRST, options=[Named("reader")], credit=10)
        again = [r.receive(timeout=15) for _ in range(7)]
        assert [m.body for m in again] == [f"m{k}" for k in range(3, 10)]
        r.close()
        # another name has its own place
        r = c.receiver(stream_name, FIRST, options=[Named("other")], credit=1)
        assert r.receive(timeout=15).body == "m0"
        r.close()


def test_a_named_consumers_offset_is_stored_while_it_reads_and_survives_a_restart(tmp_path):
    n = STORE_EVERY + 5
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        with Client(broker.url) as c:
            c.declare("s")
            c.publish("s", [Message(body=k) for k in range(n)])
            r = c.receiver("s", FIRST, options=[Named("r")], credit=n)
            got = c.receive_all(r, STORE_EVERY)  # accepts each one
            # stored while the link is attached, after STORE_EVERY acceptances
            for _ in range(200):
                status, body, _ = c.request("GET", "/queues/s/offsets/r")
                if status == 200:
                    break
            assert (status, body) == (200, {"offset": offsets_of(got)[-1]})
        broker.kill()  # no detach: what was stored is what survives
        broker.start()
        with Client(broker.url) as c:
            r = c.receiver("s", FIRST, options=[Named("r")], credit=n)
            assert [m.body for m in c.receive_all(r, 5)] == list(range(STORE_EVERY, n))
    finally:
        broker.close()
