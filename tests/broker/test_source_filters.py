"""Attach-filter parsing and echo rules, without a socket (amqp_stream.source_filters)."""

from __future__ import annotations

import pytest
from proton import Array, Data, Described, symbol, timestamp, ulong

from amqp_stream.errors import BadRequest
from amqp_stream.amqp.source_filters import (StartSpec, parse_interval,
                                        parse_source_filters)

O = symbol("rabbitmq:stream-offset-spec")  # noqa: E741 (the descriptor, short in tables)
V = symbol("rabbitmq:stream-filter")
U = symbol("rabbitmq:stream-match-unfiltered")
P = symbol("amqp:properties-filter")
A = symbol("amqp:application-properties-filter")
S = symbol("amqp:sql-filter")
NOW = 1_700_000_000_000


def parse(entries):
    return parse_source_filters(entries, now_ms=NOW)


def keys(result):
    return [k for k, _ in result.echo]


def test_no_filter_field_echoes_null_and_starts_at_next():
    r = parse(None)
    assert r.echo is None and r.start == StartSpec("next") and r.stage2 is None


def test_empty_filter_map_echoes_empty():
    assert parse([]).echo == []


@pytest.mark.parametrize("value,expected", [
    ("first", StartSpec("first")), ("last", StartSpec("last")), ("next", StartSpec("next")),
    (symbol("first"), StartSpec("first")), (0, StartSpec("offset", 0)), (ulong(12), StartSpec("offset", 12)),
    (timestamp(5000), StartSpec("timestamp", 5000)), ("10m", StartSpec("timestamp", NOW - 600_000)),
    ("1Y", StartSpec("timestamp", NOW - 365 * 86_400_000)), ("2M", StartSpec("timestamp", NOW - 60 * 86_400_000)),
])
def test_offset_specs(value, expected):
    r = parse([(symbol("any-key"), Described(O, value))])
    assert r.start == expected
    assert r.echo == [(symbol("any-key"), Described(O, value))]


@pytest.mark.parametrize("value", ["", "0m", "10", "10 m", "m10", "first ", -1, True, 1.5, None, [1], {"a": 1}])
def test_unusable_offset_is_a_hard_failure(value):
    with pytest.raises(BadRequest) as info:
        parse([(O, Described(O, value))])
    assert info.value.condition == "amqp:invalid-field"


def test_interval_units():
    assert parse_interval("3D") == 3 * 86400 and parse_interval("4h") == 4 * 3600
    assert parse_interval("3d") is None and parse_interval("x") is None


def test_stage1_values_strings_lists_and_arrays():
    assert parse([(V, Described(V, "a"))]).filter_values == ("a",)
    assert parse([(V, Described(V, ["a", "b"]))]).filter_values == ("a", "b")
    arr = Array(None, Data.STRING, "x", "y")
    r = parse([(V, Described(V, arr))])
    assert r.filter_values == ("x", "y") and keys(r) == [V]
    r = parse([(V, Described(V, ["a", 1]))])
    assert r.filter_values == () and r.echo == [] and "list of strings" in r.dropped[0][1]


def test_match_unfiltered_must_be_boolean():
    assert parse([(U, Described(U, True))]).match_unfiltered is True
    r = parse([(U, Described(U, 1))])
    assert r.match_unfiltered is False and r.echo == []


def test_descriptors_by_code():
    r = parse([(symbol("s"), Described(ulong(0x120), "a = 1")),])
    assert r.stage2_kind == "sql" and keys(r) == [symbol("s")]
    r = parse([(symbol("p"), Described(ulong(0x173), {symbol("subject"): "x"})),
               (symbol("a"), Described(ulong(0x174), {"k": 1}))])
    assert r.stage2_kind == "properties" and keys(r) == [symbol("p"), symbol("a")]


def test_invalid_entries_are_left_out_with_reasons_in_order():
    entries = [
        ("plain-string-key", Described(V, "a")),
        (symbol("nodesc"), "value"),
        (symbol("unknown"), Described(symbol("x:y"), 1)),
        (symbol("badcode"), Described(ulong(0x121), 1)),
        (symbol("sql"), Described(S, "a = ")),
        (symbol("sqltype"), Described(S, 5)),
        (symbol("props"), Described(P, {symbol("no-such-field"): "x"})),
        (symbol("apps"), Described(A, "not a map")),
        (O, Described(O, "first")),
    ]
    r = parse(entries)
    assert keys(r) == [O]
    assert [k for k, _ in r.dropped] == [e[0] for e in entries[:-1]]
    assert all(reason for _, reason in r.dropped)
    assert r.stage2 is None


