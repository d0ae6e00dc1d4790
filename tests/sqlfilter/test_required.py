"""``sqlfilter.required``: the values a filter requires, found from the compiled tree, and the
property that makes broker-derived filter keys safe: skipping the chunks whose index holds none
of the required values gives exactly the deliveries of a full scan (random streams, random
filters, derived keys on and off), with an exact index and with a chunk Bloom filter."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bloom
from sqlfilter import (FilterError, MessageView, compile_property_filter, compile_selector,
                       compile_sql, runtime)
from sqlfilter.required import (canonical, index_token, needles, required_values,
                                requirement_of, wanted_tokens)

A, P = "application_properties", "properties"

# ---- random messages: a few keys, values of every type that compares ----
_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 2.5, -0.0, math.nan]),
    st.sampled_from(["a", "b", "c", "", "é"]), st.sampled_from([b"a", b"b", b"\xff"]))
_KEYS = ("k", "m", "n")


@st.composite
def messages(draw):
    app = {k: draw(_values) for k in _KEYS if draw(st.booleans())}
    props = {"subject": draw(st.sampled_from(["a", "b"]))} if draw(st.booleans()) else {}
    return {A: app, P: props}


# ---- random filters (text), from pieces the extraction handles and pieces it must ignore ----
_literals = st.sampled_from(["1", "2", "-1", "2.5", "1.0", "'a'", "'b'", "'c'", "''", "TRUE",
                             "FALSE", "0x61"])
_fields = st.sampled_from(list(_KEYS) + ["p.subject", "h.priority"])


def _atom(draw_field, draw_lit, draw_lits, kind):
    f = draw_field
    if kind == 0:
        return f"{f} = {draw_lit}"
    if kind == 1:
        return f"{draw_lit} = {f}"
    if kind == 2:
        return f"{f} IN ({', '.join(draw_lits)})"
    if kind == 3:
        return f"{f} <> {draw_lit}"
    if kind == 4:
        return f"{f} > {draw_lit}"
    if kind == 5:
        return f"NOT {f} = {draw_lit}"
    if kind == 6:
        return f"{f} IS NULL"
    return f"{f} LIKE 'a%'"


@st.composite
def atoms(draw):
    return _atom(draw(_fields), draw(_literals), draw(st.lists(_literals, min_size=1, max_size=3)),
                 draw(st.integers(0, 7)))


def filters():
    return st.recursive(atoms(), lambda inner: st.tuples(
        inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        max_leaves=6)


def _tokens(message: dict, required) -> set[bytes]:
    """The index tokens of the required fields' values in one message."""
    out = set()
    for section, name in required:
        token = index_token(section, name, message[section].get(name))
        if token is not None:
            out.add(token)
    return out


def _chunks(stream: list, sizes: list[int]) -> list[list]:
    out, i = [], 0
    for size in sizes:
        if i >= len(stream):
            break
        out.append(stream[i:i + size])
        i += size
    if i < len(stream):
        out.append(stream[i:])
    return out


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(filters(), st.lists(messages(), max_size=40), st.lists(st.integers(1, 6), max_size=40),
       st.sampled_from([16, 255]))
def test_skipping_by_derived_keys_gives_exactly_a_full_scan(text, stream, sizes, bloom_size):
    f = compile_sql(text)
    required = required_values(f.tree)
    views = [MessageView.from_sections(**m) for m in stream]
    full = [i for i, v in enumerate(views) if f.matches(v)]
    # soundness message by message: a match holds one of the required values of each field
    for i in full:
        for (section, name), values in required.items():
            assert canonical(stream[i][section].get(name)) in values, (text, stream[i])
    indexed = list(enumerate(stream))
    exact, bloomed = [], []
    for chunk in _chunks(indexed, sizes):
        tokens = set().union(*(_tokens(m, required) for _, m in chunk)) if chunk else set()
        cf = bloom.build(sorted(tokens), bloom_size, bloom.Scheme.OSIRIS)
        read_exact = read_bloom = True
        for wanted in wanted_tokens(required).values():
            read_exact = read_exact and bool(wanted & tokens)
            read_bloom = read_bloom and bool(wanted) and cf is not None and bloom.Matcher(
                sorted(wanted)).matches(cf.bits, cf.scheme, cf.param)
        for i, _ in chunk:
            if read_exact and f.matches(views[i]):
                exact.append(i)
            if read_bloom and f.matches(views[i]):
                bloomed.append(i)
    assert exact == full and bloomed == full, text


@pytest.mark.parametrize("text,expected", [
    ("k = 'a'", {(A, "k"): {("s", b"a")}}),
    ("'a' = k", {(A, "k"): {("s", b"a")}}),
    ("k = 0x61", {(A, "k"): {("s", b"a")}}),  # binary equals the string with its bytes
    ("k = 1.0 OR k = 1", {(A, "k"): {("n", 1)}}),
    ("k IN ('a', 'b') AND m = TRUE AND n > 1", {(A, "k"): {("s", b"a"), ("s", b"b")},
                                                (A, "m"): {("b", True)}}),
    ("k = 'a' AND k = 'b'", {(A, "k"): set()}),
    ("k = 'a' AND (k = 'a' OR k = 'b')", {(A, "k"): {("s", b"a")}}),
    ("k = 'a' OR m = 'b'", {}),
    ("NOT k = 'a'", {}),
    ("k <> 'a'", {}),
    ("k LIKE 'a'", {}),
    ("k = m", {}),
    ("h.priority = 4", {}),  # absent is 4: a header default, not indexed
    ("p.subject = 'x' AND a.[odd key] = 3", {(P, "subject"): {("s", b"x")}, (A, "odd key"): {("n", 3)}}),
    ("m.[x] = 1", {}),
    ("k = 1 + 1", {(A, "k"): {("n", 2)}}),  # folded first
])
def test_required_values_of_sql(text, expected):
    got = required_values(compile_sql(text).tree)
    assert {k: set(v) for k, v in got.items()} == expected


