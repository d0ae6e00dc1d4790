"""Shared by the wire tests: proton.Message strategies, proton's own view of encoded bytes."""

from __future__ import annotations

import proton
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from amqp_stream.wire import MessageView, encode, split_sections
from tests.wire.test_codec import SCALARS, expected, typed

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

simple = st.one_of(*(SCALARS[k] for k in (
    "null", "bool", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long", "float",
    "double", "char", "timestamp", "uuid", "binary", "string", "symbol")))
short_text = st.text(max_size=20)
symbols = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=20).map(proton.symbol)
ms_times = st.integers(0, 2**41).map(lambda ms: ms / 1000)


@st.composite
def messages(draw) -> proton.Message:
    m = proton.Message()
    opt = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    m.id = opt(st.one_of(SCALARS["ulong"], st.uuids(), st.binary(max_size=16), short_text))
    m.correlation_id = opt(st.one_of(SCALARS["ulong"], st.uuids(), st.binary(max_size=16), short_text))
    m.user_id = draw(st.binary(max_size=10))
    m.address = opt(short_text)
    m.subject = opt(short_text)
    m.reply_to = opt(short_text)
    m.content_type = opt(symbols)
    m.content_encoding = opt(symbols)
    m.expiry_time = draw(st.one_of(st.just(0), ms_times))
    m.creation_time = draw(st.one_of(st.just(0), ms_times))
    m.group_id = opt(short_text)
    m.group_sequence = draw(st.integers(0, 2**31 - 1))
    m.reply_to_group_id = opt(short_text)
    m.durable = draw(st.booleans())
    m.priority = draw(st.integers(0, 255))
    m.ttl = draw(st.integers(0, 10**6)) / 1000
    m.first_acquirer = draw(st.booleans())
    m.delivery_count = draw(st.integers(0, 2**31 - 1))
    m.properties = draw(st.dictionaries(short_text, simple, max_size=8)) or None
    m.annotations = draw(st.dictionaries(symbols, simple, max_size=5)) or None
    m.instructions = draw(st.dictionaries(symbols, simple, max_size=5)) or None
    kind = draw(st.sampled_from(["data", "sequence", "value"]))
    if kind == "data":
        m.inferred = True
        m.body = draw(st.binary(max_size=300))
    elif kind == "sequence":
        m.inferred = True
        m.body = draw(st.lists(simple, max_size=5))
    else:
        m.body = draw(st.one_of(simple, st.dictionaries(short_text, simple, max_size=3)))
    return m


footers = st.one_of(st.none(), st.dictionaries(symbols, simple, min_size=1, max_size=3))


def encoded(m: proton.Message, footer: dict | None = None) -> bytes:
    b = bytes(m.encode())
    if footer:
        b += encode(proton.Described(proton.ulong(0x78), footer))
    return b


def decoded(b: bytes) -> proton.Message:
    m = proton.Message()
    m.decode(b)
    return m


def dict_of(d) -> dict:
    return expected(dict(d or {}))


def proton_sections(b: bytes) -> dict:
    """Section code -> value, decoded by proton's own decoder (our representation)."""
    out = {}
    pos = 0
    while pos < len(b):
        data = proton.Data()
        pos += data.decode(b[pos:])  # one value per call
        data.rewind()
        data.next()
        section = data.get_object()
        out.setdefault(int(section.descriptor), expected(section.value))
    return out


def fields(names, values) -> dict:
    return {n: v for n, v in zip(names, values or [], strict=False) if v is not None}


HEADER = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTIES = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
              "content_type", "content_encoding", "absolute_expiry_time", "creation_time",
              "group_id", "group_sequence", "reply_to_group_id")



def check_view(view, b: bytes) -> None:
    """Every section of the view equals what proton decodes from the same bytes."""
    sections = proton_sections(b)
    assert typed(view.header) == typed(fields(HEADER, sections.get(0x70)))
    assert typed(view.properties) == typed(fields(PROPERTIES, sections.get(0x73)))
    assert typed(view.application_properties) == typed(sections.get(0x74) or {})
    assert typed(view.message_annotations) == typed(sections.get(0x72) or {})
    assert typed(view.footer) == typed(sections.get(0x78) or {})


def check_against_message(view: MessageView, m: proton.Message) -> None:
    """The fields proton.Message reports (for the few with an unambiguous mapping)."""
    assert typed(view.application_properties) == typed(dict_of(m.properties))
    assert typed(view.message_annotations) == typed(dict_of(m.annotations))
    assert view.header.get("durable", False) == m.durable
    assert view.header.get("priority", 4) == m.priority
    assert view.properties.get("subject") == m.subject
    assert view.properties.get("to") == m.address
    assert typed(view.properties.get("message_id")) == typed(expected(m.id))


def sections_except(b: bytes, *codes: int) -> list[bytes]:
    return [b[start:end] for code, start, _, end in split_sections(b) if code not in codes]
