"""Consumer offsets and publisher sequences stored in the stream (``storage.tracking``): the
API, the bytes on disk checked against design/storage-format.md spelled out by hand, recovery
at open, retention keeping the state, readers skipping tracking chunks, RabbitMQ's directory."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time

import pytest

from storage import OffsetSpec, Stream, StreamConfig, open_reader
from storage.errors import StorageError, StreamClosedError
from storage.format import SubBatchEntry, encode_entries
from storage.files import index_path, list_files, read_index_records, segment_path
from storage.tracking import chunk_tracking
from storage.walk import walk_segment

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "rabbitmq")
HEADER = struct.Struct(">BBHIqQQIIIBBBx")  # storage-format.md, "Chunk", spelled out again


def chunks(d) -> list[tuple[int, int, object, bytes, bytes]]:
    """Every chunk of the directory: (segment start, position, header fields, data, trailer)."""
    out = []
    segments, _ = list_files(str(d))
    for start in segments:
        raw = open(segment_path(str(d), start), "rb").read()
        pos = 8
        while pos < len(raw):
            f = HEADER.unpack_from(raw, pos)
            fsize, dlen, tlen = f[10], f[8], f[9]
            data_at = pos + 48 + fsize
            out.append((start, pos, f, raw[data_at:data_at + dlen],
                        raw[data_at + dlen:data_at + dlen + tlen]))
            pos = data_at + dlen + tlen
    return out


def test_offsets_and_sequences_round_trip_and_survive_reopen(tmp_path):
    cfg = StreamConfig(fsync="never")
    with Stream.open(tmp_path, cfg) as s:
        assert s.query_offset("c1") is None and s.query_sequence("p1") == 0
        s.append_batch([b"a", b"b"], writer=("p1", 2))
        s.store_offset("c1", 1)
        s.store_offset("c2", 0)
        s.store_offset("c1", 7)  # the latest wins
        s.append_batch([b"c"], writer=("p1", 5))
        s.append_batch([b"d"], writer=(b"p2", 1))
        assert (s.query_offset("c1"), s.query_offset(b"c2")) == (7, 0)  # at once, before a flush
        assert (s.query_sequence("p1"), s.query_sequence("p2")) == (5, 1)
        s.flush()
    with Stream.open(tmp_path, cfg) as s:
        assert (s.query_offset("c1"), s.query_offset("c2"), s.query_offset("c3")) == (7, 0, None)
        assert (s.query_sequence("p1"), s.query_sequence("p2"), s.query_sequence("p3")) == (5, 1, 0)
        assert s.tracking() == ({b"c1": 7, b"c2": 0}, {b"p1": 5, b"p2": 1})


def test_a_publishing_id_not_above_the_last_is_refused_and_nothing_is_queued(tmp_path):
    with Stream.open(tmp_path, StreamConfig(fsync="never")) as s:
        s.append_batch([b"a"], writer=("p", 3))
        nxt = s._writer.next
        for seq in (3, 2):
            with pytest.raises(StorageError, match="not above"):
                s.append_batch([b"dup"], writer=("p", seq))
        assert s._writer.next == nxt and s.query_sequence("p") == 3
        s.append_batch([b"b"], writer=("p", 4))
        s.flush()
        with open_reader(str(tmp_path), OffsetSpec.first()) as r:
            assert [bytes(b) for c in r for _, b in c.records] == [b"a", b"b"]


@pytest.mark.parametrize("call", [
    lambda s: s.store_offset("", 1),
    lambda s: s.store_offset("x" * 256, 1),
    lambda s: s.store_offset("c", -1),
    lambda s: s.store_offset("c", 1 << 64),
    lambda s: s.store_offset("c", "5"),
    lambda s: s.query_offset(b""),
    lambda s: s.append_batch([b"a"], writer=("p", -1)),
    lambda s: s.append_batch([], writer=("p", 1)),
    lambda s: s.append_batch([b"a"] * 9, writer=("p", 1)),  # more than one chunk holds
    lambda s: s.append_batch([b"a" * 60, b"b" * 60], writer=("p", 1)),  # > max_chunk_bytes
])
def test_bad_tracking_input_is_a_clear_error(tmp_path, call):
    with Stream.open(tmp_path, StreamConfig(fsync="never", max_chunk_entries=8,
                                            max_chunk_bytes=100)) as s:
        with pytest.raises(StorageError):
            call(s)
        assert s.tracking() == ({}, {})


def test_bytes_on_disk_follow_the_layouts(tmp_path):
    """A delta chunk, a trailer and a snapshot, checked against storage-format.md by hand."""
    cfg = StreamConfig(fsync="never", max_segment_chunks=3, filter_size=0)
    with Stream.open(tmp_path, cfg) as s:
        s.append_batch([b"m1", b"m2"], writer=("pub", 258))  # offsets 0, 1
        s.flush()
        s.store_offset("cons", 1)  # delta at offset 2
        s.flush()
        s.append(b"m3")  # 3: third chunk, the segment is full
        s.flush()
        s.append(b"m4")  # snapshot at 4 opens the new segment, then m4 at 5
        s.flush()
    got = chunks(tmp_path)
    assert [(seg, f[1], f[6]) for seg, _, f, _, _ in got] == [
        (0, 0, 0), (0, 1, 2), (0, 0, 3), (4, 2, 4), (4, 0, 5)]
    # user chunk 0: trailer = type 0, id length 3, "pub", sequence u64
    _, _, f, data, trailer = got[0]
    assert trailer == b"\x00\x03pub" + (258).to_bytes(8, "big")
    assert f[9] == len(trailer) == 13 and (f[2], f[3]) == (2, 2)
    assert data == b"\x00\x00\x00\x02m1\x00\x00\x00\x02m2"
    # delta chunk 2: one entry, one record; a simple entry holding type 1, "cons", offset
    _, _, f, data, trailer = got[1]
    body = b"\x01\x04cons" + (1).to_bytes(8, "big")
    assert (f[0], f[2], f[3], f[9]) == (0x50, 1, 1, 0) and trailer == b""
    assert data == len(body).to_bytes(4, "big") + body
    # snapshot chunk 4, first of segment 4: type 0 carries chunk id and sequence
    _, pos, f, data, _ = got[3]
    body = (b"\x00\x03pub" + (0).to_bytes(8, "big") + (258).to_bytes(8, "big")
            + b"\x01\x04cons" + (1).to_bytes(8, "big"))
    assert pos == 8 and (f[2], f[3]) == (1, 1)
    assert data == len(body).to_bytes(4, "big") + body
    # index records carry the chunk types
    ifd = os.open(index_path(str(tmp_path), 4), os.O_RDONLY)
    try:
        assert [r.type for r in read_index_records(ifd)] == [2, 0]
    finally:
        os.close(ifd)


def test_a_publishers_batch_is_never_split_across_chunks(tmp_path):
    cfg = StreamConfig(fsync="never", max_chunk_entries=8)
    batches = {}
    with Stream.open(tmp_path, cfg) as s:
        for k in range(60):
            n = 1 + k * 7 % 8
            first = s.append_batch([b"%d" % k] * n, writer=("p%d" % (k % 3), k + 1))
            batches[k + 1] = (first, first + n - 1)
            if k % 5 == 0:
                s.append(b"loose")
    for start, pos, f, _, _trailer in chunks(tmp_path):
        fd = os.open(segment_path(str(tmp_path), start), os.O_RDONLY)
        try:
            ch = next(c for c in walk_segment(fd, "x") if c.position == pos)
            records = chunk_tracking(fd, pos, ch.header)
        finally:
            os.close(fd)
        lo, hi = f[6], f[6] + f[3] - 1
        for r in records:
            first, last = batches.pop(r.value)
            assert lo <= first and last <= hi, (r, lo, hi)
    assert not batches  # every batch's sequence is in the trailer of its chunk


def test_retention_deletes_old_segments_and_keeps_the_state(tmp_path):
    cfg = StreamConfig(fsync="never", max_segment_bytes=600, retention_bytes=1500,
                       filter_size=0)
    with Stream.open(tmp_path, cfg) as s:
        for k in range(200):
            if k < 20:
                s.store_offset("early-%d" % k, 10_000 + k)  # never stored again
                s.append_batch([b"x" * 20], writer=("early-pub-%d" % k, k + 1))
            last = s.append_batch([b"y" * 30], writer=("busy", k + 1))
            s.store_offset("busy", last)
            s.flush()  # one batch at a time: many small segments
        first = s.first_offset
    assert first > 100, "retention deleted old segments"
    segments, _ = list_files(str(tmp_path))
    for seg, pos, f, _, _ in chunks(tmp_path):
        if pos == 8:  # every segment kept starts with a snapshot (there is state from the start)
            assert f[1] == 2, seg
    with Stream.open(tmp_path, cfg) as s:
        offsets, sequences = s.tracking()
    assert offsets == {**{b"early-%d" % k: 10_000 + k for k in range(20)}, b"busy": last}
    assert sequences == {**{b"early-pub-%d" % k: k + 1 for k in range(20)}, b"busy": 200}


def test_a_snapshot_drops_offsets_below_the_first_and_keeps_the_newest_publishers(tmp_path):
    cfg = StreamConfig(fsync="never", max_segment_chunks=4, retention_bytes=1,
                       tracking_max_sequences=2, filter_size=0)
    with Stream.open(tmp_path, cfg) as s:
        s.store_offset("old", 0)
        for k in range(12):
            s.append_batch([b"m"], writer=("p%d" % k, 1))
            s.flush()
        assert s.first_offset > 0
        assert s.query_offset("old") is None
        before = s.tracking()
    # the two newest at the last snapshot, and those written after it (trimmed at the next)
    assert before[0] == {} and b"p0" not in before[1] and b"p11" in before[1]
    assert len(before[1]) < 12
    with Stream.open(tmp_path, cfg) as s:
        offsets, sequences = s.tracking()
    # a snapshot written at close may have trimmed more; never anything newer than kept
    assert offsets == {} and sequences.items() <= before[1].items()
    assert {b"p10", b"p11"} <= set(sequences)


def test_readers_skip_tracking_chunks_and_trailers(tmp_path):
    cfg = StreamConfig(fsync="never", max_segment_chunks=5)
    expected = []
    with Stream.open(tmp_path, cfg) as s:
        for k in range(40):
            first = s.append_batch([b"r%d-%d" % (k, j) for j in range(3)], writer=("p", k + 1))
            expected += [(first + j, b"r%d-%d" % (k, j)) for j in range(3)]
            s.store_offset("c", first)
            if k % 4 == 0:
                s.flush()
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        got = [(o, bytes(b)) for c in r for o, b in c.records]
    assert got == expected
    types = {f[1] for _, _, f, _, _ in chunks(tmp_path)}
    assert types == {0, 1, 2}


def test_rabbitmqs_directory_gives_its_tracking_state(tmp_path):
    d = tmp_path / "rmq"
    shutil.copytree(FIXTURE, d)
    with Stream.open(d, StreamConfig(fsync="never")) as s:
        # segment 7's snapshot: p1 = 7 (chunk 3), c1 = 5; nothing after it changes them
        assert (s.query_sequence("p1"), s.query_offset("c1")) == (7, 5)
        s.store_offset("c1", 14)
        s.append_batch([b"x"], writer=("p1", 8))
    with Stream.open(d, StreamConfig(fsync="never")) as s:
        assert (s.query_sequence("p1"), s.query_offset("c1")) == (8, 14)


def test_after_a_write_error_the_state_is_what_the_disk_holds(tmp_path, monkeypatch):
    """A publisher's batch that failed must not count as stored (its retry would be dropped as
    a duplicate): after the writer reopens its files the state is reloaded from them. The
    write error is a real EBADF from ``os.writev`` (the segment fd closed under the writer)."""
    monkeypatch.setattr("storage.writer.RETRY_MIN_S", 0.05)
    s = Stream.open(tmp_path, StreamConfig(fsync="always"))
    s.append_batch([b"a"], writer=("p", 1))
    s.store_offset("c", 0)
    s.flush()
    w = s._writer
    with w.lock:  # hold the writer off while its file goes away
        os.close(w._sfd)
        w._sfd = os.open(os.devnull, os.O_RDONLY)
    failed = threading.Event()
    s.append_batch([b"b"], writer=("p", 2), on_durable=lambda o, e: e and failed.set())
    try:
        s.store_offset("c", 9)
    except StreamClosedError:
        pass  # already failed: refused
    assert failed.wait(10)
    for _ in range(1000):  # queries are refused until the files are reopened and reloaded
        try:
            state = s.tracking()
            break
        except StreamClosedError:
            time.sleep(0.01)
    assert state == ({b"c": 0}, {b"p": 1})
    for _ in range(1000):  # the retry is taken once the backoff has passed
        try:
            s.append_batch([b"b"], writer=("p", 2))
            break
        except StreamClosedError:
            time.sleep(0.01)
    s.close()
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        assert [bytes(b) for c in r for _, b in c.records] == [b"a", b"b"]
    with Stream.open(tmp_path, StreamConfig(fsync="never")) as s:
        assert s.tracking() == ({b"c": 0}, {b"p": 2})


def test_notify_durable_runs_once_everything_appended_before_is_durable(tmp_path):
    with Stream.open(tmp_path, StreamConfig(fsync="always")) as s:
        calls = []
        s.notify_durable(lambda o, e: calls.append(("idle", o, e)))
        assert calls == [("idle", -1, None)]  # nothing waiting: at once
        first = s.append_batch([b"a", b"b"] * 5000)  # most likely still on its way
        s.notify_durable(lambda o, e: calls.append(("after", o, s.next_offset, e)))
        s.flush()
        for _ in range(1000):
            if len(calls) == 2:
                break
            time.sleep(0.01)
        # called with the last offset appended before, once the committed end is past it
        assert calls[1] == ("after", first + 9999, first + 10000, None)


@pytest.mark.parametrize("seed", range(4))
def test_random_interleavings_match_a_model_after_reopen(tmp_path, seed):
    """Appends, named batches, stores and flushes at random, with tiny segments, chunks and
    retention: every user record reads back at its offset, and the state after reopen is
    the model's (offsets below the first kept offset dropped, as snapshots drop them)."""
    import random
    rng = random.Random(seed)
    cfg = StreamConfig(fsync="never", max_segment_bytes=rng.choice([300, 700, 2000]),
                       max_segment_chunks=rng.choice([2, 5, 50]), max_chunk_entries=6,
                       retention_bytes=rng.choice([None, 3000]), filter_size=0)
    offsets: dict[bytes, int] = {}
    sequences: dict[bytes, int] = {}
    records: dict[int, bytes] = {}
    with Stream.open(tmp_path, cfg) as s:
        for step in range(400):
            r = rng.random()
            if r < 0.3:
                body = b"a%d" % step
                records[s.append(body)] = body
            elif r < 0.6:
                ref = b"p%d" % rng.randrange(5)
                seq = sequences.get(ref, 0) + rng.randint(1, 3)
                bodies = [b"b%d-%d" % (step, j) for j in range(rng.randint(1, 6))]
                first = s.append_batch(bodies, writer=(ref, seq))
                records.update(zip(range(first, first + len(bodies)), bodies, strict=True))
                sequences[ref] = seq
            elif r < 0.9:
                name = b"c%d" % rng.randrange(7)
                offsets[name] = s.next_offset + rng.randrange(50)
                s.store_offset(name, offsets[name])
            else:
                s.flush()
            assert s.query_sequence(b"p0") == sequences.get(b"p0", 0)
    with Stream.open(tmp_path, cfg) as s:
        got_offsets, got_sequences = s.tracking()
        first_kept = s.first_offset
    assert got_sequences == sequences
    assert set(got_offsets) <= set(offsets)
    for name, value in offsets.items():  # a snapshot drops only what is below its first offset
        assert got_offsets.get(name, value) == value and (name in got_offsets or value < first_kept)
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        got = [(o, bytes(b)) for c in r for o, b in c.records]
    assert got == sorted((o, b) for o, b in records.items() if o >= got[0][0])
    assert got[-1][0] == max(records)


