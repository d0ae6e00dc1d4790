"""Stage 2 SQL filter expressions (amqp:sql-filter): a table of expressions and the messages
each must select.

Rules from filter-language.md "SQL filter expressions" (lexical rules, grammar, three-valued
evaluation), OASIS AMQP Filter Expressions 1.0 §6, Jakarta Messaging 3.1 §3.8.1 (selectors), and
RabbitMQ 4.2 (rabbitmq.com/docs/stream-filtering "SQL Filter Expressions";
deps/rabbit/test/amqp_filter_sql_SUITE.erl). Rows marked `ext` are this project's extensions.
"""

from __future__ import annotations

import pytest
from proton import Message, symbol, uint

from conformance.amqp import SQL_CODE, address, offset_spec, sql_filter

pytestmark = pytest.mark.timeout(240)

ALL = list(range(9))


def corpus() -> list[Message]:
    """Messages 0..8; body = index; application properties chosen to tell rows apart."""
    return [
        Message(body=0, subject="red", properties={"n": 0, "s": "apple", "f": 1.5, "b": True, "t": "it's"}),
        Message(body=1, subject="green", priority=9,
                properties={"n": 1, "s": "banana", "f": 2.5, "b": False, "bin": b"\x01\x02"}),
        Message(body=2, subject="blue", id="id-2", correlation_id="c2",
                properties={"n": 2, "s": "cherry", "f": -1.0, "neg": -5, "nul": None}),
        Message(body=3, properties={"n": 10, "s": "a%b_c", "u": uint(10)}),
        Message(body=4, subject="red"),
        Message(body=5, content_type="text/plain",
                properties={"n": -7, "s": "Apple", "with space": "x", "w]x": "y"}),
        Message(body=6, group_id="g1", group_sequence=3, creation_time=1_700_000_000.0,
                properties={"n": 7, "s": ""}),
        Message(body=7, annotations={symbol("x-colour"): "teal"}, properties={"s": "aXb", "n": 3}),
        Message(body=8, properties={"s": "ab" * 3 + "c", "n": 4, "d": "2025-01-01"}),
    ]


HAS_N = [0, 1, 2, 3, 5, 6, 7, 8]
HAS_S = [0, 1, 2, 3, 5, 6, 7, 8]

