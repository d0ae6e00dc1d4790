"""Publish frames whose messages have one size decode as ``PackedEntries``: the same messages,
ids and bodies as the generic walk gives, for random frames (property-based)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream.streamproto import FrameError, PackedEntries, Publish
from amqp_stream.streamproto.frames import decode, encode

import pytest

U64 = st.integers(0, 2**64 - 1)


@st.composite
def frames(draw) -> Publish:
    """v1 or v2, messages of one size or of any, filter values or not, a sub-entry batch or
    not."""
    version = draw(st.sampled_from((1, 2)))
    count = draw(st.integers(0, 40))
    same = draw(st.booleans())
    size = draw(st.integers(0, 300))
    messages = []
    for _ in range(count):
        data = draw(st.binary(min_size=size, max_size=size) if same else st.binary(max_size=300))
        value = draw(st.none() | st.text(max_size=8)) if version == 2 else None
        batch = None
        if version == 1 and draw(st.integers(0, 30)) == 0:
            batch = (0, draw(st.integers(1, 9)), len(data))
        messages.append((draw(U64), value, data, batch))
    return Publish(draw(st.integers(0, 255)), tuple(messages), version)


@settings(max_examples=400, deadline=None)
@given(frames())
def test_a_decoded_publish_holds_the_messages_sent_packed_or_not(frame):
    got = decode(encode(frame)[4:])
    assert isinstance(got, Publish)
    assert got == frame  # PackedEntries compares as the tuple of its messages
    assert tuple(got.messages) == frame.messages
    sizes = {len(m[2]) for m in frame.messages}
    plain = frame.publish_version == 1 and all(m[3] is None for m in frame.messages)
    packed = type(got.messages) is PackedEntries
    assert packed == (plain and len(frame.messages) >= 2 and len(sizes) == 1)
    if packed:
        assert got.messages.ids() == tuple(m[0] for m in frame.messages)
        assert got.messages.bodies() == tuple(m[2] for m in frame.messages)
        assert len(got.messages) == len(frame.messages)
        assert got.messages[-1] == frame.messages[-1]


def test_a_frame_of_one_size_but_a_size_field_off_is_walked_and_refused():
    """The strided check sees every entry's size field: one entry claiming another size (the
    frame's length still fitting the others) is not taken as packed; the walk refuses it."""
    frame = Publish(1, tuple((i, None, b"x" * 10, None) for i in range(5)))
    raw = bytearray(encode(frame)[4:])
    raw[4 + 5 + 2 * 22 + 8 + 3] = 11  # the third message's size: 10 -> 11
    with pytest.raises(FrameError):
        decode(bytes(raw))