def test_past_the_hard_limit_a_segment_rolls_over_at_once_and_the_snapshot_follows(
        tmp_path, monkeypatch):
    """A full segment normally waits for its snapshot's offset; past ``_HARD_SEGMENT_BYTES``
    (here 0) it rolls over at once, the snapshot comes later in a newer segment, and retention
    waits for it: the state is never only in deleted segments."""
    monkeypatch.setattr("storage.writer._HARD_SEGMENT_BYTES", 0)
    cfg = StreamConfig(fsync="never", max_chunk_entries=4, max_segment_chunks=2, filter_size=0)
    with Stream.open(tmp_path, cfg) as s:
        s.append_batch([b"x"], writer=("p", 1))
        s.store_offset("c", 10_000)
        s.flush()
        first = s.append_batch([b"r%d" % k for k in range(40)])  # one batch, many rollovers
        s.flush()
    got = chunks(tmp_path)
    starts = {seg for seg, _, _, _, _ in got}
    assert len(starts) > 5
    assert any(f[1] == 2 and pos > 8 for _, pos, f, _, _ in got)  # a snapshot after a rollover
    assert [f[1] for seg, pos, f, _, _ in got if pos == 8].count(2) < len(starts) - 1
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        records = [(o, bytes(b)) for c in r for o, b in c.records]
    assert records == [(0, b"x")] + [(first + k, b"r%d" % k) for k in range(40)]
    cfg = StreamConfig(fsync="never", max_chunk_entries=4, max_segment_chunks=2, filter_size=0,
                       retention_bytes=1)  # retention at open keeps the newest segment only
    with Stream.open(tmp_path, cfg) as s:
        assert s.first_offset > first
        assert s.tracking() == ({b"c": 10_000}, {b"p": 1})


