"""Named AMQP 1.0 consumers (an extension, ``amqp_stream.amqp.tracking``): a receiver link with
the attach property ``x-consumer-name`` (or the source ``/queues/<s>/consumers/<name>``) starts
after the offset stored for that name and stores the highest offset the client accepted (every
``--offset-store-every`` acceptances, ``--offset-store-interval-ms`` after one, and at detach);
the management node reads it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from proton import Message, symbol
from proton.reactor import LinkOption

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, LinkDetached, RawFilter, annotations, offset
from tests.polling import wait_for

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


STORE_EVERY = 100


def test_a_named_consumers_offset_is_stored_while_it_reads_and_survives_a_restart(tmp_path):
    n = STORE_EVERY + 5
    # stored by count only: no timer
    broker = BrokerProcess(tmp_path / "data", extra_args=["--offset-store-every", str(STORE_EVERY),
                                                          "--offset-store-interval-ms", "0"])
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


def stored(c: Client, stream: str, name: str) -> tuple[int, object]:
    status, body, _ = c.request("GET", f"/queues/{stream}/offsets/{name}")
    return status, body


def test_the_timer_stores_an_attached_consumers_offset_and_the_count_is_a_setting(tmp_path):
    """Few settlements (below the count) are stored by the timer while the link stays attached;
    with the timer off and a count of 2, two acceptances store."""
    with BrokerProcess(tmp_path / "a", extra_args=["--offset-store-every", "0",
                                                   "--offset-store-interval-ms", "50"]) as broker:
        with Client(broker.url) as c:
            c.declare("s")
            c.publish("s", [Message(body=k) for k in range(10)])
            r = c.receiver("s", FIRST, options=[Named("t")], credit=3)
            got = c.receive_all(r, 3)
            wait_for(lambda: stored(c, "s", "t")[0] == 200, 15, "the timer's store")
            assert stored(c, "s", "t") == (200, {"offset": offsets_of(got)[-1]})
            r.close()
    with BrokerProcess(tmp_path / "b", extra_args=["--offset-store-every", "2",
                                                   "--offset-store-interval-ms", "0"]) as broker:
        with Client(broker.url) as c:
            c.declare("s")
            c.publish("s", [Message(body=k) for k in range(10)])
            r = c.receiver("s", FIRST, options=[Named("n")], credit=3)
            got = c.receive_all(r, 2)
            wait_for(lambda: stored(c, "s", "n")[0] == 200, 15, "the count's store")
            assert stored(c, "s", "n") == (200, {"offset": offsets_of(got)[-1]})
            r.close()


_HOLDER = """
import sys, time
from proton import symbol
from tests.broker.amqp import Client
from tests.broker.test_consumer_offsets import FIRST, Named
c = Client(sys.argv[1])
r = c.receiver("s", FIRST, options=[Named("gone")], credit=2)
c.receive_all(r, 2)
c.request("GET", "/queues/s")  # a round trip: the broker has read the dispositions
print("accepted", flush=True)
time.sleep(600)
"""


def test_a_connection_lost_stores_the_offset(tmp_path):
    """No detach, no timer, no count: the broker stores when the connection goes (the client
    process is killed)."""
    with BrokerProcess(tmp_path / "d", extra_args=["--offset-store-every", "0",
                                                   "--offset-store-interval-ms", "0"]) as broker:
        with Client(broker.url) as c:
            c.declare("s")
            c.publish("s", [Message(body=k) for k in range(5)])
            holder = subprocess.Popen([sys.executable, "-c", _HOLDER, broker.url],
                                      stdout=subprocess.PIPE, text=True)
            try:
                assert holder.stdout.readline().strip() == "accepted"
                assert stored(c, "s", "gone")[0] == 404  # not stored while attached
                holder.kill()
                holder.wait(timeout=30)
            finally:
                if holder.poll() is None:
                    holder.kill()
                    holder.wait(timeout=30)
                holder.stdout.close()
            wait_for(lambda: stored(c, "s", "gone")[0] == 200, 15, "the store at connection loss")
            assert stored(c, "s", "gone") == (200, {"offset": 1})


def test_the_source_address_names_a_consumer(broker, stream_name):
    """``/queues/<s>/consumers/<name>`` names the link like the attach property (for clients
    that cannot set attach properties); both given must agree."""
    with Client(broker.url) as c:
        c.declare(stream_name)
        c.publish(stream_name, [Message(body=f"m{k}") for k in range(6)])
        address = f"/queues/{stream_name}/consumers/by%20address"
        r = c.conn.create_receiver(address, credit=3, options=[RawFilter(FIRST)])
        assert [m.body for m in c.receive_all(r, 3)] == ["m0", "m1", "m2"]
        r.close()
        status, body, _ = c.request("GET", f"/queues/{stream_name}/offsets/by%20address")
        assert status == 200
        # the same name through the attach property resumes there
        r = c.receiver(stream_name, FIRST, options=[Named("by address")], credit=3)
        assert [m.body for m in c.receive_all(r, 3)] == ["m3", "m4", "m5"]
        r.close()
        with pytest.raises(LinkDetached, match="names 'by address'"):
            c.conn.create_receiver(address, credit=1, options=[RawFilter(FIRST), Named("other")])
