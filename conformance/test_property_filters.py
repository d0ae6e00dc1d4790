"""Stage 2 property filters: amqp:properties-filter and amqp:application-properties-filter.

Rules from filter-language.md "Property filters", OASIS AMQP Filter Expressions 1.0 §4.2.4/
§4.2.5 (string modifiers §4.2.2) and RabbitMQ 4.2 (rabbitmq.com/docs/stream-filtering
"AMQP Filter Expressions"; deps/rabbit/test/amqp_filter_prop_SUITE.erl).
"""

from __future__ import annotations

import uuid

import pytest
from proton import Message, symbol, timestamp, uint, ulong

from conformance.amqp import (APP_PROPERTIES_CODE, PROPERTIES_CODE, app_properties_filter,
                              offset_spec, properties_filter)

pytestmark = pytest.mark.timeout(180)

UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def messages(user: bytes) -> list[Message]:
    """Messages 0..7, each with a distinct set of properties; body = index."""
    return [
        Message(body=0, id="id-0", user_id=user, address="/to/0", subject="apple pie",
                reply_to="/r/0", correlation_id="c-0", content_type="text/plain",
                content_encoding="gzip", expiry_time=1_900_000_000.0, creation_time=1_700_000_000.0,
                group_id="g-0", group_sequence=uint(10), reply_to_group_id="rg-0",
                properties={"k": "v0", "n": 10, "f": 1.5, "b": True, "sym": symbol("s0"),
                            "nul": None, "amp": "&x"}),
        Message(body=1, id=ulong(1), subject="banana split", correlation_id=UUID,
                properties={"k": "v1", "n": 10.0, "b": False, "sym": "s0"}),
        Message(body=2, id=UUID, subject="cherry", correlation_id=b"\x01\x02",
                properties={"k": "v2", "n": 11, "x": "prefix-suffix"}),
        Message(body=3, id=b"\x09\x08", subject="apple crumble", content_type="application/json",
                properties={"k": "v0", "n": uint(10)}),
        Message(body=4, properties={}),
        Message(body=5, subject="", properties={"k": "", "n": -1}),
    ]


def run(client, stream, filters) -> list[int]:
    got = client.read(stream, [offset_spec("first"), *filters])
    return [r.message.body for r in got]


@pytest.fixture
def loaded(client, stream, target) -> str:
    user = (target.user or "guest").encode()
    client.publish(stream, messages(user))
    return stream


PROPERTY_CASES = [
    ({"message-id": "id-0"}, [0]),
    ({"message-id": ulong(1)}, [1]),
    ({"message-id": UUID}, [2]),
    ({"message-id": b"\x09\x08"}, [3]),
    ({"to": "/to/0"}, [0]),
    ({"subject": "cherry"}, [2]),
    ({"subject": ""}, [5]),
    ({"reply-to": "/r/0"}, [0]),
    ({"correlation-id": "c-0"}, [0]),
    ({"correlation-id": UUID}, [1]),
    ({"correlation-id": b"\x01\x02"}, [2]),
    ({"content-type": symbol("text/plain")}, [0]),
    ({"content-encoding": symbol("gzip")}, [0]),
    ({"absolute-expiry-time": timestamp(1_900_000_000_000)}, [0]),
    ({"creation-time": timestamp(1_700_000_000_000)}, [0]),
    ({"group-id": "g-0"}, [0]),
    ({"group-sequence": uint(10)}, [0]),
    ({"reply-to-group-id": "rg-0"}, [0]),
    ({"subject": "&p:apple"}, [0, 3]),
    ({"subject": "&s:split"}, [1]),
    ({"subject": "&p:"}, [0, 1, 2, 3, 5]),
    ({"subject": "apple"}, []),
    ({"subject": "&p:apple", "content-type": symbol("application/json")}, [3]),
    ({"subject": "&p:apple", "message-id": "id-0"}, [0]),
    ({"subject": "&p:zzz"}, []),
]


@pytest.mark.parametrize("fields,expected", PROPERTY_CASES, ids=lambda v: repr(v)[:50])
def test_properties_filter(client, loaded, fields, expected):
    """Each properties field with its allowed reference type; entries ANDed; &p: / &s:
    modifiers (filter-language.md "Property filters"; filtex §4.2.4, §4.2.2)."""
    assert run(client, loaded, [properties_filter(fields)]) == expected


