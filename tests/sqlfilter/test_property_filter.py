"""Property filters as data: (filter, message fields, expected match), each via bytes and Message.

The rows follow filter-language.md and RabbitMQ 4.2 (rabbit_amqp_filter_prop.erl and its
amqp_filter_prop_SUITE): typed reference values per properties field, 1..16 entries, null = the
key is present, numbers by value, string/symbol by text, &p: &s: && modifiers.
"""

from __future__ import annotations

import uuid

import proton
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream.wire import MessageView
from sqlfilter import FilterError, compile_property_filter

sym = proton.symbol
U1 = uuid.UUID("12345678-1234-5678-1234-567812345678")
U2 = uuid.UUID("87654321-4321-8765-4321-876543218765")
NOW = 1_700_000_000_123


def message(**fields) -> proton.Message:
    """A proton.Message; ``app`` = application properties, other keys proton attribute names."""
    m = proton.Message(body="body")
    for name, value in fields.items():
        if name == "app":
            m.properties = value
        elif name in ("creation_time", "expiry_time"):
            setattr(m, name, value / 1000)  # proton takes seconds
        else:
            setattr(m, name, value)
    return m


# --- properties-filter rows: (filter map, message fields, expected) ------------------------------
PROPERTY_ROWS = [
    # message-id: ulong, uuid, binary, string
    ({sym("message-id"): proton.ulong(999)}, {"id": proton.ulong(999)}, True),
    ({sym("message-id"): proton.ulong(999)}, {"id": proton.ulong(998)}, False),
    ({sym("message-id"): proton.ulong(999)}, {}, False),
    ({sym("message-id"): proton.ulong(7)}, {"id": "7"}, False),
    ({sym("message-id"): U1}, {"id": U1}, True),
    ({sym("message-id"): U1}, {"id": U2}, False),
    ({sym("message-id"): b"\x01\x02"}, {"id": b"\x01\x02"}, True),
    ({sym("message-id"): b"\x01\x02"}, {"id": b"\x01"}, False),
    ({sym("message-id"): "abc 6"}, {"id": "abc 6"}, True),
    ({sym("message-id"): "&p:abc"}, {"id": "abc 6"}, True),
    ({sym("message-id"): "&p:abd"}, {"id": "abc 6"}, False),
    ({sym("message-id"): "&s:c 6"}, {"id": "abc 6"}, True),
    ({sym("message-id"): "&p:ab"}, {"id": proton.ulong(5)}, False),
    ({sym("correlation-id"): "&s:abc 7"}, {"correlation_id": "abc 7"}, True),
    ({sym("correlation-id"): "corr-123"}, {"correlation_id": "corr-123"}, True),
    ({sym("correlation-id"): proton.ulong(1)}, {"correlation_id": proton.ulong(1)}, True),
    ({sym("correlation-id"): U2}, {"correlation_id": U1}, False),
    # user-id: binary
    ({sym("user-id"): b"guest"}, {"user_id": b"guest"}, True),
    ({sym("user-id"): b"guest"}, {"user_id": b"admin"}, False),
    ({sym("user-id"): b"guest"}, {}, False),
    # string fields, with modifiers
    ({sym("to"): "/exchanges/x/rk"}, {"address": "/exchanges/x/rk"}, True),
    ({sym("to"): "&p:abc "}, {"address": "abc 1"}, True),
    ({sym("reply-to"): "&p:abc"}, {"reply_to": "abc 2"}, True),
    ({sym("reply-to"): "&p:abc"}, {"reply_to": "ab"}, False),
    ({sym("subject"): "🐇"}, {"subject": "🐇"}, True),
    ({sym("subject"): "&p:🐇"}, {"subject": "🐇🐇x"}, True),
    ({sym("subject"): "&s:xxxxxxxxxxxxxx"}, {"subject": "abc 3"}, False),
    ({sym("subject"): "&&Hello"}, {"subject": "&Hello"}, True),
    ({sym("subject"): "&&Hello"}, {"subject": "&&Hello"}, False),
    ({sym("subject"): "&p:"}, {"subject": ""}, True),
    ({sym("subject"): "&p:"}, {}, False),
    ({sym("subject"): "&s:"}, {"subject": "anything"}, True),
    ({sym("subject"): "Subject"}, {"subject": "subject"}, False),
    ({sym("group-id"): "&p:a"}, {"group_id": "abc 4"}, True),
    ({sym("group-id"): "my group ID"}, {"group_id": "my group ID"}, True),
    ({sym("group-id"): "my group ID"}, {}, False),
    ({sym("reply-to-group-id"): "&s:5"}, {"reply_to_group_id": "abc 5"}, True),
    ({sym("reply-to-group-id"): "&s: 5"}, {"reply_to_group_id": "xyz 5"}, True),
    ({sym("reply-to-group-id"): "&s: 5"}, {"reply_to_group_id": "xyz5"}, False),
    # symbol fields (no modifiers on symbols)
    ({sym("content-type"): sym("text/plain")}, {"content_type": sym("text/plain")}, True),
    ({sym("content-type"): sym("text/plain")}, {"content_type": sym("text/html")}, False),
    ({sym("content-encoding"): sym("&p:gz")}, {"content_encoding": sym("gzip")}, False),
    ({sym("content-encoding"): sym("&p:gz")}, {"content_encoding": sym("&p:gz")}, True),
    # timestamps
    ({sym("creation-time"): proton.timestamp(NOW)}, {"creation_time": NOW}, True),
    ({sym("creation-time"): proton.timestamp(NOW)}, {"creation_time": NOW + 1}, False),
    ({sym("absolute-expiry-time"): proton.timestamp(NOW)}, {"expiry_time": NOW}, True),
    # group-sequence: uint
    ({sym("group-sequence"): proton.uint(2**32 - 1)}, {"group_sequence": 2**32 - 1}, True),
    ({sym("group-sequence"): proton.uint(3)}, {"group_sequence": 4}, False),
    # null reference (extension for this filter): the field must be present
    ({sym("subject"): None}, {"subject": "x"}, True),
    ({sym("subject"): None}, {}, False),
    # every entry must match
    ({sym("subject"): "s", sym("group-id"): "g"}, {"subject": "s", "group_id": "g"}, True),
    ({sym("subject"): "s", sym("group-id"): "g"}, {"subject": "s", "group_id": "h"}, False),
    # plain string keys are accepted as field names too
    ({"subject": "s"}, {"subject": "s"}, True),
]

