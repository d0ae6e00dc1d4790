"""A Publish v2 frame of many messages of varying sizes whose filter fields have one length
is decoded frame-at-once (``SpannedEntries``): ids and filter fields of up to 8 bytes read as
words of the frame (``_coded_values``), longer ones as rows. For random frames (values of 0 to
12 bytes, some not UTF-8, none, lengths mixed, empty messages last, values seen before or not)
the messages are those of the per-message walk, or the frame is refused as the walk refuses
it."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream.streamproto import SpannedEntries, traffic
from amqp_stream.streamproto.traffic import Publish, walk_messages


@st.composite
def _frame(draw):
    count = draw(st.integers(traffic.NUMPY_FROM, 700))
    width = draw(st.integers(0, 12))
    pool = draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=6))
    kind = draw(st.sampled_from(("one length", "one length", "none", "mixed", "not utf-8")))
    if kind == "not utf-8" and width:
        pool.append(b"\xff" * width)
    elif kind != "not utf-8":
        pool = [p.decode("utf-8", "replace").encode()[:width].ljust(width, b"a") for p in pool]
        pool = [p if _text(p) else b"a" * width for p in pool]
    seed = draw(st.integers(0, 1 << 30))
    sizes = [(seed >> (k % 25)) % 40 + (k * 7) % 200 for k in range(count)]
    if draw(st.booleans()):
        sizes[-1] = 0  # an empty message last: its entry shorter than a word after its field
    out = bytearray(struct.pack(">Bi", 3, count))
    for k, size in enumerate(sizes):
        out += struct.pack(">Q", seed + k)
        value = None if kind == "none" else pool[(seed + k * 3) % len(pool)]
        if kind == "mixed" and k == count // 2:
            value = b"x" * (width + 1)
        if value is None:
            out += b"\xff\xff"
        else:
            out += struct.pack(">H", len(value)) + value
        out += struct.pack(">I", size) + bytes([k % 256]) * size
    if draw(st.booleans()):
        traffic._CODES.clear()
    return bytes(out), count, kind == "mixed"


def _text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except ValueError:
        return False
    return True


@settings(max_examples=200, deadline=None, print_blob=False)
@given(_frame())
def test_a_frame_decoded_at_once_gives_the_walks_messages(frame):
    raw, count, mixed = frame
    view = memoryview(raw)
    try:
        expected = walk_messages(view, 5, count, 2)
    except ValueError:  # a FrameError, or a value that is not UTF-8
        expected = None
    try:
        got = Publish.decode_content(view, 0, 2, 2).messages
    except ValueError:
        got = None
    if expected is None:
        assert got is None
        return
    assert got == expected
    assert (type(got) is SpannedEntries) is not mixed  # several lengths: the walk's tuples
    if not mixed:
        assert got.id_bytes() == struct.pack(f">{count}Q", *(m[0] for m in expected))


def test_short_filter_fields_are_looked_up_as_numbers():
    """Values of up to 8 bytes go by ``_coded_values``: the same ``str`` objects each frame."""
    entries = b"".join(struct.pack(">QH", k, 3) + b"r%02d" % (k % 9) + struct.pack(">I", k % 50)
                       + b"m" * (k % 50) for k in range(400))
    raw = struct.pack(">Bi", 1, 400) + entries
    traffic._CODES.clear()
    first = Publish.decode_content(memoryview(raw), 0, 2, 2).messages
    again = Publish.decode_content(memoryview(raw), 0, 2, 2).messages
    assert 5 in traffic._CODES
    assert first.values == [f"r{k % 9:02d}" for k in range(400)]
    assert all(a is b for a, b in zip(first.values, again.values, strict=True))
