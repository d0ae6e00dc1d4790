"""Deciding from a chunk's filter whether a reader can skip the chunk (the read side of stage 1).

Why: a reader with stage-1 filter values looks at every chunk header and filter before it
reads the chunk's data; a chunk that cannot hold a wanted value is skipped without reading.
This runs once per chunk per reader, so it must cost a few µs, and it must never say "no"
for a chunk that holds a wanted value (a false negative loses messages).

Semantics (``../shared/design/storage-format.md``, "Chunk filter"), for reader values V:
- V empty: every chunk matches.
- chunk with no filter (``bits == b""``): matches only if ``match_unfiltered``;
- chunk with a filter: matches if some value in V has all its positions set, or if
  ``match_unfiltered`` and bit 0 is set;
- an empty value in V means "entries without a value", as in osiris: it acts like
  ``match_unfiltered`` (bit 0, and chunks without a filter);
- a scheme, size or parameter this code does not know matches (conservative: data written by
  a newer version is read, never lost).

Strategy: each value is hashed once per scheme (``bloom.schemes.digest``); per (size, scheme,
param) the values' masks are computed once and cached, and a match is one ``int.from_bytes``
of the filter and one AND/compare per value.
"""

from __future__ import annotations

from typing import Iterable

from bloom.filter import FilterValue, value_bytes
from bloom.schemes import (
    MAX_K,
    MAX_SIZE,
    MIN_SIZE,
    Scheme,
    digest,
    digest_mask,
    unfiltered_mask,
)

__all__ = ["Matcher"]

_MAX_CACHED_LAYOUTS = 1024  # distinct (size, scheme, param) kept per matcher


class Matcher:
    """A reader's stage-1 values, ready to test chunk filters.

    Args:
        values: the reader's filter values (``str`` or ``bytes``; empty = unfiltered entries).
        match_unfiltered: also match chunks holding entries without a filter value.
    Raises:
        BloomError: a value that is not text or bytes.
    """

    __slots__ = ("values", "match_unfiltered", "_unfiltered", "_everything", "_digests", "_masks")

    def __init__(self, values: Iterable[FilterValue] = (), match_unfiltered: bool = False) -> None:
        raw = [value_bytes(v) for v in values]
        self.values: tuple[bytes, ...] = tuple(dict.fromkeys(v for v in raw if v))
        self.match_unfiltered = bool(match_unfiltered)
        self._everything = not raw
        self._unfiltered = self.match_unfiltered or any(not v for v in raw)
        self._digests: dict[Scheme, list[tuple[int, int]]] = {}
        self._masks: dict[tuple[int, int, int], tuple[int, ...]] = {}

    def _layout(self, size: int, scheme: Scheme, param: int) -> tuple[int, ...]:
        digests = self._digests.get(scheme)
        if digests is None:
            digests = self._digests[scheme] = [digest(v, scheme) for v in self.values]
        masks = [digest_mask(d, size, scheme, param) for d in digests]
        if self._unfiltered:
            masks.insert(0, unfiltered_mask(size))
        if len(self._masks) >= _MAX_CACHED_LAYOUTS:
            self._masks.clear()
        layout = self._masks[(size, scheme, param)] = tuple(masks)
        return layout

    def matches(self, bits: bytes, scheme: int, param: int) -> bool:
        """Whether the chunk with filter ``bits`` (``b""`` = no filter) may hold a wanted entry.

        ``scheme`` and ``param`` are the chunk header's bytes 45 and 46.
        """
        if self._everything:
            return True
        size = len(bits)
        if size == 0:
            return self._unfiltered
        masks = self._masks.get((size, scheme, param))
        if masks is None:
            if not MIN_SIZE <= size <= MAX_SIZE:
                return True
            if scheme == Scheme.OSIRIS:
                known = Scheme.OSIRIS
            elif scheme == Scheme.MMH3 and 1 <= param <= MAX_K:
                known = Scheme.MMH3
            else:
                return True
            masks = self._layout(size, known, param)
        x = int.from_bytes(bits, "big")
        for mask in masks:
            if x & mask == mask:
                return True
        return False

    def __repr__(self) -> str:
        return f"Matcher({list(self.values)!r}, match_unfiltered={self.match_unfiltered})"
