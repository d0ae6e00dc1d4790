"""``amqp_stream.fast_match``: the one-pass stage 2 gives every record the verdict the general
matcher gives (random messages, random filters of the shapes it takes), and it does take them."""

from __future__ import annotations

import proton
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from proton import Data, Message, char, symbol

from amqp_stream.fast_match import bytes_matcher, fast_matcher
from amqp_stream.filtering import install
from sqlfilter import compile_sql

install()

KEYS = ("region", "k", "é")
TEXTS = ("r42", "r7", "", "é", "r42 ", "R42")
INTS = (0, 7, -1, 10, 255, 256, 2**31, 2**63 - 1, -2**63)
_INT_TYPES = (int, proton.ubyte, proton.byte, proton.ushort, proton.short, proton.uint,
              proton.int32, proton.ulong)


def _int(value: int, kind: type) -> object | None:
    """``value`` as a proton integer type, None when it does not fit."""
    bits = {proton.ubyte: (0, 8), proton.byte: (1, 8), proton.ushort: (0, 16),
            proton.short: (1, 16), proton.uint: (0, 32), proton.int32: (1, 32),
            proton.ulong: (0, 64), int: (1, 64)}[kind]
    signed, width = bits
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    return kind(value) if lo <= value <= hi else None


values = st.one_of(
    st.sampled_from(TEXTS), st.text(max_size=4),
    st.sampled_from(TEXTS).map(lambda t: symbol(t) if t.isascii() else t),
    st.builds(lambda v, k: _int(v, k), st.sampled_from(INTS) | st.integers(-300, 300),
              st.sampled_from(_INT_TYPES)),
    st.sampled_from((7.0, 0.5, float("nan"), True, False, None, b"r42", char("r"),
                     proton.timestamp(7), proton.decimal32(7))),
    st.text(min_size=256, max_size=300),  # a str32
)


def _map(entries: list[tuple[object, object]]) -> bytes:
    """An application-properties section holding ``entries`` as given (repeated keys, keys of
    any type, which a dict cannot hold)."""
    d = Data()
    d.put_described()
    d.enter()
    d.put_ulong(0x74)
    d.put_map()
    d.enter()
    for key, value in entries:
        d.put_object(key)
        d.put_object(value)
    d.exit()
    d.exit()
    return d.encode()


@st.composite
def messages(draw) -> bytes:
    """A stored message: proton's encoding, or sections put together by hand (a map with
    repeated keys, symbol or long keys, no properties, message annotations, a body only)."""
    keys = st.sampled_from(KEYS) | st.sampled_from([symbol("region"), symbol("k"), "x" * 300])
    entries = draw(st.lists(st.tuples(keys, values), max_size=4))
    if draw(st.booleans()):
        props = {str(k): v for k, v in entries}
        m = Message(body=draw(st.binary(max_size=20)), properties=props or None,
                    subject=draw(st.sampled_from((None, "r42"))),
                    durable=draw(st.booleans()),
                    annotations=draw(st.sampled_from((None, {symbol("x-opt"): "r42"}))))
        return bytes(m.encode())
    head = draw(st.sampled_from((b"", b"\x00\x53\x70\x45", b"\x00\x53\x70\xc0\x02\x01\x41")))
    props = draw(st.sampled_from((b"", b"\x00\x53\x73\x45", b"\x00\x53\x73\xc0\x05\x01\xa1\x02id")))
    app = draw(st.sampled_from((b"", b"\x00\x53\x74\x40"))) if not entries else _map(entries)
    body = draw(st.sampled_from((b"\x00\x53\x75\xa0\x03r42", b"\x00\x53\x77\xa1\x01x", b"")))
    return head + props + app + body


@st.composite
def filters(draw) -> str:
    """``key OP literal``, ``literal OP key`` or ``key IN (...)`` (the fast shapes), with
    string or integer literals."""
    key = draw(st.sampled_from(KEYS))
    ref = key if key.isascii() else f"[{key}]"
    if draw(st.booleans()):
        lits = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=3))
        text = [("'" + t.replace("'", "''") + "'") for t in lits]
        op = "="
    else:
        lits = draw(st.lists(st.sampled_from(INTS), min_size=1, max_size=3))
        text = [str(v) for v in lits]
        op = draw(st.sampled_from(("=", "<>", "<", "<=", ">", ">=")))
    form = draw(st.integers(0, 2))
    if form == 0:
        return f"{ref} {op} {text[0]}"
    if form == 1:
        return f"{text[0]} {op} {ref}"
    return f"{ref} IN ({', '.join(text)})"


@settings(max_examples=300, deadline=None)
@given(filters(), st.lists(messages(), min_size=1, max_size=8))
# an integer where a string literal is compared (a string's walk misread it once)
@example("[é] = ''", [b"\x00St\xd1\x00\x00\x00\x09\x00\x00\x00\x02\xa1\x02\xc3\xa9C",
                     b"\x00St\xd1\x00\x00\x00\x0b\x00\x00\x00\x02\xa1\x02\xc3\xa9`\x00\x00"])
def test_the_fast_path_agrees_with_the_general_matcher(sql, records):
    f = compile_sql(sql)
    general = f.bytes_matcher()
    fast = bytes_matcher(f)
    assert fast is not general, sql  # the fast path is the one under test
    for data in records:
        assert fast(data) == general(data) == fast(bytearray(data)), (sql, data)