def test_append_deduplicated_keeps_what_is_above_and_cuts_chunks(tmp_path):
    cfg = StreamConfig(fsync="never", max_chunk_entries=3, filter_size=16)
    with Stream.open(tmp_path, cfg) as s:
        done = []
        kept = s.append_deduplicated("p", [b"a", b"b", b"c"], [1, 2, 3], ["x", None, "y"],
                                     on_durable=lambda o, e: done.append((o, e)))
        assert kept == [0, 1, 2] and s.query_sequence("p") == 3
        ids = [2, 4, 4, 3, 5, 6, 7, 8, 9, 10]
        kept = s.append_deduplicated("p", [b"m%d" % i for i in ids], ids)
        assert kept == [1, 4, 5, 6, 7, 8, 9] and s.query_sequence("p") == 10
        assert s.append_deduplicated("p", [b"old"], [10],
                                     on_durable=lambda o, e: done.append(("dup", e))) == []
        s.flush()
        for _ in range(1000):
            if len(done) == 2:
                break
            time.sleep(0.01)
        assert done == [(2, None), ("dup", None)]
        with pytest.raises(StorageError):
            s.append_deduplicated("p", [b"a"], [11, 12])
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        got = [bytes(b) for c in r for _, b in c.records]
    assert got == [b"a", b"b", b"c"] + [b"m%d" % i for i in (4, 5, 6, 7, 8, 9, 10)]
    trailers = [t for _, _, f, _, t in chunks(tmp_path) if t]
    # 7 kept at most 3 a chunk: 3 chunks, each with the last id it holds
    assert trailers[1:] == [b"\x00\x01p" + v.to_bytes(8, "big") for v in (6, 9, 10)]


