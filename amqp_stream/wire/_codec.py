"""The AMQP 1.0 type system over bytes (sans-I/O): decode, skip and encode values.

Why a codec of our own: the broker's hot paths (storing, filtering and delivering messages) must
not build ``proton.Message`` objects (~75 µs each). Reading one section of a stored message, or
jumping over a section with its size field, costs a few µs here.

Strategy
- Every value starts with a one-byte constructor code. The code's high nibble says how the body
  is sized (AMQP 1.0 §1.6 / part 1 "Types"), which is all ``skip`` needs::

      0x4_  fixed, 0 bytes          0x5_  fixed, 1 byte         0x6_  fixed, 2 bytes
      0x7_  fixed, 4 bytes          0x8_  fixed, 8 bytes        0x9_  fixed, 16 bytes
      0xa_  variable: size:u8 | data           0xb_  variable: size:u32 | data
      0xc_  compound: size:u8 | count:u8 | ... (list8, map8)
      0xd_  compound: size:u32 | count:u32 | ...  (list32, map32)
      0xe_  array: size:u8 | count:u8 | constructor | element bodies ...
      0xf_  array: size:u32 | count:u32 | constructor | element bodies ...
      0x00  described: descriptor value | value

  (``size`` counts the bytes after the size field, count and constructor included.)
- Decoding dispatches on the constructor code through a 256-entry table of body readers; an
  array reads its element constructor once and calls the same body reader per element.
- Value representation (docs/DEVELOPING.md): null ``None``, boolean ``bool``, every integer width
  ``int``, float/double ``float``, decimal32/64/128 ``decimal.Decimal``, char ``proton.char``,
  timestamp ``proton.timestamp`` (ms), uuid ``uuid.UUID``, binary ``bytes``, string ``str``,
  symbol ``proton.symbol``, list and array ``list``, map ``dict``, described ``proton.Described``.
- Every malformed input raises ``MessageFormatError`` with the position where it went wrong;
  never another exception, never a hang (counts are bounded by the bytes that hold them).
- ``encode`` writes the smallest standard encoding of a value; proton's typed wrappers
  (``proton.ulong``, ``proton.int32``, ``proton.float32``, ``proton.Array`` ...) choose the AMQP
  type, plain ``int`` is a long, plain ``float`` a double, ``Decimal`` a decimal128; a value
  with no encoding (or one that does not fit its type) raises ``WireError``.
"""

from __future__ import annotations

import decimal
import struct
import uuid
from typing import Any, Callable

import proton

from amqp_stream.wire._errors import MessageFormatError, WireError

__all__ = ["decode", "decode_all", "skip", "encode", "encode_into", "encode_compound", "from_proton"]
# (shared inside amqp_stream.wire, not re-exported: the layouts, WIDTH, Bad, FAILURES,
# format_error, raw_decode, raw_skip, map_entries: the unchecked fast forms the walks build on)

# --- constructor codes -------------------------------------------------------------------------
DESCRIBED = 0x00
NULL = 0x40
TRUE = 0x41
FALSE = 0x42
UINT0 = 0x43
ULONG0 = 0x44
LIST0 = 0x45
UBYTE = 0x50
BYTE = 0x51
SMALLUINT = 0x52
SMALLULONG = 0x53
SMALLINT = 0x54
SMALLLONG = 0x55
BOOLEAN = 0x56
USHORT = 0x60
SHORT = 0x61
UINT = 0x70
INT = 0x71
FLOAT = 0x72
CHAR = 0x73
DECIMAL32 = 0x74
ULONG = 0x80
LONG = 0x81
DOUBLE = 0x82
TIMESTAMP = 0x83
DECIMAL64 = 0x84
DECIMAL128 = 0x94
UUID = 0x98
VBIN8 = 0xA0
STR8 = 0xA1
SYM8 = 0xA3
VBIN32 = 0xB0
STR32 = 0xB1
SYM32 = 0xB3
LIST8 = 0xC0
MAP8 = 0xC1
LIST32 = 0xD0
MAP32 = 0xD1
ARRAY8 = 0xE0
ARRAY32 = 0xF0

