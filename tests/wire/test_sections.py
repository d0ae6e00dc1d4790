"""amqp_stream.wire._sections: the section walk, and that every function over message bytes
refuses garbage with MessageFormatError only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_stream.wire import (MessageFormatError, MessageView, filter_value, split_sections,
                              stored_form, with_stream_offset)
from tests.wire.messages import SETTINGS, messages


@SETTINGS
@given(st.binary(max_size=120), st.integers(0, 2**63 - 1))
def test_garbage_only_format_errors(raw, offset):
    for run in (lambda: split_sections(raw), lambda: filter_value(raw),
                lambda: with_stream_offset(raw, offset), lambda: stored_form(raw),
                lambda: repr(MessageView.from_bytes(raw))):
        try:
            run()
        except MessageFormatError:
            pass


@SETTINGS
@given(messages(), st.data())
def test_damaged_messages_only_format_errors(m, data):
    b = bytearray(m.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(b[:data.draw(st.integers(0, len(b)))])
    for run in (lambda: split_sections(raw), lambda: filter_value(raw), lambda: stored_form(raw),
                lambda: with_stream_offset(raw, 5), lambda: repr(MessageView.from_bytes(raw))):
        try:
            run()
        except MessageFormatError:
            pass


def test_errors_name_the_section_position():
    b = b"\x00\x53\x70\x45" + b"\x00\x53\x74\xd1\x00\x00"
    with pytest.raises(MessageFormatError, match="byte 4"):
        split_sections(b)
    with pytest.raises(MessageFormatError, match="byte 4"):
        MessageView.from_bytes(b).application_properties  # noqa: B018

