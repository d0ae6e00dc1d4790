"""``compile_sql``: an SQL filter expression compiled once into a fast evaluator.

Strategy: text → ``parser.parse`` (limits, tokens, grammar, ``TreeToFilter``) → ``checks.check``
→ ``fold.fold`` → ``codegen.generate`` → ``compile()``. The resulting ``SqlFilter`` calls the
generated function directly (it is bound as the instance's ``evaluate_view``), and declares in
``sections`` the only sections the expression reads. See ``docs/sql-filters.md``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from sqlfilter import ast
from sqlfilter.base import Filter
from sqlfilter.checks import check, check_conditions
from sqlfilter.codegen import generate
from sqlfilter.errors import FilterError
from sqlfilter.fold import fold
from sqlfilter.parser import DEFAULT_MAX_LENGTH, DEFAULT_MAX_TOKENS, parse
from sqlfilter.view import MessageView, Reader, as_view, reader

__all__ = ["compile_sql", "compile_selector", "compile_uncached", "SqlFilter", "SelectorFilter"]


class SqlFilter(Filter):
    """A compiled SQL filter. ``evaluate`` gives True/False/None (unknown); only True matches."""

    def __init__(self, text: str, tree: ast.Node, source: str,
                 function: Callable[[MessageView], bool | None], sections: frozenset[str]):
        self.text = text
        self.tree = tree
        self.source = source
        self.sections = sections
        # the generated function itself, looked up before the class's method: no extra call
        # (mypy types an instance attribute named like a method as the unbound method)
        self.evaluate_view = function  # type: ignore[method-assign, assignment]

    def evaluate_view(self, view: MessageView) -> bool | None:  # replaced per instance
        raise NotImplementedError  # pragma: no cover

    def evaluate(self, message: Any) -> bool | None:
        """True, False or None (unknown) for a message the installed reader reads (stored
        bytes, a client's message) or a ``MessageView``."""
        return self.evaluate_view(as_view(message))

    def __repr__(self) -> str:
        return f"SqlFilter({self.text!r})"


def compile_sql(text: str | bytes, *, max_length: int = DEFAULT_MAX_LENGTH,
                max_tokens: int = DEFAULT_MAX_TOKENS) -> SqlFilter:
    """Compile an SQL filter expression.

    A compiled filter is immutable, so the same text compiled again (another consumer, a
    reconnect) returns the filter from a small cache instead of compiling it anew.

    Args:
        text: the expression (``str``, or ``bytes`` holding UTF-8).
        max_length: most characters allowed (RabbitMQ: 4096).
        max_tokens: most tokens allowed (RabbitMQ: 200).
    Returns:
        a ``SqlFilter`` with ``evaluate``, ``evaluate_view``, ``matches`` and ``sections``.
    Raises:
        FilterError: the expression is invalid (``position`` set for syntax errors).
    """
    if type(text) is str:
        return _compile_cached(text, max_length, max_tokens, "sql", reader())
    return compile_uncached(text, max_length=max_length, max_tokens=max_tokens)


def compile_uncached(text: str | bytes, *, max_length: int = DEFAULT_MAX_LENGTH,
                     max_tokens: int = DEFAULT_MAX_TOKENS, dialect: str = "sql",
                     with_reader: Reader | None = None) -> SqlFilter:
    """``compile_sql`` (or, with ``dialect="selector"``, ``compile_selector``) without the
    cache (what the benchmark times); ``with_reader``: the reader to pick with (default: the
    one installed, ``sqlfilter.view.use``)."""
    with_reader = with_reader or reader()
    tree = parse(text, max_length=max_length, max_tokens=max_tokens, dialect=dialect)
    selector = dialect == "selector"
    try:
        if selector:
            check_conditions(tree)
        matchers = check(tree)
        folded = fold(tree)
        generated = generate(folded, matchers, jms=selector, reader=with_reader)
        namespace = generated.globals
        exec(compile(generated.source, "<sql filter>", "exec"), namespace)
    except (RecursionError, MemoryError, SyntaxError):
        # only reachable with limits far above RabbitMQ's (thousands of nested operators);
        # SyntaxError: CPython refuses blocks nested deeper than 100 levels (deep AND/OR)
        raise FilterError("expression nested too deeply") from None
    shown = text if isinstance(text, str) else bytes(text).decode("utf-8")
    cls = SelectorFilter if selector else SqlFilter
    return cls(shown, folded, generated.source, namespace["_evaluate"], generated.sections)


@functools.lru_cache(maxsize=256)
def _compile_cached(text: str, max_length: int, max_tokens: int, dialect: str,
                    with_reader: Reader | None) -> SqlFilter:
    """(The reader is part of the key: a filter picks with the reader it was compiled for.)"""
    return compile_uncached(text, max_length=max_length, max_tokens=max_tokens, dialect=dialect,
                            with_reader=with_reader)


class SelectorFilter(SqlFilter):
    """A compiled JMS selector (the selector dialect); the same evaluator as ``SqlFilter``."""

    def __repr__(self) -> str:
        return f"SelectorFilter({self.text!r})"


def compile_selector(text: str | bytes, *, max_length: int = DEFAULT_MAX_LENGTH,
                     max_tokens: int = DEFAULT_MAX_TOKENS) -> SqlFilter:
    """Compile a JMS message selector (``apache.org:selector-filter:string``).

    The selector dialect of the SQL filter language (docs/sql-filters.md, *JMS selectors*):
    keywords in any case, JMS literals, the JMS headers mapped to AMQP fields as Qpid JMS does,
    RocketMQ's CONTAINS/STARTSWITH/ENDSWITH, NOT binding tighter than comparisons, and a
    property used as a condition false unless it is a boolean (ActiveMQ Classic's semantics).

    Raises:
        FilterError: the selector is invalid (``position`` set for syntax errors).
    """
    if type(text) is str:
        return _compile_cached(text, max_length, max_tokens, "selector", reader())
    return compile_uncached(text, max_length=max_length, max_tokens=max_tokens,
                            dialect="selector")