# --- byte layouts (big-endian, AMQP network order) ----------------------------------------------
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
F32 = struct.Struct(">f")
F64 = struct.Struct(">d")
SIZE_COUNT8 = struct.Struct(">BB")  # list8 / map8 / array8 header
SIZE_COUNT32 = struct.Struct(">II")  # list32 / map32 / array32 header
U64_PAIR = struct.Struct(">QQ")  # decimal128 as two halves

# IEEE 754-2008 decimals, Binary Integer Decimal encoding: (total bits, exponent bits, bias,
# largest canonical coefficient)
_DEC_LAYOUT = {
    DECIMAL32: (32, 8, 101, 10**7 - 1),
    DECIMAL64: (64, 10, 398, 10**16 - 1),
    DECIMAL128: (128, 14, 6176, 10**34 - 1),
}

_symbol = proton.symbol
_char = proton.char
_timestamp = proton.timestamp
_Described = proton.Described
_Decimal = decimal.Decimal
_UUID = uuid.UUID
_u16 = U16.unpack_from
_u32 = U32.unpack_from
_u64 = U64.unpack_from
_i8 = I8.unpack_from
_i16 = I16.unpack_from
_i32 = I32.unpack_from
_i64 = I64.unpack_from
_f32 = F32.unpack_from
_f64 = F64.unpack_from
_sc32 = SIZE_COUNT32.unpack_from


class Bad(Exception):
    """Internal: malformed input at ``pos`` (turned into MessageFormatError at the boundary)."""

    def __init__(self, reason: str, pos: int):
        self.reason = reason
        self.pos = pos


# --- decimals -----------------------------------------------------------------------------------
def _bid_to_decimal(bits: int, code: int) -> decimal.Decimal:
    width, ebits, bias, cmax = _DEC_LAYOUT[code]
    sign = bits >> (width - 1)
    comb = (bits >> (width - 6)) & 0x1F  # the 5 bits after the sign
    if comb == 0x1E:
        return _Decimal("-Infinity" if sign else "Infinity")
    if comb == 0x1F:
        snan = (bits >> (width - 7)) & 1
        return _Decimal(("-" if sign else "") + ("sNaN" if snan else "NaN"))
    tbits = width - 1 - ebits  # trailing coefficient bits in the "00/01/10" form
    if (bits >> (width - 3)) & 0x3 == 0x3:
        exp = (bits >> (tbits - 2)) & ((1 << ebits) - 1)
        coeff = (0x4 << (tbits - 2)) | (bits & ((1 << (tbits - 2)) - 1))
    else:
        exp = (bits >> tbits) & ((1 << ebits) - 1)
        coeff = bits & ((1 << tbits) - 1)
    if coeff > cmax:  # non-canonical: the value is zero
        coeff = 0
    return _Decimal((sign, tuple(int(d) for d in str(coeff)), exp - bias))


def _decimal_to_bid(value: decimal.Decimal, code: int) -> int:
    width, ebits, bias, cmax = _DEC_LAYOUT[code]
    sign, digits, exp = value.as_tuple()
    top = sign << (width - 1)
    if exp == "F":
        return top | (0x1E << (width - 6))
    if isinstance(exp, str):  # "n" (quiet NaN) or "N" (signalling)
        return top | (0x1F << (width - 6)) | ((1 if exp == "N" else 0) << (width - 7))
    coeff = int("".join(map(str, digits)) or "0")
    biased = exp + bias
    while coeff and coeff % 10 == 0 and biased < 0:
        coeff //= 10
        biased += 1
    while biased > (3 << (ebits - 2)) - 1 and coeff * 10 <= cmax:  # clamp a big exponent
        coeff *= 10
        biased -= 1
    if coeff > cmax or not 0 <= biased <= (3 << (ebits - 2)) - 1:
        raise WireError(f"{value} does not fit a {width}-bit decimal")
    tbits = width - 1 - ebits
    if coeff >> tbits:
        return top | (0x3 << (width - 3)) | (biased << (tbits - 2)) | (coeff & ((1 << (tbits - 2)) - 1))
    return top | (biased << tbits) | coeff


