"""SQL filter text → expression tree: limits, tokens, Lark LALR parse, ``TreeToFilter``.

Strategy: the grammar lives in ``grammar/sql_filter.lark`` and is loaded once (``_lark()``, a
cached factory) with ``TreeToFilter`` applied inline by the LALR parser. ``sqlfilter.tokens``
is the tokenizer (built from the grammar's terminals); it enforces what RabbitMQ's lexer
enforces per token: the token limit and that reserved words, in any case, are not identifiers.
Every Lark error is turned into a ``FilterError`` carrying the 1-based character position, so
callers only ever see ``FilterError`` for bad input.

Order of checks (as ``rabbit_amqp_filter_sql:parse/1``): valid UTF-8, length in characters,
tokens (count), grammar, then the tree's own checks.
"""

from __future__ import annotations

import functools
from typing import cast

from lark import Lark
from lark.exceptions import (UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                             UnexpectedToken, VisitError)

from grammar import GRAMMAR_DIR
from sqlfilter import ast, tokens
from sqlfilter.errors import FilterError
from sqlfilter.selector_tree import SelectorTransformer
from sqlfilter.tokens import RESERVED, SelectorTokenizer, Tokenizer
from sqlfilter.tree_to_filter import TreeToFilter

__all__ = ["parse", "prepare", "RESERVED", "DEFAULT_MAX_LENGTH", "DEFAULT_MAX_TOKENS"]

DEFAULT_MAX_LENGTH = 4096
DEFAULT_MAX_TOKENS = 200


@functools.lru_cache(maxsize=None)
def _lark(dialect: str = "sql") -> Lark:
    """The grammar, loaded once (LALR over ``Tokenizer``, built from the grammar's terminals).

    ``TreeToFilter`` runs inline (as each rule is reduced), so no parse tree is built and
    ``parse`` returns the expression tree directly. ``propagate_positions`` is off: it doubled
    the parse time (bench/sql_filter.py), and nodes take their position from their first token.
    ``dialect`` "selector" is the same grammar read by the selector dialect's tokenizer and
    transformer.
    """
    selector = dialect == "selector"
    return Lark.open(str(GRAMMAR_DIR / "sql_filter.lark"), parser="lalr",
                     lexer=SelectorTokenizer if selector else Tokenizer,
                     transformer=SelectorTransformer() if selector else TreeToFilter(),
                     propagate_positions=False, maybe_placeholders=False)


def prepare() -> None:
    """Load both dialects' grammars now (~50 ms each): a broker calls it at start, so that
    its first filtered consumer does not wait for them."""
    for dialect in ("sql", "selector"):
        _lark(dialect)


def _describe(err: UnexpectedInput) -> str:
    if isinstance(err, UnexpectedCharacters):
        return f"unexpected character {err.char!r}"
    if isinstance(err, UnexpectedToken):
        if err.token.type == "$END":
            return "unexpected end of expression"
        return f"unexpected {err.token.value!r}"
    if isinstance(err, UnexpectedEOF):
        return "unexpected end of expression"
    return "syntax error"


def parse(text: str | bytes, *, max_length: int = DEFAULT_MAX_LENGTH,
          max_tokens: int = DEFAULT_MAX_TOKENS, dialect: str = "sql") -> ast.Node:
    """Parse one filter expression into its tree.

    Args:
        dialect: "sql" (``amqp:sql-filter``) or "selector" (the JMS selector dialect).
        text: the expression, ``str`` or UTF-8 ``bytes``.
        max_length: most characters (code points) allowed.
        max_tokens: most tokens allowed.
    Raises:
        FilterError: for anything that is not a valid expression, with ``position`` when the
        problem has a place in the text.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            raise FilterError("the expression is not valid UTF-8", err.start + 1) from None
    elif not isinstance(text, str):
        raise FilterError(f"an SQL expression is a string, not {type(text).__name__}")
    else:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise FilterError("the expression is not valid Unicode", err.start + 1) from None
    if len(text) > max_length:
        raise FilterError(f"expression longer than {max_length} characters", max_length + 1)
    reset = tokens.max_tokens.set(max_tokens)
    try:
        # with a transformer, LALR's parse returns what TreeToFilter builds (typed as a Tree)
        return cast(ast.Node, _lark(dialect).parse(text))
    except FilterError:
        raise
    except VisitError as err:
        if isinstance(err.orig_exc, FilterError):
            raise err.orig_exc from None
        raise FilterError(f"invalid expression: {err.orig_exc}") from None
    except UnexpectedInput as err:
        at_end = isinstance(err, UnexpectedEOF) or (
            isinstance(err, UnexpectedToken) and err.token.type == "$END")
        if at_end or err.pos_in_stream is None:
            position = len(text) + 1
        else:
            position = err.pos_in_stream + 1
        raise FilterError(_describe(err), position) from None
    except RecursionError:
        raise FilterError("expression nested too deeply") from None
    finally:
        tokens.max_tokens.reset(reset)
