"""The SQL case table (``sql_cases.py``) run through ``compile_sql``.

Each row is checked on a decoded view (``MessageView.from_sections``) and on the same message
encoded by proton and viewed lazily from its bytes (``MessageView.from_bytes``), and on
``matches`` (true only for T). Rows expecting E must raise ``FilterError`` and nothing else.
"""

from __future__ import annotations

from decimal import Decimal

import proton
import pytest
from proton import Data, Described, symbol, ubyte, uint, ulong

from amqp_stream.wire import MessageFormatError, MessageView
from sqlfilter import FilterError, compile_sql
from tests.sqlfilter.sql_cases import CASES, MESSAGES, NOT_ENCODABLE

_EXPECTED = {"T": True, "F": False, "U": None}

_HEADER_FIELDS = [("durable", bool), ("priority", ubyte), ("ttl", uint), ("first_acquirer", bool),
                  ("delivery_count", uint)]
_PROPERTIES_FIELDS = ["message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
                      "content_type", "content_encoding", "absolute_expiry_time", "creation_time",
                      "group_id", "group_sequence", "reply_to_group_id"]
_PROPERTIES_TYPES = {"user_id": bytes, "group_sequence": uint, "content_type": symbol,
                     "content_encoding": symbol}


def _amqp(value):
    """proton cannot put a decimal.Decimal: send a decimal32 (its exact value is irrelevant,
    RabbitMQ drops decimals and so do we)."""
    if isinstance(value, Decimal):
        return proton.decimal32(0x3280000F)
    if isinstance(value, dict):
        return {k: _amqp(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_amqp(v) for v in value]
    return value


def encode(sections: dict[str, dict]) -> bytes:
    """An AMQP 1.0 message with these sections (and an amqp-value body), encoded by proton."""
    sections = {name: _amqp(section) for name, section in sections.items()}
    data = Data()
    header = sections.get("header")
    if header:
        fields = [None if header.get(n) is None else t(header[n]) for n, t in _HEADER_FIELDS]
        data.put_object(Described(ulong(0x70), fields))
    if sections.get("message_annotations"):
        data.put_object(Described(ulong(0x72), sections["message_annotations"]))
    props = sections.get("properties")
    if props:
        fields = []
        for name in _PROPERTIES_FIELDS:
            value = props.get(name)
            if value is not None and name in _PROPERTIES_TYPES:
                value = _PROPERTIES_TYPES[name](value)
            fields.append(value)
        data.put_object(Described(ulong(0x73), fields))
    if sections.get("application_properties"):
        data.put_object(Described(ulong(0x74), sections["application_properties"]))
    data.put_object(Described(ulong(0x77), "body"))
    if sections.get("footer"):
        data.put_object(Described(ulong(0x78), sections["footer"]))
    return bytes(data.encode())


def _ids():
    return [f"{i}:{e}:{m}:{x[:60]!r}" for i, (e, m, x) in enumerate(CASES)]


@pytest.mark.parametrize("expected,message,expression", CASES, ids=_ids())
def test_case_on_decoded_view(expected: str, message: str, expression: str) -> None:
    if expected == "E":
        with pytest.raises(FilterError):
            compile_sql(expression)
        return
    f = compile_sql(expression)
    view = MessageView.from_sections(**MESSAGES[message])
    assert f.evaluate(view) is _EXPECTED[expected], f.source
    assert f.matches(view) is (expected == "T")


_ENCODED_CASES = [c for c in CASES if c[0] != "E" and c[1] not in NOT_ENCODABLE]


@pytest.mark.parametrize("expected,message,expression", _ENCODED_CASES,
                         ids=[f"{e}:{m}:{x[:60]!r}" for e, m, x in _ENCODED_CASES])
def test_case_on_encoded_bytes(expected: str, message: str, expression: str) -> None:
    f = compile_sql(expression)
    data = encode(MESSAGES[message])
    assert f.evaluate(MessageView.from_bytes(data)) is _EXPECTED[expected], f.source
    assert f.matches(data) is (expected == "T")
    assert f.bytes_matcher()(data) is (expected == "T")


def test_table_is_large_and_covers_every_outcome() -> None:
    outcomes = {e for e, _, _ in CASES}
    assert outcomes == {"T", "F", "U", "E"}
    assert len(CASES) >= 800
    assert NOT_ENCODABLE < set(MESSAGES)


def test_error_positions_point_at_the_problem() -> None:
    cases = {"a = = 1": 5, "5. > 0": 2, "x.y = 1": 1, "a = 1 AND and": 11, "a = 'x": 5,
             "a = ": 5, "a LIKE 'x!' ESCAPE '!'": 8, "[\n]": 1, "my$key": 3}
    for text, position in cases.items():
        with pytest.raises(FilterError) as info:
            compile_sql(text)
        assert info.value.position == position, (text, info.value)


def test_limits_are_configurable() -> None:
    text = "a = 1 AND b = 2"  # 7 tokens, 15 characters
    assert compile_sql(text, max_tokens=7, max_length=15).evaluate(
        MessageView.from_sections(application_properties={"a": 1, "b": 2})) is True
    with pytest.raises(FilterError):
        compile_sql(text, max_tokens=6)
    with pytest.raises(FilterError):
        compile_sql(text, max_length=14)
    compile_sql("x" * 5000 + " IS NULL", max_length=10_000)


def test_bytes_expression_must_be_utf8() -> None:
    f = compile_sql("a = 'é'".encode())
    assert f.evaluate(MessageView.from_sections(application_properties={"a": "é"})) is True
    for bad in (b"\xff", b"a = '\xc3'", "a = '\udc80'"):
        with pytest.raises(FilterError):
            compile_sql(bad)
    with pytest.raises(FilterError):
        compile_sql(42)  # type: ignore[arg-type]


def test_sections_are_only_those_read() -> None:
    assert compile_sql("a = 1").sections == {"application_properties"}
    assert compile_sql("p.subject = 'x' AND h.priority > 4").sections == {"properties", "header"}
    assert compile_sql("m.x = 1 OR f.y = 2").sections == {"message_annotations", "footer"}
    assert compile_sql("1 = 1").sections == frozenset()
    assert compile_sql("EXISTS(p.to)").sections == {"properties"}


def test_constant_expressions_fold_to_one_return() -> None:
    for text, value in [("1 + 2 = 3", True), ("'a' + 'b' = 'ab'", None), ("NOT TRUE", False),
                        ("FALSE AND a = 1", False), ("a = 1 OR TRUE", True),
                        ("2 IN (1, 1 + 1)", True), ("LOWER('A') = 'a'", True)]:
        f = compile_sql(text)
        assert f.source.strip().splitlines()[-1].strip() == f"return {value!r}", (text, f.source)


def test_neutral_literals_fold_away_only_around_predicates() -> None:
    assert compile_sql("a = 'x' OR FALSE").tree == compile_sql("a = 'x'").tree
    assert compile_sql("TRUE AND a LIKE 'x%'").tree == compile_sql("a LIKE 'x%'").tree
    view = MessageView.from_sections(application_properties={"a": 5})
    assert compile_sql("a OR FALSE").evaluate(view) is None  # 5 is not a boolean: unknown
    assert compile_sql("TRUE AND a").evaluate(view) is None


def test_utc_is_not_folded() -> None:
    f = compile_sql("UTC() > 0")
    assert "_utc()" in f.source
    assert f.evaluate(MessageView.from_sections()) is True


def test_proton_message_and_bytes_inputs() -> None:
    f = compile_sql("p.subject = 'order' AND a.n BETWEEN 1 AND 3")
    msg = proton.Message(subject="order", properties={"n": 2}, body="x")
    assert f.matches(msg) is True
    assert f.evaluate(msg) is True
    assert f.matches(bytes(msg.encode())) is True
    msg.properties = {"n": 7}
    assert f.evaluate(msg) is False


def test_same_text_compiles_once_and_limits_still_apply() -> None:
    text = "a = 1 AND b = 2"
    assert compile_sql(text) is compile_sql(text)
    assert compile_sql(text.encode()) is not compile_sql(text)  # bytes are not cached
    with pytest.raises(FilterError):
        compile_sql(text, max_tokens=6)
    assert compile_sql(text, max_tokens=7).evaluate(
        MessageView.from_sections(application_properties={"a": 1, "b": 2})) is True


def test_undecodable_message_is_unknown_not_an_exception() -> None:
    f = compile_sql("a = 1")
    good = encode({"application_properties": {"a": 1}})
    assert f.evaluate(MessageView.from_bytes(good)) is True
    broken = good[:-12] + b"\xa1\xff" + good[-10:]  # damage the end of the encoding
    g = compile_sql("a IS NULL")  # true for a message without the key: unknown only on error
    for data in (b"\x00Sp\xc0\x02\x01", b"\x00St\xd1\x00\x00\x00\x09", broken[:-3]):
        with pytest.raises(MessageFormatError):
            MessageView.from_bytes(data).application_properties
        assert g.evaluate(MessageView.from_bytes(data)) is None
        assert f.evaluate(MessageView.from_bytes(data)) is None
        assert g.matches(data) is False
    assert compile_sql("1 = 1").evaluate(MessageView.from_bytes(b"\xff")) is True  # reads nothing


def test_deep_nesting_is_a_filter_error_or_works() -> None:
    view = MessageView.from_sections(application_properties={"a": 1})
    big = {"max_tokens": 100_000, "max_length": 100_000}
    for text in ["NOT " * 3000 + "a", " + ".join(["1"] * 3000) + " = a",
                 "a = 1 AND (" * 200 + "a = 1" + ")" * 200]:
        with pytest.raises(FilterError):
            compile_sql(text, **big)
    assert compile_sql("(" * 3000 + "a = 1" + ")" * 3000, **big).evaluate(view) is True
    assert compile_sql(" AND ".join(["a = 1"] * 150), **big).evaluate(view) is True
    # the deepest right-nested AND the default limits allow still compiles
    assert compile_sql("a = 1 AND (" * 32 + "a = 1" + ")" * 32).evaluate(view) is True


def test_evaluator_touches_only_the_sections_it_declares() -> None:
    from types import SimpleNamespace

    cases = [("p.subject LIKE 'order.%'", {"properties": {"subject": "order.1"}}),
             ("h.priority > 4 AND EXISTS(f.sig)", {"header": {"priority": 7},
                                                   "footer": {"sig": 1}}),
             ("m.[x-opt-a] = 1 OR UTC() < 0", {"message_annotations": {"x-opt-a": 1}}),
             ("NOT (region IN ('a', 'b'))", {"application_properties": {"region": "c"}})]
    for text, sections in cases:
        f = compile_sql(text)
        assert f.sections == set(sections), text
        # an object with only those attributes: touching any other section would raise
        assert f.evaluate_view(SimpleNamespace(**sections)) is True, text


def test_explain_tool(capsys) -> None:
    from sqlfilter.explain import main

    assert main(["p.subject LIKE 'a%' AND 1 + 1 = 2"]) == 0
    out = capsys.readouterr().out
    assert "sections: properties" in out and "def _evaluate(view):" in out
    assert "startswith('a')" in out
    assert main(["a = = 1"]) == 1
    err = capsys.readouterr().err
    assert "invalid" in err and "\n      ^" in err
