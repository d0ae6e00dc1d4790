"""storage.format: layouts pinned by the byte-built fixtures, codecs round-tripped by hypothesis."""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import format as fmt
from storage.errors import CorruptionError

_HB = fmt.CHUNK_HEADER_BYTES
_DATA0 = fmt.SEGMENT_HEADER_BYTES + _HB + 16  # data of the fixture's first chunk (16-byte filter)

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "rabbitmq")


def _fixture(name: str) -> bytes:
    with open(os.path.join(FIXTURE, name), "rb") as f:
        return f.read()


def test_struct_sizes_match_the_spec():
    assert fmt.CHUNK_HEADER.size == fmt.CHUNK_HEADER_BYTES == 48  # the spec's header size
    assert fmt.INDEX_RECORD.size == 29
    assert fmt.SUBBATCH_HEADER.size == 11
    assert fmt.SEGMENT_HEADER.size == fmt.INDEX_HEADER.size == 8
    assert fmt.segment_header() == b"OSIL\x00\x00\x00\x01"
    assert fmt.index_header() == b"OSII\x00\x00\x00\x01"


def test_file_names_are_20_digits_and_sort_numerically():
    assert fmt.segment_name(0) == "00000000000000000000.segment"
    assert fmt.index_name(1234) == "00000000000000001234.index"
    assert fmt.parse_file_name("00000000000000001234.index") == (1234, "index")
    assert fmt.parse_file_name("1234.index") is None
    assert fmt.parse_file_name("00000000000000001234.segment.tmp") is None
    names = [fmt.segment_name(n) for n in (10, 9, 100, 2**63)]
    assert sorted(names) == [fmt.segment_name(n) for n in (9, 10, 100, 2**63)]


def test_encoder_reproduces_the_fixture_chunk_byte_for_byte():
    """Chunk 0 of the fixture was built by hand from the spec; our encoder must agree."""
    seg = _fixture("00000000000000000000.segment")
    b0 = b"\x00\x53\x77\xa1\x05hello"
    b1 = b"\x00\x53\x75\xa0\x0cbanana split"
    bits = bytes.fromhex("80000100000000000000020000000000")
    data = fmt.encode_entries([b0, b1])
    raw = b"".join(fmt.encode_chunk(0, 1_700_000_000_000, data, 2, 2, filter_bits=bits,
                                    filter_scheme=0))
    assert seg[:8] == fmt.segment_header()
    assert seg[8:8 + len(raw)] == raw
    idx = _fixture("00000000000000000000.index")
    assert idx[8:37] == fmt.encode_index_record(0, 1_700_000_000_000, 1, 8, 0)


def test_fixture_headers_decode_to_the_spec_fields():
    seg = _fixture("00000000000000000000.segment")
    h = fmt.decode_header(seg, 8)
    assert seg[8] == 0x50
    assert (h.type, h.entries, h.records, h.epoch, h.chunk_id) == (0, 2, 2, 1, 0)
    assert (h.filter_size, h.filter_scheme, h.filter_param) == (16, 0, 0)
    data = seg[_DATA0:_DATA0 + h.data_length]
    assert zlib.crc32(data) == h.crc
    recs = fmt.decode_records(data, h.chunk_id)
    assert [o for o, _ in recs] == [0, 1]
    # the tracking delta chunk that follows consumes offset 2
    t = fmt.decode_header(seg, 8 + h.size)
    assert (t.type, t.chunk_id, t.records) == (fmt.CHUNK_TRACKING_DELTA, 2, 1)


def test_tracking_records_of_the_fixture():
    seg = _fixture("00000000000000000007.segment")
    pos = fmt.SEGMENT_HEADER_BYTES
    h = fmt.decode_header(seg, pos)
    pos += h.size
    snap = fmt.decode_header(seg, pos)
    assert snap.type == fmt.CHUNK_TRACKING_SNAPSHOT
    data = seg[pos + _HB: pos + _HB + snap.data_length]
    (length,) = struct.unpack(">I", data[:4])
    recs = fmt.decode_tracking(data[4:4 + length], snapshot=True)
    assert recs == [fmt.TrackingRecord(0, b"p1", 7, 3), fmt.TrackingRecord(1, b"c1", 5)]
    # trailer of chunk 3 in segment 0: publisher p1, sequence 7
    seg0 = _fixture("00000000000000000000.segment")
    p = 8
    for _ in range(2):
        p += fmt.decode_header(seg0, p).size
    c3 = fmt.decode_header(seg0, p)
    trailer = seg0[p + c3.size - c3.trailer_length: p + c3.size]
    assert fmt.decode_tracking(trailer) == [fmt.TrackingRecord(0, b"p1", 7)]


