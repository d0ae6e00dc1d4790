"""Consuming over a real connection: offsets, the three filter kinds, echo, credit, drain, waking."""

from __future__ import annotations

import time

import pytest
from cproton_ffi import ffi, lib
from proton import Described, Message, symbol, timestamp, ulong
from proton.utils import LinkDetached

from amqp_stream.amqp.tags import tag_number
from tests.broker.amqp import (APP_PROPS, OFFSET, PROPS, SQL, UNFILTERED, VALUES, Client,
                               Settled, annotations, arrived, echo_of, offset)


def _publish(c: Client, name: str, messages: list[Message]) -> None:
    sender = c.sender(name)
    for m in messages:
        sender.send(m)  # waits for the outcome; raises unless accepted
    sender.close()


def _fill(c: Client, name: str, messages: list[Message]) -> None:
    """Publish many messages fast (pre-settled), then wait until the stream holds them all."""
    from proton.reactor import AtMostOnce
    before = c.info(name)["next_offset"]
    fast = c.conn.create_sender(f"/queues/{name}", options=[AtMostOnce()], name="fill")
    for m in messages:
        fast.send(m)
    for _ in range(600):
        if c.info(name)["next_offset"] >= before + len(messages):
            break
        time.sleep(0.05)
    fast.close()
    assert c.info(name)["next_offset"] == before + len(messages)


def _bodies(msgs) -> list:
    return [m.body for m in msgs]


def _no_more(c: Client, receiver, wait: float = 0.5) -> bool:
    """True when nothing arrives within ``wait`` seconds (used only to check absence)."""
    try:
        receiver.receive(timeout=wait)
    except Exception:
        return True
    return False


@pytest.fixture
def client(broker):
    c = Client(broker.url)
    yield c
    c.close()


def test_first_delivers_everything_with_x_stream_offset_and_bytes_unchanged(client, stream_name):
    client.declare(stream_name)
    msgs = [Message(body=f"m{i}", properties={"i": i}, subject="s", annotations={"a": i})
            for i in range(10)]
    _publish(client, stream_name, msgs)
    r = client.receiver(stream_name, [(symbol("my-offset"), offset("first"))])
    got = client.receive_all(r, 10)
    assert _bodies(got) == [f"m{i}" for i in range(10)]
    for i, m in enumerate(got):
        ann = annotations(m)
        assert ann["x-stream-offset"] == i
        assert ann["a"] == i
        assert m.properties == {"i": i} and m.subject == "s"
    assert echo_of(r) == [(symbol("my-offset"), Described(OFFSET, "first"))]


def test_no_filter_means_next_and_null_echo(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body="old")])
    r = client.receiver(stream_name, None)
    assert echo_of(r) is None
    _publish(client, stream_name, [Message(body="new")])
    assert r.receive(timeout=15).body == "new"  # woken by the new chunk, "old" not delivered


def test_offset_n_drops_records_below_it_and_accepts_every_integer_type(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i) for i in range(10)])
    for value in (7, ulong(7), 7):
        r = client.receiver(stream_name, [(OFFSET, offset(value))], credit=10)
        got = client.receive_all(r, 3)
        assert [annotations(m)["x-stream-offset"] for m in got] == [7, 8, 9]
        r.close()


def test_offset_beyond_the_end_means_next(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body="a")])
    r = client.receiver(stream_name, [(OFFSET, offset(1000))])
    _publish(client, stream_name, [Message(body="b")])
    m = r.receive(timeout=15)
    assert m.body == "b" and annotations(m)["x-stream-offset"] == 1


def test_last_delivers_the_last_chunk(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i) for i in range(3)])  # 3 chunks (one by one)
    r = client.receiver(stream_name, [(OFFSET, offset("last"))])
    assert r.receive(timeout=15).body == 2
    assert _no_more(client, r)


def test_timestamp_and_interval_offsets(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body="early")])
    r = client.receiver(stream_name, [(OFFSET, offset("1h"))])
    assert r.receive(timeout=15).body == "early"
    r.close()
    future = timestamp(int(time.time() * 1000) + 3_600_000)
    r = client.receiver(stream_name, [(OFFSET, offset(future))])
    _publish(client, stream_name, [Message(body="later")])
    assert r.receive(timeout=15).body == "later"
    r.close()
    past = timestamp(0)
    r = client.receiver(stream_name, [(OFFSET, offset(past))])
    assert r.receive(timeout=15).body == "early"