def test_properties_filter_user_id(client, loaded, target):
    """user-id takes a binary reference (filter-language.md; RabbitMQ checks user-id equals
    the authenticated user, so the suite publishes that user's name)."""
    user = (target.user or "guest").encode()
    assert run(client, loaded, [properties_filter({"user-id": user})]) == [0]


APP_CASES = [
    ({"k": "v0"}, [0, 3]),
    ({"k": "v0", "n": 10}, [0, 3]),
    ({"n": 10}, [0, 1, 3]),          # 10 matches 10.0 and uint 10: compared by value
    ({"n": 10.0}, [0, 1, 3]),
    ({"n": uint(11)}, [2]),
    ({"n": -1}, [5]),
    ({"f": 1.5}, [0]),
    ({"b": True}, [0]),
    ({"b": False}, [1]),
    ({"sym": "s0"}, [0, 1]),           # a string reference matches a symbol of the same text
    ({"nul": None}, [0]),              # null reference: the key must be present
    ({"k": None}, [0, 1, 2, 3, 5]),
    ({"k": ""}, [5]),
    ({"x": "&p:prefix"}, [2]),
    ({"x": "&s:suffix"}, [2]),
    ({"x": "&s:prefix"}, []),
    ({"amp": "&&x"}, [0]),            # && escapes a literal leading &
    ({"k": "&p:v"}, [0, 1, 2, 3]),
    ({"missing": "v0"}, []),
    ({"k": "v0", "n": 11}, []),
]


@pytest.mark.parametrize("props,expected", APP_CASES, ids=lambda v: repr(v)[:50])
def test_application_properties_filter(client, loaded, props, expected):
    """Application properties filter: equality by value across numeric types, string vs
    symbol, null references, modifiers, AND (filter-language.md; filtex §4.2.5)."""
    assert run(client, loaded, [app_properties_filter(props)]) == expected


def test_both_property_filters_are_anded(client, loaded):
    """All entries of all filters must match (filter-language.md: AND)."""
    got = run(client, loaded, [properties_filter({"subject": "&p:apple"}),
                               app_properties_filter({"n": uint(10)})])
    assert got == [0, 3]
    got = run(client, loaded, [properties_filter({"subject": "&p:apple"}),
                               app_properties_filter({"k": "v1"})])
    assert got == []


def test_ulong_descriptors(client, loaded):
    """Descriptors may be ulong codes 0x173 / 0x174 (amqp-interface.md table; rhea users)."""
    c = client.consumer(f"/queues/{loaded}", [
        offset_spec("first"),
        properties_filter({"subject": "&p:apple"}, code=True),
        app_properties_filter({"k": "v0"}, code=True),
    ])
    got = [r.message.body for r in c.read_all()]
    assert got == [0, 3]
    echo = dict(c.echo)
    assert set(map(str, echo)) == {"rabbitmq:stream-offset-spec", "properties-filter",
                                   "application-properties-filter"}
    assert echo[symbol("properties-filter")].descriptor in (ulong(PROPERTIES_CODE),
                                                            symbol("amqp:properties-filter"))
    assert echo[symbol("application-properties-filter")].descriptor in (
        ulong(APP_PROPERTIES_CODE), symbol("amqp:application-properties-filter"))


INVALID = [
    properties_filter({"no-such-field": "x"}),
    properties_filter({"subject": symbol("wrong-type")}),
    properties_filter({"content-type": "string-not-symbol"}),
    properties_filter({"group-sequence": 10}),
    properties_filter({"subject": "&x:bad-modifier"}),
    properties_filter({}),
    app_properties_filter({"k": "&q:bad"}),
    app_properties_filter({}),
    app_properties_filter({f"k{i}": "v" for i in range(17)}),
]


@pytest.mark.parametrize("entry", INVALID, ids=lambda e: repr(e[1].value)[:40])
def test_invalid_property_filter_is_left_out(client, loaded, entry):
    """An invalid property filter (unknown key, wrong reference type, unknown & modifier,
    0 or more than 16 entries) is left out of the attach reply and not applied
    (amqp-interface.md "Consuming"; filter-language.md "Property filters")."""
    c = client.consumer(f"/queues/{loaded}", [offset_spec("first"), entry])
    assert c.echo_keys == ["rabbitmq:stream-offset-spec"]
    assert [r.message.body for r in c.read_all()] == [0, 1, 2, 3, 4, 5]