def from_proton(value: Any) -> Any:
    """``value`` in the representation ``decode`` gives: proton's decimal32/64/128 wrappers (which
    hold the raw IEEE 754 bits) become ``decimal.Decimal``; any other value is returned as is."""
    if isinstance(value, proton.decimal32):
        return _bid_to_decimal(int(value), DECIMAL32)
    if isinstance(value, proton.decimal64):
        return _bid_to_decimal(int(value), DECIMAL64)
    if isinstance(value, proton.decimal128):
        return _bid_to_decimal(int.from_bytes(bytes(value), "big"), DECIMAL128)
    return value


# --- decoding: one body reader per constructor --------------------------------------------------
# A reader takes (buf, pos) with pos just after the constructor and returns (value, end).
_READERS: list = [None] * 256
_ZERO_WIDTH = frozenset((NULL, TRUE, FALSE, UINT0, ULONG0, LIST0))


def _take(buf: Any, pos: int, n: int) -> int:
    end = pos + n
    if end > len(buf):
        raise Bad(f"value of {n} bytes runs past the end ({len(buf)})", pos)
    return end


def raw_decode(buf: Any, pos: int) -> tuple:
    reader = _READERS[buf[pos]]
    if reader is None:
        raise Bad(f"unknown constructor 0x{buf[pos]:02x}", pos)
    return reader(buf, pos + 1)


def _r_described(buf, pos):
    descriptor, pos = raw_decode(buf, pos)
    value, pos = raw_decode(buf, pos)
    return _Described(descriptor, value), pos


def _const(value):
    return lambda buf, pos: (value, pos)


def _r_ubyte(buf, pos):
    return buf[pos], pos + 1


def _r_byte(buf, pos):
    return _i8(buf, pos)[0], pos + 1


def _r_bool(buf, pos):
    b = buf[pos]
    if b > 1:
        raise Bad(f"boolean byte {b}", pos)
    return b == 1, pos + 1


def _fixed(unpack, size, wrap=None):
    if wrap is None:
        return lambda buf, pos: (unpack(buf, pos)[0], pos + size)
    return lambda buf, pos: (wrap(unpack(buf, pos)[0]), pos + size)


def _r_char(buf, pos):
    cp = _u32(buf, pos)[0]
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise Bad(f"char U+{cp:X} is not a Unicode scalar value", pos)
    return _char(chr(cp)), pos + 4


def _r_dec32(buf, pos):
    return _bid_to_decimal(_u32(buf, pos)[0], DECIMAL32), pos + 4


def _r_dec64(buf, pos):
    return _bid_to_decimal(_u64(buf, pos)[0], DECIMAL64), pos + 8


def _r_dec128(buf, pos):
    hi, lo = U64_PAIR.unpack_from(buf, pos)
    return _bid_to_decimal((hi << 64) | lo, DECIMAL128), pos + 16


def _r_uuid(buf, pos):
    end = _take(buf, pos, 16)
    return _UUID(bytes=bytes(buf[pos:end])), end


def _r_vbin8(buf, pos):
    start = pos + 1
    end = _take(buf, start, buf[pos])
    return bytes(buf[start:end]), end


def _r_vbin32(buf, pos):
    start = pos + 4
    end = _take(buf, start, _u32(buf, pos)[0])
    return bytes(buf[start:end]), end


def _r_str8(buf, pos):
    start = pos + 1
    end = _take(buf, start, buf[pos])
    return str(buf[start:end], "utf-8"), end


def _r_str32(buf, pos):
    start = pos + 4
    end = _take(buf, start, _u32(buf, pos)[0])
    return str(buf[start:end], "utf-8"), end


def _ascii_symbol(buf, start, end):
    raw = bytes(buf[start:end])
    if not raw.isascii():
        raise Bad("symbol is not ASCII", start)
    return _symbol(raw.decode("ascii"))


def _r_sym8(buf, pos):
    start = pos + 1
    end = _take(buf, start, buf[pos])
    return _ascii_symbol(buf, start, end), end


def _r_sym32(buf, pos):
    start = pos + 4
    end = _take(buf, start, _u32(buf, pos)[0])
    return _ascii_symbol(buf, start, end), end