@pytest.mark.parametrize("bad", ["firstish", "10x", "-5m", True, [1, 2]])
def test_unusable_offset_spec_refuses_the_link(client, stream_name, bad):
    client.declare(stream_name)
    with pytest.raises(LinkDetached) as info:
        client.receiver(stream_name, [(OFFSET, offset(bad))])
    assert "amqp:invalid-field" in str(info.value)
    # the connection keeps working
    r = client.receiver(stream_name, [(OFFSET, offset("first"))], link_name="another")
    assert echo_of(r) == [(OFFSET, Described(OFFSET, "first"))]


def test_negative_offset_refuses_the_link(client, stream_name):
    client.declare(stream_name)
    with pytest.raises(LinkDetached):
        client.receiver(stream_name, [(OFFSET, offset(-1))])


def test_unknown_stream_is_refused_with_not_found(client):
    with pytest.raises(LinkDetached) as info:
        client.receiver("there-is-no-such-stream", None)
    assert "amqp:not-found" in str(info.value)


def test_stage1_bloom_filter_values_and_match_unfiltered(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name,
             [Message(body="red1", annotations={"x-stream-filter-value": "red"}),
              Message(body="blue1", annotations={"x-stream-filter-value": "blue"}),
              Message(body="plain"),
              Message(body="red2", annotations={"x-stream-filter-value": "red"})])
    # each publish was confirmed alone, so each message has its own chunk
    r = client.receiver(stream_name, [(OFFSET, offset("first")), (VALUES, Described(VALUES, "red"))])
    assert _bodies(client.receive_all(r, 2)) == ["red1", "red2"]
    assert _no_more(client, r)
    r.close()
    r = client.receiver(stream_name, [(OFFSET, offset("first")),
                                      (VALUES, Described(VALUES, ["red", "blue"])),
                                      (UNFILTERED, Described(UNFILTERED, True))])
    assert _bodies(client.receive_all(r, 4)) == ["red1", "blue1", "plain", "red2"]
    assert [k for k, _ in echo_of(r)] == [OFFSET, VALUES, UNFILTERED]


def test_sql_filter_by_symbol_and_by_code(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i, properties={"n": i}, subject="even" if i % 2 == 0 else "odd")
                                   for i in range(10)])
    for descriptor in (SQL, ulong(0x120)):
        r = client.receiver(stream_name, [(OFFSET, offset("first")),
                                          (symbol("sql-filter"), Described(descriptor, "n >= 6 AND p.subject = 'even'"))])
        assert _bodies(client.receive_all(r, 2)) == [6, 8]
        assert echo_of(r)[1] == (symbol("sql-filter"), Described(descriptor, "n >= 6 AND p.subject = 'even'"))
        assert _no_more(client, r)
        r.close()


def test_invalid_entries_are_left_out_of_the_echo_and_the_link_attaches(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i, properties={"n": i}) for i in range(4)])
    entries = [
        (OFFSET, offset("first")),
        (symbol("bad-sql"), Described(SQL, "n >>> 3")),            # syntax error
        ("string-key", Described(VALUES, "x")),                    # key is not a symbol
        (symbol("weird"), Described(symbol("no:such-filter"), 1)),  # unknown descriptor
        (symbol("bare"), "no descriptor"),                         # not described
        (symbol("vals"), Described(VALUES, 12)),                   # wrong value type
        (symbol("mu"), Described(UNFILTERED, "yes")),              # not a boolean
        (symbol("sql"), Described(SQL, 42)),                       # not a string
        (symbol("pf"), Described(ulong(0x173), "not a map")),
        (symbol("unknown-code"), Described(ulong(0x999), "x")),
    ]
    r = client.receiver(stream_name, entries)
    assert echo_of(r) == [(OFFSET, Described(OFFSET, "first"))]
    assert _bodies(client.receive_all(r, 4)) == [0, 1, 2, 3]  # no stage 2 in place


def test_none_accepted_echoes_an_empty_map(client, stream_name):
    client.declare(stream_name)
    r = client.receiver(stream_name, [(symbol("x"), Described(symbol("no:such"), 1))])
    assert echo_of(r) == []


def test_filter_that_is_not_a_map_is_ignored(client, stream_name):
    client.declare(stream_name)
    from tests.broker.amqp import RawFilter
    r = client.conn.create_receiver(f"/queues/{stream_name}", options=[RawFilter("just a string")])
    assert echo_of(r) == []