def test_sql_error_reason_has_position():
    r = parse([(S, Described(S, "a = = 1"))])
    assert "at character" in r.dropped[0][1]


def test_later_entry_wins_within_a_slot():
    r = parse([(symbol("o1"), Described(O, "first")), (V, Described(V, "a")),
               (symbol("o2"), Described(O, "last"))])
    assert r.start == StartSpec("last") and keys(r) == [V, symbol("o2")]


def test_sql_replaces_property_filters_and_vice_versa():
    p = (symbol("p"), Described(P, {symbol("subject"): "x"}))
    a = (symbol("a"), Described(A, {"k": "v"}))
    s = (symbol("s"), Described(S, "k = 'v'"))
    r = parse([p, a, s])
    assert keys(r) == [symbol("s")] and r.stage2_kind == "sql"
    r = parse([s, p])
    assert keys(r) == [symbol("p")] and r.stage2_kind == "properties"
    r = parse([p, s, a])
    assert keys(r) == [symbol("a")] and r.stage2_kind == "properties"


def test_invalid_later_entry_does_not_evict_a_valid_one():
    p = (symbol("p"), Described(P, {symbol("subject"): "x"}))
    bad = (symbol("s"), Described(S, "syntax error here ((("))
    r = parse([p, bad])
    assert keys(r) == [symbol("p")] and r.stage2_kind == "properties"


def test_compiled_stage2_filters_work_on_bytes():
    from proton import Message
    r = parse([(symbol("s"), Described(S, "n > 2"))])
    assert r.stage2.matches(Message(properties={"n": 3}).encode())
    assert not r.stage2.matches(Message(properties={"n": 1}).encode())
    r = parse([(symbol("p"), Described(P, {symbol("subject"): "&p:ab"})),
               (symbol("a"), Described(A, {"n": 1}))])
    assert r.stage2.matches(Message(subject="abc", properties={"n": 1}).encode())
    assert not r.stage2.matches(Message(subject="abc", properties={"n": 2}).encode())


def test_describe_for_logs():
    r = parse([(O, Described(O, 5)), (V, Described(V, "a")), (U, Described(U, True)),
               (S, Described(S, "a = 1"))])
    assert r.describe() == "start=offset:5 values=['a'] match-unfiltered stage2=sql"


# -- fuzz: any filter set either parses or refuses with BadRequest, never anything else ----------
from hypothesis import given, settings, strategies as st  # noqa: E402

_descriptors = st.sampled_from([O, V, U, P, A, S, ulong(0x120), ulong(0x173), ulong(0x174),
                                ulong(0x999), symbol("x:y"), "not-a-symbol", 7])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(),
                     st.text(max_size=20), st.binary(max_size=10),
                     st.sampled_from(["first", "last", "next", "10m", "a = 1", "n > ", "&p:x"]).map(str),
                     st.builds(symbol, st.text(max_size=10)), st.builds(timestamp, st.integers(0, 2**40)))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=5), st.builds(symbol, st.text(max_size=5))),
                                                 inner, max_size=3)), max_leaves=6)
_entries = st.lists(st.tuples(st.one_of(st.builds(symbol, st.text(max_size=8)), st.text(max_size=8), st.integers()),
                              st.one_of(_values, st.builds(Described, _descriptors, _values))), max_size=6)


@settings(max_examples=150, deadline=None)
@given(_entries)
def test_fuzz_parse_or_refuse(entries):
    try:
        result = parse(entries)
    except BadRequest as exc:
        assert exc.condition == "amqp:invalid-field" and exc.description
        return
    assert len(result.echo) + len(result.dropped) <= len(entries)
    # the echo is a subsequence of the entries, in wire order, with their values as received
    it = iter(entries)
    assert all(any(e[0] is k and e[1] is v for e in it) for k, v in result.echo)
    if result.stage2 is not None:
        assert result.stage2_kind in ("sql", "properties")