def test_a_named_batch_spans_chunks_and_a_crash_keeps_the_ids_written(tmp_path):
    """append_deduplicated's batch is cut like any other (32, 64 ... after idle); the trailer
    of each chunk holds the publishing id of the last message in it, as osiris's does, so a
    crash after any chunk keeps exactly the ids written: a retry stores the rest only."""
    cfg = StreamConfig(fsync="never")
    ids = list(range(1, 201))
    bodies = [b"%d" % i for i in ids]
    with Stream.open(tmp_path, cfg) as s:
        assert s.append_deduplicated("p", bodies, ids) == list(range(200))
        s.flush()
    got = chunks(tmp_path)
    assert [f[3] for _, _, f, _, _ in got] == [32, 64, 104]
    assert [t for *_, t in got] == [b"\x00\x01p" + v.to_bytes(8, "big") for v in (32, 96, 200)]
    with open(segment_path(str(tmp_path), 0), "r+b") as f:  # the last chunk never made it
        f.truncate(got[2][1])
    with Stream.open(tmp_path, cfg) as s:
        assert s.query_sequence("p") == 96
        assert s.append_deduplicated("p", bodies, ids) == list(range(96, 200))
        s.flush()
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        assert [bytes(b) for c in r for _, b in c.records] == bodies


def test_sequences_must_be_one_ascending_id_per_body(tmp_path):
    with Stream.open(tmp_path, StreamConfig(fsync="never")) as s:
        for seqs, seq in (([1], 2), ([1, 2, 3], 3), ([2, 1], 1), ([1, 1], 1)):
            with pytest.raises(StorageError, match="sequences"):
                s.append_batch([b"a", b"b"], writer=("p", seq), sequences=seqs)
        assert s.query_sequence("p") == 0


