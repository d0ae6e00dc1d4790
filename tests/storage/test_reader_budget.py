"""Sliced stage-1 scans: ``read_chunk(max_skips=N)`` pauses after N chunks passed over, keeps its
place, and reads exactly what an unsliced scan reads (same records, same stats, same bytes)."""

from __future__ import annotations

import pytest

from storage import SCAN_PAUSED, OffsetSpec, Stream, StreamConfig, open_reader


def _write(directory, values: list[str | None]) -> None:
    """One record per chunk (max_chunk_entries=1), rolling over every 300 chunks."""
    cfg = StreamConfig(fsync="never", max_chunk_entries=1, max_segment_chunks=300)
    with Stream.open(directory, cfg) as s:
        s.append_batch([f"r{i}".encode() for i in range(len(values))], values)
        s.flush()


def _drain(reader, budget):
    """Every chunk's records, and how many times the reader paused."""
    records, pauses = [], 0
    while True:
        chunk = reader.read_chunk(budget) if budget else reader.read_chunk()
        if chunk is None:
            return records, pauses
        if chunk is SCAN_PAUSED:
            pauses += 1
            continue
        records.extend(chunk.records)


@pytest.mark.parametrize("in_process", [True, False])
def test_budget_pauses_and_reads_the_same_records_and_bytes(tmp_path, in_process):
    values = ["miss"] * 1000 + ["hit"] + ["miss"] * 700 + [None] + ["miss"] * 50 + ["hit"]
    d = tmp_path / "s"
    _write(d, values)

    def reader():
        if in_process:
            s = Stream.open(d, StreamConfig(fsync="never"))
            return s, s.reader(OffsetSpec.first(), ["hit"])
        return None, open_reader(str(d), OffsetSpec.first(), ["hit"])

    s, whole = reader()
    want, pauses = _drain(whole, None)
    assert pauses == 0
    assert want == [(1000, b"r1000"), (1752, b"r1752")]
    if s:
        s.close()
    for budget in (1, 7, 64, 1000):
        s, sliced = reader()
        got, pauses = _drain(sliced, budget)
        assert got == want
        # 1751 chunks passed over; a pause after every ``budget`` of them
        assert pauses >= 1751 // budget - 2
        assert sliced.stats == whole.stats  # nothing read twice, nothing extra
        assert sliced.position == whole.position == len(values)
        sliced.close()
        if s:
            s.close()


def test_a_paused_reader_goes_on_from_its_place_across_appends(tmp_path):
    d = tmp_path / "s"
    with Stream.open(d, StreamConfig(fsync="never", max_chunk_entries=1)) as s:
        s.append_batch([b"x"] * 500, ["miss"] * 500)
        s.flush()
        r = s.reader(OffsetSpec.first(), ["hit"])
        assert r.read_chunk(100) is SCAN_PAUSED
        assert r.position == 100
        s.append(b"found", "hit")
        s.flush()
        got = _drain(r, 100)
        assert got[0] == [(500, b"found")]
        assert r.stats.chunks_skipped == 500
        r.close()


def test_budget_below_one_is_refused(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        with pytest.raises(ValueError):
            s.reader(OffsetSpec.first(), ["a"]).read_chunk(0)
