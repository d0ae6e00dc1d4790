"""A stream directory in RabbitMQ's layout (the byte-built fixture) reads back as expected."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from storage import OffsetSpec, Stream, StreamConfig, open_reader

HERE = os.path.dirname(__file__)
FIXTURE = os.path.join(HERE, "fixtures", "rabbitmq")
with open(os.path.join(HERE, "fixtures", "rabbitmq.expected.json")) as _f:
    EXPECTED = json.load(_f)
RECORDS = [(r["offset"], bytes.fromhex(r["body_hex"])) for r in EXPECTED["records"]]
VALUES = {r["offset"]: r["filter_value"] for r in EXPECTED["records"]}


def _read(spec, values=(), match_unfiltered=False, directory=FIXTURE):
    with open_reader(directory, spec, values, match_unfiltered) as r:
        chunks = list(r)
        return chunks, r.stats


def test_all_user_records_in_order_tracking_chunks_skipped():
    chunks, stats = _read(OffsetSpec.first())
    got = [(o, bytes(b)) for c in chunks for o, b in c.records]
    assert got == RECORDS
    assert [c.chunk_id for c in chunks] == [0, 3, 7, 12, 14]
    assert stats.chunks_read == 5 and stats.chunks_skipped == 0


@pytest.mark.parametrize("values,unfiltered", [(["banana"], False), (["apple"], False),
                                               (["pineapple"], False), (["apple", "pineapple"], False),
                                               (["nothing-has-this"], True), (["banana"], True)])
def test_stage1_returns_whole_chunks_holding_a_wanted_value(values, unfiltered):
    chunks, stats = _read(OffsetSpec.first(), values, unfiltered)
    got = {c.chunk_id for c in chunks}
    by_chunk: dict[int, set] = {}
    for chunk in EXPECTED["chunks"]:
        if chunk["type"] == 0:
            by_chunk[chunk["chunk_id"]] = {VALUES[o] for o in range(chunk["chunk_id"],
                                                                     chunk["chunk_id"] + chunk["records"])}
    must = {cid for cid, vals in by_chunk.items()
            if vals & set(values) or (unfiltered and None in vals)}
    assert must <= got  # never a false negative
    # the fixture's RabbitMQ filters have no false positives for these values
    assert got == must
    assert stats.chunks_skipped == len(by_chunk) - len(got)


def test_offset_specs_on_the_fixture():
    first = lambda spec: [(c.chunk_id, c.records[0][0]) for c in _read(spec)[0]][:1]  # noqa: E731
    assert first(OffsetSpec.offset(2)) == [(3, 3)]  # offset 2 is the tracking chunk
    assert first(OffsetSpec.offset(5)) == [(3, 5)]  # records below 5 dropped
    assert first(OffsetSpec.offset(9)) == [(7, 9)]  # second segment, by file name
    assert first(OffsetSpec.offset(15)) == []  # beyond the end: next
    assert first(OffsetSpec.last()) == [(14, 14)]
    assert first(OffsetSpec.next()) == []
    t0 = 1_700_000_000_000
    assert first(OffsetSpec.timestamp(t0 - 1)) == [(0, 0)]  # before the start: first
    assert first(OffsetSpec.timestamp(t0 + 3000)) == [(7, 7)]
    assert first(OffsetSpec.timestamp(t0 + 3500)) == [(12, 12)]  # snapshot at +4000 skipped
    assert first(OffsetSpec.timestamp(t0 + 60_000)) == []  # after the end: next


def test_stream_opens_a_rabbitmq_directory_unchanged_and_appends_after_it(tmp_path):
    d = tmp_path / "s"
    shutil.copytree(FIXTURE, d)
    before = {n: (d / n).read_bytes() for n in os.listdir(d)}
    with Stream.open(d, StreamConfig(fsync="always")) as s:
        assert {n: (d / n).read_bytes() for n in os.listdir(d) if n != ".writer.lock"} == before
        assert (s.first_offset, s.next_offset) == (0, EXPECTED["next_offset"])
        off = s.append(b"ours", "banana")
        s.flush()
        assert off == 15
        with s.reader(OffsetSpec.offset(14)) as r:
            assert [rec for c in r for rec in c.records] == [(14, RECORDS[-1][1]), (15, b"ours")]


RAW_LEN_FIXTURE = os.path.join(HERE, "fixtures", "rabbitmq_raw_len")


def test_uncompressed_subbatch_whose_length_field_differs_is_served(tmp_path):
    """RabbitMQ checks a sub-batch's uncompressed-length field only when it decompresses; an
    uncompressed sub-batch whose field says 0 (chunk 0) or 1000 (chunk 3) is served by it, and
    by us: the CRC covers the bytes. Through files alone and through an opened stream."""
    want = [(0, b"\x00\x53\x75\xa0\x05raw-0"), (1, b"\x00\x53\x75\xa0\x05raw-1"),
            (2, b"\x00\x53\x75\xa0\x05after"), (3, b"\x00\x53\x77\xa1\x05three")]
    chunks, _ = _read(OffsetSpec.first(), directory=RAW_LEN_FIXTURE)
    assert [(o, bytes(b)) for c in chunks for o, b in c.records] == want
    d = tmp_path / "s"
    shutil.copytree(RAW_LEN_FIXTURE, d)
    with Stream.open(d, StreamConfig()) as s:
        assert s.next_offset == 4
        with s.reader(OffsetSpec.offset(1)) as r:
            assert [(o, bytes(b)) for c in r for o, b in c.records] == want[1:]