def _items(buf, pos, end, count):
    """Decode ``count`` values that must exactly fill buf[pos:end].

    The common scalar encodings are decoded inline (this loop is the cost of reading a section).
    """
    if end > len(buf):
        raise Bad("compound value runs past the end", pos)
    if count > end - pos:
        raise Bad(f"count {count} cannot fit in {end - pos} bytes", pos)
    out: list[Any] = []
    append = out.append
    readers = _READERS
    for _ in range(count):
        c = buf[pos]
        if c == 0xA1:  # str8
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise Bad("string runs past its container", start)
            append(buf[start:pos].decode())
        elif c == 0xA3:  # sym8
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise Bad("symbol runs past its container", start)
            append(_symbol(buf[start:pos].decode("ascii")))
        elif c == 0x55 or c == 0x54 or c == 0x51:  # smalllong, smallint, byte
            v = buf[pos + 1]
            append(v - 256 if v > 127 else v)
            pos += 2
        elif c == 0x53 or c == 0x52 or c == 0x50:  # smallulong, smalluint, ubyte
            append(buf[pos + 1])
            pos += 2
        elif c == 0x40:
            append(None)
            pos += 1
        elif c == 0x41:
            append(True)
            pos += 1
        elif c == 0x42:
            append(False)
            pos += 1
        else:
            reader = readers[c]
            if reader is None:
                raise Bad(f"unknown constructor 0x{c:02x}", pos)
            value, pos = reader(buf, pos + 1)
            append(value)
    if pos != end:
        raise Bad(f"compound value ends at {pos}, its size says {end}", pos)
    return out


def _r_list8(buf, pos):
    return _items(buf, pos + 2, pos + 1 + buf[pos], buf[pos + 1]), pos + 1 + buf[pos]


def _r_list32(buf, pos):
    size, count = _sc32(buf, pos)
    end = pos + 4 + size
    return _items(buf, pos + 8, end, count), end


def map_entries(buf, pos, end, count):
    """Decode a map body of ``count`` items (keys and values) filling buf[pos:end] exactly.

    Keys and values of the common encodings are decoded inline: reading the application
    properties of a message is mostly this loop.
    """
    if end > len(buf):
        raise Bad("map runs past the end", pos)
    if count & 1:
        raise Bad("map with an odd number of items", pos)
    if count > end - pos:
        raise Bad(f"count {count} cannot fit in {end - pos} bytes", pos)
    out = {}
    readers = _READERS
    for _ in range(count >> 1):
        c = buf[pos]
        if c == 0xA1:  # str8 key (application properties)
            start = pos + 2
            pos = start + buf[pos + 1]
            key = buf[start:pos].decode()
        elif c == 0xA3:  # sym8 key (annotations)
            start = pos + 2
            pos = start + buf[pos + 1]
            key = _symbol(buf[start:pos].decode("ascii"))
        else:
            reader = readers[c]
            if reader is None:
                raise Bad(f"unknown constructor 0x{c:02x}", pos)
            key, pos = reader(buf, pos + 1)
        c = buf[pos]
        if c == 0xA1:
            start = pos + 2
            pos = start + buf[pos + 1]
            value = buf[start:pos].decode()
        elif c == 0x55 or c == 0x54 or c == 0x51:  # smalllong, smallint, byte
            value = buf[pos + 1]
            if value > 127:
                value -= 256
            pos += 2
        elif c == 0x41:
            value = True
            pos += 1
        elif c == 0x42:
            value = False
            pos += 1
        elif c == 0x82:
            value = _f64(buf, pos + 1)[0]
            pos += 9
        elif c == 0x81:
            value = _i64(buf, pos + 1)[0]
            pos += 9
        elif c == 0x71:
            value = _i32(buf, pos + 1)[0]
            pos += 5
        else:
            reader = readers[c]
            if reader is None:
                raise Bad(f"unknown constructor 0x{c:02x}", pos)
            value, pos = reader(buf, pos + 1)
        if pos > end:
            raise Bad("map entry runs past the map", pos)
        try:
            out[key] = value
        except TypeError:
            raise Bad("map key is not hashable", pos) from None
    if pos != end:
        raise Bad(f"map ends at {pos}, its size says {end}", pos)
    return out


