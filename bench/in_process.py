"""A ``Consumer`` driven in-process: what it asks of the broker's stream entry, over a real
``storage.Stream`` on disk (no derived keys, no metrics), for tests that send over proton's
engine to a receiving engine without a socket (``bench.proton_floor``'s pair), and for
benches that time a consumer alone (``bench.amqp_scan``)."""

from __future__ import annotations

from amqp_stream.columns import column_matcher
from sqlfilter.required import needles_of
from storage import Stream

__all__ = ["StreamEntry"]


class StreamEntry:
    """What a consumer asks of a stream entry: its reader (no derived keys), no metrics.
    ``stage2_reads``: the reader also takes what the broker's gives it of a stage-2 filter
    (the bytes it requires; columns for chunks of one layout), as ``streams.StreamEntry``."""

    metrics = None
    deleted = False

    def __init__(self, stream: Stream, stage2_reads: bool = False) -> None:
        self.stream = stream
        self.stage2_reads = stage2_reads

    def reader(self, spec, filter_values=(), match_unfiltered=False, stage2=None):
        if not self.stage2_reads:
            return self.stream.reader(spec, filter_values, match_unfiltered)
        return self.stream.reader(spec, filter_values, match_unfiltered,
                                  needles=needles_of(stage2), columns=column_matcher(stage2))
