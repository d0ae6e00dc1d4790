"""Property tests for the SQL filter pipeline (hypothesis).

- any text or bytes: ``compile_sql`` returns a filter or raises ``FilterError``, nothing else;
- random expressions generated from the grammar compile, and evaluating them on random messages
  gives True/False/None and never raises;
- the compiled evaluator (folding, fast paths, generated code) agrees with a plain tree walk over
  the unfolded tree using ``sqlfilter.runtime``;
- ``NOT x`` is unknown exactly when ``x`` is, and otherwise its negation;
- LIKE matchers agree with Python's ``re`` (which, like PCRE without dotall, lets ``$`` match
  before a final line feed and never lets ``.`` match one).
"""

from __future__ import annotations

import re
import uuid

from hypothesis import HealthCheck, given, settings, strategies as st
from proton import char, symbol, timestamp

from amqp_stream.wire import MessageView
from sqlfilter import FilterError, compile_sql
from sqlfilter import ast, runtime
from sqlfilter.like import compile_like
from sqlfilter.parser import parse

_SETTINGS = settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])

# ---- random messages ----
_KEYS = ["a", "b", "c", "n", "s"]
_values = st.one_of(
    st.integers(-5, 5), st.sampled_from(["a", "b", "ab", "a%"]),
    st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=True),
    st.text(max_size=6), st.binary(max_size=4), st.text(max_size=3).map(symbol),
    st.integers(0, 2**40).map(timestamp), st.characters().map(char), st.uuids(),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=2), st.integers(),
                                                         max_size=2))
_messages = st.builds(
    lambda ap, subject, prio: MessageView.from_sections(
        header={} if prio is None else {"priority": prio},
        properties={} if subject is None else {"subject": subject},
        application_properties=ap),
    st.fixed_dictionaries({}, optional={k: _values for k in _KEYS}),
    st.none() | st.text(max_size=5), st.none() | st.integers(0, 9))

# ---- random expressions from the grammar ----
_literal = st.one_of(
    st.integers(0, 10**20).map(str),
    st.tuples(st.integers(0, 999), st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.sampled_from(["1.5E3", "2.0E-2", "TRUE", "FALSE", "INF", "NAN", "0x00FF", "0xAB"]),
    st.text(alphabet="ab%_'\" ", max_size=4).map(lambda s: "'" + s.replace("'", "''") + "'"),
)
_ref = st.sampled_from(_KEYS + ["absent", "p.subject", "h.priority", "[s]", "a.n", "m.x",
                                "f.y", "a[0]", "n['k']", "UTC()"])
_patterns = st.text(alphabet="ab%_!\n", max_size=5).filter(lambda p: "\n" not in p)


def _expressions() -> st.SearchStrategy[str]:
    leaf = st.one_of(_literal, _ref)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(inner, st.sampled_from(["=", "<>", "<", ">", "<=", ">=", "!="]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda x: f"(NOT {x})"),
            inner.map(lambda x: f"(-({x}))"),
            st.tuples(inner, st.booleans(), _patterns).map(
                lambda t: f"({t[0]} {'NOT ' if t[1] else ''}LIKE '{t[2]}')"),
            st.tuples(inner, st.booleans(), _patterns).map(
                lambda t: f"({t[0]} LIKE '{t[2]}x' ESCAPE '!')"),
            st.tuples(inner, st.booleans(), st.lists(inner, min_size=1, max_size=3)).map(
                lambda t: f"({t[0]} {'NOT ' if t[1] else ''}IN ({', '.join(t[2])}))"),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} BETWEEN {t[1]} AND {t[2]})"),
            st.tuples(st.sampled_from(_KEYS + ["p.subject", "a[1]", "(a + 1)", "2"]),
                      st.booleans()).map(
                lambda t: f"({t[0]} IS {'NOT ' if t[1] else ''}NULL)"),
            st.sampled_from(_KEYS + ["p.subject", "n['k']"]).map(lambda r: f"EXISTS({r})"),
            st.tuples(st.sampled_from(["LOWER", "UPPER", "DATE"]), inner).map(
                lambda t: f"{t[0]}({t[1]})"),
            st.tuples(st.sampled_from(["LEFT", "RIGHT", "SUBSTRING"]), inner, inner).map(
                lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        )

    return st.recursive(leaf, extend, max_leaves=12)


