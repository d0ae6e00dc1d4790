"""amqp_stream.wire._pick: a filter's keys picked from stored bytes agree with the decoded
sections, on the one-pass walk and the exact one."""

from __future__ import annotations

import itertools

import proton
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_stream.wire import KeyPicker, MessageFormatError, MessageView, encode
from amqp_stream.wire._codec import FAILURES, SIZE_COUNT32
from amqp_stream.wire._pick import fast_pick
from tests.wire.messages import (PROPERTIES, SCALARS, SETTINGS, dict_of, encoded, footers, messages,
                                 short_text, simple, symbols, typed)


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


# --- the one-pass walk (fast_pick) against the exact walk ----------------------------------------
def exact_pick(b: bytes, pp: KeyPicker | None, pa: KeyPicker | None) -> tuple:
    view = MessageView.from_bytes(b)
    return (None if pp is None else view._exact_properties(pp),
            None if pa is None else view._exact_application_properties(pa))


def check_fast(b: bytes, pp: KeyPicker | None, pa: KeyPicker | None, taken: bool) -> None:
    """Whenever the one-pass walk answers, the exact walk gives the same dicts (and so must not
    raise: the one-pass walk never accepts what the exact one refuses). ``taken``: it must
    answer."""
    try:
        fast = fast_pick(b, pp, pa)
    except FAILURES:
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
        assert fast_pick(b, pp, pa) == ({"subject": "first"}, {"k": 2})
        assert fast_pick(b, None, pa) == (None, {"k": 2})
        assert fast_pick(b, pp, None) == ({"subject": "first"}, None)
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
    assert all(fast_pick(b, pp, pa) is not None for pp, pa in cases)
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

