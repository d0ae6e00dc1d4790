"""Pushdown translation: Spark filters -> stage-1 values and a stage-2 SQL text.

The SQL we generate is compiled by the broker's own ``sqlfilter`` and evaluated on real encoded
messages; its answer must equal Spark's semantics (a row passes when the predicate is true, null
makes it fail) for every row of a table that includes missing and odd values.
"""

from __future__ import annotations

import itertools

import proton
import pytest
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, IsNull,
                                    LessThan, LessThanOrEqual, Not, StringContains, StringEndsWith,
                                    StringStartsWith)
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, TimestampType

import sqlfilter
from amqp_stream.spark.pushdown import plan_pushdown, sql_identifier, sql_literal

COLUMNS = {"region": StringType(), "n": LongType(), "amount": DoubleType(), "ok": BooleanType(),
           "my key": StringType(), "AND": LongType(), "subject": StringType(), "ts": TimestampType()}


def test_identifiers_are_quoted_only_when_needed():
    assert sql_identifier("region") == "region"
    assert sql_identifier("my key") == "[my key]"
    assert sql_identifier("a]b") == "[a]]b]"
    assert sql_identifier("AND") == "[AND]"
    assert sql_identifier("like") == "[like]"
    assert sql_identifier("_x") == "[_x]"
    assert sql_identifier("subject") == "properties.subject"


@pytest.mark.parametrize("value", [0, -7, 2**62, 1.5, -0.001, 1e300, 123456.789, "it's", "", b"\x00\xff"])
def test_literals_compile_and_compare_equal(value):
    f = sqlfilter.compile_sql(f"v = {sql_literal(value)}")
    assert f.matches(proton.Message(body=b"", properties={"v": value}))


def test_filter_value_equal_and_in_become_stage1_with_an_exact_check():
    filters = [EqualTo(("filter_value",), "eu"), In(("filter_value",), ("eu", "us"))]
    pd, rest = plan_pushdown(filters, COLUMNS)
    assert rest == [] and pd.filter_values == ("eu",) and pd.sql is None
    assert pd.accepts("eu") and not pd.accepts("us") and not pd.accepts(None)
    pd, _ = plan_pushdown([EqualTo(("filter_value",), "eu"), EqualTo(("filter_value",), "us")], COLUMNS)
    assert pd.empty  # contradictory: nothing can match, no broker round trip needed


def test_untranslatable_filters_stay_with_spark_by_reference():
    keep = [StringContains(("filter_value",), "e"), EqualTo(("filter_value",), 3),
            EqualTo(("unknown",), 1), EqualTo(("n", "x"), 1), EqualTo(("ts",), 5),
            In(("n",), (1, None)), GreaterThan(("amount",), float("nan"))]
    pd, rest = plan_pushdown(keep, COLUMNS)
    assert pd.sql is None and pd.filter_values is None
    assert len(rest) == len(keep) and all(a is b for a, b in zip(rest, keep, strict=True))


def test_every_pushed_predicate_is_also_checked_by_spark():
    f, g = GreaterThan(("amount",), 2.5), EqualTo(("n",), 3)
    pd, rest = plan_pushdown([f, g], COLUMNS)
    assert rest == [f, g]
    assert pd.sql == ("((amount > 2.50000000000000000E0) OR (EXISTS(amount) AND ((amount + 0.0) IS NULL OR "
                      "(amount % 1) IS NOT NULL))) AND (n = 3)")


def test_a_string_equality_lists_every_value_whose_text_it_is():
    pd, _ = plan_pushdown([In(("region",), ("5", "eu"))], COLUMNS)
    assert pd.sql == "region IN ('5', 5, 53, 'eu')"  # the string, the int, the char '5'
    pd, _ = plan_pushdown([EqualTo(("region",), "eu")], COLUMNS)
    assert pd.sql == "region = 'eu'"  # a plain equality: derived keys and the prefilter use it


def test_a_pushed_text_stays_within_what_the_broker_compiles():
    filters = [In(("region",), tuple(f"r{i}" for i in range(40))), EqualTo(("n",), 1), EqualTo(("n",), 2)] * 3
    pd, rest = plan_pushdown(filters, COLUMNS)
    assert len(rest) == len(filters) and 0 < len(pd.pushed) < len(filters)
    sqlfilter.compile_sql(pd.sql)  # 200 tokens at most: no more clauses than fit


