"""The attach reply: which filters the broker says it put in place.

Rules from amqp-interface.md "Consuming" (the echo is exactly the accepted entries in the order
received; null when none asked; an empty map when none accepted; invalid or conflicting entries
left out; symbol and ulong descriptors) and the AMQP 1.0 spec (messaging §3.5.3 source
`filter`: the receiving end's filter set is what the sender actually applies), as RabbitMQ does
(amqp_filtex_SUITE, amqp_client_SUITE stream filter tests).
"""

from __future__ import annotations

import pytest
from proton import Described, Message, symbol, ulong

from conformance.amqp import (address, app_properties_filter, match_unfiltered, offset_spec,
                              properties_filter, sql_filter, stream_filter)

pytestmark = pytest.mark.timeout(120)


def test_no_filter_echoes_null(client, stream):
    """No filter asked: the reply's source filter is null (amqp-interface.md)."""
    c = client.consumer(address(stream), None)
    assert c.echo is None
    assert c.link.remote_source.address == address(stream)


def test_all_accepted_entries_echoed_in_order(client, stream):
    """Every accepted entry comes back with its key and value, in the order sent
    (amqp-interface.md "Consuming")."""
    entries = [stream_filter(["a", "b"]), offset_spec("first"), match_unfiltered(True)]
    c = client.consumer(address(stream), entries)
    echo = c.echo
    assert [str(k) for k, _ in echo] == [k for k, _ in entries]
    for (key, sent), (_, got) in zip(entries, echo, strict=True):
        assert got.descriptor == sent.descriptor, key
        assert got.value == sent.value, key


def test_echo_with_stage2_filters(client, stream):
    """A SQL filter with offset and stage-1 entries: all echoed (amqp-interface.md)."""
    entries = [offset_spec("first"), stream_filter("x"), sql_filter("a = 1")]
    c = client.consumer(address(stream), entries)
    assert c.echo_keys == [k for k, _ in entries]
    assert c.echo[2][1].value == "a = 1"


def test_unknown_descriptor_is_left_out(client, stream):
    """An unsupported filter is left out; the link is still attached (amqp-interface.md)."""
    entries = [offset_spec("first"), ("my-filter", Described(symbol("example:unknown"), "x")),
               stream_filter("v")]
    c = client.consumer(address(stream), entries)
    assert c.echo_keys == ["rabbitmq:stream-offset-spec", "rabbitmq:stream-filter"]


def test_nothing_accepted_echoes_empty_map(client, stream):
    """Filters asked, none accepted: the echo is an empty map, not null (amqp-interface.md)."""
    c = client.consumer(address(stream), [("bad", Described(symbol("example:unknown"), 1)),
                                          sql_filter("this is not sql")])
    assert c.echo == []


def test_invalid_stream_filter_value_is_left_out(client, stream):
    """A stream-filter whose value is neither a string nor a list of strings is left out
    (amqp-interface.md table)."""
    c = client.consumer(address(stream), [offset_spec("first"), stream_filter("ok"),
                                          ("rabbitmq:stream-filter-2",
                                           Described(symbol("rabbitmq:stream-filter"), 42))])
    assert c.echo_keys == ["rabbitmq:stream-offset-spec", "rabbitmq:stream-filter"]


def test_property_and_sql_conflict_later_wins(client, stream):
    """The property filters and the SQL filter are alternatives; on a conflict the entry later
    on the wire wins (amqp-interface.md "Consuming", RabbitMQ's behaviour)."""
    client.publish(stream, [Message(body=0, properties={"k": "a"}),
                            Message(body=1, properties={"k": "b"})])
    c = client.consumer(address(stream), [offset_spec("first"), app_properties_filter({"k": "a"}),
                                          sql_filter("k = 'b'")])
    assert c.echo_keys == ["rabbitmq:stream-offset-spec", "sql-filter"]
    assert [r.message.body for r in c.read_all()] == [1]
    c.close()
    c = client.consumer(address(stream), [offset_spec("first"), sql_filter("k = 'b'"),
                                          properties_filter({"subject": "&p:"}),
                                          app_properties_filter({"k": "a"})])
    assert c.echo_keys == ["rabbitmq:stream-offset-spec", "properties-filter",
                           "application-properties-filter"]
    assert [r.message.body for r in c.read_all()] == []  # no message has a subject


def test_ulong_descriptors_are_accepted(client, stream):
    """Descriptors given as ulong codes work like their symbols (amqp-interface.md: rhea users
    often send codes)."""
    client.publish(stream, [Message(body=i, properties={"i": i}) for i in range(5)])
    c = client.consumer(address(stream), [offset_spec("first"), sql_filter("i >= 3", code=True)])
    assert c.echo_keys == ["rabbitmq:stream-offset-spec", "sql-filter"]
    assert c.echo[1][1].descriptor in (ulong(0x120), symbol("amqp:sql-filter"))
    assert [r.message.body for r in c.read_all()] == [3, 4]


def test_filters_on_a_conventional_other_key(client, stream):
    """Entries are recognised by descriptor, not key: any key works (amqp-interface.md table,
    key column "any")."""
    client.publish(stream, [Message(body=i, properties={"i": i}) for i in range(4)])
    c = client.consumer(address(stream), [offset_spec(ulong(2), key="where-to-start"),
                                          app_properties_filter({"i": 3}, key="my-props")])
    assert c.echo_keys == ["where-to-start", "my-props"]
    assert [r.message.body for r in c.read_all()] == [3]
