"""JMS selectors (``apache.org:selector-filter:string``): parsing and echo rules without a
socket, then real consumers on a real broker sending exactly what Qpid JMS sends.

Qpid JMS (``AmqpConsumerBuilder.configureSource``, ``AmqpJmsSelectorType``) puts the selector
under the key ``jms-selector`` as a described string whose descriptor is the ulong
``0x0000468C00000004``; ActiveMQ and Artemis echo the entry in the attach reply. Qpid JMS
itself is not run here (it needs Maven Central, which this machine cannot reach), so proton
and rhea send those bytes.
"""

from __future__ import annotations

from proton import Described, Message, symbol, ulong

from amqp_stream.amqp.source_filters import (SELECTOR_FILTER, SELECTOR_FILTER_CODE,
                                             parse_source_filters)
from tests.broker.amqp import OFFSET, SQL, Client, echo_of, offset
from tests.broker.test_rhea import FIRST, bodies, consume, declare, echo, f, publish

JMS_KEY = symbol("jms-selector")
NOW = 1_700_000_000_000


def qpid_jms(selector: str) -> tuple[symbol, Described]:
    """The filter entry Qpid JMS sends for a consumer with this selector."""
    return JMS_KEY, Described(ulong(SELECTOR_FILTER_CODE), selector)


def test_selector_by_code_and_symbol_under_any_key_is_compiled_and_echoed():
    for key, value in (qpid_jms("color = 'red'"),
                       (symbol("sel"), Described(SELECTOR_FILTER, "color = 'red'"))):
        r = parse_source_filters([(OFFSET, offset("first")), (key, value)], now_ms=NOW)
        assert r.stage2_kind == "selector"
        assert r.echo == [(OFFSET, offset("first")), (key, value)]
        assert r.stage2.matches(Message(properties={"color": "red"}, body="x"))
        assert not r.stage2.matches(Message(properties={"color": "blue"}, body="x"))


def test_the_dialect_is_chosen_by_the_descriptor_only():
    jms = parse_source_filters([qpid_jms("NOT n = 6")], now_ms=NOW).stage2
    sql = parse_source_filters([(JMS_KEY, Described(SQL, "NOT n = 6"))], now_ms=NOW).stage2
    message = Message(properties={"n": 5}, body="x")
    assert sql.evaluate(message) is True  # NOT (n = 6)
    assert jms.evaluate(message) is False  # (NOT n) = 6: NOT of a non-boolean is TRUE


def test_invalid_selector_is_left_out_with_its_reason():
    r = parse_source_filters([(OFFSET, offset("first")), qpid_jms("color = = 'red'")], now_ms=NOW)
    assert r.stage2 is None and r.echo == [(OFFSET, offset("first"))]
    assert r.dropped[0][0] == JMS_KEY and "invalid JMS selector" in r.dropped[0][1]
    r = parse_source_filters([(JMS_KEY, Described(ulong(SELECTOR_FILTER_CODE), 5))], now_ms=NOW)
    assert r.echo == [] and "must be a string" in r.dropped[0][1]


def test_selector_sql_and_property_filters_are_alternatives_the_later_wins():
    props = (symbol("p"), Described(symbol("amqp:application-properties-filter"), {"a": "1"}))
    sql = (symbol("s"), Described(SQL, "a = '1'"))
    r = parse_source_filters([props, sql, qpid_jms("a = '2'")], now_ms=NOW)
    assert r.stage2_kind == "selector" and [k for k, _ in r.echo] == [JMS_KEY]
    r = parse_source_filters([qpid_jms("a = '2'"), sql], now_ms=NOW)
    assert r.stage2_kind == "sql" and [k for k, _ in r.echo] == [symbol("s")]
    r = parse_source_filters([qpid_jms("a = '2'"), props], now_ms=NOW)
    assert r.stage2_kind == "properties" and [k for k, _ in r.echo] == [symbol("p")]


def _orders() -> list[Message]:
    out = []
    for i in range(12):
        out.append(Message(body=f"o{i}", durable=i % 2 == 0, priority=i % 10, subject="order",
                           id=f"ID:order-{i}", properties={"color": "red" if i % 3 == 0 else "blue",
                                                           "amount": i * 10}))
    return out


