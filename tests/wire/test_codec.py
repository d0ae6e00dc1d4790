"""amqp_stream.wire._codec against proton's own encoder: every primitive and composite, nested;
garbage."""

from __future__ import annotations

import decimal
import math
import struct
import uuid

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_stream.wire import (MessageFormatError, WireError, decode, decode_all, encode,
                              from_proton, skip)
from amqp_stream.wire._codec import _bid_to_decimal

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- proton-typed values -----------------------------------------------------------------------
ascii_text = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=40)
long_text = st.text(max_size=300)
SCALARS = {
    "null": st.none(),
    "bool": st.booleans(),
    "ubyte": st.integers(0, 255).map(proton.ubyte),
    "ushort": st.integers(0, 2**16 - 1).map(proton.ushort),
    "uint": st.integers(0, 2**32 - 1).map(proton.uint),
    "ulong": st.integers(0, 2**64 - 1).map(proton.ulong),
    "byte": st.integers(-128, 127).map(proton.byte),
    "short": st.integers(-(2**15), 2**15 - 1).map(proton.short),
    "int": st.integers(-(2**31), 2**31 - 1).map(proton.int32),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32).map(proton.float32),
    "double": st.floats(),
    "char": st.characters(exclude_categories=("Cs",)).map(proton.char),  # no surrogates (refused)
    "decimal32": st.integers(0, 2**32 - 1).map(proton.decimal32),
    "decimal64": st.integers(0, 2**64 - 1).map(proton.decimal64),
    "decimal128": st.binary(min_size=16, max_size=16).map(proton.decimal128),
    "timestamp": st.integers(-(2**63), 2**63 - 1).map(proton.timestamp),
    "uuid": st.uuids(),
    "binary": st.binary(max_size=300),
    "string": long_text,
    "symbol": st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=300).map(proton.symbol),
}
ARRAY_TYPES = {
    "bool": proton.Data.BOOL, "ubyte": proton.Data.UBYTE, "ushort": proton.Data.USHORT,
    "uint": proton.Data.UINT, "ulong": proton.Data.ULONG, "byte": proton.Data.BYTE,
    "short": proton.Data.SHORT, "int": proton.Data.INT, "long": proton.Data.LONG,
    "float": proton.Data.FLOAT, "double": proton.Data.DOUBLE, "char": proton.Data.CHAR,
    "decimal32": proton.Data.DECIMAL32, "decimal64": proton.Data.DECIMAL64,
    "decimal128": proton.Data.DECIMAL128,
    "timestamp": proton.Data.TIMESTAMP, "uuid": proton.Data.UUID, "binary": proton.Data.BINARY,
    "string": proton.Data.STRING, "symbol": proton.Data.SYMBOL,
}
scalar = st.one_of(*SCALARS.values())
keys = st.one_of(SCALARS["string"], SCALARS["symbol"], SCALARS["ulong"], SCALARS["long"])
descriptors = st.one_of(SCALARS["ulong"], ascii_text.map(proton.symbol))


@st.composite
def arrays(draw):
    name = draw(st.sampled_from(sorted(ARRAY_TYPES)))
    elements = draw(st.lists(SCALARS[name], max_size=6))
    descriptor = draw(st.one_of(st.just(proton.UNDESCRIBED), descriptors))
    return proton.Array(descriptor, ARRAY_TYPES[name], *elements)


values = st.recursive(
    st.one_of(scalar, arrays()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(keys, inner, max_size=5),
        # (a described value directly inside a described value trips proton's list8 decoder)
        st.tuples(descriptors, inner.filter(lambda x: not isinstance(x, proton.Described)))
        .map(lambda t: proton.Described(*t)),
    ),
    max_leaves=12,
)


def typed(v):
    """A comparable form that keeps the type of every value (our representation)."""
    if isinstance(v, float):
        return ("float", struct.pack(">d", v) if not math.isnan(v) else "nan")
    if isinstance(v, decimal.Decimal):
        return ("Decimal", str(v))  # (NaN is not equal to itself)
    if isinstance(v, (bool, type(None), uuid.UUID, bytes)):
        return (type(v).__name__, v)
    if isinstance(v, (int, str)):
        return (type(v).__name__, v)
    if isinstance(v, list):
        return ("list", [typed(x) for x in v])
    if isinstance(v, dict):
        return ("map", sorted(((repr(typed(k)), typed(x)) for k, x in v.items())))
    if isinstance(v, proton.Described):
        return ("described", typed(v.descriptor), typed(v.value))
    raise AssertionError(f"unexpected type {type(v)}")


