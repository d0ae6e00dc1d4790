"""Publish frames of a task's messages (option ``streamUrl``): per message, or a batch at a time.

Why: a Publish frame is a head and, per message, its publishing id, its filter value (Publish
v2), its size and its AMQP bytes. Built per message in Python (a tuple, a ``struct.pack`` and
a copy each) the frames cost the task about as much as encoding the messages. ``batch_frames``
builds every entry of a batch as one row of an Arrow binary array (``row_concat.join`` of the
ids, sizes and filter values made a column at a time and of the messages' own unjoined pieces:
one ``take`` for the whole entry), so a frame's entries lie one after the other in that array's
data buffer: a frame is its 13-byte head and one slice of the buffer, sent as they are (no
copy into a frame's bytes), and no Python runs per message.

Both cut frames at the same places (at most ``FRAME_MESSAGES`` messages and ``limit`` bytes, an
entry counted as ``14 + size + filter value bytes``; one message larger than ``limit`` goes
alone) and write the same bytes (``tests/spark/test_framing.py`` compares them over random
batches). A frame is v2 when a message in it has a filter value, else v1, as
``client.stream.publish_frame`` writes it; ``batch_frames`` gives None for a batch whose filter
values are null in some rows only (a frame of it might be v1, another v2), and for a filter
value too long for the frame: those go per message.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from typing import Any, Iterable, Sequence

from amqp_stream.client.stream import publish_frame
from amqp_stream.spark.row_concat import as_array, binary, join, lengths as _lengths, matrix
from amqp_stream.streamproto import Key

__all__ = ["FRAME_MESSAGES", "Frame", "entry_frames", "batch_frames"]

FRAME_MESSAGES = 1000  # messages in one Publish frame at most (and fewer when frame_max says so)
_HEAD = struct.Struct(">IHHBi")  # size, key, version, publisher id, message count
#: a frame as the buffers it is sent as, one after the other
Frame = tuple[bytes | memoryview, ...]
_NO_FILTER = 0xFFFF  # a v2 entry's filter value length when it has none; longer ones cannot be sent


def entry_frames(datas: Sequence[bytes], values: Sequence[str | None] | None, first: int, limit: int,
                 publisher_id: int) -> Iterable[tuple[Frame, int]]:
    """Publish frames of ``datas`` (message i with publishing id ``first + i`` and filter value
    ``values[i]``), message by message; (frame, messages in it), a frame as the buffers it is
    sent as, one after the other."""
    batch: list[tuple[int, str | None, bytes]] = []
    size = 0
    for i, data in enumerate(datas):
        value = values[i] if values is not None else None
        entry = 14 + len(data) + (len(value.encode()) if value else 0)
        if batch and (len(batch) >= FRAME_MESSAGES or size + entry > limit):
            yield (publish_frame(publisher_id, batch),), len(batch)
            batch, size = [], 0
        batch.append((first + i, value, data))
        size += entry
    if batch:
        yield (publish_frame(publisher_id, batch),), len(batch)


def batch_frames(messages: Any, values: Any, first: int, limit: int, publisher_id: int
                 ) -> list[tuple[Frame, int]] | None:
    """``entry_frames`` of ``messages`` (an Arrow binary array, or ``row_concat.Pieces``: joined
    here with the entries' other fields in one go) and a string array of their filter
    ``values`` (or None), built a batch at a time; None when the batch must go per message (see
    the module doc). A frame is its head and a view of the entries' buffer (sent as they are:
    no copy of a batch's bytes into frames)."""
    import numpy as np
    n = len(messages)
    if not n:
        return []
    ids = matrix(np.arange(first, first + n, dtype=np.uint64).astype(">u8"))
    sizes = matrix(np.asarray(_lengths(messages)).astype(">u4"))
    if values is not None and values.null_count == n:
        values = None
    if values is None:
        version, extra = 1, 2  # a v1 entry is 12 bytes and the data; counted as 14 as in entry_frames
        entries = as_array(join(ids, sizes, messages))
    else:
        if values.null_count:
            return None
        raw = binary(values)
        value_sizes = np.asarray(_lengths(raw))
        if value_sizes.max() >= _NO_FILTER:
            return None
        version, extra = 2, 0
        entries = as_array(join(ids, matrix(value_sizes.astype(">u2")), raw, sizes, messages))
    offsets = memoryview(entries.buffers()[1]).cast("i")[entries.offset:entries.offset + n + 1]
    data = memoryview(entries.buffers()[2])
    frames: list[tuple[Frame, int]] = []
    a = 0
    while a < n:
        start = offsets[a]
        top = min(n, a + FRAME_MESSAGES)
        # the last end b in (a, top] whose frame keeps within limit; at least one message
        b = bisect_right(range(a + 1, top + 1), limit, key=lambda e: offsets[e] - start + extra * (e - a)) + a
        b = max(b, a + 1)
        body = data[start:offsets[b]]
        frames.append(((_HEAD.pack(len(body) + 9, Key.PUBLISH, version, publisher_id, b - a), body), b - a))
        a = b
    return frames

