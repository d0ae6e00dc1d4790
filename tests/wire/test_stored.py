"""amqp_stream.wire._stored against proton: the broker's byte edits (stored_form at publish,
with_stream_offset at delivery) and the order rule they share."""

from __future__ import annotations

import proton
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_stream.wire import (MAX_FILTER_VALUES, BadFilterValue, MessageFormatError, MessageView,
                              WireError, encode, filter_value, split_sections, stored_form,
                              with_stream_offset)
from sqlfilter import compile_property_filter, compile_sql
from tests.wire.messages import (SETTINGS, check_view, decoded, dict_of, encoded, expected, footers,
                                 messages, sections_except, simple, symbols, typed)


@SETTINGS
@given(messages(), footers)
def test_stored_form_cuts_delivery_annotations(m, footer):
    m.annotations = None  # (no filter value of another type)
    b = encoded(m, footer)
    stripped = stored_form(b)[0]
    assert bytes(stored_form(memoryview(b))[0]) == stripped
    m.instructions = None
    assert stripped == encoded(m, footer)  # exactly what proton writes without them
    assert stored_form(stripped)[0] is stripped  # in order, nothing to cut: no copy


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
def test_stored_form_reads_the_filter_value(m, footer, value):
    """The publish path's single pass: the bytes without delivery annotations, and the value."""
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
    m.instructions = None
    assert stored == encoded(m, footer)
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


@pytest.mark.parametrize("annotations", [b"", b"\x00\x53\x72\xc1\x05\x02\xa3\x01k\x41",
                                         b"\x00\x53\x72\xd1\x00\x00\x00\x08\x00\x00\x00\x02\xa3\x01k\x41"])
@pytest.mark.parametrize("header", [b"", b"\x00\x53\x70\x45", b"\x00\x53\x70\xc0\x02\x01\x41",
                                    b"\x00\x53\x70\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x41"])
def test_every_leading_shape_gets_the_same_offset(header, annotations):
    """A header as list0 or list8 with annotations absent, map8 or map32 is placed from a few
    bytes; a list32 header goes the general walk: the message that comes out is the same."""
    b = header + annotations + b"\x00\x53\x75\xa0\x03abc\x00\x53\x78\xc1\x01\x00"
    out = with_stream_offset(b, 1 << 40)
    got = decoded(out)
    want = {"x-stream-offset": 1 << 40} | ({"k": True} if annotations else {})
    assert got.annotations == want and got.body == b"abc"
    assert got.durable == (header.endswith(b"\x41") and len(header) > 4)
    assert sections_except(out, 0x72) == sections_except(b, 0x72)
    assert with_stream_offset(out, 7) == with_stream_offset(b, 7)  # replaced, not added
    with pytest.raises(WireError):
        with_stream_offset(b, 1 << 63)


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



@pytest.mark.parametrize("offset", [2**63, -(2**63) - 1])
def test_offset_outside_a_long_is_refused(offset):
    with pytest.raises(WireError):
        with_stream_offset(b"\x00\x53\x77\x40", offset)



# --- the order rule (``_sections``): what stored_form writes, every later reader relies on -------
FOOTER = encode(proton.Described(proton.ulong(0x78), {proton.symbol("f"): 1}))
SQL = "region = 'eu' AND p.subject = 'orders' AND h.priority = 7"


def node_like_parts() -> dict[int, bytes]:
    """The sections of a typical filtered message, encoded by proton, keyed by code."""
    m = proton.Message(durable=True, priority=7, subject="orders", id="m-1",
                       properties={"region": "eu", "n": 3},
                       annotations={proton.symbol("x-stream-filter-value"): "eu",
                                    proton.symbol("x-opt-k"): "v"},
                       instructions={proton.symbol("x-opt-delivery"): 1})
    m.inferred = True
    m.body = b"payload"
    b = bytes(m.encode())
    parts = {code: b[start:end] for code, start, _, end in split_sections(b)}
    assert sorted(parts) == [0x70, 0x71, 0x72, 0x73, 0x74, 0x75]
    return parts