def test_bad_magic_and_short_header_raise_corruption_naming_the_place():
    buf = bytearray(b"".join(fmt.encode_chunk(5, 1, fmt.encode_entries([b"x"]), 1, 1)))
    buf[0] = 0x51
    with pytest.raises(CorruptionError) as ei:
        fmt.decode_header(bytes(buf), path="seg", position=1234)
    assert ei.value.path == "seg" and ei.value.position == 1234
    with pytest.raises(CorruptionError):
        fmt.decode_header(b"\x50" * 20)


def test_header_fields_outside_the_crc_are_checked_for_consistency():
    """The CRC covers only the data: a flipped type byte must not turn a user chunk into a
    tracking chunk that readers would skip silently."""
    raw = bytearray(b"".join(fmt.encode_chunk(5, 1, fmt.encode_entries([b"a", b"b"]), 2, 2)))
    raw[1] = 1
    with pytest.raises(CorruptionError):
        fmt.decode_header(bytes(raw))
    raw[1], raw[2], raw[3] = 0, 0, 0  # zero entries
    with pytest.raises(CorruptionError):
        fmt.decode_header(bytes(raw))


def test_entries_overrunning_the_section_raise():
    data = fmt.encode_entries([b"abc", b"defg"])
    with pytest.raises(CorruptionError):
        fmt.decode_records(data[:-1], 0)
    with pytest.raises(CorruptionError):
        fmt.decode_records(data + b"\x00", 0)


_bodies = st.lists(st.binary(max_size=300), min_size=1, max_size=20)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 0, 1, 3, 4]), _bodies), min_size=1, max_size=6),
       st.integers(0, 2**40))
def test_entries_and_subbatches_round_trip(groups, chunk_id):
    parts, expected = [], []
    for compression, bodies in groups:
        if compression is None:
            parts.append(fmt.encode_entries(bodies))
        else:
            parts.append(fmt.encode_subbatch(bodies, compression))
        expected.extend(bodies)
    data = b"".join(parts)
    got = fmt.decode_records(data, chunk_id)
    assert [bytes(b) for _, b in got] == expected
    assert [o for o, _ in got] == list(range(chunk_id, chunk_id + len(expected)))


@settings(max_examples=80, deadline=None)
@given(chunk_id=st.integers(0, 2**64 - 1), ts=st.integers(-2**63, 2**63 - 1),
       epoch=st.integers(0, 2**64 - 1), ctype=st.integers(0, 2), bodies=_bodies,
       bits=st.one_of(st.just(b""), st.binary(min_size=16, max_size=255)),
       scheme=st.integers(0, 255), param=st.integers(0, 255), trailer=st.binary(max_size=40))
def test_chunk_header_round_trips(chunk_id, ts, epoch, ctype, bodies, bits, scheme, param, trailer):
    if ctype != 0:
        bodies = bodies[:1]  # a tracking chunk holds one entry, one record
    data = fmt.encode_entries(bodies)
    raw = b"".join(fmt.encode_chunk(chunk_id, ts, data, len(bodies), len(bodies), chunk_type=ctype,
                                    epoch=epoch, filter_bits=bits, filter_scheme=scheme,
                                    filter_param=param, trailer=trailer))
    h = fmt.decode_header(raw)
    assert (h.chunk_id, h.timestamp, h.epoch, h.type) == (chunk_id, ts, epoch, ctype)
    assert h.size == len(raw)
    assert (h.filter_size, raw[_HB:_HB + h.filter_size]) == (len(bits), bits)
    assert (h.filter_scheme, h.filter_param) == ((scheme, param) if bits else (0, 0))
    assert raw[47] == 0
    assert h.crc == zlib.crc32(data)
    assert raw[_HB + len(bits): _HB + len(bits) + h.data_length] == data


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 1000))
def test_decoding_garbage_raises_corruption_or_returns(garbage, chunk_id):
    """A parser fuzz: any bytes either decode or raise CorruptionError/StorageError."""
    from storage.errors import StorageError
    try:
        fmt.decode_records(garbage, chunk_id)
    except StorageError:
        pass
    try:
        fmt.decode_header(garbage)
    except CorruptionError:
        pass


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 40), st.integers(1, 30), st.integers(0, 29), st.integers(0, 3),
       st.integers(0, 255))
def test_same_length_fast_path_agrees_with_the_general_decoder(length, n, which, byte, value):
    """Same-sized entries take a fast path; one differing header byte must fall back."""
    bodies = [bytes([i % 256]) * length for i in range(n)]
    data = bytearray(fmt.encode_entries(bodies))
    want = list(zip(range(7, 7 + n), bodies, strict=True))
    assert fmt.decode_records(bytes(data), 7, entries=n) == want
    k = which % n
    data[k * (length + 4) + byte] = value
    from storage.errors import StorageError
    try:
        slow = fmt.decode_records(bytes(data), 7)
    except StorageError:
        slow = "error"
    try:
        fast = fmt.decode_records(bytes(data), 7, entries=n)
    except StorageError:
        fast = "error"
    assert fast == slow
