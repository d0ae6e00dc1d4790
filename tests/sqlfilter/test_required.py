"""``sqlfilter.required``: the values a filter requires, found from the compiled tree, and the
property that makes broker-derived filter keys safe: skipping the chunks whose index holds none
of the required values gives exactly the deliveries of a full scan (random streams, random
filters, derived keys on and off), with an exact index and with a chunk Bloom filter."""

from __future__ import annotations

import math
import struct
import uuid
from decimal import Decimal

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bloom
from amqp_stream.wire import MessageView
from sqlfilter import FilterError, compile_property_filter, compile_selector, compile_sql, runtime
from sqlfilter.required import (bounds_of, canonical, index_token, needles, required_bounds,
                                required_values, requirement_of, wanted_tokens)

A, P = "application_properties", "properties"

# ---- random messages: a few keys, values of every type that compares ----
#: numbers in every AMQP type a value may take (proton picks the shortest encoding of each:
#: small values get the one-byte forms, 300 and 70000 the wide ones)
_TYPED_NUMBERS = [
    proton.ubyte(1), proton.byte(-1), proton.ushort(300), proton.short(-300), proton.uint(0),
    proton.uint(1), proton.uint(70000), proton.int32(-1), proton.int32(70000), proton.ulong(0),
    proton.ulong(300), proton.ulong(70000), 300, -300, 70000, 0, proton.float32(1.0),
    proton.float32(2.5), proton.float32(-0.0), 300.0, proton.char("\x01"), proton.timestamp(1),
    proton.timestamp(70000)]
_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 2.5, -0.0, math.nan]),
    st.sampled_from(_TYPED_NUMBERS),
    st.sampled_from(["a", "b", "c", "", "é"]), st.sampled_from([b"a", b"b", b"\xff"]))
_KEYS = ("k", "m", "n")


@st.composite
def messages(draw):
    app = {k: draw(_values) for k in _KEYS if draw(st.booleans())}
    props = {"subject": draw(st.sampled_from(["a", "b"]))} if draw(st.booleans()) else {}
    return {A: app, P: props}


# ---- random filters (text), from pieces the extraction handles and pieces it must ignore ----
_literals = st.sampled_from(["1", "2", "-1", "2.5", "1.0", "0", "-0.0", "300", "-300", "70000",
                             "300.0", "'a'", "'b'", "'c'", "''", "TRUE",
                             "FALSE", "0x61"])
_fields = st.sampled_from(list(_KEYS) + ["p.subject", "h.priority"])


def _atom(f, lit, lits, kind, op):
    if kind == 0:
        return f"{f} = {lit}"
    if kind == 1:
        return f"{lit} = {f}"
    if kind == 2:
        return f"{f} IN ({', '.join(lits)})"
    if kind == 3:
        return f"{f} <> {lit}"
    if kind == 4:
        return f"{f} {op} {lit}"
    if kind == 5:
        return f"NOT {f} = {lit}"
    if kind == 6:
        return f"{f} IS NULL"
    if kind == 7:
        return f"{f} LIKE 'a%'"
    if kind == 8:
        return f"{lit} {op} {f}"
    return f"{f} BETWEEN {lit} AND {lits[-1]}"


@st.composite
def atoms(draw):
    return _atom(draw(_fields), draw(_literals), draw(st.lists(_literals, min_size=1, max_size=3)),
                 draw(st.integers(0, 9)), draw(st.sampled_from(["<", "<=", ">=", ">"])))


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


def _inside(v, bound) -> bool:
    lo, hi, lo_in, hi_in = bound
    return (v > lo or lo_in and v == lo) and (v < hi or hi_in and v == hi)


#: filters made mostly of what bounds a number, on two keys, over messages that mostly hold
#: numbers near the literals (the general strategies above seldom meet at an interval's edge)
_near = st.sampled_from(["-1", "0", "1", "2", "2.5", "-0.0", "300", "'a'", "TRUE"])


@st.composite
def _range_atoms(draw):
    return _atom(draw(st.sampled_from(["k", "m"])), draw(_near), draw(st.lists(_near, min_size=1, max_size=3)),
                 draw(st.sampled_from([0, 2, 3, 4, 4, 5, 8, 9])), draw(st.sampled_from(["<", "<=", ">=", ">"])))


