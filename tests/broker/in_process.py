"""A ``Consumer`` driven in-process: what it asks of the broker's stream entry, over a real
``storage.Stream`` on disk (no derived keys, no metrics), for tests that send over proton's
engine to a receiving engine without a socket (``bench.proton_floor``'s pair)."""

from __future__ import annotations

from storage import Stream

__all__ = ["StreamEntry"]


class StreamEntry:
    """What a consumer asks of a stream entry: its reader (no derived keys), no metrics."""

    metrics = None
    deleted = False

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    def reader(self, spec, filter_values=(), match_unfiltered=False, stage2=None):
        return self.stream.reader(spec, filter_values, match_unfiltered)
