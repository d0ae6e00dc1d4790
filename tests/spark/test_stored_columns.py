"""``stored_columns.stored_adder`` (one walk a message into the column lists) gives the batches
``Columns.add(stored_message(...))`` gives: random messages built byte by byte, in the usual
encodings and in the others the walk leaves to ``stored_message`` (ulong descriptors, str32 and
sym32 keys, map32 and list32 sections, repeated keys and sections, header and footer sections,
every body kind), random declared schemas and filter values; no broker, no Spark session."""

from __future__ import annotations

from tests.spark.test_batches import _same
import struct
import uuid

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from amqp_stream.client.names import FILTER_VALUE
from amqp_stream.spark import stream_read
from amqp_stream.spark.batches import Columns
from amqp_stream.spark.mapping import BASE_COLUMNS, declared_columns
from amqp_stream.spark.stored_columns import stored_adder
from amqp_stream.spark.stream_read import stored_message
from amqp_stream.wire import encode

KEYS = ["a", "b", "région", "message_id", "subject", "creation_time", "group_sequence", "content_type"]
TYPES = ["string", "integer", "long", "byte", "double", "boolean", "binary", "timestamp", "decimal(10,2)",
         {"type": "array", "elementType": "string", "containsNull": True}]

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(-128, 127),
    st.integers(-(2**31), 2**31 - 1).map(proton.int32), st.integers(-128, 127).map(proton.byte),
    st.integers(0, 255).map(proton.ubyte), st.integers(0, 2**32 - 1).map(proton.uint),
    st.integers(0, 2**64 - 1).map(proton.ulong), st.floats(allow_nan=True, allow_infinity=True),
    st.floats(width=32).map(proton.float32), st.text(max_size=6), st.text(alphabet="ab", max_size=3).map(proton.symbol),
    st.binary(max_size=6), st.integers(-(2**40), 2**42).map(proton.timestamp), st.uuids(),
    st.characters().map(proton.char), st.sampled_from(["5", "2026-01-02", "1.5", "true", ""]))
_values = _scalars | st.lists(st.integers(-3, 3) | st.text(max_size=2), max_size=2)


def _descriptor(draw, code: int) -> bytes:
    """A section's descriptor: the usual smallulong, or a ulong, or a symbol name now and then
    (which ``amqp_stream.wire`` does not read: both ways fail alike)."""
    kind = draw(st.sampled_from(["small"] * 20 + ["ulong", "symbol"]))
    if kind == "small":
        return bytes((0x00, 0x53, code))
    if kind == "ulong":
        return b"\x00\x80" + struct.pack(">Q", code)
    names = {0x70: "header", 0x72: "message-annotations", 0x73: "properties", 0x74: "application-properties",
             0x75: "data", 0x76: "amqp-sequence", 0x77: "amqp-value", 0x78: "footer"}
    return b"\x00" + encode(proton.symbol(f"amqp:{names[code]}:list"))


def _text32(code: int, s: str) -> bytes:
    raw = s.encode("utf-8" if code == 0xB1 else "ascii")
    return bytes((code,)) + struct.pack(">I", len(raw)) + raw


def _key(draw, k: str, symbol: bool = False) -> bytes:
    """A map key: str8 (sym8 for annotations) as usual, str32 / sym32 / the other one now and then."""
    wide = draw(st.integers(0, 4)) == 0
    if symbol:
        return _text32(0xB3, k) if wide else encode(proton.symbol(k))
    if k.isascii() and draw(st.integers(0, 19)) == 0:
        return encode(proton.symbol(k))  # not a str: the map column makes it text
    return _text32(0xB1, k) if wide else encode(k)


def _compound(draw, kind: str, items: list[bytes]) -> bytes:
    """A map (``items``: its entries, key and value each) or list of encoded items: the smallest
    form, or the 32-bit one now and then."""
    body = b"".join(items)
    count = 2 * len(items) if kind == "map" else len(items)
    if kind == "list" and not items and draw(st.booleans()):
        return b"\x45"
    if draw(st.integers(0, 3)) == 0 or len(body) > 250:
        return (b"\xd1" if kind == "map" else b"\xd0") + struct.pack(">II", len(body) + 4, count) + body
    return (b"\xc1" if kind == "map" else b"\xc0") + struct.pack(">BB", len(body) + 1, count) + body