# --- application-properties-filter rows -----------------------------------------------------------
APP = {"k1": -2, "k2": 10, "k3": False, "k4": True, "k5": "hey", "k6": sym("sym"), "k7": b"\x00\xff",
       "k8": U1, "k9": None, "f": 10.0, "d": 2.5, "ts": proton.timestamp(NOW), "c": proton.char("c"),
       "ul": proton.ulong(2**64 - 1)}
APP_ROWS = [
    ({"k1": proton.int32(-2)}, APP, True),
    ({"k1": -2}, APP, True),
    ({"k1": proton.byte(-2)}, APP, True),
    ({"k1": 2}, APP, False),
    ({"k2": proton.uint(10)}, APP, True),
    ({"k2": 10.0}, APP, True),  # numbers compare by value across types
    ({"f": proton.uint(10)}, APP, True),
    ({"f": proton.float32(10.0)}, APP, True),
    ({"d": 2.5}, APP, True),
    ({"d": proton.ulong(2)}, APP, False),
    ({"ul": proton.ulong(2**64 - 1)}, APP, True),
    ({"k3": False}, APP, True),
    ({"k3": True}, APP, False),
    ({"k4": True}, APP, True),
    ({"k4": 1}, APP, False),  # a boolean is not a number
    ({"k2": True}, {"k2": 1}, False),
    ({"k3": 0}, APP, False),
    ({"k5": "hey"}, APP, True),
    ({"k5": sym("hey")}, APP, True),  # a symbol reference matches a string of the same text
    ({"k6": "sym"}, APP, True),  # a string reference matches a symbol of the same text
    ({"k5": sym("no match")}, APP, False),
    ({"k5": "&p:h"}, APP, True),
    ({"k5": "&s:ey"}, APP, True),
    ({"k5": "&s:hey!"}, APP, False),
    ({"k6": "&p:sy"}, APP, True),
    ({"k7": b"\x00\xff"}, APP, True),
    ({"k7": b"\x00"}, APP, False),
    ({"k5": b"hey"}, APP, False),
    ({"k8": U1}, APP, True),
    ({"k8": U2}, APP, False),
    ({"ts": proton.timestamp(NOW)}, APP, True),
    ({"c": proton.char("c")}, APP, True),
    ({"k9": None}, APP, True),  # null: the key is present (even with a null value)
    ({"k2": None}, APP, True),
    ({"missing": None}, APP, False),
    ({"missing": 1}, APP, False),
    ({"k1": -2, "k5": sym("hey"), "k4": True, "k3": False}, APP, True),
    ({"k1": -2, "k5": sym("hey"), "k4": True, "k3": True}, APP, False),
    ({"k2": proton.uint(10)}, {"k2": 10.1}, False),
    ({"k2": proton.uint(10)}, {}, False),
    ({"nan": float("nan")}, {"nan": float("nan")}, False),
    ({"K1": -2}, APP, False),  # keys are case-sensitive
    # decimals, NaN/±inf floats and compound values: as RabbitMQ (mc_amqp's simple map, which its
    # SQL filter reads too) a message value of these kinds is dropped, so the key is absent (not
    # even a null reference matches); a decimal or NaN/inf reference is kept "as is" and equals
    # nothing. The SQL table pins the same (`dec IS NULL`, `lst IS NULL`, `[nan] IS NULL` ...).
    # (These first five rows said True before: decimals compared by value, unlike the SQL filter.)
    ({"k2": proton.decimal32(0x3280000A)}, APP, False),  # decimal32 10
    ({"d": proton.decimal64(0x31A0000000000019)}, APP, False),  # decimal64 2.5
    ({"k2": proton.decimal128(bytes.fromhex("3040000000000000000000000000000A"))}, APP, False),
    ({"k2": proton.decimal32(0x3280000B)}, APP, False),
    ({"dec": 7.5}, {"dec": proton.decimal32(0x3200004B)}, False),  # message value decimal32 7.5
    ({"dec": None}, {"dec": proton.decimal32(0x3200004B)}, False),
    ({"dec": proton.decimal32(0x3200004B)}, {"dec": proton.decimal32(0x3200004B)}, False),
    ({"dec": None, "k1": -2}, {"dec": proton.decimal64(0x31A0000000000019), "k1": -2}, False),
    ({"k1": -2}, {"dec": proton.decimal128(bytes(16)), "k1": -2}, True),  # other keys unharmed
    ({"lst": None}, {"lst": [1, 2]}, False),
    ({"map": None}, {"map": {"a": 1}}, False),
    ({"arr": None}, {"arr": proton.Array(proton.UNDESCRIBED, proton.Data.INT, 1, 2)}, False),
    ({"desc": None}, {"desc": proton.Described(sym("x"), 1)}, False),
    ({"nan": None}, {"nan": float("nan")}, False),
    ({"inf": None}, {"inf": float("inf")}, False),
    ({"inf": float("inf")}, {"inf": float("inf")}, False),
    ({"inf": float("-inf")}, {"inf": float("-inf")}, False),
    ({"f": float("inf")}, APP, False),
    ({"f": proton.float32(10.0), "nul": None}, {"f": 10.0, "nul": None}, True),  # simple values stay
]

