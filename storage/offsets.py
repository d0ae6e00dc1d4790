"""Where a reader starts: the offset specs of ``design/storage-format.md`` ("Reading").

``first`` / ``last`` / ``next`` / an offset N / a timestamp T (ms) / an interval (``10m``, meaning
the timestamp now - interval). The spec is only a value here; ``storage.reader`` resolves it
against the log. ``OffsetSpec.parse`` reads the text form the tools accept.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from storage.errors import StorageError

__all__ = ["OffsetSpec", "parse_interval_ms"]

# RabbitMQ's interval units (x-stream-offset strings): Y, M (month), D, h, m, s; we also take
# lower-case d and w, and ms.
_UNITS_MS = {
    "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "D": 86_400_000, "d": 86_400_000,
    "w": 7 * 86_400_000, "M": 30 * 86_400_000, "Y": 365 * 86_400_000, "y": 365 * 86_400_000,
}
_INTERVAL = re.compile(r"^(\d+)(ms|s|m|h|D|d|w|M|Y|y)$")


def parse_interval_ms(text: str) -> int:
    m = _INTERVAL.match(text.strip())
    if not m:
        raise StorageError(f"not an interval: {text!r} (e.g. 30s, 10m, 2h, 7D)")
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


@dataclass(frozen=True)
class OffsetSpec:
    """``kind`` is one of first, last, next, offset, timestamp; ``value`` the offset or ms."""

    kind: str
    value: int = 0

    @classmethod
    def first(cls) -> OffsetSpec:
        return cls("first")

    @classmethod
    def last(cls) -> OffsetSpec:
        return cls("last")

    @classmethod
    def next(cls) -> OffsetSpec:
        return cls("next")

    @classmethod
    def offset(cls, n: int) -> OffsetSpec:
        if n < 0:
            raise StorageError("an offset is >= 0")
        return cls("offset", int(n))

    @classmethod
    def timestamp(cls, ms: int) -> OffsetSpec:
        return cls("timestamp", int(ms))

    @classmethod
    def interval(cls, text: str, now_ms: int | None = None) -> OffsetSpec:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return cls("timestamp", now - parse_interval_ms(text))

    @classmethod
    def parse(cls, text: str) -> OffsetSpec:
        """``first|last|next|N|@MS|<interval like 10m>``; ``@MS`` is a timestamp in ms."""
        t = text.strip()
        if t in ("first", "last", "next"):
            return cls(t)
        if t.isdigit():
            return cls.offset(int(t))
        if t.startswith("@") and t[1:].lstrip("-").isdigit():
            return cls.timestamp(int(t[1:]))
        try:
            return cls.interval(t)
        except StorageError:
            raise StorageError(f"not an offset spec: {text!r} (first, last, next, an offset, "
                               "@timestamp-ms or an interval like 10m)") from None