# (expression, expected message indexes)
ROWS: list[tuple[str, list[int]]] = [
    # comparison and equality across numeric types
    ("n = 1", [1]),
    ("n <> 1", [i for i in HAS_N if i != 1]),
    ("n != 1", [i for i in HAS_N if i != 1]),
    ("n > 2", [3, 6, 7, 8]),
    ("n >= 2", [2, 3, 6, 7, 8]),
    ("n < 0", [5]),
    ("n <= 0", [0, 5]),
    ("n = 10.0", [3]),
    ("u = 10", [3]),
    ("u = n", [3]),
    ("f > 2.0", [1]),
    ("f < 0", [2]),
    ("f = 1.5", [0]),
    ("n = 1.0E1", [3]),
    ("neg < -4", [2]),
    # arithmetic
    ("n + 1 = 2", [1]),
    ("n - 2 * 3 = 1", [6]),
    ("2 * 3 + 1 = n", [6]),
    ("n * 2 = 20", [3]),
    ("n / 4 = 2.5", [3]),
    ("n % 3 = 1", [1, 3, 6, 8]),
    ("n % 3 = -1", [5]),
    ("-n = 7", [5]),
    ("+n = 1", [1]),
    ("n / 0 = 1", []),
    ("NOT (n / 0 = 1)", []),
    ("f % 2 = 1", []),
    ("s + 1 = 1", []),
    ("'a' + 'b' = 'ab'", []),
    # strings
    ("s = 'apple'", [0]),
    ("s = \"apple\"", [0]),
    ("t = 'it''s'", [0]),
    ("t = \"it's\"", [0]),
    ("s > 'b'", [1, 2]),
    ("s < 'B'", [5, 6]),
    ("s = ''", [6]),
    ("s LIKE 'a%'", [0, 3, 7, 8]),
    ("s LIKE '_pple'", [0, 5]),
    ("s LIKE 'a!%b!_c' ESCAPE '!'", [3]),
    ("s LIKE 'a%b_c'", [3]),
    ("s NOT LIKE 'a%'", [1, 2, 5, 6]),
    ("s LIKE '%'", HAS_S),
    ("s LIKE '%a%a%a%'", [1, 8]),
    ("s LIKE '%b%b%b%c'", [8]),
    ("s LIKE 'aXb'", [7]),
    ("n LIKE '1'", []),
    ("s IN ('apple', 'cherry')", [0, 2]),
    ("s NOT IN ('apple', 'cherry')", [1, 3, 5, 6, 7, 8]),
    ("n IN (1, 2.0)", [1, 2]),
    ("nul IN ('x')", []),
    ("missing NOT IN ('x')", []),
    # null and presence
    ("nul IS NULL", ALL),
    ("nul IS NOT NULL", []),
    ("s IS NULL", [4]),
    ("s IS NOT NULL", HAS_S),
    ("missing = 1", []),
    ("NOT (missing = 1)", []),
    # booleans and three-valued logic
    ("b", [0]),
    ("NOT b", [1]),
    ("b = TRUE", [0]),
    ("b = FALSE", [1]),
    ("b <> TRUE", [1]),
    ("s", []),
    ("NOT s", []),
    ("TRUE", ALL),
    ("FALSE", []),
    ("NOT FALSE", ALL),
    ("missing = 1 OR n = 2", [2]),
    ("missing = 1 AND n = 2", []),
    ("NOT (missing = 1 AND n = 3)", [i for i in HAS_N if i != 7]),
    ("n = 1 OR n = 2 AND s = 'apple'", [1]),
    ("(n = 1 OR n = 2) AND s = 'cherry'", [2]),
    ("NOT n = 1", [i for i in HAS_N if i != 1]),  # NOT applies to the comparison
    # comparisons of different kinds
    ("s < 1", []),
    ("NOT (s < 1)", HAS_S),
    ("s = 1", []),
    ("s <> 1", HAS_S),
    ("b < TRUE", []),
    ("bin = 0x0102", [1]),
    ("bin > 0x01", [1]),
    # header and properties sections, qualified and delimited names
    ("header.priority = 9", [1]),
    ("h.priority = 4", [i for i in ALL if i != 1]),
    ("h.priority > 4", [1]),
    ("p.subject = 'red'", [0, 4]),
    ("properties.subject IN ('green', 'blue')", [1, 2]),
    ("p.message_id = 'id-2'", [2]),
    ("p.correlation_id = 'c2'", [2]),
    ("p.content_type = 'text/plain'", [5]),
    ("p.group_id = 'g1' AND p.group_sequence = 3", [6]),
    ("p.subject IS NULL", [3, 5, 6, 7, 8]),
    ("p.group_sequence > 2", [6]),
    ("p.creation_time = 1700000000000", [6]),
    ("p.creation_time > 1600000000000", [6]),
    ("p.absolute_expiry_time IS NULL", ALL),
    ("a.s = 'apple'", [0]),
    ("application_properties.n = 1", [1]),
    ("[with space] = 'x'", [5]),
    ("[w]]x] = 'y'", [5]),
    ("[n] = 1", [1]),
    ("UTC() > 1700000000000", ALL),
]

EXTENSION_ROWS: list[tuple[str, list[int]]] = [
    ("n BETWEEN 1 AND 3", [1, 2, 7]),
    ("n NOT BETWEEN 1 AND 3", [0, 3, 5, 6, 8]),
    ("LOWER(s) = 'apple'", [0, 5]),
    ("UPPER(s) = 'BANANA'", [1]),
    ("m.[x-colour] = 'teal'", [7]),
    ("message_annotations.[x-colour] IS NOT NULL", [7]),
    ("f < INF", [0, 1, 2]),
    ("LEFT(s, 2) = 'ap'", [0]),
    ("RIGHT(s, 3) = 'ple'", [0, 5]),
    ("SUBSTRING(s, 2, 3) = 'ppl'", [0, 5]),
    ("EXISTS(nul)", [2]),
]

