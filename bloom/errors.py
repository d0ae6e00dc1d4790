"""The root exception of the ``bloom`` package: wrong arguments to ``build`` or ``Matcher``.

A ``ValueError`` because every case is a caller handing in a value it should not (a size
outside 16..255, an unknown scheme to build with, a filter value that is not text or bytes).
Reading never raises for what a chunk on disk says: an unknown scheme there matches.
"""

from __future__ import annotations

__all__ = ["BloomError"]


class BloomError(ValueError):
    """Invalid argument to the bloom package (size, scheme or value)."""
