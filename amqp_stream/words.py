"""Small helpers for what the commands say: counts with their noun, the nearest known name.

Why one place: every command prints counts ("1 message", "2 messages"), and the CLI and the
settings refuse a name with a suggestion (a flag, a command, an environment variable); they
should read the same.
"""

from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["plural", "nearest", "did_you_mean"]


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 message``, ``2 messages`` (``nouns`` for an irregular plural)."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (difflib's ratio, as argparse does from 3.14), if any
    is close enough to be a likely typo."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the nearest known name, or nothing."""
    best = nearest(name, known)
    return f" (did you mean {best}?)" if best else ""