def canonical_stored(parts: dict[int, bytes], *body: bytes) -> bytes:
    """What the broker must store: proton's order, no delivery annotations."""
    return b"".join(parts[c] for c in (0x70, 0x72, 0x73, 0x74)) + b"".join(body or [parts[0x75]])


def data_section(payload: bytes) -> bytes:
    return bytes((0x00, 0x53, 0x75, 0xA0, len(payload))) + payload


# each case: the order the sections are sent in (0x75.. are the body), with footer or not
ORDERS = [
    pytest.param((0x70, 0x73, 0x72, 0x74, 0x75), id="properties-before-annotations (Node amqp10)"),
    pytest.param((0x73, 0x74, 0x72, 0x70, 0x75), id="header-and-annotations-last"),
    pytest.param((0x75, 0x74, 0x73, 0x72, 0x71, 0x70), id="all-reversed"),
    pytest.param((0x70, 0x72, 0x73, 0x75, 0x74), id="application-properties-after-body"),
    pytest.param((0x72, 0x71, 0x70, 0x73, 0x74, 0x75), id="delivery-annotations-in-between"),
    pytest.param((0x70, 0x71, 0x72, 0x73, 0x74, 0x75), id="already-in-order"),
]


@pytest.mark.parametrize("footer", [False, True], ids=["no-footer", "footer"])
@pytest.mark.parametrize("order", ORDERS)
def test_sections_in_any_order_are_stored_in_the_canonical_order(order, footer):
    parts = node_like_parts()
    raw = b"".join(parts[c] for c in order) + (FOOTER if footer else b"")
    want = canonical_stored(parts) + (FOOTER if footer else b"")
    stored, value = stored_form(raw)
    assert stored == want
    assert value == filter_value(raw) == "eu"  # stage 1 finds the value wherever it was sent
    # stage 2 reads the same values from what is stored as from a canonical message
    sql = compile_sql(SQL)
    props = compile_property_filter(properties={proton.symbol("subject"): "orders"},
                                    application_properties={"region": "eu"})
    for f in (sql, props):
        assert f.matches(stored) and f.matches(want)
    view = MessageView.from_bytes(stored)
    assert view.message_annotations[proton.symbol("x-stream-filter-value")] == "eu"
    assert view.application_properties == {"region": "eu", "n": 3}
    # the delivery edit finds the one annotations section: clients see x-stream-offset
    out = with_stream_offset(stored, 42)
    assert [code for code, *_ in split_sections(out)].count(0x72) == 1
    got = decoded(out)
    assert got.annotations == {"x-stream-filter-value": "eu", "x-opt-k": "v", "x-stream-offset": 42}
    assert got.subject == "orders" and got.properties == {"region": "eu", "n": 3}
    assert got.body == b"payload" and got.priority == 7 and got.instructions is None


def test_body_sections_keep_their_order():
    parts = node_like_parts()
    one, two, three = data_section(b"one"), data_section(b"two"), data_section(b"three")
    raw = parts[0x73] + one + parts[0x74] + two + parts[0x70] + three + parts[0x72]
    stored, value = stored_form(raw)
    assert stored == canonical_stored(parts, one, two, three)
    assert value == "eu"


def test_a_message_in_order_is_not_copied():
    parts = node_like_parts()
    b = canonical_stored(parts)
    assert stored_form(b)[0] is b