def expected(v):
    """Proton's object for a value, in the codec's representation."""
    if isinstance(v, proton.Array):
        items = [expected(x) for x in v.elements]
        if v.descriptor is proton.UNDESCRIBED or v.descriptor is None:
            return items
        return [proton.Described(expected(v.descriptor), x) for x in items]
    if isinstance(v, bool) or v is None:
        return v
    # proton keeps decimals as raw bits; their conversion is pinned by test_decimal_vectors
    if isinstance(v, proton.decimal32):
        return _bid_to_decimal(int(v), 0x74)
    if isinstance(v, proton.decimal64):
        return _bid_to_decimal(int(v), 0x84)
    if isinstance(v, proton.decimal128):
        return _bid_to_decimal(int.from_bytes(bytes(v), "big"), 0x94)
    if isinstance(v, proton.timestamp):
        return proton.timestamp(int(v))
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, (bytes, memoryview)):
        return bytes(v)
    if isinstance(v, (proton.symbol, proton.char)):
        return v
    if isinstance(v, str):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [expected(x) for x in v]
    if isinstance(v, dict):
        return {expected(k): expected(x) for k, x in v.items()}
    if isinstance(v, proton.Described):
        return proton.Described(expected(v.descriptor), expected(v.value))
    return v


def proton_encode(v) -> bytes:
    data = proton.Data()
    data.put_object(v)
    return bytes(data.encode())


def proton_decode(b: bytes):
    data = proton.Data()
    data.decode(b)
    data.rewind()
    assert data.next() is not None
    return expected(data.get_object())  # converted while proton's buffers are alive


@SETTINGS
@given(values)
def test_decodes_what_proton_encodes(v):
    b = proton_encode(v)
    value, end = decode(b)
    assert end == len(b)
    assert typed(value) == typed(expected(v))
    assert skip(b) == len(b)
    # at an offset, and from a memoryview
    padded = memoryview(b"\x40\x41" + b + b"\x42")
    assert decode(padded, 2)[1] == 2 + len(b)
    assert skip(padded, 2) == 2 + len(b)


@SETTINGS
@given(values)
def test_proton_decodes_what_we_encode(v):
    b = encode(v)
    assert typed(proton_decode(b)) == typed(expected(v))
    assert typed(decode(b)[0]) == typed(expected(v))
    assert skip(b) == len(b)


@SETTINGS
@given(st.lists(values, max_size=4))
def test_sequence_of_values(vs):
    b = b"".join(proton_encode(v) for v in vs)
    assert [typed(x) for x in decode_all(b)] == [typed(expected(v)) for v in vs]


@pytest.mark.parametrize("raw, value", [
    (b"\x40", None), (b"\x41", True), (b"\x42", False), (b"\x56\x01", True), (b"\x56\x00", False),
    (b"\x43", 0), (b"\x44", 0), (b"\x52\xff", 255), (b"\x53\x07", 7), (b"\x54\xff", -1),
    (b"\x55\x80", -128), (b"\x51\xfe", -2), (b"\x50\xfe", 254), (b"\x60\xff\xfe", 65534),
    (b"\x61\xff\xfe", -2), (b"\x70\x00\x01\x00\x00", 65536), (b"\x71\xff\xff\xff\xff", -1),
    (b"\x80" + (2**64 - 1).to_bytes(8, "big"), 2**64 - 1),
    (b"\x81" + (-5).to_bytes(8, "big", signed=True), -5),
    (b"\x72\x3f\xc0\x00\x00", 1.5), (b"\x82\x40\x04\x00\x00\x00\x00\x00\x00", 2.5),
    (b"\x45", []), (b"\xc0\x01\x00", []), (b"\xd0\x00\x00\x00\x04\x00\x00\x00\x00", []),
    (b"\xc1\x01\x00", {}), (b"\xc0\x03\x02\x41\x40", [True, None]),
    (b"\xe0\x02\x00\x41", []), (b"\xe0\x02\x03\x40", [None, None, None]),
    (b"\xa1\x00", ""), (b"\xb1\x00\x00\x00\x02hi", "hi"), (b"\xa0\x01\x00", b"\x00"),
    (b"\xb0\x00\x00\x00\x00", b""),
])
def test_every_constructor_form(raw, value):
    decoded, end = decode(raw)
    assert end == len(raw)
    assert typed(decoded) == typed(value)
    assert skip(raw) == len(raw)