INVALID = [
    "n = ",
    "n = 1 and n = 1",          # keywords are upper case only; reserved words are not names
    "n = 5.",
    "n = .5",
    "n = 5E2",
    "n = 100E-1",
    "bin = 0x0g",
    "bin = 0x012",
    "s LIKE 'a' ESCAPE 'ab'",
    "s = 'unterminated",
    "n = 1 = 1",                # comparison is non-associative
    "d.[x] = 1",                # delivery annotations are never stored
    "(n = 1",
    "n IN ()",
    "like = 1",
    "n = 1 " + "AND n = 1 " * 70,  # more than 200 tokens
    "s = '" + "x" * 4100 + "'",     # more than 4096 characters
]


@pytest.fixture(scope="module")
def sql_stream(target):
    """One stream holding the corpus, shared by every row of this module."""
    import uuid

    name = f"conf-sql-{uuid.uuid4().hex[:8]}"
    c = target.connect()
    assert c.declare(name).status == 201
    c.publish(name, corpus())
    yield name
    c.delete(name)
    c.close()


def select(client, stream, expression: str, code: bool = False) -> tuple[list[int], list | None]:
    c = client.consumer(address(stream), [offset_spec("first"), sql_filter(expression, code=code)])
    got = [r.message.body for r in c.read_all()]
    keys = c.echo_keys
    c.close()
    return got, keys


@pytest.mark.parametrize("expression,expected", ROWS, ids=[r[0] for r in ROWS])
def test_sql_expression(client, sql_stream, expression, expected):
    """The expression is accepted (echoed) and selects exactly the expected messages
    (filter-language.md "SQL filter expressions"; filtex §6; RabbitMQ amqp_filter_sql_SUITE)."""
    got, keys = select(client, sql_stream, expression)
    assert keys == ["rabbitmq:stream-offset-spec", "sql-filter"]
    assert got == sorted(expected)


@pytest.mark.extension
@pytest.mark.parametrize("expression,expected", EXTENSION_ROWS, ids=[r[0] for r in EXTENSION_ROWS])
def test_sql_extension_expression(client, sql_stream, expression, expected):
    """Extensions accepted here, rejected by RabbitMQ 4.2: BETWEEN, the spec's functions
    (LOWER, UPPER, LEFT, RIGHT, SUBSTRING, EXISTS), message annotations, INF
    (filter-language.md "Extensions"; filtex §6.4)."""
    got, keys = select(client, sql_stream, expression)
    assert keys == ["rabbitmq:stream-offset-spec", "sql-filter"]
    assert got == sorted(expected)


@pytest.mark.parametrize("expression", INVALID, ids=[e[:30] for e in INVALID])
def test_invalid_sql_is_left_out(client, sql_stream, expression):
    """An expression that cannot be parsed is not put in place: left out of the attach reply,
    the link stays up without it (filter-language.md "Evaluation": definitional error;
    amqp-interface.md "Consuming")."""
    got, keys = select(client, sql_stream, expression)
    assert keys == ["rabbitmq:stream-offset-spec"]
    assert got == ALL


def test_sql_with_ulong_descriptor(client, sql_stream):
    """The SQL filter descriptor may be the ulong 0x120 (amqp-interface.md table)."""
    c = client.consumer(address(sql_stream), [offset_spec("first"), sql_filter("n = 2", code=True)])
    got = [r.message.body for r in c.read_all()]
    assert got == [2]
    ((_, _), (key, value)) = c.echo
    assert str(key) == "sql-filter" and value.value == "n = 2"
    assert value.descriptor in (SQL_CODE, symbol("amqp:sql-filter"))


def test_like_is_linear(client, stream):
    """LIKE with many `%` against long subjects finishes (no backtracking blow-up)
    (filter-language.md "Evaluation": LIKE in linear time)."""
    subject = "a" * 500
    client.publish(stream, [Message(body=0, properties={"s": subject}),
                            Message(body=1, properties={"s": subject + "b"})])
    pattern = "%a" * 100 + "%b"
    got, keys = select(client, stream, f"s LIKE '{pattern}'")
    assert keys == ["rabbitmq:stream-offset-spec", "sql-filter"]
    assert got == [1]
