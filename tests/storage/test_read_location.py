"""``Reader.read_location``: where a chunk's header and data lie, for senders that use
``os.sendfile``; the same chunks, offsets and stage-1 decisions as ``read_chunk``."""

from __future__ import annotations

import os
import zlib

from storage import SCAN_PAUSED, ChunkLocation, OffsetSpec, Stream, StreamConfig
from storage.format import CHUNK_HEADER, decode_records


def _fill(directory, **config):
    s = Stream.open(directory, StreamConfig(**config))
    s.append_batch([b"a%d" % i for i in range(10)], ["red"] * 10)
    s.flush()
    s.append_batch([b"b%d" % i for i in range(5)], ["blue"] * 5)
    s.flush()
    s.append_batch([b"c%d" % i for i in range(7)], [None] * 7)
    s.flush()
    return s


def _locations(reader, **kw):
    out = []
    while True:
        loc = reader.read_location(**kw)
        if loc is None:
            return out
        if loc is SCAN_PAUSED:
            continue
        data = os.pread(loc.fd, loc.length, loc.position)  # before the next call
        out.append((loc, data))


def test_locations_give_the_stored_header_and_data(tmp_path):
    with _fill(tmp_path / "s") as s:
        with s.reader(OffsetSpec.first()) as r:
            located = _locations(r)
        with s.reader(OffsetSpec.first()) as r:
            chunks = list(r)
    assert [loc.chunk_id for loc, _ in located] == [c.chunk_id for c in chunks] == [0, 10, 15]
    for (loc, data), chunk in zip(located, chunks, strict=True):
        assert isinstance(loc, ChunkLocation)
        h = CHUNK_HEADER.unpack(loc.header)
        assert (h[2], h[3], h[6], h[7], h[8]) == (loc.entries, loc.records, loc.chunk_id,
                                                  loc.crc, loc.length)
        assert zlib.crc32(data) == loc.crc
        assert decode_records(data, loc.chunk_id) == chunk.records
        assert loc.next_offset == chunk.next_offset


def test_stage1_skips_the_same_chunks_as_read_chunk(tmp_path):
    with _fill(tmp_path / "s") as s:
        with s.reader(OffsetSpec.first(), ["blue"]) as r:
            located = _locations(r, max_skips=1)
            assert r.stats.chunks_skipped == 2 and r.position == 22
    assert [loc.chunk_id for loc, _ in located] == [10]
    with _fill(tmp_path / "t") as s, s.reader(OffsetSpec.first(), ["blue"], True) as r:
        assert [loc.chunk_id for loc, _ in _locations(r)] == [10, 15]


def test_a_start_inside_a_chunk_gives_the_whole_chunk_and_skips_earlier_ones(tmp_path):
    with _fill(tmp_path / "s") as s:
        with s.reader(OffsetSpec.offset(12)) as r:
            located = _locations(r)
        with s.reader(OffsetSpec.offset(15)) as r:
            from_15 = _locations(r)
        with s.reader(OffsetSpec.next()) as r:
            assert r.read_location() is None
            s.append(b"late")
            s.flush()
            late = r.read_location()
    assert [loc.chunk_id for loc, _ in located] == [10, 15]
    assert located[0][0].records == 5  # offsets 10..11 are the receiver's to drop
    assert [loc.chunk_id for loc, _ in from_15] == [15]
    assert late.chunk_id == 22 and late.records == 1


def test_committed_chunk_id_follows_commits_and_survives_a_reopen(tmp_path):
    s = Stream.open(tmp_path / "s", StreamConfig(max_segment_bytes=300))
    assert s.committed_chunk_id == -1
    ids = []
    for n in (3, 1, 4, 2):  # small segments: several rollovers
        ids.append(s.append_batch([b"x" * 50] * n))
        s.flush()
        assert s.committed_chunk_id == ids[-1]
    s.close()
    with Stream.open(tmp_path / "s") as again:
        assert again.committed_chunk_id == ids[-1] == 8
        assert len(again.segment_starts()) > 1