@st.composite
def messages(draw) -> bytes:
    sections = []
    if draw(st.integers(0, 4)) == 0:
        sections.append(_descriptor(draw, 0x70) + encode([True, proton.ubyte(4)]))
    if draw(st.booleans()):
        entries = []
        fv = draw(st.none() | st.text(max_size=3) | st.sampled_from(["eu", "us"]) | _scalars)
        if fv is not None:
            entries.append(_key(draw, FILTER_VALUE, symbol=True) + encode(fv))
        if draw(st.booleans()):
            entries.append(_key(draw, "x-stream-other", symbol=True) + encode(draw(_scalars)))
        entries = draw(st.permutations(entries))
        sections.append(_descriptor(draw, 0x72) + _compound(draw, "map", entries))
    if draw(st.booleans()):
        fields = [draw(st.none() | st.text(max_size=4) | st.integers(0, 300).map(proton.ulong) | st.uuids()),
                  draw(st.none() | st.binary(max_size=4)), None, draw(st.none() | st.text(max_size=3)),
                  None, None, draw(st.none() | st.sampled_from(["application/json", ""]).map(proton.symbol)), None,
                  draw(st.none() | st.integers(0, 2**41).map(proton.timestamp) | st.just("x")),
                  draw(st.none() | st.sampled_from([0, 1001, 1795823780661]).map(proton.timestamp)
                       | st.integers(-(2**40), 2**42).map(proton.timestamp) | st.sampled_from([proton.ulong(5), "7", "x"])),
                  None, draw(st.none() | st.integers(0, 3).map(proton.uint)), None]
        fields = fields[:draw(st.integers(0, len(fields)))]
        sections.append(_descriptor(draw, 0x73) + _compound(draw, "list", [encode(f) for f in fields]))
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(KEYS), max_size=5, unique=draw(st.integers(0, 3)) > 0))
        items = [_key(draw, k) + encode(draw(_values)) for k in keys]
        sections.append(_descriptor(draw, 0x74) + _compound(draw, "map", items))
        if draw(st.integers(0, 9)) == 0:  # a second one: the first counts
            sections.append(_descriptor(draw, 0x74) + encode({"a": 1}))
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from([0x75, 0x75, 0x76, 0x77]))
        body = {0x75: st.binary(max_size=300), 0x76: st.lists(st.integers(0, 3), max_size=2), 0x77: _values}[kind]
        sections.append(_descriptor(draw, kind) + encode(draw(body)))
    if draw(st.integers(0, 4)) == 0:
        sections.append(_descriptor(draw, 0x78) + encode({proton.symbol("f"): 1}))
    return b"".join(sections)


@st.composite
def schemas(draw) -> StructType:
    names = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
    fields = [{"name": n, "type": draw(st.sampled_from(TYPES)), "nullable": True, "metadata": {}} for n in names]
    declared = StructType.fromJson({"type": "struct", "fields": fields})
    return declared_columns(StructType(list(BASE_COLUMNS.fields) + list(declared.fields)))


def _batches(datas: list[bytes], declared: StructType, stream: str | None, wanted, new: bool) -> list:
    """The rows of ``datas`` in batches of 4, the new way or today's."""
    columns = Columns(declared, stream)
    add = stored_adder(columns, wanted)
    out = []
    for i, d in enumerate(datas):
        if new:
            add(d, 100 + i)
        else:
            m = stored_message(d, 100 + i)
            if wanted is None or m.filter_value in wanted:
                columns.add(m)
        if len(columns) >= 4:
            out.append(columns.batch())
    out.append(columns.batch())
    return out


def _rows(datas, declared, stream, wanted, new: bool):
    try:
        return [b.to_pylist() for b in _batches(datas, declared, stream, wanted, new)]
    except Exception as exc:  # noqa: BLE001 - bytes neither way reads, a time past year 9999: both fail alike
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=6), schemas(), st.none() | st.just("p-1"),
       st.none() | st.sampled_from([("eu",), ("eu", "us"), ("",)]))
def test_one_walk_gives_the_columns_of_stored_message(datas, declared, stream, wanted):
    datas = datas + datas[::-1]  # sections seen before: read from what the walk remembers
    assert _same(_rows(datas, declared, stream, wanted, True), _rows(datas, declared, stream, wanted, False))