def test_required_values_of_selectors_use_the_mapped_fields():
    got = required_values(compile_selector("region = 'r1' and JMSType = 't' and JMSPriority = 5 "
                                           "and JMSMessageID = 'ID:x'").tree)
    assert got == {(A, "region"): {("s", b"r1")}, (P, "subject"): {("s", b"t")}}


@given(_values, _values)
def test_canonical_equality_is_the_languages_equality(a, b):
    same = canonical(a) is not None and canonical(a) == canonical(b)
    assert same == (runtime.eq(runtime.norm(a), runtime.norm(b)) is True)


def test_index_tokens_tell_fields_and_types_apart():
    assert index_token(A, "k", "1") != index_token(A, "k", 1)
    assert index_token(A, "k", "a") == index_token(A, "k", b"a")
    assert index_token(A, "k", 1) == index_token(A, "k", 1.0)
    assert index_token(A, "k", "a") != index_token(A, "m", "a")
    assert index_token(A, "k", None) is None and index_token(A, "k", math.nan) is None
    with pytest.raises(FilterError):
        compile_sql("k = ")


# ---- property filters: the entries that are plain equality ----
_refs = st.one_of(
    st.sampled_from(["a", "b", "&p:a", "&s:b", "&&a", "", "é"]),
    st.sampled_from([proton.symbol("a"), proton.char("a"), b"a", b"\xff"]),
    st.integers(-2, 2), st.sampled_from([1.0, 2.5, proton.ulong(1), True, False, None]),
    st.just(Decimal("1.5")))
_message_values = st.sampled_from([
    "a", "b", "&a", "ab", "ba", "é", "", b"a", b"\xff", 1, 2.5, 1.0, True, False, None,
    proton.symbol("a"), proton.char("a"), proton.ulong(1), uuid.UUID(int=1), math.nan])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS[:2]), _refs, min_size=1, max_size=2),
       st.lists(st.dictionaries(st.sampled_from(_KEYS[:2]), _message_values), max_size=20))
def test_a_property_filter_requires_its_equality_entries(refs, apps):
    f = compile_property_filter(application_properties=refs)
    requirement = requirement_of(f)
    for app in apps:
        if f.matches(MessageView.from_sections(application_properties=app)):
            for (section, name), values in requirement.items():
                assert section == A and canonical(app.get(name)) in values, (refs, app)


def _encoded(app: dict, subject=None) -> bytes:
    return proton.Message(properties=app, subject=subject, body="x").encode()


@SETTINGS
@given(filters(), st.lists(messages(), max_size=20))
def test_the_byte_prefilter_of_sql_never_changes_an_answer(text, stream):
    """``bytes_matcher`` rejects a record without the required bytes before decoding it: the
    answers stay those of the full evaluation, message by message."""
    f = compile_sql(text)
    match = f.bytes_matcher()
    for m in stream:
        data = _encoded(m[A], m[P].get("subject"))
        assert match(data) == f.matches(MessageView.from_bytes(data)), (text, m)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS[:2]), _refs, min_size=1, max_size=2),
       st.lists(st.dictionaries(st.sampled_from(_KEYS[:2]), _message_values), max_size=20))
def test_the_byte_prefilter_of_property_filters_never_changes_an_answer(refs, apps):
    f = compile_property_filter(application_properties=refs)
    match = f.bytes_matcher()
    for app in apps:
        data = _encoded(app)
        assert match(data) == f.matches(MessageView.from_bytes(data)), (refs, app)


@pytest.mark.parametrize("text,expected", [
    ("region = 'r42'", ((b"r42",),)),
    ("region IN ('b', 'a') AND p.subject = 's'", ((b"a", b"b"), (b"s",))),
    ("k = 1", ((b"k",),)),  # numbers have too many encodings: only the key
    ("k = 'a' AND k = 'b'", ((),)),  # nothing can match
    ("k = ''", ((b"k",),)),  # every record holds the empty string
    ("k = 'a' OR m = 'b'", ()),
])
def test_needles(text, expected):
    assert needles(requirement_of(compile_sql(text))) == expected


def test_a_record_without_the_needles_is_not_evaluated():
    f = compile_sql("k = 'zz'")
    seen = []
    evaluate = f.evaluate_view
    f.evaluate_view = lambda view: seen.append(view) or evaluate(view)  # type: ignore[method-assign]
    match = f.bytes_matcher()
    assert match(_encoded({"k": "ab"})) is False and seen == []
    assert match(_encoded({"k": "zz"})) is True and len(seen) == 1


def test_requirement_of_each_filter_kind():
    assert requirement_of(compile_sql("k = 'a'")) == {(A, "k"): {("s", b"a")}}
    assert requirement_of(compile_selector("JMSType = 't'")) == {(P, "subject"): {("s", b"t")}}
    f = compile_property_filter(properties={proton.symbol("subject"): "s"},
                                application_properties={"k": "&p:x", "m": "&&y", "n": None,
                                                        "c": proton.char("A"), "d": Decimal(1)})
    assert requirement_of(f) == {(P, "subject"): {("s", b"s"), ("n", 115)},
                                 (A, "m"): {("s", b"&y")},
                                 (A, "c"): {("s", b"A"), ("n", 65)}, (A, "d"): set()}
    assert requirement_of(object()) == {}