# --- both filters at once -------------------------------------------------------------------------
BOTH_ROWS = [
    ({sym("subject"): "The Subject"}, {"The Key": proton.byte(-123)},
     {"subject": "The Subject", "app": {"The Key": -123}}, True),
    ({sym("subject"): "The Subject"}, {"The Key": proton.byte(-123)},
     {"subject": "The Subject"}, False),
    ({sym("subject"): "The Subject"}, {"The Key": proton.byte(-123)},
     {"app": {"The Key": -123}}, False),
]


def run_both_ways(flt, m: proton.Message) -> bool:
    """The filter's answer from proton-encoded bytes, equal to its answer from the Message."""
    from_bytes = flt.matches(bytes(m.encode()))
    assert flt.bytes_matcher()(bytes(m.encode())) is from_bytes
    assert flt.matches(m) is from_bytes
    assert flt.matches(MessageView.from_message(m)) is from_bytes
    return from_bytes


@pytest.mark.parametrize("spec, fields, want", PROPERTY_ROWS)
def test_properties_filter(spec, fields, want):
    assert run_both_ways(compile_property_filter(properties=spec), message(**fields)) is want


@pytest.mark.parametrize("spec, app, want", APP_ROWS)
def test_application_properties_filter(spec, app, want):
    f = compile_property_filter(application_properties=spec)
    assert f.sections == frozenset({"application_properties"})
    assert run_both_ways(f, message(app=app)) is want


@pytest.mark.parametrize("props, app, fields, want", BOTH_ROWS)
def test_both_filters(props, app, fields, want):
    f = compile_property_filter(props, app)
    assert f.sections == frozenset({"properties", "application_properties"})
    assert run_both_ways(f, message(**fields)) is want