_range_filters = st.recursive(_range_atoms(), lambda inner: st.tuples(
    inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"), max_leaves=4)
_numbers = st.one_of(st.sampled_from([-1, 0, 1, 2, 2.5, 3, 300, 299.5, proton.ubyte(2), proton.float32(2.5),
                                      proton.timestamp(300), proton.char("\x01")]), _values)
_number_messages = st.fixed_dictionaries({A: st.dictionaries(st.sampled_from(["k", "m"]), _numbers),
                                          P: st.just({})})


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_range_filters, _range_filters, filters()), st.lists(_number_messages, max_size=30),
       st.lists(st.integers(1, 6), max_size=30))
def test_skipping_by_number_bounds_gives_exactly_a_full_scan(text, stream, sizes):
    """Each chunk keeps, per field, the least and greatest number its records hold (their
    canonical numbers, which their index tokens hold); a chunk whose interval misses a bound is
    skipped."""
    f = compile_sql(text)
    bounds = required_bounds(f.tree)
    views = [MessageView.from_sections(**m) for m in stream]
    full = [i for i, v in enumerate(views) if f.matches(v)]
    for i in full:  # soundness message by message: a match holds a number inside each bound
        for (section, name), bound in bounds.items():
            c = canonical(stream[i][section].get(name))
            assert c is not None and c[0] == "n" and _inside(c[1], bound), (text, stream[i])
    got = []
    for chunk in _chunks(list(enumerate(stream)), sizes):
        read = True
        for (section, name), (lo, hi, lo_in, hi_in) in bounds.items():
            numbers = []
            for _, m in chunk:
                c = canonical(m[section].get(name))
                if c is not None and c[0] == "n":
                    numbers.append(c[1])
            least, most = (min(numbers), max(numbers)) if numbers else (math.inf, -math.inf)
            read = read and (most > lo or lo_in and most == lo) and (least < hi or hi_in and least == hi)
        got.extend(i for i, _ in chunk if read and f.matches(views[i]))
    assert got == full, text


def test_bounds_hold_for_every_pair_of_comparisons_and_value():
    """Exhaustive where the random test is thin: every AND and OR of two comparisons of ``k``
    with numbers near each other, against every number (and non-number) ``k`` may hold; a
    message that matches holds a number inside the bound."""
    lits = ["0", "1", "2", "2.5"]
    singles = [f"k {op} {v}" for op in ("<", "<=", ">=", ">", "=") for v in lits]
    singles += [f"{v} {op} k" for op in ("<", ">=") for v in lits]
    singles += ["k BETWEEN 1 AND 2", "k IN (0, 2.5)"]
    texts = singles + [f"({a}) {c} ({b})" for a in singles for b in singles for c in ("AND", "OR")]
    values = [-1, 0, 1, 2, 2.5, 3, 0.5, 1.5, proton.ubyte(2), proton.float32(2.5), proton.char("\x01"),
              proton.timestamp(2), "1", True, None]
    views = [(v, MessageView.from_sections(application_properties={"k": v})) for v in values]
    for text in texts:
        f = compile_sql(text)
        bound = required_bounds(f.tree).get((A, "k"))
        for v, view in views:
            if f.matches(view):
                c = canonical(v)
                assert bound is None or c is not None and c[0] == "n" and _inside(c[1], bound), (text, v)


@pytest.mark.parametrize("text,expected", [
    ("k > 5", {(A, "k"): (5, math.inf, False, False)}),
    ("5 <= k", {(A, "k"): (5, math.inf, True, False)}),
    ("k BETWEEN 1 AND 3 AND k < 2", {(A, "k"): (1, 2, True, False)}),
    ("k > 5 OR k <= 1", {(A, "k"): (-math.inf, math.inf, False, False)}),  # still a number
    ("k > 5 OR m < 1", {}),
    ("k IN (1, 2.5, -3)", {(A, "k"): (-3, 2.5, True, True)}),
    ("k IN (1, 'a')", {}),
    ("k = 3 AND k >= 3", {(A, "k"): (3, 3, True, True)}),
    ("k = 'a'", {}),
    ("k > TRUE", {}),
    ("NOT k > 5", {}),
    ("k + 1 > 3", {}),
    ("h.priority > 4", {}),  # a header default: not indexed
    ("p.absolute_expiry_time > 10 AND k < 0", {(P, "absolute_expiry_time"): (10, math.inf, False, False),
                                               (A, "k"): (-math.inf, 0, False, False)}),
])
def test_required_bounds_of_sql(text, expected):
    assert required_bounds(compile_sql(text).tree) == expected