def test_the_fast_path_takes_the_common_shapes_only():
    general = lambda data: False  # noqa: E731
    for sql in ("region = 'r42'", "'r42' = region", "region IN ('a', 'b')", "k = 7", "k < 10",
                "10 > k", "k IN (1, 2)", "k <> 3"):
        assert fast_matcher(compile_sql(sql), general) is not None, sql
    for sql in ("region <> 'r42'", "region < 'r'", "k = 7.5", "k IN (1, 'a')", "k = TRUE",
                "p.subject = 'x'", "region = 'a' AND k = 1", "k + 1 = 2", "region LIKE 'r%'",
                "k IN (1, k)"):
        assert fast_matcher(compile_sql(sql), general) is None, sql


def _head_and_rest(data: bytes) -> tuple[bytes, bytes] | None:
    """(the bytes up to the end of the application properties, the rest) of a stored message
    the walk reads, None for one it does not decide from a head."""
    from amqp_stream.fast_match import _value_of

    at, head = _value_of(b"region", True)(data)
    return (data[:head], data[head:]) if head else None


BODIES = (b"", b"\x00\x53\x77\xa1\x01x", b"\x00\x53\x75\xa0\x03r42",
          b"\x00\x53\x77\xa1\x06region")


@settings(max_examples=200, deadline=None)
@given(filters(), st.lists(messages(), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 5), st.sampled_from(BODIES)), min_size=1, max_size=30))
def test_remembered_verdicts_agree_with_the_general_matcher(sql, records, picks):
    """Records that share a head (other bodies after it), in any order: the remembered verdict
    is the one the general matcher gives each."""
    f = compile_sql(sql)
    general = f.bytes_matcher()
    fast = bytes_matcher(f)
    for index, body in picks:
        data = records[index % len(records)]
        split = _head_and_rest(data)
        if split is not None:
            data = split[0] + body
        assert fast(data) == general(data), (sql, data)


def _counting(decide):
    calls = []

    def counted(data: bytes):
        calls.append(data)
        return decide(data)

    return counted, calls


def test_a_repeated_head_is_answered_without_the_walk():
    from amqp_stream.fast_match import _decider, memoized

    f = compile_sql("region = 'r42'")
    decide, calls = _counting(_decider(f, f.bytes_matcher()))
    match = memoized(decide)
    r42 = bytes(Message(properties={"region": "r42", "k": 1}, body="a").encode())
    r7 = bytes(Message(properties={"region": "r7", "k": 1}, body="a").encode())
    head, _ = _head_and_rest(r42)
    assert [match(r42), match(r7), match(head + b"\x00\x53\x77\xa1\x01b"), match(r7),
            match(r42)] == [True, False, True, False, True]
    assert calls == [r42, r7]  # the walk ran once per head


@pytest.mark.parametrize("last", [{"region": "r43"}, {"k": 2}, {"k": 1, "x": "b"}])
def test_heads_that_differ_in_their_last_byte_are_told_apart(last):
    """The head ends where the application properties end: records whose properties differ
    only in their last byte (the last value) keep their own verdicts."""
    from amqp_stream.fast_match import _decider, memoized

    for sql in ("region = 'r42'", "k = 1"):
        f = compile_sql(sql)
        general = f.bytes_matcher()
        match = memoized(_decider(f, general))
        first = {"k": 1, "region": "r42"} if "region" in last else {"region": "r42", "k": 1}
        if "x" in last:
            first = {"region": "r42", "k": 1, "x": "a"}
        other = {**first, **last}
        records = [bytes(Message(properties=p, body="a").encode()) for p in (first, other)]
        assert len(records[0]) == len(records[1])
        for data in records * 2:
            assert match(data) == general(data), (sql, data)


def test_the_memo_gives_up_when_heads_do_not_repeat():
    from amqp_stream import fast_match

    f = compile_sql("region = 'r42'")
    decide, calls = _counting(fast_match._decider(f, f.bytes_matcher()))
    match = fast_match.memoized(decide)
    unique = [bytes(Message(id=i, properties={"region": "r42"}).encode())
              for i in range(fast_match.MEMO_TRIAL + 10)]
    assert all(match(data) for data in unique)
    repeated = unique[-1]
    for _ in range(3):
        assert match(repeated)
    assert len(calls) == len(unique) + 3  # off: every record walked (nothing kept)


def test_records_the_needles_reject_do_not_turn_the_memo_off():
    """A derived key's blocks or a chunk read whole give records without the needles first
    (false positives of the index): they cost no walk and must not count as misses."""
    from amqp_stream import fast_match
    from sqlfilter.required import prefiltered

    f = compile_sql("region = 'r42'")
    decide, calls = _counting(fast_match._decider(f, f.bytes_matcher()))
    match = fast_match.memoized(decide, prefiltered(f, lambda data: True))
    others = [bytes(Message(id=i, properties={"region": "r7"}).encode())
              for i in range(fast_match.MEMO_TRIAL * 2)]
    r42 = bytes(Message(properties={"region": "r42"}, body="a").encode())
    assert not any(match(data) for data in others)
    assert all(match(r42) for _ in range(10))
    assert calls == [r42]