@pytest.mark.parametrize("order, extra, message, at", [
    ((0x70, 0x72, 0x73, 0x75), 0x72, "second message-annotations section", -1),
    ((0x73, 0x72, 0x75), 0x73, "second properties section", -1),
    ((0x70, 0x75), 0x70, "second header section", -1),
    ((0x74, 0x75), 0x74, "second application-properties section", -1),
    ((0x71, 0x72, 0x75), 0x71, "second delivery-annotations section", -1),
    ((0x70, 0x75, 0x78), 0x78, "second footer section", -1),
    ((0x70, 0x75, 0x78), 0x73, "properties section after the footer", -1),
    ((0x70, 0x78), 0x75, "data section after the footer", -1),
    ((0x73, 0x72, 0x75, 0x72), None, "second message-annotations section", 3),
])
def test_a_duplicate_or_a_section_after_the_footer_is_refused(order, extra, message, at):
    parts = node_like_parts()
    parts[0x78] = FOOTER
    sent = list(order) + ([extra] if extra is not None else [])
    raw = b"".join(parts[c] for c in sent)
    offending = sum(len(parts[c]) for c in sent[:at % len(sent)])  # where the bad one starts
    want = f"^{message} \\(at byte {offending}\\)$"
    for run in (stored_form, filter_value):
        with pytest.raises(MessageFormatError, match=want) as info:
            run(raw)
        assert type(info.value) is MessageFormatError  # not a BadFilterValue: amqp:decode-error


@st.composite
def permuted(draw) -> tuple[bytes, bytes]:
    """(a proton-encoded message, the same sections in any order; a footer stays last)."""
    m = draw(messages())
    footer = draw(footers)
    b = encoded(m, footer)
    sections = [b[start:end] for code, start, _, end in split_sections(b) if code != 0x78]
    tail = b"".join(b[start:end] for code, start, _, end in split_sections(b) if code == 0x78)
    return b, b"".join(draw(st.permutations(sections))) + tail


@SETTINGS
@given(permuted())
def test_stored_form_of_any_permutation_is_the_canonical_message(pair):
    b, raw = pair
    try:
        want = stored_form(b)
    except BadFilterValue:  # (an x-stream-filter-value of another type: refused either way)
        with pytest.raises(BadFilterValue):
            stored_form(raw)
        return
    stored, value = stored_form(raw)
    assert (stored, value) == want
    canonical, got = decoded(want[0]), decoded(stored)  # proton reads the same message
    for field in ("durable", "priority", "ttl", "first_acquirer", "delivery_count", "id",
                  "user_id", "address", "subject", "reply_to", "correlation_id", "content_type",
                  "content_encoding", "expiry_time", "creation_time", "group_id",
                  "group_sequence", "reply_to_group_id", "properties", "annotations",
                  "instructions", "body"):
        assert typed(expected_field(got, field)) == typed(expected_field(canonical, field)), field
    assert got.instructions is None
    out = decoded(with_stream_offset(stored, 9))
    assert out.annotations[proton.symbol("x-stream-offset")] == 9


def expected_field(m: proton.Message, field: str):
    value = getattr(m, field)
    return dict_of(value) if isinstance(value, dict) else expected(value)


# ---- several filter values per message (a list or array of strings: our extension) ----

def _with_value(value) -> bytes:
    m = proton.Message(body="x", annotations={proton.symbol("x-stream-filter-value"): value,
                                             proton.symbol("other"): 1})
    return bytes(m.encode())


@SETTINGS
@given(st.lists(st.text(max_size=20), min_size=1, max_size=MAX_FILTER_VALUES), st.booleans())
def test_a_list_or_array_of_strings_is_several_values(values, as_array):
    value = (proton.Array(proton.UNDESCRIBED, proton.Data.STRING, *values) if as_array
             else list(values))
    b = _with_value(value)
    stored, got = stored_form(b)
    assert got == tuple(values) == filter_value(b)
    assert stored == b  # the bytes are stored as sent


def test_a_string_stays_one_value_and_an_empty_list_is_none():
    assert stored_form(_with_value("red"))[1] == "red"
    assert stored_form(_with_value(["red"]))[1] == ("red",)
    assert stored_form(_with_value([]))[1] is None


@pytest.mark.parametrize("value", [["a", 1], ["a", proton.symbol("b")], [["a"]], [None],
                                   ["v"] * (MAX_FILTER_VALUES + 1), {"a": "b"}])
def test_a_list_of_anything_but_strings_or_too_many_is_refused(value):
    with pytest.raises(BadFilterValue) as info:
        stored_form(_with_value(value))
    assert "x-stream-filter-value" in str(info.value)
