"""A filtered AMQP consumer delivers exactly the records the general matcher keeps, in order,
whatever the path (the one-pass matcher, the general one, a stream with a derived key), the
credit (a few at a time, so matched records wait between turns) and the settle mode: random
messages and filters over a real broker, the expected deliveries computed here with the filter
evaluated on each ``proton.Message`` (the plain path)."""

from __future__ import annotations

import itertools
import time

import proton
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from proton import Described, Message, symbol
from proton.reactor import AtMostOnce

from amqp_stream.filtering import install
from sqlfilter import compile_sql
from tests.broker.amqp import OFFSET, SQL, Client, Settled, offset

install()

_KINDS = (int, proton.ubyte, proton.short, proton.uint, proton.ulong, str, float)
_names = itertools.count()


def _value(kind: type, n: int) -> object:
    return f"r{n}" if kind is str else float(n) if kind is float else kind(n)


@st.composite
def _messages(draw) -> list[Message]:
    out = []
    for i in range(draw(st.integers(1, 300))):
        props = {}
        if draw(st.integers(0, 9)):  # now and then no such key
            props["region"] = draw(st.sampled_from(("r1", "r2", "r3", symbol("r1"), "é", 7)))
        if draw(st.integers(0, 9)):
            props["k"] = _value(draw(st.sampled_from(_KINDS)), draw(st.integers(0, 12)))
        out.append(Message(body=f"{i}", properties=props or None, durable=draw(st.booleans()),
                           subject=draw(st.sampled_from((None, f"s{i}")))))
    return out


FILTERS = ("region = 'r1'", "region IN ('r2', 'r3')", "k = 7", "k < 5", "k >= 10", "k <> 3",
           "7 = k", "region = 'r1' OR k = 3", "k + 0 = 7", "region LIKE 'r%' AND k > 2")


def _fill(c: Client, name: str, messages: list[Message]) -> None:
    """Publish pre-settled; every other message without proton's empty header (the shapes the
    consumer splices ``x-stream-offset`` into on its own: no header, an empty one, any other)."""
    sender = c.conn.create_sender(f"/queues/{name}", options=[AtMostOnce()], name="fill")
    link = sender.link
    for i, m in enumerate(messages):
        data = bytes(m.encode())
        if i % 2 and data.startswith(b"\x00\x53\x70\x45"):
            data = data[4:]
        c.conn.wait(lambda: link.credit > 0, msg="waiting for credit")  # noqa: B023
        delivery = link.delivery(str(i))
        link.send(data)
        link.advance()
        delivery.settle()
    deadline = time.monotonic() + 30
    while c.info(name)["next_offset"] < len(messages):
        assert time.monotonic() < deadline, "the stream did not take the messages"
        time.sleep(0.02)
    sender.close()


@settings(max_examples=10, deadline=None, phases=(Phase.generate,), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(messages=_messages(), sqls=st.lists(st.sampled_from(FILTERS), min_size=2, max_size=4,
                                           unique=True),
       credit=st.sampled_from((1, 3, 7, 1000)), settled=st.booleans())
def test_deliveries_are_what_the_general_matcher_keeps(broker, messages, sqls, credit, settled):
    with Client(broker.url) as c:
        names = [f"fd-{next(_names)}", f"fd-{next(_names)}"]
        c.declare(names[0])
        c.declare(names[1], {"x-queue-type": "stream", "x-stream-derived-filter-keys": ["region"]})
        for name in names:
            _fill(c, name, messages)
        for sql in sqls:
            f = compile_sql(sql)
            want = [m.body for m in messages if f.evaluate(m) is True]
            for name in names:
                r = c.receiver(name, [(OFFSET, offset("first")), (symbol("q"), Described(SQL, sql))],
                               credit=credit, options=[Settled()] if settled else None)
                got = []
                for _ in want:
                    m = r.receive(timeout=15)
                    sent = messages[int(m.body)]  # every other byte as sent
                    assert m.annotations[symbol("x-stream-offset")] == int(m.body)
                    assert (m.subject, m.properties, m.durable) == (sent.subject, sent.properties,
                                                                    sent.durable)
                    got.append(m.body)
                    if not settled:
                        r.accept()
                # nothing more comes: a drain answers with what is left
                r.link.drain(1000)
                c.conn.wait(lambda: not r.link.draining(), timeout=15)  # noqa: B023
                assert r.fetcher.has_message == 0, (sql, name)
                r.close()
                assert got == want, (sql, name, credit, settled)
        for name in names:
            c.delete(name)
