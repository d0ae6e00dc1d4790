"""Sub-entry batches appended as they came (a stream client's Publish): one entry, many records
and offsets; readers open them; offsets, record counts and recovery agree."""

from __future__ import annotations

import gzip

import pytest

from storage import OffsetSpec, StorageError, Stream, StreamConfig
from storage.format import SubBatchEntry, encode_entries


def gz_entry(bodies: list[bytes]) -> SubBatchEntry:
    raw = encode_entries(bodies)
    return SubBatchEntry(1, len(bodies), len(raw), gzip.compress(raw))


def records(stream) -> list[tuple[int, bytes]]:
    with stream.reader(OffsetSpec.first()) as r:
        return [(o, bytes(b)) for c in r for o, b in c.records]


def test_entries_take_their_records_offsets(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig()) as s:
        assert s.append_batch([b"a"]) == 0
        s.flush()
        plain = encode_entries([b"p0", b"p1"])
        items = [b"b", gz_entry([b"g0", b"g1", b"g2"]), SubBatchEntry(0, 2, len(plain), plain),
                 b"c"]
        first = s.append_batch(items, ["x", None, None, "y"], records=7)
        assert first == 1
        s.flush()
        assert s.append_batch([b"d"]) == 8  # offsets go on after the records
        s.flush()
        assert s.next_offset == 9 and s.committed_chunk_id == 8
        got = records(s)
        with s.reader(OffsetSpec.first()) as r:
            loc = [r.read_location() for _ in range(3)]
    assert got == [(0, b"a"), (1, b"b"), (2, b"g0"), (3, b"g1"), (4, b"g2"), (5, b"p0"),
                   (6, b"p1"), (7, b"c"), (8, b"d")]
    assert [(c.chunk_id, c.entries, c.records) for c in loc] == [(0, 1, 1), (1, 4, 7), (8, 1, 1)]
    with Stream.open(tmp_path / "s") as again:  # recovery reads the same log
        assert again.next_offset == 9 and records(again) == got
        assert again.append_batch([b"e"]) == 9


def test_stage1_values_of_the_items(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig()) as s:
        s.append_batch([gz_entry([b"r0", b"r1"]), b"v"], [None, "blue"], records=3)
        s.flush()
        with s.reader(OffsetSpec.first(), ["blue"]) as r:
            assert [o for c in r for o, _ in c.records] == [0, 1, 2]
        with s.reader(OffsetSpec.first(), ["red"]) as r:
            assert list(r) == []


def test_a_wrong_record_count_is_refused(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig()) as s:
        with pytest.raises(StorageError):
            s.append_batch([gz_entry([b"a", b"b"])], records=3)
        assert s.append_batch([b"ok"]) == 0


def test_values_stay_with_their_bodies_after_a_batch_without_values(tmp_path):
    """A sub-batch entry appended with no filter values takes one value slot (None) per body,
    not per record: the next append's values, written in the same chunk, stay with their
    bodies (one slot per record shifted them: "blue" fell off the Bloom filter)."""
    import threading
    release = threading.Event()
    with Stream.open(tmp_path / "s", StreamConfig(filter_size=16)) as s:
        # the writer thread runs this callback: while it waits, what follows queues up and
        # is taken in one batch
        s.append_batch([b"first"], on_durable=lambda o, e: release.wait(10))
        s.append_batch([gz_entry([b"r0", b"r1", b"r2"])], None, records=3)
        s.append_batch([b"x"], ["blue"])
        release.set()
        s.flush(10)
        with s.reader(OffsetSpec.first(), ["blue"]) as r:
            assert (4, b"x") in [(o, bytes(b)) for c in r for o, b in c.records]
