"""The selector dialect's case table (``selector_cases.py``) run through ``compile_selector``,
on decoded views and on the same messages encoded by proton; and what sets the dialect apart
from ``compile_sql`` (which must not change)."""

from __future__ import annotations

import time

import pytest

from amqp_stream.wire import MessageView
from sqlfilter import FilterError, compile_selector, compile_sql, runtime
from tests.sqlfilter.selector_cases import CASES, MESSAGES
from tests.sqlfilter.test_sql_cases import encode

_EXPECTED = {"T": True, "F": False, "U": None}


def _ids(cases):
    return [f"{i}:{e}:{m}:{x[:60]!r}" for i, (e, m, x) in enumerate(cases)]


@pytest.mark.parametrize("expected,message,expression", CASES, ids=_ids(CASES))
def test_case_on_decoded_view(expected: str, message: str, expression: str) -> None:
    if expected == "E":
        with pytest.raises(FilterError):
            compile_selector(expression)
        return
    f = compile_selector(expression)
    view = MessageView.from_sections(**MESSAGES[message])
    assert f.evaluate(view) is _EXPECTED[expected], f.source
    assert f.matches(view) is (expected == "T")


_ENCODED = [c for c in CASES if c[0] != "E"]


@pytest.mark.parametrize("expected,message,expression", _ENCODED, ids=_ids(_ENCODED))
def test_case_on_encoded_bytes(expected: str, message: str, expression: str) -> None:
    f = compile_selector(expression)
    data = encode(MESSAGES[message])
    assert f.evaluate(MessageView.from_bytes(data)) is _EXPECTED[expected], f.source
    assert f.bytes_matcher()(data) is (expected == "T")


def test_table_covers_every_outcome() -> None:
    assert {e for e, _, _ in CASES} == {"T", "F", "U", "E"}
    assert len(CASES) >= 200


def test_sql_filter_language_is_unchanged_by_the_dialect() -> None:
    """The same texts mean what RabbitMQ says under amqp:sql-filter."""
    view = MessageView.from_sections(application_properties={"n": 5, "color": "red",
                                                             "CONTAINS": 1})
    assert compile_sql("NOT n = 5").evaluate(view) is False  # NOT (n = 5)
    assert compile_selector("NOT n = 5").evaluate(view) is False  # (NOT n) = 5
    assert compile_sql("NOT n = 6").evaluate(view) is True
    assert compile_selector("NOT n = 6").evaluate(view) is False
    assert compile_sql("color").evaluate(view) is None  # a non-boolean condition: unknown
    assert compile_selector("color").evaluate(view) is False
    assert compile_sql("CONTAINS = 1").evaluate(view) is True  # an identifier in SQL
    for text in ("n = 5 and color = 'red'", "a = 0x1f", "a = .5", "a CONTAINS 'x'"):
        with pytest.raises(FilterError):
            compile_sql(text)
        compile_selector(text)


def test_error_positions_point_at_the_problem() -> None:
    cases = {"a = = 1": 5, "a = 1 AND 2": 11, "a = 09": 6, "a = 99999999999999999999": 5,
             "a = 'x": 5, "a = 1 AND and": 11}
    for text, position in cases.items():
        with pytest.raises(FilterError) as info:
            compile_selector(text)
        assert info.value.position == position, (text, info.value)


def test_in_and_between_follow_jms_in_the_dialect_only() -> None:
    """JMS's IN takes a property and string literals, its BETWEEN numbers (ActiveMQ refuses the
    rest); the SQL filter keeps RabbitMQ's rules, which take them all."""
    cases = {"n IN (1, 2)": (7, "IN takes string literals only"),
             "n IN ('a', 1)": (12, "IN takes string literals only"),
             "color BETWEEN 'a' AND 'c'": (15, "BETWEEN compares numbers only"),
             "n BETWEEN 1 AND 'c'": (17, "BETWEEN compares numbers only"),
             "NOT color IN ('red')": (5, "NOT binds tighter than IN"),
             "n + 1 IN ('a')": (1, "IN takes a property on its left")}
    for text, (position, reason) in cases.items():
        with pytest.raises(FilterError) as info:
            compile_selector(text)
        assert info.value.position == position and reason in info.value.reason, (text, info.value)
        compile_sql(text)  # amqp:sql-filter: valid


def test_jms_expiration_is_the_time_of_reading_plus_the_ttl() -> None:
    """Qpid JMS (``AmqpJmsMessageFacade.getExpiration``): absolute-expiry-time, else the
    receive time + the header ttl (0 is no ttl), else 0."""
    view = MessageView.from_sections(header={"ttl": 60_000})
    before = time.time_ns() // 1_000_000
    assert compile_selector(f"JMSExpiration >= {before + 60_000}").evaluate(view) is True
    read = runtime.jms_expiration(None, 60_000)
    assert before + 60_000 <= read <= time.time_ns() // 1_000_000 + 60_000
    assert compile_selector("JMSExpiration = 0").evaluate(
        MessageView.from_sections(header={"ttl": 0})) is True


def test_selectors_are_cached_apart_from_sql() -> None:
    assert compile_selector("a = 1") is compile_selector("a = 1")
    assert compile_selector("a = 1") is not compile_sql("a = 1")
    assert repr(compile_selector("a = 1")) == "SelectorFilter('a = 1')"


def test_sections_read_are_those_the_headers_map_to() -> None:
    assert compile_selector("JMSPriority > 4").sections == {"header"}
    assert compile_selector("JMSMessageID = 'x' OR JMSType = 'y'").sections == {"properties"}
    assert compile_selector("m.rank = 1 AND x = 2").sections == {"message_annotations",
                                                                 "application_properties"}


def test_explain_tool_reads_selectors(capsys) -> None:
    from sqlfilter.explain import main

    assert main(["--selector", "JMSPriority > 4 and color = 'red'"]) == 0
    out = capsys.readouterr().out
    assert "sections: application_properties, header" in out and "'priority', 4" in out
    assert main(["JMSPriority > 4 and color = 'red'"]) == 1  # lower-case and: not SQL


@pytest.mark.parametrize("text", [
    "region = 'EMEA' AND price > 100",
    "a IN ('x', 'y') OR b BETWEEN 1 AND 5",
    "s LIKE 'ab%' AND n IS NOT NULL",
])
def test_the_same_expression_compiles_to_the_same_code_in_both_dialects(text):
    """The dialect evaluates as fast as the SQL filter: same tree, same generated function."""
    sql = compile_sql(text)
    lowered = text
    for keyword in ("AND", "OR", "IN", "BETWEEN", "LIKE", "IS", "NOT", "NULL"):
        lowered = lowered.replace(f" {keyword} ", f" {keyword.lower()} ")
    selector = compile_selector(lowered)
    assert selector.tree == sql.tree
    assert selector.source == sql.source