# --- invalid filters: the whole filter is refused --------------------------------------------------
INVALID = [
    ({sym("group-id"): proton.uint(3)}, None),  # wrong type for the field
    ({sym("message-id"): 999}, None),  # a long, not a ulong
    ({sym("message-id"): sym("abc")}, None),
    ({sym("message-id"): proton.uint(5)}, None),
    ({sym("user-id"): "guest"}, None),
    ({sym("to"): sym("x")}, None),
    ({sym("subject"): b"x"}, None),
    ({sym("content-type"): "text/plain"}, None),  # a string, not a symbol
    ({sym("creation-time"): NOW}, None),
    ({sym("creation-time"): proton.ulong(NOW)}, None),
    ({sym("group-sequence"): proton.ulong(1)}, None),
    ({sym("group-sequence"): 1}, None),
    ({sym("priority"): proton.ubyte(4)}, None),  # not a properties field
    ({sym("message_id"): proton.ulong(1)}, None),  # underscore spelling
    ({proton.ulong(0): "x"}, None),
    ({sym("subject"): "&x"}, None),  # & without a known modifier
    ({sym("subject"): "&"}, None),
    ({sym("subject"): "&P:x"}, None),
    ({sym("message-id"): "&q:1"}, None),
    ({sym("subject"): "ok", sym("to"): "&bad"}, None),
    ({}, None),  # 0 entries
    ({sym(f) : None for f in ["to", "subject", "reply-to", "group-id", "reply-to-group-id",
                              "message-id", "user-id", "correlation-id", "content-type",
                              "content-encoding", "creation-time", "absolute-expiry-time",
                              "group-sequence"]} | {"x" * i: None for i in range(1, 5)}, None),
    (None, {sym("k2"): proton.uint(10)}),  # symbol key
    (None, {proton.ulong(1): 1}),
    (None, {"k": [1, 2]}),  # compound reference values
    (None, {"k": {"a": 1}}),
    (None, {"k": proton.Described(sym("d"), 1)}),
    (None, {"k": "&oops"}),
    (None, {}),
    (None, {str(n): proton.uint(1) for n in range(1, 18)}),  # 17 entries
    ([("subject", "x")], None),  # not a map
    (None, None),  # nothing at all
]


@pytest.mark.parametrize("props, app", INVALID)
def test_invalid_filters(props, app):
    with pytest.raises(FilterError):
        compile_property_filter(props, app)


def test_sixteen_entries_are_allowed():
    spec = {str(n): proton.uint(n) for n in range(16)}
    f = compile_property_filter(application_properties=spec)
    assert run_both_ways(f, message(app={str(n): n for n in range(16)}))
    assert not run_both_ways(f, message(app={str(n): n for n in range(15)}))


def test_matches_stored_bytes_with_other_sections_around():
    m = message(subject="abc", app={"k": "v"}, annotations={sym("x-stream-filter-value"): "v"},
                instructions={sym("d"): 1}, durable=True)
    assert run_both_ways(compile_property_filter({sym("subject"): "&p:a"}, {"k": "v"}), m)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=12), st.text(max_size=6), st.sampled_from(["&p:", "&s:", "", "&&"]))
def test_string_modifiers_agree_with_python(value, affix, modifier):
    reference = modifier + affix
    if not modifier and affix.startswith("&"):
        with pytest.raises(FilterError):
            compile_property_filter(application_properties={"k": reference})
        return
    f = compile_property_filter(application_properties={"k": reference})
    want = {"&p:": value.startswith(affix), "&s:": value.endswith(affix),
            "": value == affix, "&&": value == "&" + affix}[modifier]
    assert run_both_ways(f, message(app={"k": value})) is want


simple_values = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**64 - 1).map(proton.ulong),
    # (no ±inf: RabbitMQ drops it from the message, so it matches no reference: APP_ROWS)
    st.integers(-(2**31), 2**31 - 1).map(proton.int32),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10), st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=10).map(sym),
    st.binary(max_size=10), st.uuids(), st.integers(0, 2**50).map(proton.timestamp),
)


def as_reference(value):
    """The reference value that must match ``value`` exactly (a leading & escaped)."""
    if type(value) is str and value.startswith("&"):
        return "&" + value
    return value


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), simple_values, min_size=1, max_size=16), st.data())
def test_a_message_matches_a_filter_of_its_own_values(app, data):
    m = message(app=app)
    chosen = data.draw(st.lists(st.sampled_from(sorted(app)), min_size=1, max_size=15, unique=True))
    spec = {k: as_reference(app[k]) for k in chosen}
    assert run_both_ways(compile_property_filter(application_properties=spec), m)
    # a missing key, or the same key with a value of another kind, does not match
    key = chosen[0]
    assert not run_both_ways(compile_property_filter(
        application_properties={**spec, key + "\x00missing": None}), m)
    other = {bool: "x", str: 1.5, bytes: "x", uuid.UUID: b"x"}.get(type(app[key]), b"\x01")
    assert not run_both_ways(compile_property_filter(application_properties={**spec, key: other}), m)
