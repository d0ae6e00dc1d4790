"""Where a reader starts: the offset specs of ``design/storage-format.md`` ("Reading").

``first`` / ``last`` / ``next`` / an offset N / a timestamp T (ms) / an interval (``10m``, meaning
the timestamp now - interval). The spec is only a value here; ``storage.reader`` resolves it
against the log. ``OffsetSpec.parse`` reads the text forms (the tools', and with ``rabbitmq=True``
the strings an AMQP offset spec may hold), and ``parse_interval_ms`` the interval syntax: this
module is their one home (the broker, management, the CLI and the config all call it).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from storage.errors import StorageError

__all__ = ["OffsetSpec", "parse_interval_ms", "TIMESTAMP_FROM_MS"]

# The one home of the interval syntax (``10m``, ``7D``). RabbitMQ's units (x-max-age and AMQP
# offset-spec strings) are Y (365 days), M (30 days), D, h, m, s; the tools also take lower-case
# d and y, w and ms.
_UNITS_MS = {
    "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "D": 86_400_000, "d": 86_400_000,
    "w": 7 * 86_400_000, "M": 30 * 86_400_000, "Y": 365 * 86_400_000, "y": 365 * 86_400_000,
}
_INTERVAL = re.compile(r"([0-9]+)(ms|s|m|h|D|d|w|M|Y|y)")
_RABBITMQ_INTERVAL = re.compile(r"([0-9]+)([YMDhms])")
NAMES = ("first", "last", "next")
#: a bare integer this large is a timestamp in ms (year 2001 on) where a caller asks for it
TIMESTAMP_FROM_MS = 10**12


def parse_interval_ms(text: str, *, rabbitmq: bool = False) -> int:
    """Milliseconds in an interval like ``10m``. With ``rabbitmq`` only RabbitMQ's form is taken
    (what ``x-max-age`` and an AMQP offset-spec string accept): digits and one of Y M D h m s,
    nothing around them, above zero. Raises ``StorageError`` otherwise."""
    m = (_RABBITMQ_INTERVAL if rabbitmq else _INTERVAL).fullmatch(text if rabbitmq else text.strip())
    if not m or (rabbitmq and int(m.group(1)) == 0):
        units = "Y M D h m s, above zero" if rabbitmq else "ms s m h D w M Y"
        raise StorageError(f"not an interval: {text!r} (digits then one of {units}; "
                           "e.g. 30s, 10m, 2h, 7D)")
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
    def interval(cls, text: str, now_ms: int | None = None, *, rabbitmq: bool = False) -> OffsetSpec:
        """The timestamp ``now_ms`` (default: now) minus the interval ``text``."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return cls("timestamp", now - parse_interval_ms(text, rabbitmq=rabbitmq))

    @classmethod
    def parse(cls, text: str, *, now_ms: int | None = None, rabbitmq: bool = False,
              timestamp_from: int | None = None) -> OffsetSpec:
        """``first|last|next|N|@MS|<interval like 10m>``; ``@MS`` is a timestamp in ms, an
        interval the timestamp ``now_ms`` (default: now) minus it.

        ``rabbitmq``: only the string forms RabbitMQ takes in an AMQP offset spec (a name or
        ``parse_interval_ms(..., rabbitmq=True)``). ``timestamp_from``: a bare integer at least
        this large is a timestamp in ms (the tools pass ``TIMESTAMP_FROM_MS``).
        """
        t = text if rabbitmq else text.strip()
        if t in NAMES:
            return cls(t)
        if not rabbitmq:
            if t.isdigit():
                n = int(t)
                if timestamp_from is not None and n >= timestamp_from:
                    return cls.timestamp(n)
                return cls.offset(n)
            if t.startswith("@") and t[1:].lstrip("-").isdigit():
                return cls.timestamp(int(t[1:]))
        try:
            return cls.interval(t, now_ms, rabbitmq=rabbitmq)
        except StorageError:
            forms = ("first, last, next or an interval like 10m (units Y M D h m s)" if rabbitmq
                     else "first, last, next, an offset, @timestamp-ms or an interval like 10m")
            raise StorageError(f"not an offset spec: {text!r} ({forms})") from None

    def __str__(self) -> str:
        """``first`` / ``offset:5`` / ``timestamp:1700000000000``: for logs."""
        return self.kind if self.kind in NAMES else f"{self.kind}:{self.value}"
