"""sqlfilter.message, .pick, .sections and .stored against proton.Message: section views, picks
and the broker's byte edits."""

from __future__ import annotations

import itertools

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlfilter import MessageFormatError, MessageView, codec
from sqlfilter.codec import SIZE_COUNT32, encode
from sqlfilter.message import as_view
from sqlfilter.pick import KeyPicker, _fast_pick
from sqlfilter.sections import split_sections
from sqlfilter.stored import (BadFilterValue, filter_value, stored_form, strip_delivery_annotations,
                              with_stream_offset)
from tests.sqlfilter.test_codec import SCALARS, expected, typed

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
    return {n: v for n, v in zip(names, values or []) if v is not None}


HEADER = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTIES = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id",
              "content_type", "content_encoding", "absolute_expiry_time", "creation_time",
              "group_id", "group_sequence", "reply_to_group_id")


def check_view(view: MessageView, b: bytes) -> None:
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


@SETTINGS
@given(st.binary(max_size=120), st.integers(0, 2**63 - 1))
def test_garbage_only_format_errors(raw, offset):
    for run in (lambda: split_sections(raw), lambda: strip_delivery_annotations(raw),
                lambda: filter_value(raw), lambda: with_stream_offset(raw, offset),
                lambda: stored_form(raw),
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
    for run in (lambda: split_sections(raw), lambda: strip_delivery_annotations(raw),
                lambda: filter_value(raw), lambda: with_stream_offset(raw, 5),
                lambda: repr(MessageView.from_bytes(raw))):
        try:
            run()
        except MessageFormatError:
            pass


# --- byte edits ---------------------------------------------------------------------------------
def sections_except(b: bytes, *codes: int) -> list[bytes]:
    return [b[start:end] for code, start, _, end in split_sections(b) if code not in codes]


@SETTINGS
@given(messages(), footers)
def test_strip_delivery_annotations(m, footer):
    b = encoded(m, footer)
    stripped = strip_delivery_annotations(b)
    assert bytes(strip_delivery_annotations(memoryview(b))) == stripped
    m.instructions = None
    assert stripped == encoded(m, footer)  # exactly what proton writes without them
    if not m.instructions:
        assert strip_delivery_annotations(stripped) is stripped


@SETTINGS
@given(messages(), st.one_of(st.none(), st.text(max_size=40), simple))
def test_filter_value(m, value):
    annotations = dict(m.annotations or {})
    if value is not None:
        annotations[proton.symbol("x-stream-filter-value")] = value
    m.annotations = annotations or None
    b = bytes(m.encode())
    if value is None or type(value) is str:
        assert filter_value(b) == value
        assert filter_value(memoryview(b)) == value
    else:
        with pytest.raises(MessageFormatError):
            filter_value(b)


@SETTINGS
@given(messages(), footers, st.one_of(st.none(), st.text(max_size=40), simple))
def test_stored_form_is_strip_and_filter_value_in_one_walk(m, footer, value):
    """The publish path's single pass agrees with the three separate functions it replaces."""
    annotations = dict(m.annotations or {})
    if value is not None:
        annotations[proton.symbol("x-stream-filter-value")] = value
    m.annotations = annotations or None
    b = encoded(m, footer)
    if value is not None and type(value) is not str:
        with pytest.raises(BadFilterValue):
            stored_form(b)
        return
    split_sections(b)  # sound framing
    stored, got = stored_form(b)
    assert stored == strip_delivery_annotations(b)
    assert got == filter_value(b) == value
    assert stored_form(memoryview(b)) == (stored, got)


@SETTINGS
@given(messages(), st.data())
def test_stored_form_refuses_what_split_sections_refuses(m, data):
    b = bytearray(m.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(b[:data.draw(st.integers(0, len(b)))])
    try:
        split_sections(raw)
        framing_ok = bool(raw)
    except MessageFormatError:
        framing_ok = False
    if not framing_ok:
        with pytest.raises(MessageFormatError):
            stored_form(raw)


def test_stored_form_of_an_empty_transfer():
    with pytest.raises(MessageFormatError, match="empty"):
        stored_form(b"")


def test_filter_value_inside_another_value_is_not_a_key():
    m = proton.Message(body="x", annotations={proton.symbol("k"): "x-stream-filter-value"},
                       properties={"x-stream-filter-value": "no"})
    assert filter_value(bytes(m.encode())) is None


@SETTINGS
@given(messages(), footers, st.integers(-(2**63), 2**63 - 1), st.booleans())
def test_with_stream_offset(m, footer, offset, twice):
    b = encoded(m, footer)
    out = with_stream_offset(b, offset ^ 1 if twice else offset)
    if twice:
        out = with_stream_offset(out, offset)  # replaces the first one
    got = decoded(out)
    want = dict_of(m.annotations)
    want[proton.symbol("x-stream-offset")] = offset
    assert typed(dict_of(got.annotations)) == typed(want)
    assert type(got.annotations[proton.symbol("x-stream-offset")]) is int  # an AMQP long
    assert sections_except(out, 0x72) == sections_except(b, 0x72)  # every other byte unchanged
    check_view(MessageView.from_bytes(out), out)


def big_annotations(size: int) -> bytes:
    """A message whose annotations are a map8 of about ``size`` bytes."""
    annotations = encode(proton.Described(proton.ulong(0x72),
                                          {proton.symbol("pad"): "p" * (size - 10)}))
    assert annotations[3] == 0xC1  # map8
    return b"\x00\x53\x70\xc0\x02\x01\x41" + annotations + b"\x00\x53\x75\xa0\x03abc"


@pytest.mark.parametrize("size", [100, 229, 230, 240])
def test_map8_grows_into_map32_when_needed(size):
    b = big_annotations(size)
    out = with_stream_offset(b, 42)
    got = decoded(out)
    assert got.annotations == {"pad": "p" * (size - 10), "x-stream-offset": 42}
    assert got.body == b"abc" and got.durable
    ma = [out[v:e] for code, _, v, e in split_sections(out) if code == 0x72][0]
    assert ma[0] == (0xC1 if len(ma) <= 257 else 0xD1)


def test_new_annotations_section_goes_after_header_and_delivery_annotations():
    m = proton.Message(body="x", durable=True, instructions={proton.symbol("d"): 1}, subject="s")
    out = with_stream_offset(bytes(m.encode()), 7)
    assert [code for code, *_ in split_sections(out)] == [0x70, 0x71, 0x72, 0x73, 0x77]
    assert decoded(out).annotations == {"x-stream-offset": 7}
    bare = b"\x00\x53\x77\x40"
    assert with_stream_offset(bare, 1)[:3] == b"\x00\x53\x72"


def test_null_annotations_section_becomes_a_map():
    out = with_stream_offset(b"\x00\x53\x72\x40\x00\x53\x77\x40", 3)
    assert decoded(out).annotations == {"x-stream-offset": 3}


def sym32(name: str) -> bytes:
    return b"\xb3" + len(name).to_bytes(4, "big") + name.encode()


def annotations_section(*entries: bytes, count: int) -> bytes:
    body = b"".join(entries)
    return b"\x00\x53\x72\xc1" + bytes((len(body) + 1, count)) + body


def test_annotation_keys_in_long_symbol_form_are_found():
    ma = annotations_section(sym32("x-stream-filter-value"), b"\xa1\x02eu",
                             sym32("x-stream-offset"), b"\x55\x01", count=4)
    b = ma + b"\x00\x53\x77\x40"
    assert filter_value(b) == "eu"
    out = with_stream_offset(b, 9)
    assert decoded(out).annotations == {"x-stream-filter-value": "eu", "x-stream-offset": 9}


def test_annotation_keys_of_other_types_are_skipped():
    ma = annotations_section(b"\x53\x07", b"\xa1\x15x-stream-filter-value",  # ulong key 7
                             b"\xa3\x15x-stream-filter-valuf", b"\xa1\x01x", count=4)
    b = ma + b"\x00\x53\x77\x40"
    assert filter_value(b) is None
    assert decoded(with_stream_offset(b, 2)).annotations[proton.symbol("x-stream-offset")] == 2


@SETTINGS
@given(st.dictionaries(symbols, st.one_of(st.text(max_size=60), st.integers(-5, 5)), max_size=12),
       st.integers(0, 2**63 - 1), st.booleans())
def test_with_stream_offset_on_small_and_large_annotation_maps(annotations, offset, present):
    """Annotations written by our encoder: map8 when small, map32 when not (proton: map32)."""
    if present:
        annotations[proton.symbol("x-stream-offset")] = 77
    ma = encode(proton.Described(proton.ulong(0x72), annotations))
    b = b"\x00\x53\x70\xc0\x02\x01\x41" + ma + b"\x00\x53\x75\xa0\x02hi"
    out = with_stream_offset(b, offset)
    got = decoded(out)
    want = dict_of(annotations)
    want[proton.symbol("x-stream-offset")] = offset
    assert typed(dict_of(got.annotations)) == typed(want)
    assert sections_except(out, 0x72) == sections_except(b, 0x72)
    assert filter_value(out) is None


def test_errors_name_the_section_position():
    b = b"\x00\x53\x70\x45" + b"\x00\x53\x74\xd1\x00\x00"
    with pytest.raises(MessageFormatError, match="byte 4"):
        split_sections(b)
    with pytest.raises(MessageFormatError, match="byte 4"):
        MessageView.from_bytes(b).application_properties  # noqa: B018


@pytest.mark.parametrize("offset", [2**63, -(2**63) - 1])
def test_offset_outside_a_long_is_refused(offset):
    with pytest.raises(ValueError):
        with_stream_offset(b"\x00\x53\x77\x40", offset)


# --- picks: just the keys a filter reads ----------------------------------------------------------
def check_pick(b: bytes, app_keys, fields) -> None:
    """A pick agrees with the fully decoded sections on every key asked for, whichever path
    (one pass on a fresh view, the exact walk after another section was read, the cache)."""
    full = MessageView.from_bytes(b)
    try:
        app, props = full.application_properties, full.properties
    except MessageFormatError:
        return  # the whole sections are bad: a pick may or may not notice (module docstring)
    pa, pp = KeyPicker(app_keys), KeyPicker(fields)
    fresh = MessageView.from_bytes(b)
    warm = MessageView.from_bytes(b)
    warm.header  # noqa: B018  (reads a section: the exact path from here on)
    for view in (fresh, warm, full):
        got_p, got_ap = view.pick(pp, pa)
        for key in app_keys:
            assert (key in got_ap) == (key in app), key
            assert typed(got_ap.get(key)) == typed(app.get(key)), key
        for name in fields:
            assert (name in got_p) == (name in props), name
            assert typed(got_p.get(name)) == typed(props.get(name)), name
    assert MessageView.from_bytes(b).pick(None, pa)[0] is None
    assert typed(MessageView.from_bytes(b).pick_properties(pp)) == typed(
        {k: v for k, v in props.items() if k in fields})


keys_of = lambda d, data: data.draw(st.sets(  # noqa: E731
    st.one_of(st.sampled_from(sorted(d)) if d else short_text, short_text), max_size=4))
field_sets = st.sets(st.sampled_from(PROPERTIES), max_size=4)


@SETTINGS
@given(messages(), footers, field_sets, st.data())
def test_pick_agrees_with_the_decoded_sections(m, footer, fields, data):
    b = encoded(m, footer)
    check_pick(b, keys_of(dict_of(m.properties), data), fields)


@SETTINGS
@given(st.dictionaries(st.one_of(short_text, symbols, SCALARS["char"], SCALARS["int"]), simple,
                       max_size=6),
       st.lists(st.one_of(st.none(), short_text, SCALARS["ulong"]), max_size=14),
       field_sets, st.data())
def test_pick_agrees_on_our_own_encodings(app, props, fields, data):
    """map8/list8, symbol/char/int keys, list items past the 13 fields: the exact path's cases."""
    b = (encode(proton.Described(proton.ulong(0x73), props)) +
         encode(proton.Described(proton.ulong(0x74), app)) + b"\x00\x53\x77\x40")
    keys = keys_of({str(k) for k in app if isinstance(k, str)}, data)
    check_pick(b, keys, fields)


@SETTINGS
@given(messages(), field_sets, st.data())
def test_pick_on_damaged_messages(m, fields, data):
    b = bytearray(m.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(b[:data.draw(st.integers(0, len(b)))])
    try:
        check_pick(raw, keys_of(dict_of(m.properties), data), fields)
    except MessageFormatError:
        pass  # a pick of bad bytes raises this or agrees; nothing else


def test_pick_keys_in_every_form_and_duplicates():
    def app_section(body: bytes, count: int) -> bytes:
        return b"\x00\x53\x74\xc1" + bytes((len(body) + 1, count)) + body

    k = KeyPicker(["ab", "c", "ü"])
    cases = [  # (map body, entries, the picked keys' values)
        (b"\xa1\x02ab\x55\x01", 1, {"ab": 1}),                        # str8
        (b"\xa1\x02ab\x55\xfe", 1, {"ab": -2}),                       # smalllong -2
        (b"\xa3\x02ab\x55\x02", 1, {"ab": 2}),                        # sym8
        (b"\xb1\x00\x00\x00\x02ab\x55\x03", 1, {"ab": 3}),            # str32
        (b"\x73\x00\x00\x00\x63\x55\x04", 1, {"c": 4}),                # char 'c'
        (b"\xa1\x02\xc3\xbc\x55\x05", 1, {"ü": 5}),                    # UTF-8 key
        (b"\xa1\x02ab\x55\x01\xa1\x02ab\x55\x09", 2, {"ab": 9}),       # the last one wins
        (b"\xa1\x02xy\x00\xa3\x01d\x55\x01\xa1\x01c\x40", 2, {"c": None}),  # described
        (b"\xa1\x02xy\xa1\x02ab\xa1\x01c\x55\x07", 2, {"c": 7}),       # 'ab' in a value
    ]
    for body, entries, want in cases:
        raw = app_section(body, 2 * entries) + b"\x00\x53\x77\x40"
        full = MessageView.from_bytes(raw).application_properties
        assert {key: full[key] for key in full if key in k.names} == want, body
        fresh, warm = MessageView.from_bytes(raw), MessageView.from_bytes(raw)
        warm.header  # noqa: B018  (a section was read: the exact path)
        for view in (fresh, warm):
            got = view.pick(None, k)[1]
            assert {key: got[key] for key in got if key in k.names} == want, body
    # a list key cannot be hashed: the whole map is refused, as when it is decoded
    bad = app_section(b"\x45\x55\x01", 2)
    with pytest.raises(MessageFormatError):
        MessageView.from_bytes(bad).pick(None, k)
    with pytest.raises(MessageFormatError):
        MessageView.from_bytes(bad).application_properties  # noqa: B018


# --- the one-pass walk (_fast_pick) against the exact walk ----------------------------------------
def exact_pick(b: bytes, pp: KeyPicker | None, pa: KeyPicker | None) -> tuple:
    view = MessageView.from_bytes(b)
    return (None if pp is None else view._exact_properties(pp),
            None if pa is None else view._exact_application_properties(pa))


def check_fast(b: bytes, pp: KeyPicker | None, pa: KeyPicker | None, taken: bool) -> None:
    """Whenever the one-pass walk answers, the exact walk gives the same dicts (and so must not
    raise: the one-pass walk never accepts what the exact one refuses). ``taken``: it must
    answer."""
    try:
        fast = _fast_pick(b, pp, pa)
    except codec._FAILURES:
        fast = None
    if taken:
        assert fast is not None, b.hex(" ")
    if fast is not None:
        assert typed(list(fast)) == typed(list(exact_pick(b, pp, pa))), b.hex(" ")
        assert (fast[0] is None) == (pp is None) and (fast[1] is None) == (pa is None)


def pickers(data, app_keys) -> list[tuple]:
    # (at least one field: with none, the one-pass walk reads no field of the list while the
    # exact walk reads all of them, so only the exact one notices a bad item; as before)
    pp = KeyPicker(data.draw(st.sets(st.sampled_from(PROPERTIES), min_size=1, max_size=4)))
    pa = KeyPicker(keys_of(app_keys, data))
    return [(pp, pa), (None, pa), (pp, None)]


@SETTINGS
@given(messages(), footers, st.data())
def test_fast_pick_takes_proton_encodings(m, footer, data):
    """Whatever proton writes (list0/list32 sections, map32, str8/str32/sym8 keys and values of
    every simple type) is read by the one-pass walk, with the exact walk's answer."""
    b = encoded(m, footer)
    for pp, pa in pickers(data, {str(k) for k in dict_of(m.properties)}):
        check_fast(b, pp, pa, taken=True)


described = st.builds(proton.Described, SCALARS["ulong"], simple)
values = st.one_of(simple, described)


def list_section(code: int, items: list, form: str) -> bytes:
    body = b"".join(encode(x) for x in items)
    if form == "list0" and not items:
        return bytes((0, 0x53, code, 0x45))
    if form == "null" and not items:
        return bytes((0, 0x53, code, 0x40))
    if form == "8" and len(body) < 255 and len(items) < 256:
        return bytes((0, 0x53, code, 0xC0, len(body) + 1, len(items))) + body
    return bytes((0, 0x53, code, 0xD0)) + SIZE_COUNT32.pack(len(body) + 4, len(items)) + body


def map_section(code: int, entries: list[tuple], form: str) -> bytes:
    body = b"".join(encode(k) + encode(v) for k, v in entries)
    n = 2 * len(entries)
    if form == "null" and not entries:
        return bytes((0, 0x53, code, 0x40))
    if form == "8" and len(body) < 255 and n < 256:
        return bytes((0, 0x53, code, 0xC1, len(body) + 1, n)) + body
    return bytes((0, 0x53, code, 0xD1)) + SIZE_COUNT32.pack(len(body) + 4, n) + body


forms = st.sampled_from(["list0", "null", "8", "32"])
tails = st.sampled_from([b"", b"\x00\x53\x77\x40", b"\x00\x53\x75\xa0\x02hi",
                         b"\x00\x53\x75\xb0\x00\x00\x00\x01x", b"\x00\x53\x78\xc1\x01\x00"])
app_keys = st.one_of(short_text, symbols, SCALARS["char"], SCALARS["int"])


@SETTINGS
@given(st.lists(st.tuples(app_keys, values), max_size=6), st.lists(values, max_size=15),
       st.one_of(st.none(), forms), st.one_of(st.none(), forms), st.booleans(), tails,
       st.booleans(), st.data())
def test_fast_pick_agrees_on_every_form(entries, items, pform, aform, header, tail, twice, data):
    """list0/null/list8/list32 properties, null/map8/map32 application properties (either may be
    missing, come in either order or twice: the first counts), duplicate keys (the last wins),
    symbol/char/int keys, described values, short last sections (under the 12 head bytes).
    The walk must answer whenever all keys are str8/sym8 and no item is described."""
    b = b"\x00\x53\x70\xc0\x02\x01\x41" if header else b""
    sections = []
    if pform is not None:
        sections.append(list_section(0x73, items, pform))
    if aform is not None:
        sections.append(map_section(0x74, entries, aform))
    if data.draw(st.booleans()):
        sections.reverse()
    if twice:  # the same keys and as many fields again, other values
        again = [(k, "again") for k, _ in entries if type(k) in (str, proton.symbol)]
        more = [map_section(0x74, again or [("k", 1)], "8"),
                list_section(0x73, ["again"] * max(len(items), 4), "8")]
        sections += more[::-1] if data.draw(st.booleans()) else more
    b += b"".join(sections) + tail
    strings = {str(k) for k, _ in entries if isinstance(k, str) and type(k) is not proton.char}
    taken = (
        (pform is None or all(type(x) is not proton.Described for x in items))
        and (aform is None or all(type(k) in (str, proton.symbol)
                                  and type(v) is not proton.Described for k, v in entries)))
    for pp, pa in pickers(data, strings):
        check_fast(b, pp, pa, taken)


def test_fast_pick_reads_the_first_section_of_each_kind():
    p1 = list_section(0x73, [None, None, None, "first"], "8")
    p2 = list_section(0x73, [None, None, None, "second"], "32")
    a1 = map_section(0x74, [("k", 1), ("k", 2)], "8")  # a key twice: the last one wins
    a2 = map_section(0x74, [("k", 3)], "32")
    pp, pa = KeyPicker(["subject"]), KeyPicker(["k"])
    for parts in itertools.permutations([p1, p2, a1, a2]):
        if parts.index(p1) > parts.index(p2) or parts.index(a1) > parts.index(a2):
            continue
        b = b"".join(parts) + b"\x00\x53\x77\x40"
        assert _fast_pick(b, pp, pa) == ({"subject": "first"}, {"k": 2})
        assert _fast_pick(b, None, pa) == (None, {"k": 2})
        assert _fast_pick(b, pp, None) == ({"subject": "first"}, None)
        check_fast(b, pp, pa, taken=True)


def bench_like_message() -> bytes:
    m = proton.Message(id="m-414002", subject="order.created", durable=True, priority=5,
                       properties={"region": "LATAM", "price": 12, "amount": 9, "customer": "c840"})
    m.inferred = True
    m.body = b"x" * 64
    return bytes(m.encode())


@pytest.mark.parametrize("b", [
    bench_like_message(),
    list_section(0x73, ["id", None, "to", "subj", None, proton.ulong(7)], "8")
    + map_section(0x74, [("a", 1), (proton.symbol("b"), "x"), ("a", 2), ("cc", 3.5)], "8")
    + b"\x00\x53\x77\x40",
    b"\x00\x53\x70\x45" + list_section(0x73, [], "list0")
    + map_section(0x74, [("aa", "y" * 300)], "32")
    + b"\x00\x53\x75\xa0\x01z",
    b"\x00\x53\x70\x45" + list_section(0x73, [None, None, None, "s"], "32")
    + b"\x00\x53\x75\xa0\x01z\x00\x53\x78\xc1\x01\x00",
], ids=["proton", "list8-map8", "list0-map32-long-value", "no-map-footer"])
def test_fast_pick_never_takes_damaged_bytes(b):
    """Every truncation and many one-byte changes of a message: the one-pass walk either hands
    over (None) or answers what the exact walk answers, which must not raise."""
    cases = [(KeyPicker(["subject", "to"]), KeyPicker(["amount", "a", "aa"])),
             (None, KeyPicker(["price", "b", "zz"])), (KeyPicker(["message_id"]), None)]
    assert all(_fast_pick(b, pp, pa) is not None for pp, pa in cases)
    damaged = [b[:n] for n in range(len(b))]
    for i in range(len(b)):
        for v in {0x00, 0x40, 0x45, 0x53, 0x6F, 0x79, 0xA1, 0xB1, 0xC0, 0xD1, 0xFF, b[i] ^ 1,
                  (b[i] + 1) & 255, (b[i] - 1) & 255}:
            if v != b[i]:
                damaged.append(b[:i] + bytes((v,)) + b[i + 1:])
    for raw in damaged:
        for pp, pa in cases:
            check_fast(raw, pp, pa, taken=False)


@SETTINGS
@given(messages(), st.data())
def test_fast_pick_on_damaged_proton_messages(m, data):
    b = bytearray(m.encode())
    for _ in range(data.draw(st.integers(1, 3))):
        b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(b[:data.draw(st.integers(0, len(b)))])
    for pp, pa in pickers(data, {str(k) for k in dict_of(m.properties)}):
        check_fast(raw, pp, pa, taken=False)