def _usual(i: int) -> bytes:
    m = proton.Message(body=f'{{"n": {i}}}'.encode(), id=f"m-{i}", creation_time=1795823780.661 + i,
                       content_type="application/json")
    m.properties = {"n": proton.int32(i), "region": f"r{i % 3}", "amount": i * 0.25, "k": i * 3 - 200,
                    "ok": i % 2 == 0, "none": None, "u": proton.ubyte(i % 256)}
    m.annotations = {proton.symbol(FILTER_VALUE): f"r{i % 3}"}
    return bytes(m.encode())


def test_the_usual_messages_take_the_walk(monkeypatch):
    """What the sink and proton write (the bench's messages) never goes to ``stored_message``,
    and gives its rows."""
    declared = declared_columns(StructType.fromJson({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in [*BASE_COLUMNS.jsonValue()["fields"][:0], ("n", "integer"), ("region", "string"),
                     ("amount", "double"), ("k", "long"), ("message_id", "string"), ("ok", "boolean")]]}))
    datas = [_usual(i) for i in range(300)]
    expected = [b.to_pylist() for b in _batches(datas, declared, None, ("r0", "r2"), False)]
    slow = []
    monkeypatch.setattr(stream_read, "stored_message", lambda d, o: slow.append(o) or stored_message(d, o))
    got = [b.to_pylist() for b in _batches(datas, declared, None, ("r0", "r2"), True)]
    assert slow == []
    assert _same(got, expected) and len(sum(got, [])) == 200


@pytest.mark.parametrize("data", [
    b"\x00\x53\x74\xc1\x05\x02\xa1\x01a",  # a map entry cut short
    b"\x00\x53\x74\xc1\x04\x01\xa1\x01a",  # an odd count
    b"\x00\x53\x74\xc1\x07\x03\xa1\x01a\xa1\x01b",  # an odd count, the bytes one entry
    b"\x00\x53\x72\xc1\x07\x03\xa3\x01a\xa1\x01b",  # the same in the annotations
    b"\x00\x53\x73\xc0\x03\x01\xa1\x05",  # a string past its list
    b"\x00\x53\x72\xc1\x06\x02\xa3\x02\xff\xfe\x40",  # a symbol that is not ASCII
    b"\x00\x53\x75\xa0\x09ab",  # a body past the message
    b"\x00\x53\x74\xc1\x0f\x02\xa1\x01a\xa1\x09b",  # a map and its last string past the message
])
def test_bad_bytes_fail_as_today(data):
    """Bytes the walk cannot read go to ``stored_message``: the read fails as it did."""
    declared = declared_columns(StructType(list(BASE_COLUMNS.fields)))
    with pytest.raises(Exception) as today:
        _batches([data], declared, None, None, False)
    with pytest.raises(type(today.value)):
        _batches([data], declared, None, None, True)


def test_a_remembered_properties_section_with_another_count_fails_as_today():
    """The same bytes after the message id under another item count are read again (and fail
    as on today's path), not taken from what the walk remembers."""
    declared = declared_columns(StructType.fromJson({"type": "struct", "fields": [
        {"name": "subject", "type": "string", "nullable": True, "metadata": {}}]}))
    items = b"\xa1\x02m1\x40\x40\xa1\x01s"
    good, bad = (b"\x00\x53\x73\xc0" + bytes((len(items) + 1, count)) + items + b"\x00\x53\x75\xa0\x00"
                 for count in (4, 5))
    got = _rows([good, bad], declared, None, None, True)
    assert got == _rows([good, bad], declared, None, None, False)
    assert got.startswith("MessageFormatError")


def test_uuid_ids_and_times_in_seconds():
    """Properties as ``StreamMessage`` has them: uuid ids kept, zero times absent, times in seconds."""
    declared = declared_columns(StructType.fromJson({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in [("message_id", "string"), ("creation_time", "double"), ("group_sequence", "long")]]}))
    m = proton.Message(id=uuid.UUID(int=7), creation_time=2.5, group_sequence=0)
    rows = [b.to_pylist() for b in _batches([bytes(m.encode())], declared, None, None, True)]
    assert rows[0][0]["message_id"] == str(uuid.UUID(int=7))
    assert rows[0][0]["creation_time"] == 2.5 and rows[0][0]["group_sequence"] is None
    assert _same(rows, [b.to_pylist() for b in _batches([bytes(m.encode())], declared, None, None, False)])