def test_conflict_later_entry_wins_sql_over_properties(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i, subject="a" if i < 2 else "b") for i in range(4)])
    props = (symbol("p"), Described(PROPS, {symbol("subject"): "a"}))
    sql = (symbol("q"), Described(SQL, "p.subject = 'b'"))
    r = client.receiver(stream_name, [(OFFSET, offset("first")), props, sql])
    assert [k for k, _ in echo_of(r)] == [OFFSET, symbol("q")]
    assert _bodies(client.receive_all(r, 2)) == [2, 3]
    r.close()
    r = client.receiver(stream_name, [(OFFSET, offset("first")), sql, props])
    assert [k for k, _ in echo_of(r)] == [OFFSET, symbol("p")]
    assert _bodies(client.receive_all(r, 2)) == [0, 1]
    assert _no_more(client, r)


def test_property_filters_by_symbol_and_code(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i, subject=f"s{i % 2}", properties={"k": f"v{i % 3}"})
                                   for i in range(6)])
    r = client.receiver(stream_name, [(OFFSET, offset("first")),
                                      (symbol("p"), Described(ulong(0x173), {symbol("subject"): "s0"})),
                                      (symbol("a"), Described(APP_PROPS, {"k": "&p:v0"}))])
    assert _bodies(client.receive_all(r, 1)) == [0]
    assert len(echo_of(r)) == 3
    assert _no_more(client, r)


def test_filtered_messages_use_no_credit_and_drain_returns_the_rest(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i, properties={"n": i}) for i in range(20)])
    r = client.receiver(stream_name, [(OFFSET, offset("first")), (SQL, Described(SQL, "n % 5 = 0"))],
                        credit=0)
    link = r.link
    link.flow(10)
    got = [r.receive(timeout=15).body for _ in range(4)]
    assert got == [0, 5, 10, 15]
    r.fetcher.incoming.clear() if hasattr(r.fetcher, "incoming") else None
    # 10 credit, 4 deliveries: 6 left, the 16 dropped messages used none
    client.conn.wait(lambda: link.credit == 6, timeout=10)
    link.drain(0)
    client.conn.wait(lambda: link.credit == 0 and not link.draining(), timeout=10)


def test_consumer_waits_at_the_end_and_is_woken(client, broker, stream_name):
    client.declare(stream_name)
    r = client.receiver(stream_name, [(OFFSET, offset("first"))])
    with Client(broker.url) as other:
        for i in range(3):
            _publish(other, stream_name, [Message(body=i)])
            assert r.receive(timeout=15).body == i


def test_presettled_consumer(client, stream_name):
    """A receiver that asks for pre-settled deliveries gets them settled: it never settles them
    itself, so unsettled ones would stay in the broker's engine until the link ends (~700
    bytes each: 725 MiB over a million deliveries, before the broker answered the mode)."""
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i) for i in range(5)])
    r = client.receiver(stream_name, [(OFFSET, offset("first"))], options=[Settled()])
    assert r.link.remote_snd_settle_mode == 1  # SND_SETTLED, as asked
    assert all(d.settled for _, d in arrived(r, 5))
    assert _bodies([r.receive(timeout=15) for _ in range(5)]) == [0, 1, 2, 3, 4]


def test_dispositions_change_nothing(client, stream_name):
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=i) for i in range(3)])
    r = client.receiver(stream_name, [(OFFSET, offset("first"))])
    r.receive(timeout=15)
    r.reject()
    r.receive(timeout=15)
    r.release()
    r.receive(timeout=15)
    r.accept()
    r.close()
    r = client.receiver(stream_name, [(OFFSET, offset("first"))])
    assert _bodies(client.receive_all(r, 3)) == [0, 1, 2]


def test_many_consumers_on_many_streams(broker, stream_name):
    names = [f"{stream_name}-{i}" for i in range(4)]
    with Client(broker.url) as c:
        for n in names:
            c.declare(n)
            _publish(c, n, [Message(body=f"{n}:{j}") for j in range(5)])
    clients = [Client(broker.url) for _ in range(3)]
    try:
        receivers = [(n, cl.receiver(n, [(OFFSET, offset("first"))], credit=3)) for cl in clients for n in names]
        for n, r in receivers:
            got = [r.receive(timeout=15).body for _ in range(5)]
            assert got == [f"{n}:{j}" for j in range(5)]
    finally:
        for cl in clients:
            cl.close()


def test_a_scanning_consumer_does_not_starve_another(client, broker, stream_name):
    """A consumer whose filter matches nothing in a long stream yields between turns, so a
    second consumer on another connection is served meanwhile."""
    client.declare(stream_name)
    _fill(client, stream_name, [Message(body=i, properties={"n": i}) for i in range(3000)])
    _publish(client, stream_name, [Message(body="last", properties={"n": -1})])
    scanning = client.receiver(stream_name, [(OFFSET, offset("first")), (SQL, Described(SQL, "n = -1"))])
    with Client(broker.url) as other:
        r = other.receiver(stream_name, [(OFFSET, offset("first"))], credit=5)
        assert r.receive(timeout=15).body == 0
    assert scanning.receive(timeout=30).body == "last"