def test_proton_sending_what_qpid_jms_sends(broker, stream_name):
    selector = ("color = 'red' and JMSDeliveryMode = 'PERSISTENT' AND JMSPriority >= 4 "
                "and amount between 0 AND 100 and JMSType = 'order' and JMSMessageID LIKE 'ID:order-%'")
    with Client(broker.url) as c:
        c.declare(stream_name)
        c.publish(stream_name, _orders())
        r = c.receiver(stream_name, [(OFFSET, offset("first")), qpid_jms(selector)])
        got = c.receive_all(r, 1)
        assert [m.body for m in got] == ["o6"]  # red: 0 3 6 9; durable: even; priority >= 4: 6
        assert echo_of(r) == [(OFFSET, offset("first")), qpid_jms(selector)]
        r.close()
        # the same consumer without the selector's dialect-only parts gets every red order
        r = c.receiver(stream_name, [(OFFSET, offset("first")), qpid_jms("color = 'red'")])
        assert [m.body for m in c.receive_all(r, 4)] == ["o0", "o3", "o6", "o9"]


def test_invalid_selector_is_not_echoed_and_the_link_attaches(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        c.publish(stream_name, [Message(body="x", properties={"color": "red"})])
        r = c.receiver(stream_name, [(OFFSET, offset("first")), qpid_jms("color = ")])
        assert echo_of(r) == [(OFFSET, offset("first"))]
        assert [m.body for m in c.receive_all(r, 1)] == ["x"]  # no stage 2 in place


def test_rhea_sending_the_selector_by_code_and_by_symbol(broker, stream_name):
    declare(broker, stream_name)
    publish(broker, stream_name, [
        {"body": "a", "subject": "t1", "application_properties": {"region": "emea", "n": 1}},
        {"body": "b", "subject": "t2", "application_properties": {"region": "amer", "n": 2}},
        {"body": "c", "subject": "t1", "application_properties": {"region": "emea", "n": 3}},
        {"body": "END", "subject": "t1", "application_properties": {"region": "emea", "n": 9}},
    ])
    text = "Region IS NULL AND region = 'emea' and JMSType = 't1' AND (n = 3 OR n = 9)"
    for descriptor in (SELECTOR_FILTER_CODE, str(SELECTOR_FILTER)):
        result = consume(broker, stream_name, [FIRST, f("jms-selector", descriptor, text)])
        assert bodies(result) == ["c"]
        assert echo(result)["jms-selector"] == (descriptor, text)


def test_jms_expiration_comes_from_the_ttl_as_activemq_delivers_it(broker, stream_name):
    """ActiveMQ delivers the messages with a ttl for ``JMSExpiration > 0`` (its AMQP
    ``InboundTransformer``: absolute-expiry-time, else arrival + ttl); Qpid JMS reads them so."""
    messages = [Message(body="none"), Message(body="ttl-a", ttl=60), Message(body="zero", ttl=0),
                Message(body="expiry", expiry_time=NOW / 1000 + 60),
                Message(body="ttl-b", ttl=3600)]
    with Client(broker.url) as c:
        c.declare(stream_name)
        c.publish(stream_name, messages)
        r = c.receiver(stream_name, [(OFFSET, offset("first")), qpid_jms("JMSExpiration > 0")])
        assert [m.body for m in c.receive_all(r, 3)] == ["ttl-a", "expiry", "ttl-b"]
        r.close()
        selector = f"JMSExpiration > {NOW} AND JMSExpiration < {NOW + 3_600_000}"
        r = c.receiver(stream_name, [(OFFSET, offset("first")), qpid_jms(selector)])
        assert [m.body for m in c.receive_all(r, 1)] == ["expiry"]


def test_selectors_jms_forbids_are_refused_and_not_echoed(broker, stream_name):
    """``n IN (1, 2)``, ``color BETWEEN 'a' AND 'c'``, ``NOT color IN ('red')``: ActiveMQ refuses
    them (JMS 2.0 §3.8.1.1); the link attaches without the filter, its reason logged."""
    for text in ("n IN (1, 2)", "n IN (1, 'a')", "color BETWEEN 'a' AND 'c'",
                 "NOT color IN ('red')"):
        r = parse_source_filters([qpid_jms(text)], now_ms=NOW)
        assert r.stage2 is None and r.echo == [], text
        assert "invalid JMS selector" in r.dropped[0][1], text
    with Client(broker.url) as c:
        c.declare(stream_name)
        c.publish(stream_name, [Message(body="x", properties={"n": 1, "color": "red"})])
        r = c.receiver(stream_name, [(OFFSET, offset("first")), qpid_jms("n IN (1, 2)")])
        assert echo_of(r) == [(OFFSET, offset("first"))]