def _conditions() -> st.SearchStrategy[str]:
    """Well-typed conditions (comparisons of values, predicates, AND/OR/NOT of those), so
    that more results are true or false rather than unknown."""
    value = st.recursive(
        st.one_of(_literal, _ref),
        lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        max_leaves=4)
    predicate = st.one_of(
        st.tuples(value, st.sampled_from(["=", "<>", "<", ">", "<=", ">="]), value).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(value, st.booleans(), _patterns).map(
            lambda t: f"{t[0]} {'NOT ' if t[1] else ''}LIKE '{t[2]}'"),
        st.tuples(value, st.lists(value, min_size=1, max_size=4)).map(
            lambda t: f"{t[0]} IN ({', '.join(t[1])})"),
        st.tuples(value, value, value).map(lambda t: f"{t[0]} NOT BETWEEN {t[1]} AND {t[2]}"),
        value.map(lambda v: f"{v} IS NULL"),
        st.sampled_from(_KEYS).map(lambda k: f"EXISTS {k}"),
        st.sampled_from(["TRUE", "FALSE", "a", "b"]),
    )
    return st.recursive(predicate, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda x: f"NOT ({x})")), max_leaves=6)


_exprs = st.one_of(_expressions(), _conditions())


def _compile(text: str):
    """Compile or None: generated text may still be refused (e.g. a bad LIKE escape)."""
    try:
        return compile_sql(text, max_tokens=10_000)
    except FilterError:
        return None


# ---- a reference tree walker over the unfolded tree ----
_HEADER_DEFAULTS = {"priority": 4, "durable": False, "first_acquirer": False, "delivery_count": 0}


def _raw(node, view):
    if isinstance(node, ast.Field):
        section = getattr(view, node.section)
        if node.section == "header" and node.name in _HEADER_DEFAULTS:
            return section.get(node.name, _HEADER_DEFAULTS[node.name])
        return section.get(node.name)
    return runtime.element(_raw(node.base, view), node.key)


def _exists(node, view):
    if isinstance(node, ast.Field):
        return node.name in getattr(view, node.section)
    return runtime.has_element(_raw(node.base, view), node.key)


def reference(node, view):
    """Evaluate without folding or generated code: the semantics, stated once more."""
    r = lambda n: reference(n, view)  # noqa: E731
    if isinstance(node, ast.Literal):
        return node.value
    if isinstance(node, (ast.Field, ast.Element)):
        return runtime.norm(_raw(node, view))
    if isinstance(node, ast.Utc):
        return runtime.utc()
    if isinstance(node, ast.Neg):
        return runtime.neg(r(node.operand))
    if isinstance(node, ast.Pos):
        return runtime.pos(r(node.operand))
    if isinstance(node, ast.Arith):
        f = {"+": runtime.add, "-": runtime.sub, "*": runtime.mul, "/": runtime.div,
             "%": runtime.mod}[node.op]
        return f(r(node.left), r(node.right))
    if isinstance(node, ast.Compare):
        return runtime.COMPARE[node.op](r(node.left), r(node.right))
    if isinstance(node, ast.And):
        return runtime.and3(r(node.left), r(node.right))
    if isinstance(node, ast.Or):
        return runtime.or3(r(node.left), r(node.right))
    if isinstance(node, ast.Not):
        return runtime.not3(r(node.operand))
    if isinstance(node, ast.Like):
        return compile_like(node.pattern, node.escape).match_value(r(node.subject))
    if isinstance(node, ast.In):
        return runtime.in_(r(node.subject), tuple(r(i) for i in node.items))
    if isinstance(node, ast.Between):
        return runtime.between(r(node.subject), r(node.low), r(node.high))
    if isinstance(node, ast.IsNull):
        if isinstance(node.ref, (ast.Field, ast.Element)):
            return runtime.norm(_raw(node.ref, view)) is None
        return runtime.norm(r(node.ref)) is None
    if isinstance(node, ast.Exists):
        return _exists(node.ref, view)
    if isinstance(node, ast.Call):
        f = {"LOWER": runtime.lower, "UPPER": runtime.upper, "LEFT": runtime.left,
             "RIGHT": runtime.right, "SUBSTRING": runtime.substring, "DATE": runtime.date}
        return f[node.name](*(r(a) for a in node.args))
    raise AssertionError(node)


