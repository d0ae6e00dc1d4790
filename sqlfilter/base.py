"""What every compiled stage-2 filter offers, whatever language it was written in."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

from sqlfilter.required import prefiltered
from sqlfilter.view import MessageView, as_view, reader


class Filter(ABC):
    """A compiled filter. Compile once per link, then call ``matches`` per message.

    ``matches`` takes what the installed reader reads (``sqlfilter.view``: the broker's reads
    the stored bytes of an encoded message, decoding only the sections the filter reads, or a
    ``proton.Message``), or a ``MessageView``.
    """

    #: the sections the filter reads, e.g. {"properties", "application_properties"}
    sections: frozenset[str] = frozenset()

    def matches(self, message: Any) -> bool:
        return self.evaluate_view(as_view(message)) is True

    def bytes_matcher(self) -> Callable[[bytes], bool]:
        """``matches`` for stored message bytes only, as one function with no type dispatch:
        what the broker calls once per record a consumer reads. A record that lacks the bytes
        the filter requires (``sqlfilter.required.needles``) is rejected without decoding."""
        evaluate, view = self.evaluate_view, _from_bytes()
        return prefiltered(self, lambda data: evaluate(view(data)) is True)

    @abstractmethod
    def evaluate_view(self, view: MessageView) -> bool | None:
        """True, False, or None for unknown (only True matches)."""


def _from_bytes() -> Callable[[bytes], MessageView]:
    """The installed reader's view of stored bytes (what ``bytes_matcher`` calls per record)."""
    installed = reader()
    if installed is None:
        raise TypeError("a filter reads message bytes through a reader: none is installed "
                        "(sqlfilter.view.use)")
    return installed.from_bytes
