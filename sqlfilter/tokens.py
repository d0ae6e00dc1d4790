"""The tokenizer of SQL filter expressions, built from the terminals of ``grammar/sql_filter.lark``.

Strategy: the terminals stay defined once, in the grammar; this module compiles them into one
alternation (higher Lark priority first, which gives leex's longest match for our terminals:
binary before integer, float before integer, section names before identifiers) and scans with
``re.match`` at each position. It replaces Lark's basic lexer because it is about twice as fast
(no line counting, no per-terminal callbacks) and because it enforces, per token, what
RabbitMQ's lexer enforces:
- keywords are upper case only: an identifier whose text is a keyword becomes that keyword;
- a reserved word in any other case is refused as an identifier (``RESERVED``);
- at most ``max_tokens`` tokens (set per parse through a context variable);
- any character no terminal matches is an error at its position.
"""

from __future__ import annotations

import contextvars
import re
from typing import Iterator

from lark import Token
from lark.common import LexerConf
from lark.lexer import Lexer, PatternStr

from sqlfilter.errors import FilterError

__all__ = ["Tokenizer", "RESERVED", "max_tokens"]

#: words that are never identifiers, in any case (RabbitMQ's ?KEYWORDS in
#: rabbit_amqp_sql_lexer.xrl, plus nan and inf which its test suite shows are reserved).
#: BETWEEN is not reserved by RabbitMQ, so ``between`` stays an identifier here too.
RESERVED = frozenset((
    "and", "or", "not", "like", "in", "is", "null", "escape", "true", "false", "exists", "lower",
    "upper", "left", "right", "substring", "utc", "date", "nan", "inf"))

#: the token limit of the parse under way
max_tokens: contextvars.ContextVar[int] = contextvars.ContextVar("sql_max_tokens", default=200)


class Tokenizer(Lexer):
    """A Lark custom lexer: ``lex(text)`` yields Lark tokens or raises ``FilterError``."""

    def __init__(self, lexer_conf: LexerConf) -> None:
        terminals = list(lexer_conf.terminals)
        ident = next(t for t in terminals if t.name == "IDENT")
        ident_re = re.compile(ident.pattern.to_regexp())
        # string terminals that are spelled like identifiers are keywords, found via IDENT
        self._keywords = {t.pattern.value: t.name for t in terminals
                          if isinstance(t.pattern, PatternStr)
                          and ident_re.fullmatch(t.pattern.value)}
        scanned = [t for t in terminals if t.pattern.value not in self._keywords
                   or not isinstance(t.pattern, PatternStr)]
        scanned.sort(key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value),
                                    t.name))
        self._ignore = frozenset(lexer_conf.ignore)
        self._scanner = re.compile("|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})"
                                            for t in scanned))

    def lex(self, text: str) -> Iterator[Token]:  # type: ignore[override]
        limit = max_tokens.get()
        match = self._scanner.match
        keywords, ignore = self._keywords, self._ignore
        pos, end, count = 0, len(text), 0
        while pos < end:
            m = match(text, pos)
            if m is None:
                raise FilterError(f"unexpected character {text[pos]!r}", pos + 1)
            kind = m.lastgroup
            assert kind is not None  # every alternative of the scanner is a named group
            value = m.group()
            start, pos = pos, m.end()
            if kind in ignore:
                continue
            count += 1
            if count > limit:
                raise FilterError(f"more than {limit} tokens", start + 1)
            if kind == "IDENT":
                keyword = keywords.get(value)
                if keyword is not None:
                    kind = keyword
                elif value.lower() in RESERVED:
                    raise FilterError(f"{value!r} is a reserved word", start + 1)
            yield Token(kind, value, start_pos=start, line=1, column=start + 1, end_pos=pos)