def test_types_of_special_values():
    assert type(decode(b"\xa3\x03abc")[0]) is proton.symbol
    assert type(decode(b"\xb3\x00\x00\x00\x01a")[0]) is proton.symbol
    assert decode(b"\x73\x00\x01\xf6\x00")[0] == proton.char("\U0001f600")
    assert type(decode(b"\x73\x00\x00\x00\x41")[0]) is proton.char
    ts = decode(b"\x83" + (1700000000123).to_bytes(8, "big"))[0]
    assert type(ts) is proton.timestamp and ts == 1700000000123
    described = decode(b"\x00\x53\x70\x45")[0]
    assert isinstance(described, proton.Described)
    assert described.descriptor == 0x70 and described.value == []


# IEEE 754-2008 BID vectors (decimal32: bias 101, decimal64: 398, decimal128: 6176)
@pytest.mark.parametrize("raw, value", [
    (b"\x74" + bytes.fromhex("32800001"), "1"),
    (b"\x74" + bytes.fromhex("B2800001"), "-1"),
    (b"\x74" + bytes.fromhex("3200004B"), "7.5"),  # 75 x 10^-1
    (b"\x74" + bytes.fromhex("32000000"), "0.0"),
    (b"\x74" + bytes.fromhex("78000000"), "Infinity"),
    (b"\x74" + bytes.fromhex("F8000000"), "-Infinity"),
    (b"\x74" + bytes.fromhex("6CB8967F"), "9999999"),  # coefficient > 2^23: the "11" form
    (b"\x84" + bytes.fromhex("31C0000000000001"), "1"),
    (b"\x84" + bytes.fromhex("31A0000000000019"), "2.5"),
    (b"\x94" + bytes.fromhex("30400000000000000000000000000001"), "1"),
    (b"\x94" + bytes.fromhex("303E0000000000000000000000000539"), "133.7"),
])
def test_decimal_vectors(raw, value):
    decoded, end = decode(raw)
    assert end == len(raw)
    assert type(decoded) is decimal.Decimal
    assert str(decoded) == str(decimal.Decimal(value))
    # and the same bits come out of our encoder for each width
    kind = {0x74: proton.decimal32, 0x84: proton.decimal64}.get(raw[0])
    if kind is not None:
        assert encode(kind(int.from_bytes(raw[1:], "big"))) == raw


def test_decimal_nan():
    assert decode(b"\x74" + bytes.fromhex("7C000000"))[0].is_nan()


@SETTINGS
@given(st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(lambda d: len(d.as_tuple().digits) <= 34
                                                        and -6100 < d.as_tuple().exponent < 6100))
def test_decimal128_round_trip(d):
    assert decode(encode(d))[0] == d


@SETTINGS
@given(st.binary(max_size=200))
def test_garbage_raises_only_format_errors(raw):
    for run in (lambda: decode(raw), lambda: skip(raw), lambda: decode_all(raw)):
        try:
            run()
        except MessageFormatError:
            pass


@SETTINGS
@given(values, st.data())
def test_damaged_encodings_raise_only_format_errors(v, data):
    b = bytearray(proton_encode(v))
    if data.draw(st.booleans()):
        del b[data.draw(st.integers(0, len(b) - 1)):]  # truncated
    else:
        for _ in range(data.draw(st.integers(1, 3))):
            b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    for run in (lambda: decode(bytes(b)), lambda: skip(bytes(b)), lambda: decode_all(bytes(b))):
        try:
            run()
        except MessageFormatError:
            pass