# --- semantics: broker SQL == Spark for every row ------------------------------------------------

ROWS = [
    {"region": "eu-west", "n": 5, "amount": 1.5, "ok": True, "my key": "a%b", "AND": 1},
    {"region": "us_east", "n": -3, "amount": 10.0, "ok": False, "my key": "ab", "AND": 2},
    {"region": "eu", "n": 100, "ok": True, "my key": "x]"},
    {"n": 0, "amount": 0.0},
    {"region": "", "n": 7, "amount": -2.0, "ok": False, "my key": "_b"},
    {},
]
FILTERS = [
    EqualTo(("region",), "eu"), Not(EqualTo(("region",), "eu")), GreaterThan(("n",), 4),
    GreaterThanOrEqual(("n",), 5), LessThan(("n",), 0), LessThanOrEqual(("amount",), 1.5),
    In(("region",), ("eu", "us_east")), IsNull(("amount",)), IsNotNull(("region",)),
    StringStartsWith(("region",), "eu"), StringEndsWith(("region",), "_east"),
    StringContains(("my key",), "%"), StringStartsWith(("my key",), "_"), EqualTo(("ok",), True),
    Not(EqualTo(("ok",), True)), EqualTo(("AND",), 2), Not(In(("n",), (5, 7))),
    StringEndsWith(("my key",), "]"), Not(IsNull(("n",))), GreaterThan(("region",), "eu"),
]


def spark_eval(f, row):
    """Spark's answer: True, False or None (null)."""
    if isinstance(f, Not):
        v = spark_eval(f.child, row)
        return None if v is None else not v
    x = row.get(f.attribute[0])
    if isinstance(f, IsNull):
        return x is None
    if isinstance(f, IsNotNull):
        return x is not None
    if x is None:
        return None
    if isinstance(f, In):
        return x in f.value
    ops = {EqualTo: lambda a, b: a == b, GreaterThan: lambda a, b: a > b,
           GreaterThanOrEqual: lambda a, b: a >= b, LessThan: lambda a, b: a < b,
           LessThanOrEqual: lambda a, b: a <= b, StringStartsWith: str.startswith,
           StringEndsWith: str.endswith, StringContains: lambda a, b: b in a}
    return ops[type(f)](x, f.value)


@pytest.mark.parametrize("pair", list(itertools.combinations(range(len(FILTERS)), 2))[::7] +
                         [(i,) for i in range(len(FILTERS))])
def test_broker_sql_agrees_with_spark(pair):
    """On values of each column's own type the broker's answer is Spark's (for other values the
    clause lets the message through: tests/spark/test_pushdown_equivalence.py)."""
    filters = [FILTERS[i] for i in pair]
    pd, rest = plan_pushdown(filters, COLUMNS)
    assert rest == filters
    pushed = [f for f in filters if repr(f) in pd.pushed]
    if not pushed:
        assert pd.sql is None
        return
    compiled = sqlfilter.compile_sql(pd.sql)
    for row in ROWS:
        encoded = proton.Message(body=b"", properties=dict(row)).encode()
        expected = all(spark_eval(f, row) is True for f in pushed)
        assert compiled.matches(encoded) == expected, (pd.sql, row)


def test_offset_predicates_narrow_the_range_and_stay_with_spark():
    filters = [GreaterThanOrEqual(("offset",), 100), LessThan(("offset",), 250), GreaterThan(("offset",), 120),
               In(("offset",), (130, 400)), EqualTo(("offset",), "x")]
    pd, rest = plan_pushdown(filters, COLUMNS)
    assert (pd.offset_start, pd.offset_end) == (130, 250)
    assert len(rest) == len(filters) and all(a is b for a, b in zip(rest, filters, strict=True))
    assert pd.clamp(0, 1000) == (130, 250) and pd.clamp(200, 220) == (200, 220)
    pd, _ = plan_pushdown([LessThanOrEqual(("offset",), 5), GreaterThan(("offset",), 5)], COLUMNS)
    assert pd.empty
