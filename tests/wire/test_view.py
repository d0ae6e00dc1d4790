"""amqp_stream.wire._view against proton: MessageView's sections from bytes and messages."""

from __future__ import annotations

import proton
import pytest
from hypothesis import given

from amqp_stream.wire import MessageFormatError, MessageView, as_view, encode
from tests.wire.messages import (SETTINGS, check_against_message, check_view, encoded, footers,
                                 messages)


@SETTINGS
@given(messages(), footers)
def test_view_from_bytes_matches_proton(m, footer):
    b = encoded(m, footer)
    check_view(MessageView.from_bytes(b), b)
    check_view(MessageView.from_bytes(memoryview(b)), b)
    check_view(as_view(bytearray(b)), b)
    check_against_message(MessageView.from_bytes(b), m)


@SETTINGS
@given(messages())
def test_view_from_message_matches_proton(m):
    check_view(MessageView.from_message(m), bytes(m.encode()))
    check_view(as_view(m), bytes(m.encode()))
    check_against_message(MessageView.from_message(m), m)


def test_view_sections_are_cached_and_absent_sections_empty():
    view = MessageView.from_bytes(b"\x00\x53\x77\xa1\x01x")
    assert view.header == {} and view.properties == {} and view.footer == {}
    assert view.application_properties is view.application_properties
    assert as_view(view) is view
    with pytest.raises(TypeError):
        as_view(42)


@pytest.mark.parametrize("descriptor", [
    proton.ulong(0x74), proton.symbol("amqp:application-properties:map"),
])
def test_view_accepts_every_descriptor_form(descriptor):
    # a ulong descriptor is written as smallulong by the encoder; force the 8-byte form too
    section = encode(proton.Described(descriptor, {"k": "v"}))
    long_form = b"\x00\x80" + (0x74).to_bytes(8, "big") + encode({"k": "v"})
    for raw in (section, long_form):
        view = MessageView.from_bytes(raw + b"\x00\x53\x75\xa0\x00")
        assert view.application_properties == {"k": "v"}
    header = encode(proton.Described(proton.symbol("amqp:header:list"), [True, proton.ubyte(9)]))
    assert MessageView.from_bytes(header).header == {"durable": True, "priority": 9}


@pytest.mark.parametrize("raw", [
    b"\x41", b"\x00\x53\x79\x45", b"\x00\x53\x74\xa1\x01x", b"\x00\x53\x74\xc1\x05\x02\xa1\x01x",
    b"\x00\xa3\x03abc\x45", b"\x00\x53\x70\xa1\x01x", b"\x00\x53",
])
def test_malformed_messages(raw):
    with pytest.raises(MessageFormatError):
        view = MessageView.from_bytes(raw)
        view.header, view.application_properties  # noqa: B018

