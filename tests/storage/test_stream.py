"""The writer: offsets, group commit, chunk limits, durability callbacks, rollover, retention,
listeners and tailing readers, on real files."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from storage import (
    OffsetSpec,
    StorageError,
    Stream,
    StreamClosedError,
    StreamConfig,
    open_reader,
)
from storage.files import list_segments
from tests.polling import wait_for
from storage.format import CHUNK_HEADER_BYTES, INDEX_RECORD_BYTES, SEGMENT_HEADER_BYTES, decode_header


def chunks_on_disk(directory) -> list:
    """Every chunk header, walking the segments (not the index)."""
    out = []
    for start in list_segments(str(directory)):
        with open(os.path.join(directory, f"{start:020d}.segment"), "rb") as f:
            raw = f.read()
        pos = SEGMENT_HEADER_BYTES
        while pos < len(raw):
            h = decode_header(raw, pos)
            out.append((start, pos, h))
            pos += h.size
    return out


def all_records(stream_or_dir, spec=None):
    spec = spec or OffsetSpec.first()
    if isinstance(stream_or_dir, Stream):
        r = stream_or_dir.reader(spec)
    else:
        r = open_reader(str(stream_or_dir), spec)
    with r:
        return [(o, bytes(b)) for c in r for o, b in c.records]


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_appends_get_consecutive_offsets_and_durable_callbacks_in_order(tmp_path, policy):
    seen = []
    with Stream.open(tmp_path / "s", StreamConfig(fsync=policy, fsync_interval_ms=5)) as s:
        offs = [s.append(b"m%d" % i, None, lambda o, e: seen.append((o, e, s.committed_offset)))
                for i in range(500)]
        first = s.append_batch([b"b%d" % i for i in range(300)], None,
                               lambda o, e: seen.append((o, e, s.committed_offset)))
        s.flush()
    assert offs == list(range(500)) and first == 500
    assert [o for o, _, _ in seen] == list(range(500)) + [799]
    assert all(e is None for _, e, _ in seen)
    # a callback runs only once its record is committed (visible to readers)
    assert all(committed >= o for o, _, committed in seen)
    assert all_records(tmp_path / "s") == [(i, b"m%d" % i) for i in range(500)] + \
        [(500 + i, b"b%d" % i) for i in range(300)]


def test_group_commit_forms_chunks_from_what_is_waiting_within_limits(tmp_path):
    cfg = StreamConfig(fsync="never", max_chunk_entries=50, min_chunk_entries=50, max_chunk_bytes=1000)
    with Stream.open(tmp_path / "s", cfg) as s:
        s.append_batch([b"x" * 10] * 120)  # 14 bytes per entry: 50-entry chunks fit 700 B
        s.flush()
        s.append_batch([b"y" * 96] * 25)  # 100 bytes per entry: 10 per chunk
        s.flush()
        s.append(b"z" * 5000)  # one entry larger than the byte limit still gets a chunk
        s.flush()
    sizes = [h.records for _, _, h in chunks_on_disk(tmp_path / "s")]
    assert sizes == [50, 50, 20, 10, 10, 5, 1]
    assert all(h.entries == h.records for _, _, h in chunks_on_disk(tmp_path / "s"))


def test_a_burst_from_idle_is_cut_as_osiris_batches_it(tmp_path):
    """As gen_batch_server sizes osiris's writer batches (RabbitMQ 3.10 cuts a 4,999-message
    send_batch into 32, 64 ... 2,048 and 935): after idle a chunk takes at most
    min_chunk_entries (32); the limit doubles after each full chunk, up to max_chunk_entries,
    and halves when a chunk takes the last of the queue."""
    def sizes(s):
        s.flush()
        return [h.records for _, _, h in chunks_on_disk(tmp_path / "s")]
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        s.append_batch([b"m"] * 4999)
        assert sizes(s) == [32, 64, 128, 256, 512, 1024, 2048, 935]
        s.append_batch([b"n"] * 5000)  # 935 emptied the queue: 4096 halved
        assert sizes(s)[8:] == [2048, 2952]
        s.append_batch([b"o"] * 20000)  # up to max_chunk_entries
        assert sizes(s)[10:] == [2048, 4096, 8192, 5664]
    cfg = StreamConfig(fsync="never", max_chunk_entries=100)
    with Stream.open(tmp_path / "t", cfg) as s:
        s.append_batch([b"m"] * 300)
        s.flush()
    assert [h.records for _, _, h in chunks_on_disk(tmp_path / "t")] == [32, 64, 100, 100, 4]


def test_a_large_client_frame_shares_no_chunk(tmp_path):
    """``frames``: a batch holding several client frames (one loop turn's Publish frames). A
    frame of at least min_chunk_entries (32) messages starts a chunk and shares none with
    another frame; it is cut by the limit alone (32 + 18 after idle); smaller frames share
    chunks as any records do. Deduplication keeps the frames of what it keeps. A writer that
    takes more than FRAMES_APART_MAX entries at once is behind: it cuts across frames."""
    def sizes(d):
        return [h.records for _, _, h in chunks_on_disk(d)]
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        s.append_batch([b"m"] * 500, frames=range(0, 500, 50))
        s.flush()
    assert sizes(tmp_path / "s") == [32, 18] + [50] * 9
    with Stream.open(tmp_path / "t", StreamConfig(fsync="never")) as s:
        s.append_batch([b"m"] * 500)  # without frames: cut anywhere
        s.flush()
    assert sizes(tmp_path / "t") == [32, 64, 128, 256, 20]
    with Stream.open(tmp_path / "u", StreamConfig(fsync="never")) as s:
        # 5 small frames, a large one, 2 small: the large one alone, the small ones together
        s.append_batch([b"m"] * 90, frames=[0, 4, 8, 12, 16, 20, 80, 85])
        s.flush()
    assert sizes(tmp_path / "u") == [20, 32, 28, 10]
    with Stream.open(tmp_path / "v", StreamConfig(fsync="never")) as s:
        s.append_deduplicated("p", [b"m"] * 10, list(range(10)))
        s.flush()
        # ids 0..9 are stored: the first frame's first 10 go, the rest keep their frames
        kept = s.append_deduplicated("p", [b"m"] * 150, list(range(150)), frames=[0, 50, 100])
        s.flush()
        for bad in ([1, 2], [0, 2, 1], [0, 3], []):
            with pytest.raises(StorageError, match="frames"):
                s.append_batch([b"m"] * 3, frames=bad)
    assert len(kept) == 140 and sizes(tmp_path / "v") == [10, 32, 8, 50, 50]
    with Stream.open(tmp_path / "w", StreamConfig(fsync="never")) as s:
        # more than FRAMES_APART_MAX taken at once: a writer behind cuts across frames
        s.append_batch([b"m"] * 2000, frames=range(0, 2000, 100))
        s.flush()
    assert sizes(tmp_path / "w") == [32, 64, 128, 256, 512, 1008]


def test_many_concurrent_appenders_share_chunks(tmp_path):
    cfg = StreamConfig(fsync="always")
    with Stream.open(tmp_path / "s", cfg) as s:
        def work(k):
            for i in range(200):
                s.append(b"%d-%d" % (k, i), f"v{k}")
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s.flush()
        recs = all_records(s)
    assert len(recs) == 800 and [o for o, _ in recs] == list(range(800))
    for k in range(4):  # each appender's records keep their order
        mine = [b for _, b in recs if b.startswith(b"%d-" % k)]
        assert mine == [b"%d-%d" % (k, i) for i in range(200)]
    # with fsync always, appends waiting during an fsync are written together
    assert len(chunks_on_disk(tmp_path / "s")) < 800


def test_filters_are_written_per_chunk_and_only_when_a_value_exists(tmp_path):
    import bloom
    cfg = StreamConfig(fsync="never", filter_size=32, filter_scheme=bloom.Scheme.MMH3)
    with Stream.open(tmp_path / "s", cfg) as s:
        s.append_batch([b"a", b"b"], ["red", None])
        s.flush()
        s.append_batch([b"c"], None)
        s.flush()
    (_, p0, h0), (_, p1, h1) = chunks_on_disk(tmp_path / "s")
    assert (h0.filter_size, h0.filter_scheme) == (32, int(bloom.Scheme.MMH3))
    raw = (tmp_path / "s" / "00000000000000000000.segment").read_bytes()
    bits = raw[p0 + CHUNK_HEADER_BYTES:p0 + CHUNK_HEADER_BYTES + 32]
    assert bits[0] & 0x80  # bit 0: an unfiltered entry
    assert bloom.Matcher(["red"]).matches(bits, h0.filter_scheme, h0.filter_param)
    assert h1.filter_size == 0


def test_rollover_by_chunks_and_by_bytes_names_segments_after_the_chunk_id(tmp_path):
    with Stream.open(tmp_path / "c", StreamConfig(fsync="never", max_segment_chunks=2)) as s:
        for i in range(5):
            s.append(b"r%d" % i)
            s.flush()
        assert list(s.segment_starts()) == [0, 2, 4]
    assert list_segments(str(tmp_path / "c")) == [0, 2, 4]
    cfg = StreamConfig(fsync="never", max_segment_bytes=300, max_chunk_entries=10)
    with Stream.open(tmp_path / "b", cfg) as s:
        for _ in range(6):
            s.append_batch([b"x" * 20] * 3)
            s.flush()
    for _start, pos, _h in chunks_on_disk(tmp_path / "b"):
        assert pos < 300  # a chunk starts only below the limit
    starts = list_segments(str(tmp_path / "b"))
    assert len(starts) > 1
    assert [h.chunk_id for st, p, h in chunks_on_disk(tmp_path / "b") if p == 8] == starts
    assert [o for o, _ in all_records(tmp_path / "b")] == list(range(18))


def test_retention_by_bytes_keeps_the_newest_segments_that_fit(tmp_path):
    cfg = StreamConfig(fsync="never", max_segment_chunks=1, retention_bytes=250)
    with Stream.open(tmp_path / "s", cfg) as s:
        for _i in range(10):
            s.append(b"x" * 50)  # each segment: 110 bytes (segment header, chunk header, 54)
            s.flush()
        starts = list(s.segment_starts())
        assert s.first_offset == starts[0]
        recs = all_records(s)
    sizes = [os.path.getsize(tmp_path / "s" / f"{st:020d}.segment") for st in starts]
    # retention runs at rollover (as in osiris), when the newest segment is just its header:
    # what was kept then fit (110 + 110 + 8), one more older segment would not have
    assert sizes == [110, 110, 110] and sum(sizes[:-1]) + 8 <= 250 < sum(sizes) + 8
    assert starts == [7, 8, 9] and [o for o, _ in recs] == [7, 8, 9]
    names = sorted(n for n in os.listdir(tmp_path / "s") if n != ".writer.lock")
    assert names == sorted(f"{n:020d}.{k}" for n in (7, 8, 9) for k in ("index", "segment"))


def test_retention_by_age_never_deletes_the_newest_segment(tmp_path):
    cfg = StreamConfig(fsync="never", max_segment_chunks=1, retention_age_ms=1)
    with Stream.open(tmp_path / "s", cfg) as s:
        for _i in range(4):
            s.append(b"old")
            s.flush()
            time.sleep(0.005)  # chunk timestamps must be older than the age limit
        assert list(s.segment_starts()) == [3]
    # reopening with the newest segment old too keeps it
    with Stream.open(tmp_path / "s", cfg) as s:
        assert list(s.segment_starts()) == [3]
        assert all_records(s) == [(3, b"old")]


def test_listeners_and_tailing_reader(tmp_path):
    calls = []
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        def listener() -> None:
            calls.append(s.next_offset)
        s.add_listener(listener)
        r = s.reader(OffsetSpec.next())
        assert r.read_chunk() is None
        assert r.wait(0.01) is False
        got = []

        def consume():
            while len(got) < 3:
                c = r.read_chunk()
                if c is None:
                    r.wait(5)
                    continue
                got.extend(c.records)
        t = threading.Thread(target=consume)
        t.start()
        for i in range(3):
            s.append(b"t%d" % i)
            s.flush()
        t.join(10)
        assert not t.is_alive()
        assert [b for _, b in got] == [b"t0", b"t1", b"t2"]
        assert calls and calls[-1] == 3
        s.remove_listener(listener)
        s.append(b"more")
        s.flush()
        assert calls[-1] == 3


@pytest.fixture
def thread_switches():
    """Switch threads as often as the interpreter can, so orderings between the writer thread
    and a reader that a slower switch would hide happen within a short test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_reader_never_sees_uncommitted_chunks(tmp_path, monkeypatch):
    """With fsync always, a group is readable in the process only once it is fsynced: a spy
    around the real ``os.fdatasync`` reads the stream at the moment the group is in the files
    but not yet synced. A reader of the stream must see exactly the committed records then;
    a reader of the files alone sees the new chunks (so the moment is a real one)."""
    import storage.writer as mod
    real_sync = os.fdatasync
    windows: list = []  # (committed end, stream reader's offsets, files-alone reader's offsets)
    d = tmp_path / "s"
    with Stream.open(d, StreamConfig(fsync="always", max_chunk_entries=3)) as s:
        def spy(fd):
            with s.reader(OffsetSpec.first()) as r:
                in_stream = [o for c in r for o, _ in c.records]
            with open_reader(str(d), OffsetSpec.first()) as r:
                on_disk = [o for c in r for o, _ in c.records]
            windows.append((s.next_offset, in_stream, on_disk))
            real_sync(fd)
        monkeypatch.setattr(mod.os, "fdatasync", spy)
        for i in range(20):
            s.append_batch([b"%d" % i] * (i % 4 + 1))
            s.flush()
        monkeypatch.setattr(mod.os, "fdatasync", real_sync)
    assert len(windows) >= 20
    for end, in_stream, _ in windows:
        assert in_stream == list(range(end))
    assert all(len(on_disk) > end for end, _, on_disk in windows[:20])


def test_last_made_while_appends_are_queued_is_their_last_chunk(tmp_path, monkeypatch):
    """A reader for ``last`` made while appends are queued (here written, held before their
    fdatasync) starts at the last chunk of those appends once they are committed, not at the
    chunk that was last before them (rstream's test_offset_type_last subscribes right after
    its send_batch, and RabbitMQ has written it by then)."""
    import storage.writer as mod
    real_sync = os.fdatasync
    in_sync, go = threading.Event(), threading.Event()

    def held(fd):
        in_sync.set()
        go.wait(10)
        real_sync(fd)
    with Stream.open(tmp_path / "s", StreamConfig(fsync="always")) as s:
        s.append_batch([b"a"] * 10)
        s.flush()
        monkeypatch.setattr(mod.os, "fdatasync", held)
        s.append_batch([b"b%d" % i for i in range(100)])  # chunks of 32, 64 and 4
        assert in_sync.wait(10)
        with s.reader(OffsetSpec.last()) as r:
            assert r.read_chunk() is None  # nothing of them committed yet
            go.set()
            s.flush()
            chunk = r.read_chunk()
            assert chunk is not None and [o for o, _ in chunk.records] == list(range(106, 110))


def test_next_made_while_appends_are_queued_starts_after_them(tmp_path, monkeypatch):
    """A reader for ``next`` made while appends wait for the writer (some written and held
    before their fdatasync, some still queued) starts after all of them, once they are
    committed: rstream's test_offset_type_next subscribes right after an unconfirmed
    send_batch and must get only what it sends after; the writer ends a chunk there, so a
    record appended later never shares a chunk with them."""
    import storage.writer as mod
    real_sync = os.fdatasync
    in_sync, go = threading.Event(), threading.Event()

    def held(fd):
        in_sync.set()
        go.wait(10)
        real_sync(fd)
    with Stream.open(tmp_path / "s", StreamConfig(fsync="always")) as s:
        s.append_batch([b"a"] * 10)
        s.flush()
        monkeypatch.setattr(mod.os, "fdatasync", held)
        s.append_batch([b"b"] * 5)  # taken by the writer, held in its fdatasync
        assert in_sync.wait(10)
        s.append_batch([b"c"] * 5)  # queued behind it
        with s.reader(OffsetSpec.next()) as r:
            assert r.read_chunk() is None
            s.append(b"d")  # after the reader: may be taken with the c's, never in their chunk
            go.set()
            s.flush()
            chunk = r.read_chunk()
            assert chunk is not None and chunk.records == [(20, b"d")]


def test_a_confirmed_record_is_readable(tmp_path, thread_switches):
    """The committed end moves before the callbacks run (docs/storage.md): once
    ``on_durable(o)`` runs, ``o`` is committed, so whoever is told a record is durable can read
    it; and a reader on another thread never returns a record at or past the committed end.
    Thread switches are forced so the orderings between writer and reader really vary (run
    callbacks before the end moves and this fails)."""
    cfg = StreamConfig(fsync="always", max_chunk_entries=4)
    count = 300
    ahead: list = []  # (offset read, committed end right after the read)
    confirmed_unreadable: list = []
    with Stream.open(tmp_path / "s", cfg) as s:
        def cb(o, e):
            if e is not None or o >= s.next_offset:
                confirmed_unreadable.append((o, e, s.next_offset))
        read: list = []

        def reader():
            with s.reader(OffsetSpec.first()) as rd:
                while rd.position < count:
                    c = rd.read_chunk()
                    if c is None:
                        rd.wait(5)
                        continue
                    end = s.next_offset
                    ahead.extend((o, end) for o, _ in c.records if o >= end)
                    read.extend(o for o, _ in c.records)
        t = threading.Thread(target=reader)
        t.start()
        for i in range(count):
            s.append(b"%d" % i, None, cb)
        s.flush()
        t.join(30)
        assert not t.is_alive()
    assert ahead == []
    assert confirmed_unreadable == []
    assert read == list(range(count))


def test_append_after_close_raises_and_close_is_durable(tmp_path):
    s = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    s.append_batch([b"a"] * 10)
    s.close()
    with pytest.raises(StreamClosedError):
        s.append(b"late")
    assert isinstance(StreamClosedError("x"), StorageError)
    assert len(all_records(tmp_path / "s")) == 10


def _break_writer(s: Stream, count: int, errors: list) -> None:
    """Queue ``count`` records behind a segment fd that cannot be written (a real EBADF from
    ``os.writev``) and wait until the writer has failed them all."""
    w = s._writer
    with w.lock:  # hold the writer off while its file goes away
        os.close(w._sfd)
        w._sfd = os.open(os.devnull, os.O_RDONLY)
        for _i in range(count):
            w._bodies.append(b"x")
            w._values.append(None)
            w._callbacks.append((w.next, lambda o, e: errors.append((o, e))))
            w.next += 1
        w._wake.notify()
    for _ in range(1000):
        if len(errors) >= count:
            break
        time.sleep(0.01)


def test_a_write_error_fails_every_waiting_append(tmp_path, monkeypatch):
    """ENOSPC cannot be made on demand here; closing the segment fd under the writer gives a
    real EBADF from os.writev, the same path."""
    monkeypatch.setattr("storage.writer.RETRY_MIN_S", 60.0)  # no retry within this test
    s = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    s.append(b"ok")
    s.flush()
    errors = []
    _break_writer(s, 3, errors)
    assert [o for o, _ in errors] == [1, 2, 3]
    assert all(isinstance(e, StorageError) for _, e in errors)
    with pytest.raises(StreamClosedError):
        s.append(b"after")
    s.close()
    assert all_records(tmp_path / "s") == [(0, b"ok")]


def test_after_a_write_error_appends_work_again_once_the_backoff_has_passed(tmp_path, monkeypatch):
    """The writer reopens its files (recovery as at open); after the backoff the next append
    is tried for real and, the file being writable again, succeeds: consecutive offsets,
    nothing accepted lost, nothing failed stored, readers keep their place."""
    monkeypatch.setattr("storage.writer.RETRY_MIN_S", 0.05)
    s = Stream.open(tmp_path / "s", StreamConfig(fsync="always", max_chunk_entries=1))
    s.append_batch([b"a", b"b"])
    s.flush()
    tail = s.reader(OffsetSpec.next())
    assert tail.read_chunk() is None
    errors: list = []
    _break_writer(s, 3, errors)
    assert [o for o, _ in errors] == [2, 3, 4] and all(e is not None for _, e in errors)
    with pytest.raises(StreamClosedError, match="write failed"):
        s.append(b"refused")  # within the backoff
    durable: list = []
    for _ in range(500):  # until the backoff has passed
        try:
            offset = s.append(b"c", on_durable=lambda o, e: durable.append((o, e)))
            break
        except StreamClosedError:
            time.sleep(0.01)
    else:
        raise AssertionError("appends never taken again")
    assert offset == 2  # the failed offsets were never committed: handed out again
    s.append(b"d")
    s.flush()
    assert durable == [(2, None)]
    assert [r for c in iter(tail.read_chunk, None) for r in c.records] == [(2, b"c"), (3, b"d")]
    tail.close()
    s.close()
    assert all_records(tmp_path / "s") == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    with Stream.open(tmp_path / "s") as again:  # and it is a clean log for recovery
        assert again.next_offset == 4


def test_a_reader_on_a_segment_that_recovery_removed_goes_on_where_the_log_goes_on(tmp_path):
    """A rollover whose first write failed leaves an empty newest segment; a reader may have
    opened it (at ``next``). Recovery after the error removes it and the log continues in the
    segment before: the reader must follow there, not wait on the removed file."""
    from storage.files import create_segment
    d = tmp_path / "s"
    with Stream.open(d, StreamConfig(fsync="never", max_chunk_entries=1)) as s:
        s.append_batch([b"a", b"b"])
    create_segment(str(d), 2, False)  # the rollover's files, nothing written in them
    reader = open_reader(str(d), OffsetSpec.next())
    assert reader.read_chunk() is None
    with Stream.open(d, StreamConfig(fsync="never")) as s:  # recovery removes segment 2
        assert list(s.segment_starts()) == [0]
        s.append(b"c")
        s.flush()
        assert [c.records for c in iter(reader.read_chunk, None)] == [[(2, b"c")]]
    reader.close()


def test_bad_config_is_refused():
    for kw in ({"max_chunk_entries": 70000}, {"filter_size": 8}, {"max_segment_bytes": 5 * 2**30},
               {"fsync": "sometimes"}):
        with pytest.raises((StorageError, ValueError)):
            StreamConfig(**kw)


def test_one_writer_per_directory(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        with pytest.raises(StorageError, match="another writer"):
            Stream.open(tmp_path / "s")
        s.append(b"still mine")
    with Stream.open(tmp_path / "s") as again:  # released at close
        assert again.next_offset == 1


def test_records_too_large_for_a_31_bit_length_are_refused(tmp_path, monkeypatch):
    import storage.stream
    monkeypatch.setattr(storage.stream, "MAX_RECORD_BYTES", 10)  # 2 GiB bodies are too slow here
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        with pytest.raises(StorageError):
            s.append(b"x" * 11)
        with pytest.raises(StorageError):
            s.append_batch([b"ok", b"x" * 11])
        assert s.append(b"x" * 10) == 0  # nothing was queued by the refused calls


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_fsync_policy_decides_when_callbacks_run(tmp_path, monkeypatch, policy):
    """A spy around the real os.writev / os.fdatasync records the order of writes, syncs and
    callbacks: under ``always`` every callback follows a sync of what was written before it;
    under ``interval`` (10 s here) and ``never`` callbacks follow the write, with no sync until
    close."""
    import storage.writer as mod
    events: list = []
    real_writev, real_sync = os.writev, os.fdatasync
    monkeypatch.setattr(mod.os, "writev", lambda fd, bufs: (events.append("write"),
                                                             real_writev(fd, bufs))[1])
    monkeypatch.setattr(mod.os, "fdatasync", lambda fd: (events.append("sync"), real_sync(fd))[1])
    cfg = StreamConfig(fsync=policy, fsync_interval_ms=10_000)
    with Stream.open(tmp_path / "s", cfg) as s:
        time.sleep(0.05)  # let the writer settle before the first append
        for i in range(200):
            s.append(b"%d" % i, None, lambda o, e: events.append(("cb", o)))
        s.flush()
        during = list(events)
    # after close nothing written is left unsynced
    assert [e for e in events if not isinstance(e, tuple)][-1] == "sync"
    assert [e[1] for e in during if isinstance(e, tuple)] == list(range(200))
    io = [e for e in during if not isinstance(e, tuple)]
    assert "write" in io
    if policy == "always":
        for k, e in enumerate(during):
            if isinstance(e, tuple):
                last_io = next(x for x in reversed(during[:k]) if not isinstance(x, tuple))
                assert last_io == "sync"
    elif policy == "interval":
        assert io.count("sync") <= 1  # at most one per 10 s (the first write may sync)
    else:
        assert "sync" not in io


def test_a_skipped_chunk_costs_only_its_header_and_filter(tmp_path):
    """bytes_read adds up exactly: index records, header + 16 filter bytes per chunk looked at, and the
    data section of each chunk read; a skipped chunk's data is never read."""
    cfg = StreamConfig(fsync="never", max_chunk_entries=10, filter_size=16)
    with Stream.open(tmp_path / "s", cfg) as s:
        for c in range(20):
            s.append_batch([b"z" * 200] * 10, [f"value-{c}"] * 10)
            s.flush()
        with s.reader(OffsetSpec.first(), ["value-7"]) as r:
            got = list(r)
    hdrs = chunks_on_disk(tmp_path / "s")
    data = {h.chunk_id: h.data_length for _, _, h in hdrs}
    read_ids = [c.chunk_id for c in got]
    assert 70 in read_ids and r.stats.chunks_read == len(read_ids)
    assert r.stats.chunks_skipped == 20 - len(read_ids)
    # every matched chunk is looked at twice (skip loop, then _read): `look` bytes more each
    look = CHUNK_HEADER_BYTES + 16
    expected = (INDEX_RECORD_BYTES * 20 + look * 20 + look * len(read_ids)
                + sum(data[i] for i in read_ids))
    assert r.stats.bytes_read == expected


def test_filter_values_may_be_bytes_or_bytearray(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        s.append_batch([b"1", b"2", b"3"], [b"blue", bytearray(b"red"), "green"])
        s.flush()
        for v in ("blue", "red", "green"):
            with s.reader(OffsetSpec.first(), [v]) as r:
                assert [o for c in r for o, _ in c.records] == [0, 1, 2]
        with s.reader(OffsetSpec.first(), ["nope"]) as r:
            assert list(r) == [] and r.stats.chunks_skipped == 1


def test_a_record_with_several_filter_values_is_read_by_a_reader_of_any(tmp_path):
    cfg = StreamConfig(fsync="never", max_chunk_entries=2)
    with Stream.open(tmp_path / "s", cfg) as s:
        s.append_batch([b"0", b"1"], [("red", "blue"), "red"])  # chunk 0
        s.append_batch([b"2", b"3"], [("green",), (b"blue", "pink")])  # chunk 2
        s.append(b"4", ())  # chunk 4: an empty tuple is a record without a value
        s.flush()
        for values, offsets in ((["blue"], [0, 1, 2, 3]), (["red"], [0, 1]),
                                (["green"], [2, 3]), (["pink"], [2, 3]), (["nope"], [])):
            with s.reader(OffsetSpec.first(), values) as r:
                assert [o for c in r for o, _ in c.records] == offsets, values
        with s.reader(OffsetSpec.first(), ["nope"], True) as r:
            assert [o for c in r for o, _ in c.records] == [4]
        with pytest.raises(StorageError):
            s.append(b"x", ("ok", 3))
        with pytest.raises(StorageError):
            s.append_batch([b"x"], [("ok", None)])


def test_a_bad_filter_value_is_refused_and_the_stream_keeps_working(tmp_path):
    with Stream.open(tmp_path / "s", StreamConfig(fsync="never")) as s:
        with pytest.raises(StorageError):
            s.append(b"x", 42)
        with pytest.raises(StorageError):
            s.append_batch([b"x", b"y"], ["ok", 3.5])
        assert s.append(b"fine", "ok") == 0
        s.flush()
        assert all_records(s) == [(0, b"fine")]


def test_interval_policy_syncs_an_idle_stream_within_the_interval(tmp_path, monkeypatch):
    import storage.writer as mod
    synced = threading.Event()
    real_sync = os.fdatasync
    monkeypatch.setattr(mod.os, "fdatasync", lambda fd: (synced.set(), real_sync(fd))[1])
    cfg = StreamConfig(fsync="interval", fsync_interval_ms=50)
    with Stream.open(tmp_path / "s", cfg) as s:
        time.sleep(0.1)  # the first write may sync at once: start with an old last sync
        s.append(b"a")
        s.flush()
        synced.clear()
        s.append(b"b")  # written now, synced by the writer's timed wait, without more appends
        s.flush()
        assert synced.wait(5), "no fsync of the idle stream"


def test_a_long_run_of_one_filter_value_ends_its_chunk(tmp_path):
    """Values in bursts get chunks of their own (a chunk ends after the first run of at least
    RUN_CUT_MIN entries that ends inside it), so a stage-1 reader of one value reads that
    burst's chunk only; interleaved values, short runs and one value throughout keep chunks of
    full size, and a named publisher's batch is never cut."""
    from storage.chunking import RUN_CUT_MIN

    run = RUN_CUT_MIN

    def sizes(values, name, writer=None):
        cfg = StreamConfig(fsync="never", max_chunk_entries=8 * run, min_chunk_entries=8 * run)
        with Stream.open(tmp_path / name, cfg) as s:
            s.append_batch([b"m%d" % i for i in range(len(values))], values, writer=writer)
            s.flush()
            with s.reader(OffsetSpec.first()) as r:
                got = [len(c.records) for c in r]
            with s.reader(OffsetSpec.first(), ["v2"]) as r:
                v2 = [len(c.records) for c in r]
        return got, v2

    bursts = [f"v{i // (2 * run)}" for i in range(8 * run)]
    assert sizes(bursts, "bursts") == ([2 * run] * 4, [2 * run])
    # a short tail of the burst before goes with the next run; the last run is not cut
    tail = ["a"] * 30 + ["v2"] * run + ["c"] * (2 * run) + ["d"] * 10 + ["e"] * (3 * run)
    assert sizes(tail, "tail") == ([30 + run, 2 * run, 10 + 3 * run], [30 + run])
    for name, values in (("interleaved", [f"v{i % 7}" for i in range(8 * run)]),
                         ("short", [f"v{i // (run - 1)}" for i in range(8 * run)]),
                         ("none", [None] * (8 * run))):
        assert sizes(values, name)[0] == [8 * run], name
    assert sizes(bursts, "named", writer=(b"pub", 8 * run))[0] == [8 * run]


def test_the_end_of_a_long_run_starts_a_chunk_across_appends(tmp_path):
    """A run counts whole across chunks and appends: 300 entries of B, then 20 more of B and
    700 without a value, make the 20 a chunk of their own, so a stage-1 reader of B is not
    sent the 700 (rabbitmq-stream-js-client's filtering test counts them); short runs after
    it stay together."""
    cfg = StreamConfig(fsync="never", min_chunk_entries=8192)  # sizes out of the way
    with Stream.open(tmp_path / "s", cfg) as s:
        s.append_batch([b"b"] * 300, ["B"] * 300)
        s.flush()
        s.append_batch([b"b"] * 20 + [b"u"] * 700, ["B"] * 20 + [None] * 700)
        s.flush()
        s.append_batch([b"a"] * 10 + [b"u"] * 5, ["A"] * 10 + [None] * 5)
        s.flush()
        with s.reader(OffsetSpec.first(), ["B"]) as r:
            to_b = sum(len(c.records) for c in r)
    assert [h.records for _, _, h in chunks_on_disk(tmp_path / "s")] == [300, 20, 700, 15]
    assert to_b == 320


def test_run_cut_ends_a_chunk_after_the_first_long_run_that_ends_inside_it():
    """``run_cut`` tests windows; the rule it implements, value by value, on random layouts."""
    import random

    from storage.chunking import RUN_CUT_MIN, run_cut

    def rule(values, i, n):
        start = i
        for k in range(i + 1, i + n):
            if values[k] != values[k - 1]:
                if k - start >= RUN_CUT_MIN:
                    return k - i
                start = k
        return n

    rnd = random.Random(11)
    lengths = [1, 3, RUN_CUT_MIN // 2 - 1, RUN_CUT_MIN // 2, RUN_CUT_MIN - 1, RUN_CUT_MIN,
               RUN_CUT_MIN + 1, 2 * RUN_CUT_MIN + 1]
    for _ in range(3000):
        values: list = [None] * rnd.randrange(RUN_CUT_MIN)
        for j in range(rnd.randrange(1, 12)):
            values += [rnd.choice([f"v{j}", "a", None])] * rnd.choice(lengths)
        i = rnd.randrange(len(values))
        n = rnd.randrange(1, len(values) - i + 1)
        assert run_cut(values, i, n) == rule(values, i, n), (i, n)


def test_a_sub_batch_queued_when_a_write_fails_leaves_no_count_behind(tmp_path, monkeypatch):
    """What was queued while a write failed is dropped with its record counts: a sub-batch
    entry's extra records counted on after the reopen put the next chunk at a wrong offset
    (negative here: it could not be written at all). A failing ``os.writev`` is mocked: a
    write error on demand, after something else was queued behind it."""
    import errno

    from storage.format import SubBatchEntry, encode_entries
    monkeypatch.setattr("storage.writer.RETRY_MIN_S", 0.05)
    entered, go = threading.Event(), threading.Event()
    real_writev = os.writev
    failing = [True]

    def writev(fd, bufs):
        if failing[0]:
            failing[0] = False
            entered.set()
            go.wait(10)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_writev(fd, bufs)
    monkeypatch.setattr("storage.writer.os.writev", writev)
    errors: list = []
    s = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    try:
        s.append(b"a", on_durable=lambda o, e: errors.append((o, e)))
        assert entered.wait(10)  # the writer is in the write that fails
        raw = encode_entries([b"r0", b"r1", b"r2"])
        s.append_batch([SubBatchEntry(0, 3, len(raw), raw)], records=3,
                       on_durable=lambda o, e: errors.append((o, e)))
        go.set()
        wait_for(lambda: len(errors) == 2, 10, "both appends failed")
        assert [e is not None for _, e in errors] == [True, True]
        taken: list = []

        def append() -> bool:  # refused until the backoff has passed
            try:
                taken.append(s.append(b"c"))
            except StreamClosedError:
                return False
            return True
        wait_for(append, 10, "appends taken again")
        s.flush(10)
        assert taken == [0] and s.next_offset == 1
    finally:
        s.close()
    assert all_records(tmp_path / "s") == [(0, b"c")]