def test_absurd_credit_is_served_in_bounded_turns(client, broker, stream_name):
    client.declare(stream_name)
    _fill(client, stream_name, [Message(body=i) for i in range(2001)])
    r = client.receiver(stream_name, [(OFFSET, offset("first"))], credit=0)
    r.link.flow(2**31 - 1)  # as much credit as proton lets a client say
    with Client(broker.url) as other:  # the broker still answers others meanwhile
        assert other.info(stream_name)["message_count"] == 2001
    got = [r.receive(timeout=30).body for _ in range(2001)]
    assert got == list(range(2001))


@pytest.mark.parametrize("entries", [
    [(symbol("k"), Described(OFFSET, Described(symbol("nested"), "first")))],
    [({"map": "as key"}, Described(VALUES, "a"))],
    [(symbol("k"), Described(ulong(2**64 - 1), "x"))],
    [(symbol("k"), Described(Described(symbol("d"), 1), "x"))],
    [(symbol("k"), Described(SQL, "a" * 5000))],
    [(symbol("k"), Described(SQL, "a = 'unterminated"))],
    [(symbol("k"), Described(SQL, "\udcff"))] if False else [(symbol("k"), Described(SQL, "x = '\u0000'"))],
    [(symbol("k"), Described(APP_PROPS, {1: "int key"}))],
    [(symbol("k"), Described(PROPS, {symbol("subject"): "&x:bad modifier"}))],
])
def test_adversarial_filter_entries_never_hurt_the_connection(client, stream_name, entries):
    client.declare(stream_name)
    try:
        r = client.receiver(stream_name, entries, link_name="adv")
        echo = echo_of(r)
        assert echo is not None
        r.close()
    except LinkDetached as exc:  # a hard failure (e.g. an offset spec that is not one)
        assert "amqp:invalid-field" in str(exc)
    # the same connection still works
    _publish(client, stream_name, [Message(body="alive")])
    r = client.receiver(stream_name, [(OFFSET, offset("first"))], link_name="check")
    assert r.receive(timeout=15).body == "alive"


def test_refusal_attaches_with_a_null_terminus_then_detaches(broker):
    """Unknown stream: the attach reply has a null source (consumer) / target (publisher)."""
    from proton import Terminus
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    seen = {}

    class H(MessagingHandler):
        def on_start(self, event):
            conn = event.container.connect(broker.url)
            event.container.create_receiver(conn, "/queues/no-such-stream-a", name="r")
            event.container.create_sender(conn, "/queues/no-such-stream-b", name="s")

        def on_link_remote_open(self, event):
            link = event.link
            term = link.remote_source if link.is_receiver else link.remote_target
            seen[link.name] = [term.type]

        def on_link_remote_close(self, event):
            seen[event.link.name].append(event.link.remote_condition.name)
            if len(seen) == 2 and all(len(v) == 2 for v in seen.values()):
                event.connection.close()

    Container(H()).run()
    assert seen == {"r": [Terminus.UNSPECIFIED, "amqp:not-found"],
                    "s": [Terminus.UNSPECIFIED, "amqp:not-found"]}


def test_delete_detaches_consumers(client, broker, stream_name):
    client.declare(stream_name)
    with Client(broker.url) as other:
        r = other.receiver(stream_name, [(OFFSET, offset("first"))])
        client.delete(stream_name)
        with pytest.raises(LinkDetached) as info:
            r.receive(timeout=15)
        assert "amqp:resource-deleted" in str(info.value)


@pytest.mark.parametrize("presettled", [False, True])
def test_each_delivery_has_a_tag_of_its_own(client, stream_name, presettled):
    """The consumer rewrites one tag cell per delivery (``amqp.tags.TagCell``): a cell written
    once, or not at all, would give every delivery the same tag."""
    client.declare(stream_name)
    _publish(client, stream_name, [Message(body=f"m{i}") for i in range(300)])
    r = client.receiver(stream_name, [(OFFSET, offset("first"))], credit=300,
                        options=[Settled()] if presettled else None)
    deliveries = [d for _, d in arrived(r, 300)]
    assert all(d.settled == presettled for d in deliveries)
    tags = [bytes(ffi.buffer(t.start, t.size))
            for t in (lib.pn_delivery_tag(d._impl) for d in deliveries)]
    assert all(len(t) == 8 for t in tags)
    assert len(set(tags)) == 300
    if not presettled:
        assert [tag_number(lib.pn_delivery_tag(d._impl)) for d in deliveries] == list(range(1, 301))
    r.close()
