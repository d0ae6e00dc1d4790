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

__all__ = ["Tokenizer", "SelectorTokenizer", "RESERVED", "SELECTOR_KEYWORDS", "max_tokens"]

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
                    hint = (f" (keywords are upper case: {value.upper()})"
                            if value.upper() in keywords else
                            " (reserved in any case: not a name)")
                    raise FilterError(f"{value!r} is a reserved word{hint}", start + 1)
            yield Token(kind, value, start_pos=start, line=1, column=start + 1, end_pos=pos)


#: the selector dialect's keywords, in any case (JMS 3.1 §3.8.1.1, plus RocketMQ's three)
SELECTOR_KEYWORDS = frozenset((
    "AND", "OR", "NOT", "LIKE", "ESCAPE", "IN", "IS", "NULL", "TRUE", "FALSE", "BETWEEN",
    "CONTAINS", "STARTSWITH", "ENDSWITH"))
#: keywords that are %declare'd in the grammar (no pattern there): their terminal names
_DECLARED = {"CONTAINS": "_CONTAINS", "STARTSWITH": "_STARTSWITH", "ENDSWITH": "_ENDSWITH"}
#: tokens that end an operand: a NOT after one is infix (NOT LIKE/IN/BETWEEN/...)
_OPERAND_END = frozenset(("IDENT", "SECTION_DELIMITED_ID", "INT", "FLOAT", "STRING", "RPAR",
                          "NULL", "NULL_LITERAL", "TRUE", "FALSE"))
#: the dialect's lexemes (ActiveMQ Classic SelectorParser.jj), tried in this order
_SELECTOR_LEXEMES = (
    ("WHITESPACE", r"[ \t\f\n\r]+"),
    ("FLOAT", (r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
               r"|[0-9]+[eE][+-]?[0-9]+")),
    ("INT", r"0[xX][0-9a-fA-F]+|[1-9][0-9]*[lL]?|0[0-7]*"),
    ("STRING", r"'(?:[^']|'')*'"),
    ("SECTION_DELIMITED_ID", r"[a-zA-Z][a-zA-Z_-]*\.\[(?:[^\[\]]|\[\[|\]\])*\]"),
    ("IDENT", r"(?:[^\W\d]|\$)[\w$.]*"),
    ("COMPARE_OP", r"<>|<=|>=|=|<|>"),
)


class SelectorTokenizer(Lexer):
    """The selector dialect's tokenizer: same terminal names as the grammar, JMS lexemes.

    Keywords in any case; identifiers are Java-like (``$``, ``_``, and ``.`` after the first
    character, as ActiveMQ); integers are decimal (``L`` suffix allowed), hex or octal; floats
    may be ``5.``, ``.5`` or ``1e3``; strings are single-quoted. A prefix NOT becomes
    ``_NOT_TIGHT`` (it binds tighter than comparisons); a NOT after an operand or IS stays NOT.
    NULL outside ``IS [NOT] NULL`` is ``NULL_LITERAL`` (a null value).
    """

    def __init__(self, lexer_conf: LexerConf) -> None:
        punctuation = {t.pattern.value: t.name for t in lexer_conf.terminals
                       if isinstance(t.pattern, PatternStr)
                       and not t.pattern.value[:1].isalpha()}
        keywords = {t.pattern.value: t.name for t in lexer_conf.terminals
                    if isinstance(t.pattern, PatternStr) and t.pattern.value.isalpha()}
        keywords["BETWEEN"] = "BETWEEN"
        self._keywords = {k: keywords.get(k) or _DECLARED[k] for k in SELECTOR_KEYWORDS}
        marks = [(name, re.escape(value)) for value, name in punctuation.items()]
        self._scanner = re.compile("|".join(f"(?P<{name}>{pattern})"
                                            for name, pattern in (*_SELECTOR_LEXEMES, *marks)))

    def lex(self, text: str) -> Iterator[Token]:  # type: ignore[override]
        limit = max_tokens.get()
        match, keywords = self._scanner.match, self._keywords
        pos, end, count, previous = 0, len(text), 0, ""
        while pos < end:
            m = match(text, pos)
            if m is None:
                raise FilterError(f"unexpected character {text[pos]!r}", pos + 1)
            kind = m.lastgroup
            assert kind is not None  # every alternative of the scanner is a named group
            value = m.group()
            start, pos = pos, m.end()
            if kind == "WHITESPACE":
                continue
            count += 1
            if count > limit:
                raise FilterError(f"more than {limit} tokens", start + 1)
            if kind == "IDENT":
                kind = keywords.get(value.upper(), kind)
                if kind == "NOT" and previous not in _OPERAND_END and previous != "IS":
                    kind = "_NOT_TIGHT"
                elif kind == "NULL" and previous not in ("IS", "NOT"):
                    kind = "NULL_LITERAL"
            previous = kind
            yield Token(kind, value, start_pos=start, line=1, column=start + 1, end_pos=pos)