def _r_map8(buf, pos):
    end = pos + 1 + buf[pos]
    return map_entries(buf, pos + 2, end, buf[pos + 1]), end


def _r_map32(buf, pos):
    size, count = _sc32(buf, pos)
    end = pos + 4 + size
    return map_entries(buf, pos + 8, end, count), end


def _array(buf, pos, end, count):
    if end > len(buf):
        raise Bad("array runs past the end", pos)
    descriptor = None
    described = buf[pos] == DESCRIBED
    if described:
        descriptor, pos = raw_decode(buf, pos + 1)
    code = buf[pos]
    reader = _READERS[code]
    if reader is None or code == DESCRIBED:
        raise Bad(f"bad array element constructor 0x{code:02x}", pos)
    pos += 1
    limit = len(buf) if code in _ZERO_WIDTH else end - pos
    if count > limit:
        raise Bad(f"array count {count} cannot fit", pos)
    out: list[Any] = []
    append = out.append
    for _ in range(count):
        value, pos = reader(buf, pos)
        append(_Described(descriptor, value) if described else value)
    if pos != end:
        raise Bad(f"array ends at {pos}, its size says {end}", pos)
    return out


def _r_array8(buf, pos):
    return _array(buf, pos + 2, pos + 1 + buf[pos], buf[pos + 1]), pos + 1 + buf[pos]


def _r_array32(buf, pos):
    size, count = _sc32(buf, pos)
    end = pos + 4 + size
    return _array(buf, pos + 8, end, count), end


for _code, _reader in {
    DESCRIBED: _r_described,
    NULL: _const(None), TRUE: _const(True), FALSE: _const(False),
    UINT0: _const(0), ULONG0: _const(0), LIST0: lambda buf, pos: ([], pos),
    UBYTE: _r_ubyte, SMALLUINT: _r_ubyte, SMALLULONG: _r_ubyte,
    BYTE: _r_byte, SMALLINT: _r_byte, SMALLLONG: _r_byte, BOOLEAN: _r_bool,
    USHORT: _fixed(_u16, 2), SHORT: _fixed(_i16, 2),
    UINT: _fixed(_u32, 4), INT: _fixed(_i32, 4), FLOAT: _fixed(_f32, 4), CHAR: _r_char,
    DECIMAL32: _r_dec32,
    ULONG: _fixed(_u64, 8), LONG: _fixed(_i64, 8), DOUBLE: _fixed(_f64, 8),
    TIMESTAMP: _fixed(_i64, 8, _timestamp), DECIMAL64: _r_dec64,
    DECIMAL128: _r_dec128, UUID: _r_uuid,
    VBIN8: _r_vbin8, STR8: _r_str8, SYM8: _r_sym8,
    VBIN32: _r_vbin32, STR32: _r_str32, SYM32: _r_sym32,
    LIST8: _r_list8, MAP8: _r_map8, LIST32: _r_list32, MAP32: _r_map32,
    ARRAY8: _r_array8, ARRAY32: _r_array32,
}.items():
    _READERS[_code] = _reader
del _code, _reader

FAILURES = (Bad, IndexError, struct.error, UnicodeDecodeError, RecursionError, ValueError)


def format_error(exc: BaseException, pos: int) -> MessageFormatError:
    if isinstance(exc, Bad):
        return MessageFormatError(f"{exc.reason} (at byte {exc.pos})")
    if isinstance(exc, UnicodeDecodeError):
        return MessageFormatError(f"invalid UTF-8 in a string (value at byte {pos})")
    if isinstance(exc, RecursionError):
        return MessageFormatError(f"values nested too deeply (value at byte {pos})")
    return MessageFormatError(f"truncated or malformed value (value at byte {pos})")