def test_bounds_of_each_filter_kind():
    assert bounds_of(compile_selector("amount > 10 AND JMSPriority > 3")) == {
        (A, "amount"): (10, math.inf, False, False)}
    assert bounds_of(compile_property_filter(application_properties={"k": 5})) == {}


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
    proton.symbol("a"), proton.char("a"), proton.ulong(1), uuid.UUID(int=1), math.nan,
    *_TYPED_NUMBERS])


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
    ("k = TRUE", ((b"k",),)),  # no needle for a boolean: only the key
    ("k = 'a' AND k = 'b'", ((),)),  # nothing can match
    ("k = ''", ((b"k",),)),  # every record holds the empty string
    ("k = 'a' OR m = 'b'", ()),
])
def test_needles(text, expected):
    assert needles(requirement_of(compile_sql(text))) == expected


def _with_char_key(key: str, value) -> bytes:
    """A message whose application properties are ``{char(key): value}`` (map32), body 'x'."""
    data = proton.Data()
    data.put_object(value)
    entries = b"\x73" + struct.pack(">I", ord(key)) + data.encode()
    return (b"\x00\x53\x74\xd1" + struct.pack(">II", 4 + len(entries), 2) + entries
            + b"\x00\x53\x75\xa0\x01x")


#: the AMQP types a number may be stored as, with the integers each holds (floats: any)
_WIDE = [(proton.ubyte, 0, 2 ** 8 - 1), (proton.byte, -2 ** 7, 2 ** 7 - 1),
         (proton.ushort, 0, 2 ** 16 - 1), (proton.short, -2 ** 15, 2 ** 15 - 1),
         (proton.uint, 0, 2 ** 32 - 1), (proton.int32, -2 ** 31, 2 ** 31 - 1),
         (proton.ulong, 0, 2 ** 64 - 1), (int, -2 ** 63, 2 ** 63 - 1),
         (proton.timestamp, -2 ** 63, 2 ** 63 - 1), (proton.char, 0, 0xD7FF),
         (proton.float32, None, None), (float, None, None)]


@pytest.mark.parametrize("value", [0, 1, 7, -1, -128, 127, 255, 256, -129, 65535, 70000,
                                   2 ** 31 - 1, -2 ** 31, 2 ** 32 - 1, 2 ** 53, 2 ** 63 - 1,
                                   2 ** 64 - 1, -2 ** 63, 1.5, -0.0, 0.1])
def test_a_number_is_found_in_every_type_that_holds_it(value):
    """Every AMQP type that can hold ``value`` (as proton encodes it, shortest form first)
    stores bytes that one of ``k = value``'s needles finds, with a str8, str32 or char key."""
    f = compile_sql(f"k = {value!r}")
    (group,) = needles(requirement_of(f))
    match = f.bytes_matcher()
    tried = 0
    for kind, lo, hi in _WIDE:
        if lo is not None and not (type(value) is int and lo <= value <= hi):
            continue
        typed = kind(chr(value)) if kind is proton.char else kind(value)
        stored = _encoded({"k": typed})
        if not f.matches(MessageView.from_bytes(stored)):
            assert kind in (proton.float32, float)  # a float that rounds the value
            continue
        tried += 1
        held = typed
        assert any(n in stored for n in group), (kind, value)
        char_keyed = _with_char_key("k", typed)  # (proton encodes string keys only)
        assert f.matches(MessageView.from_bytes(char_keyed))
        assert any(n in char_keyed for n in group), (kind, value)
        assert match(stored) and match(char_keyed), (kind, value)  # the byte prefilter too
    long_key = "k" * 300  # a str32 key: its length's low byte, then its bytes
    (group,) = needles(requirement_of(compile_sql(f"{long_key} = {value!r}")))
    assert any(n in _encoded({long_key: held}) for n in group)
    assert tried >= 1


def test_number_needles_tell_values_apart():
    (seven,) = needles(requirement_of(compile_sql("k = 7")))
    for other in (8, 7.5, "7", True):
        assert not any(n in _encoded({"k": other}) for n in seven)
    assert not any(n in _encoded({"kk": 7}) for n in seven)


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