@_SETTINGS
@given(st.text(max_size=60))
def test_any_text_compiles_or_raises_filter_error(text: str) -> None:
    try:
        compile_sql(text)
    except FilterError as err:
        assert err.position is None or 1 <= err.position <= len(text) + 1


@_SETTINGS
@given(st.binary(max_size=40))
def test_any_bytes_compile_or_raise_filter_error(data: bytes) -> None:
    try:
        compile_sql(data)
    except FilterError:
        pass


_fragments = st.lists(st.sampled_from(
    ["a", "p.subject", "h.priority", "m.x", "[k]", "[", "]", "'x'", "\"y\"", "'", "1", "1.5",
     "1.5E2", "0xAB", "0x", "=", "<>", "!=", "<", ">=", "+", "-", "*", "/", "%", "(", ")", ",",
     "AND", "OR", "NOT", "LIKE", "ESCAPE", "IN", "IS", "NULL", "BETWEEN", "TRUE", "FALSE",
     "UTC", "LOWER", "LEFT", "SUBSTRING", "DATE", "EXISTS", "INF", "NAN", "and", "Null", "d.x",
     "x.y", "[0]", "['k']", "\n", " "]), max_size=25)


@_SETTINGS
@given(_fragments)
def test_token_soup_compiles_or_raises_filter_error(parts: list[str]) -> None:
    f = None
    try:
        f = compile_sql(" ".join(parts))
    except FilterError:
        return
    assert f.evaluate(MessageView.from_sections()) in (True, False, None)


@_SETTINGS
@given(_exprs, _messages)
def test_generated_expressions_evaluate_to_three_values(text: str, view: MessageView) -> None:
    f = _compile(text)
    if f is None:
        return
    assert f.evaluate(view) in (True, False, None)
    assert f.matches(view) is (f.evaluate(view) is True)


@_SETTINGS
@given(_exprs, _messages)
def test_compiled_evaluator_agrees_with_tree_walk(text: str, view: MessageView) -> None:
    f = _compile(text)
    if f is None or "UTC()" in text:
        return
    expected = runtime.cond(reference(parse(text, max_tokens=10_000), view))
    assert f.evaluate(view) is expected, f.source


@_SETTINGS
@given(_exprs, _messages)
def test_not_is_unknown_exactly_when_operand_is(text: str, view: MessageView) -> None:
    f, g = _compile(text), _compile(f"NOT ({text})")
    if f is None or g is None or "UTC()" in text:
        return
    x, not_x = f.evaluate(view), g.evaluate(view)
    assert (x is None) == (not_x is None)
    if x is not None:
        assert not_x is (not x)


@_SETTINGS
@given(st.text(alphabet="ab%_", max_size=8), st.text(alphabet="ab\n", max_size=10))
def test_like_agrees_with_python_re(pattern: str, subject: str) -> None:
    m = compile_like(pattern)
    if m.kind == "exact":
        expected = subject == pattern
    elif m.kind == "prefix_suffix":
        expected = (len(subject) >= len(m.prefix) + len(m.suffix)
                    and subject.startswith(m.prefix) and subject.endswith(m.suffix))
    else:
        rx = "".join(".*?" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
        expected = re.match(f"^{rx}$", subject) is not None
    assert m.match_str(subject) is expected


@_SETTINGS
@given(st.text(alphabet="ab%_!", max_size=8), st.text(alphabet="ab%_!", max_size=10))
def test_like_escape_agrees_with_python_re(pattern: str, subject: str) -> None:
    try:
        m = compile_like(pattern, "!")
    except FilterError:
        assert pattern.replace("!!", "").endswith("!") or pattern.endswith("!")
        return
    rx, chars = [], iter(pattern)
    for c in chars:
        if c == "!":
            rx.append(re.escape(next(chars)))
        else:
            rx.append(".*?" if c == "%" else "." if c == "_" else re.escape(c))
    assert m.match_str(subject) is (re.match("^" + "".join(rx) + "$", subject) is not None)


def test_uuid_and_char_values_are_seen_as_rabbitmq_sees_them() -> None:
    u = uuid.uuid4()
    view = MessageView.from_sections(application_properties={"u": u, "c": char("é")})
    assert compile_sql(f"u = 0x{u.hex.upper()}").evaluate(view) is True
    assert compile_sql("c = 233").evaluate(view) is True