def test_append_deduplicated_takes_id_0_from_an_unknown_reference(tmp_path):
    """As osiris: a reference with nothing stored takes any publishing id, 0 too (though
    query_sequence answers 0 for both "unknown" and "0 stored"); then 0 is a duplicate."""
    with Stream.open(tmp_path, StreamConfig(fsync="never")) as s:
        assert s.append_deduplicated("p", [b"a"], [0]) == [0]
        assert s.append_deduplicated("p", [b"b", b"c"], [0, 1]) == [1]
        assert s.tracking()[1] == {b"p": 1}
        s.flush()
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        assert [bytes(b) for c in r for _, b in c.records] == [b"a", b"c"]


def test_append_deduplicated_takes_sub_entry_batches(tmp_path):
    """A sub-entry batch is one publishing id for its records (as RabbitMQ deduplicates them):
    a batch whose id was stored is dropped whole; the kept ones take one offset per record."""
    def batch(*bodies: bytes) -> SubBatchEntry:
        raw = encode_entries(list(bodies))
        return SubBatchEntry(0, len(bodies), len(raw), raw)
    with Stream.open(tmp_path, StreamConfig(fsync="never")) as s:
        assert s.append_deduplicated("p", [batch(b"a0", b"a1"), b"b", batch(b"c0", b"c1", b"c2")],
                                     [1, 2, 3]) == [0, 1, 2]
        s.flush()
        assert s.next_offset == 6 and s.query_sequence("p") == 3
        assert s.append_deduplicated("p", [batch(b"x0", b"x1"), batch(b"d0", b"d1")],
                                     [3, 4]) == [1]
        s.flush()
        assert s.next_offset == 8 and s.query_sequence("p") == 4
    with open_reader(str(tmp_path), OffsetSpec.first()) as r:
        got = [bytes(b) for c in r for _, b in c.records]
    assert got == [b"a0", b"a1", b"b", b"c0", b"c1", b"c2", b"d0", b"d1"]