def decode(buf: Any, pos: int = 0) -> tuple[Any, int]:
    """Decode the value at ``buf[pos]``; return (value, position after it).

    ``buf`` is bytes, bytearray or a memoryview (only the value's own bytes are copied).
    Raises ``MessageFormatError``.
    """
    base = 0
    try:
        if type(buf) is bytes:
            return raw_decode(buf, pos)
        end = raw_skip(buf, pos)  # size fields only; then decode a copy of just this value
        base = pos
        value, used = raw_decode(bytes(buf[pos:end]), 0)
        return value, pos + used
    except FAILURES as exc:
        if isinstance(exc, Bad):
            exc.pos += base  # a position in the copy: make it a position in buf
        raise format_error(exc, pos) from None


def decode_all(buf: Any) -> list:
    """Decode a sequence of values filling ``buf`` exactly."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    out = []
    pos = 0
    while pos < len(buf):
        value, pos = decode(buf, pos)
        out.append(value)
    return out


# --- skipping -------------------------------------------------------------------------------------
# For each constructor: fixed body width, or -1 (u8 size), -4 (u32 size), None (unknown).
WIDTH: list = [None] * 256
for _code in range(256):
    if _READERS[_code] is not None and _code != DESCRIBED:
        WIDTH[_code] = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16, 0xA: -1, 0xB: -4,
                         0xC: -1, 0xD: -4, 0xE: -1, 0xF: -4}[_code >> 4]
del _code


def raw_skip(buf: Any, pos: int) -> int:
    code = buf[pos]
    width = WIDTH[code]
    if width is None:
        if code == DESCRIBED:
            return raw_skip(buf, raw_skip(buf, pos + 1))
        raise Bad(f"unknown constructor 0x{code:02x}", pos)
    if width == -1:
        end = pos + 2 + buf[pos + 1]
    elif width == -4:
        end = pos + 5 + _u32(buf, pos + 1)[0]
    else:
        end = pos + 1 + width
    if end > len(buf):
        raise Bad("value runs past the end", pos)
    return end


def skip(buf: Any, pos: int = 0) -> int:
    """The position just after the value at ``buf[pos]``, found from size fields only.

    The value's contents are not checked. Raises ``MessageFormatError``.
    """
    try:
        return raw_skip(buf, pos)
    except FAILURES as exc:
        raise format_error(exc, pos) from None


# --- encoding -------------------------------------------------------------------------------------
def _w_int(out: bytearray, v: int) -> None:
    if -128 <= v <= 127:
        out += b"\x55" + I8.pack(v)
    elif -(1 << 63) <= v < (1 << 63):
        out += b"\x81" + I64.pack(v)
    elif 0 <= v < (1 << 64):
        out += b"\x80" + U64.pack(v)
    else:
        raise WireError(f"integer {v} does not fit a long or ulong")


def _w_ulong(out, v):
    if v == 0:
        out.append(ULONG0)
    elif v < 256:
        out += bytes((SMALLULONG, v))
    else:
        out += b"\x80" + U64.pack(v)


def _w_uint(out, v):
    if v == 0:
        out.append(UINT0)
    elif v < 256:
        out += bytes((SMALLUINT, v))
    else:
        out += b"\x70" + U32.pack(v)


def _w_int32(out, v):
    if -128 <= v <= 127:
        out += b"\x54" + I8.pack(v)
    else:
        out += b"\x71" + I32.pack(v)


def _w_variable(code8: int, data: bytes, out: bytearray) -> None:
    if len(data) < 256:
        out += bytes((code8, len(data)))
    else:
        out += bytes((code8 + 0x10,)) + U32.pack(len(data))
    out += data


def _compound(out: bytearray, small: int, large: int, count: int, body: bytes | bytearray
              ) -> None:
    if len(body) + 1 < 256 and count < 256:
        out.append(small)
        out += SIZE_COUNT8.pack(len(body) + 1, count)
    else:
        out.append(large)
        out += SIZE_COUNT32.pack(len(body) + 4, count)
    out += body


def encode_compound(out: bytearray, kind: str, count: int, body: bytes | bytearray) -> None:
    """Append a list or map (``kind``) of ``count`` items whose encodings are ``body`` (a map
    counts keys and values): for callers that encode the items themselves."""
    if kind == "list":
        _compound(out, LIST8, LIST32, count, body)
    elif kind == "map":
        _compound(out, MAP8, MAP32, count, body)
    else:
        raise ValueError(f"kind is 'list' or 'map', not {kind!r}")


def _w_list(out, v):
    if not v:
        out.append(LIST0)
        return
    body = bytearray()
    for item in v:
        encode_into(body, item)
    _compound(out, LIST8, LIST32, len(v), body)


def _w_map(out, v):
    body = bytearray()
    for key, item in v.items():
        encode_into(body, key)
        encode_into(body, item)
    _compound(out, MAP8, MAP32, 2 * len(v), body)


def _e_list(out: bytearray, v: Any) -> None:
    """A list as an array element: size32 | count32 | items (the constructor is the array's)."""
    body = bytearray()
    for item in v:
        encode_into(body, item)
    out += SIZE_COUNT32.pack(len(body) + 4, len(v))
    out += body


def _e_map(out: bytearray, v: Any) -> None:
    body = bytearray()
    for key, item in v.items():
        encode_into(body, key)
        encode_into(body, item)
    out += SIZE_COUNT32.pack(len(body) + 4, 2 * len(v))
    out += body


def _e_array(out: bytearray, v: Any) -> None:
    inner = bytearray()
    _w_array(inner, v, wide=True)
    out += inner[1:]


def _e_decimal(code: int, width: int) -> Callable:
    def write(out: bytearray, v: Any) -> None:
        if isinstance(v, bytes):  # proton.decimal128 holds its 16 bytes
            out += v
        else:
            raw = _decimal_to_bid(v, code) if isinstance(v, decimal.Decimal) else int(v)
            out += raw.to_bytes(width, "big")
    return write


def _e_utf8(out: bytearray, v: Any, encoding: str = "utf-8") -> None:
    raw = v.encode(encoding)
    out += U32.pack(len(raw))
    out += raw


_D = proton.Data
#: proton.Array element type -> (element constructor, element body writer); arrays use the wide
#: (32-bit) form of variable-width and compound elements
_ARRAY_ELEMENTS: dict[int, tuple[int, Callable]] = {
    _D.NULL: (NULL, lambda out, v: None),
    _D.BOOL: (BOOLEAN, lambda out, v: out.append(1 if v else 0)),
    _D.UBYTE: (UBYTE, lambda out, v: out.append(v)),
    _D.BYTE: (BYTE, lambda out, v: out.extend(I8.pack(v))),
    _D.USHORT: (USHORT, lambda out, v: out.extend(U16.pack(v))),
    _D.SHORT: (SHORT, lambda out, v: out.extend(I16.pack(v))),
    _D.UINT: (UINT, lambda out, v: out.extend(U32.pack(v))),
    _D.INT: (INT, lambda out, v: out.extend(I32.pack(v))),
    _D.CHAR: (CHAR, lambda out, v: out.extend(U32.pack(ord(v)))),
    _D.FLOAT: (FLOAT, lambda out, v: out.extend(F32.pack(v))),
    _D.ULONG: (ULONG, lambda out, v: out.extend(U64.pack(v))),
    _D.LONG: (LONG, lambda out, v: out.extend(I64.pack(v))),
    _D.TIMESTAMP: (TIMESTAMP, lambda out, v: out.extend(I64.pack(v))),
    _D.DOUBLE: (DOUBLE, lambda out, v: out.extend(F64.pack(v))),
    _D.DECIMAL32: (DECIMAL32, _e_decimal(DECIMAL32, 4)),
    _D.DECIMAL64: (DECIMAL64, _e_decimal(DECIMAL64, 8)),
    _D.DECIMAL128: (DECIMAL128, _e_decimal(DECIMAL128, 16)),
    _D.UUID: (UUID, lambda out, v: out.extend(v.bytes)),
    _D.BINARY: (VBIN32, lambda out, v: out.extend(U32.pack(len(v)) + bytes(v))),
    _D.STRING: (STR32, _e_utf8),
    _D.SYMBOL: (SYM32, lambda out, v: _e_utf8(out, v, "ascii")),
    _D.LIST: (LIST32, _e_list),
    _D.MAP: (MAP32, _e_map),
    _D.ARRAY: (ARRAY32, _e_array),
}
del _D


def _w_array(out: bytearray, v: Any, wide: bool = False) -> None:
    entry = _ARRAY_ELEMENTS.get(v.type)
    if entry is None:
        raise WireError(f"cannot encode arrays of proton type {v.type}")
    code, writer = entry
    body = bytearray()
    if v.descriptor is not proton.UNDESCRIBED and v.descriptor is not None:
        body.append(DESCRIBED)
        encode_into(body, v.descriptor)
    body.append(code)
    for item in v.elements:
        writer(body, item)
    if not wide and len(body) + 1 < 256 and len(v.elements) < 256:
        out.append(ARRAY8)
        out += SIZE_COUNT8.pack(len(body) + 1, len(v.elements))
    else:
        out.append(ARRAY32)
        out += SIZE_COUNT32.pack(len(body) + 4, len(v.elements))
    out += body


def _w_described(out, v):
    out.append(DESCRIBED)
    encode_into(out, v.descriptor)
    encode_into(out, v.value)


_WRITERS: dict = {
    type(None): lambda out, v: out.append(NULL),
    bool: lambda out, v: out.append(TRUE if v else FALSE),
    int: _w_int,
    float: lambda out, v: out.extend(b"\x82" + F64.pack(v)),
    str: lambda out, v: _w_variable(STR8, v.encode("utf-8"), out),
    bytes: lambda out, v: _w_variable(VBIN8, v, out),
    bytearray: lambda out, v: _w_variable(VBIN8, bytes(v), out),
    memoryview: lambda out, v: _w_variable(VBIN8, bytes(v), out),
    list: _w_list,
    tuple: _w_list,
    dict: _w_map,
    uuid.UUID: lambda out, v: out.extend(b"\x98" + v.bytes),
    decimal.Decimal: lambda out, v: out.extend(b"\x94" + _decimal_to_bid(v, DECIMAL128).to_bytes(16, "big")),
    proton.symbol: lambda out, v: _w_variable(SYM8, v.encode("ascii"), out),
    proton.char: lambda out, v: out.extend(b"\x73" + U32.pack(ord(v))),
    proton.timestamp: lambda out, v: out.extend(b"\x83" + I64.pack(v)),
    proton.ulong: _w_ulong,
    proton.uint: _w_uint,
    proton.ushort: lambda out, v: out.extend(b"\x60" + U16.pack(v)),
    proton.ubyte: lambda out, v: out.extend(b"\x50" + U8.pack(v)),
    proton.byte: lambda out, v: out.extend(b"\x51" + I8.pack(v)),
    proton.short: lambda out, v: out.extend(b"\x61" + I16.pack(v)),
    proton.int32: _w_int32,
    proton.float32: lambda out, v: out.extend(b"\x72" + F32.pack(v)),
    proton.decimal32: lambda out, v: out.extend(b"\x74" + U32.pack(v)),
    proton.decimal64: lambda out, v: out.extend(b"\x84" + U64.pack(v)),
    proton.decimal128: lambda out, v: out.extend(b"\x94" + bytes(v)),
    proton.Described: _w_described,
    proton.Array: _w_array,
    proton.PropertyDict: _w_map,
    proton.AnnotationDict: _w_map,
    proton.SymbolList: _w_list,
}


def encode_into(out: bytearray, value: Any) -> None:
    """Append the AMQP encoding of ``value`` to ``out``. Raises ``WireError`` for what has none."""
    writer = _WRITERS.get(type(value))
    if writer is None:
        for kind, candidate in _WRITERS.items():
            if isinstance(value, kind) and kind is not bool:
                writer = candidate
                break
        else:
            raise WireError(f"no AMQP encoding for {type(value).__name__}")
    try:
        writer(out, value)
    except (struct.error, UnicodeEncodeError) as exc:
        raise WireError(f"{value!r} does not fit its AMQP type: {exc}") from None


def encode(value: Any) -> bytes:
    """The AMQP encoding of one value (smallest standard form)."""
    out = bytearray()
    encode_into(out, value)
    return bytes(out)
