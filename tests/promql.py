"""What a Grafana dashboard's PromQL queries select, for checking dashboards against the series a
real broker exports: the metric names, their label matchers and the labels the queries group or
join on. A reader of PromQL selectors, not a PromQL parser: enough for dashboards' expressions
(functions, aggregations with ``by``/``without``, ``on``/``group_left`` joins, range selectors,
``label_values(...)`` variable queries)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

__all__ = ["Selector", "dashboard_queries", "selectors"]

# PromQL's aggregation operators, functions and keywords that may stand before "(" or a name
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk",
                 "quantile", "count_values", "group"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TOKEN = re.compile(r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)|(?P<brace>\{)|(?P<range>\[[^\]]*\])'
                    r'|(?P<paren>\()|(?P<other>.)', re.S)
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*,?')


@dataclass
class Selector:
    """``name{label op "value", ...}`` in a query; ``grouping``: labels named in the query's
    ``by``/``on``/``group_left``/... lists (the query needs them on the series it combines)."""

    name: str
    matchers: list[tuple[str, str, str]] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)


def dashboard_queries(path: str | Path) -> list[str]:
    """Every PromQL expression of a Grafana dashboard: panels' targets (``expr``) and the
    template variables' queries."""
    found: list[str] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "expr" and isinstance(v, str):
                    found.append(v)
                elif k == "query" and key == "templating_item" and isinstance(v, str):
                    found.append(v)
                elif k == "list" and key == "templating":
                    for item in v:
                        walk(item, "templating_item")
                    continue
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)

    walk(json.loads(Path(path).read_text()))
    return [q for q in found if q and q != "prometheus"]


def selectors(expr: str) -> list[Selector]:
    """The series selectors of ``expr``; ``label_values(sel, label)`` counts ``label`` as
    grouping of ``sel``. Grafana's ``$variables`` are left in the values."""
    grouping: set[str] = set()
    out: list[Selector] = []
    tokens = list(_tokens(expr))
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "name" and text.lower() in _KEYWORDS:
            if following[0] == "paren":  # by (...), on(...), group_left(...)
                labels, i = _label_list(tokens, i + 2)
                grouping |= labels
                continue
        elif kind == "name" and text in _AGGREGATIONS and following[1] in ("by", "without"):
            i += 1  # sum by (labels) (...)
            continue
        elif kind == "name" and following[0] == "paren":
            if text == "label_values":  # Grafana: label_values(selector, label)
                inner = expr[expr.index("label_values(") + len("label_values("):expr.rindex(")")]
                selector, _, label = inner.rpartition(",")
                if not selector:  # label_values(label): no selector
                    return []
                return [Selector(s.name, s.matchers, {label.strip()}) for s in selectors(selector)]
            i += 1  # a function or an aggregation
            continue
        elif kind == "name":
            sel = Selector(text)
            if following[0] == "brace":
                sel.matchers = following[1]  # type: ignore[assignment]
                i += 1
            out.append(sel)
        elif kind == "brace":  # {__name__=...} alone: not used by dashboards here
            raise ValueError(f"a selector without a metric name in {expr!r}")
        i += 1
    for sel in out:
        sel.grouping = set(grouping)
    return out


def _tokens(expr: str) -> Iterator[tuple[str, Any]]:
    pos = 0
    while pos < len(expr):
        if expr[pos] == '"':  # a string outside a selector (e.g. label_replace's arguments)
            m = _STRING.match(expr, pos)
            assert m is not None, expr
            pos = m.end()
            continue
        m = _TOKEN.match(expr, pos)
        assert m is not None
        if m.group("brace"):
            end = expr.index("}", pos)
            body = expr[pos + 1:end]
            matchers = [(mm.group(1), mm.group(2), json.loads(mm.group(3)))
                        for mm in _MATCHER.finditer(body)]
            yield "brace", matchers
            pos = end + 1
            continue
        if m.group("name"):
            if _number_before(expr, pos):  # 1e+06 and the like
                pos = m.end()
                continue
            yield "name", m.group("name")
        elif m.group("paren"):
            yield "paren", "("
        elif m.group("other") == ")":
            yield "close", ")"
        pos = m.end()


def _number_before(expr: str, pos: int) -> bool:
    return pos > 0 and (expr[pos - 1].isdigit() or expr[pos - 1] == ".")


def _label_list(tokens: list[tuple[str, Any]], i: int) -> tuple[set[str], int]:
    """The label names up to the closing parenthesis at or after ``tokens[i]``."""
    labels: set[str] = set()
    while i < len(tokens) and tokens[i][0] != "close":
        if tokens[i][0] == "name":
            labels.add(tokens[i][1])
        i += 1
    return labels, i + 1
