"""The wire package's one root exception and its kinds.

Why one root: a caller (the broker's publish path, a filter, a tool) catches ``WireError`` for
anything this package refuses, or one kind when it answers differently (the broker rejects a
``BadFilterValue`` with ``amqp:invalid-field``, any other ``MessageFormatError`` with
``amqp:decode-error``). All are ``ValueError``s: bad input, never a bug of ours.
"""

from __future__ import annotations


class WireError(ValueError):
    """Anything ``amqp_stream.wire`` refuses: bad message bytes, a value with no AMQP encoding, an
    offset that is not an AMQP long."""


class MessageFormatError(WireError):
    """Encoded bytes that are not a valid AMQP 1.0 message (or not the expected type)."""


class BadFilterValue(MessageFormatError):
    """``x-stream-filter-value`` is present but not a string or a list of strings (the message
    itself is sound)."""
