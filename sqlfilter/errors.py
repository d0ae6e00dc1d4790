"""The package's one root exception."""

from __future__ import annotations


class FilterError(ValueError):
    """A filter that cannot be put in place: bad syntax, a bad type, a limit exceeded.

    ``position`` is the 1-based character offset of a syntax error in an SQL expression
    (``None`` when the error has no place in the text).
    """

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message if position is None else f"{message} (at character {position})")
        self.reason = message
        self.position = position