@pytest.mark.parametrize("raw", [
    b"", b"\x01", b"\xff", b"\xa1\x05ab", b"\xb0\xff\xff\xff\xffab", b"\x81\x00",
    b"\xc0\x05\x02\x41", b"\xd0\xff\xff\xff\xff\xff\xff\xff\xff", b"\xc1\x03\x01\x41\x41",
    b"\xc1\x05\x02\xc0\x01\x00\x41",  # a list as a map key
    b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40",  # 4 billion nulls in 5 bytes
    b"\xe0\x03\x02\x00\x41",  # described array without the element constructor
    b"\xa1\x02\xff\xfe",  # bad UTF-8
    b"\xa3\x01\xe9",  # non-ASCII symbol
    b"\x73\x00\x00\xd8\x00",  # surrogate char
    b"\x56\x02",  # boolean byte 2
    b"\xc0\x03\x01\x41\x41",  # list longer than its count says
    b"\x00" * 5000,  # deeply nested described values
])
def test_malformed_vectors(raw):
    with pytest.raises(MessageFormatError):
        decode(raw)
        if len(raw) and skip(raw) != len(raw):
            raise MessageFormatError("not all consumed")


def test_error_carries_position():
    with pytest.raises(MessageFormatError, match="byte 4"):
        decode(b"\xc0\x04\x02\x41\x01\x40")


@pytest.mark.parametrize("value, raw", [
    (7, b"\x55\x07"), (-300, b"\x81" + (-300).to_bytes(8, "big", signed=True)),
    (proton.symbol("ab"), b"\xa3\x02ab"), ("é", b"\xa1\x02\xc3\xa9"),
    ({proton.symbol("k"): 1}, b"\xc1\x06\x02\xa3\x01k\x55\x01"),
    (proton.ulong(0), b"\x44"), (proton.ulong(5), b"\x53\x05"), (proton.uint(0), b"\x43"),
    ("x" * 300, b"\xb1\x00\x00\x01\x2c" + b"x" * 300),
])
def test_encoder_uses_smallest_forms(value, raw):
    assert encode(value) == raw


def test_encoder_refuses_what_has_no_encoding():
    for value in (object(), 2**64, proton.symbol("ü"), proton.ubyte(256), [1, {object(): 2}],
                  decimal.Decimal("1E+7000")):
        with pytest.raises(WireError):  # the package's root (a ValueError)
            encode(value)


@pytest.mark.parametrize("raw", ["7C000000", "31000005", "B1000005", "78000000"])
def test_from_proton_gives_decimals_as_decode_does(raw):
    """A decimal from proton (raw bits) becomes the Decimal our decoder reads from its bytes."""
    for code, kind, width in ((0x74, proton.decimal32, 4), (0x84, proton.decimal64, 8),
                              (0x94, proton.decimal128, 16)):
        bits = bytes.fromhex(raw).rjust(width, b"\0")
        value = kind(bits) if kind is proton.decimal128 else kind(int.from_bytes(bits, "big"))
        got, want = from_proton(value), decode(bytes((code,)) + bits)[0]
        assert type(got) is decimal.Decimal and str(got) == str(want)
    assert from_proton(proton.ulong(3)) == 3 and type(from_proton(proton.ulong(3))) is proton.ulong


def test_positions_in_a_memoryview_are_positions_in_the_buffer():
    buf = memoryview(b"\x40" * 10 + b"\xc0\x04\x02\x41\x01\x40")
    with pytest.raises(MessageFormatError, match="byte 14"):
        decode(buf, 10)
    assert decode(buf, 3) == (None, 4)


@pytest.mark.parametrize("array", [
    proton.Array(proton.UNDESCRIBED, proton.Data.LIST, [1, "a"], [], [proton.symbol("s")]),
    proton.Array(proton.UNDESCRIBED, proton.Data.MAP, {"k": 1}, {}, {proton.symbol("x"): [2]}),
    proton.Array(proton.UNDESCRIBED, proton.Data.ARRAY,
                 proton.Array(proton.UNDESCRIBED, proton.Data.INT, 1, 2),
                 proton.Array(proton.UNDESCRIBED, proton.Data.INT)),
    proton.Array(proton.symbol("d"), proton.Data.LIST, [True]),
    proton.Array(proton.UNDESCRIBED, proton.Data.STRING, *["x" * 100] * 4),  # > 255 bytes
    proton.Array(proton.UNDESCRIBED, proton.Data.DECIMAL32, proton.decimal32(0x32800001)),
    proton.Array(proton.UNDESCRIBED, proton.Data.DECIMAL128, proton.decimal128(bytes(16))),
])
def test_compound_arrays_both_ways(array):
    want = typed(expected(array))
    assert typed(decode(proton_encode(array))[0]) == want
    ours = encode(array)
    assert typed(decode(ours)[0]) == want
    assert typed(proton_decode(ours)) == want
    assert skip(ours) == len(ours)
