"""The two verbs replication needs from storage, on real files: ``append_chunks`` (whole chunks
as another log holds them) and ``truncate``, with ``read_raw`` (chunks as they lie on disk).

A copy made chunk by chunk must be the same files as its source (segments and indexes byte for
byte); a copy holding chunks the source never had is cut back and converges."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import OffsetSpec, StorageError, Stream, StreamClosedError, StreamConfig
from storage.errors import StaleEpochError
from storage.files import list_files
from storage.format import CHUNK_HEADER_BYTES, HEADER_CRC_AT


def files_of(directory) -> dict[str, bytes]:
    """Every segment and index file of a log, by name (the lock file and sidecars aside)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".segment", ".index")):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def raw_chunks(stream: Stream, offset: int = 0) -> list[tuple[bytes, bool]]:
    """Every chunk from ``offset`` to the local end, as ``append_chunks`` takes them."""
    out = []
    with stream.replication_reader(offset) as reader:
        while (c := reader.read_raw()) is not None:
            out.append((os.pread(c.fd, c.size, c.position), c.first))
    return out


def fill(stream: Stream, batches: list[list[int]], epoch_at: dict[int, int] | None = None) -> None:
    """Append ``batches`` (sizes of records), with a consumer offset and a named publisher now
    and then, so tracking chunks and trailers are copied too."""
    seq = 0
    for k, sizes in enumerate(batches):
        if epoch_at and k in epoch_at:
            stream.flush()
            stream.set_epoch(epoch_at[k])
        bodies = [bytes([k % 251]) * n for n in sizes]
        if k % 3 == 1:
            ids = list(range(seq + 1, seq + 1 + len(bodies)))
            seq = ids[-1]
            stream.append_deduplicated("producer-1", bodies, ids)
        else:
            stream.append_batch(bodies, [f"v{k % 4}"] * len(bodies))
        if k % 4 == 3:
            stream.store_offset("consumer-1", k)
        stream.flush()


CONFIG = dict(max_segment_bytes=4000, max_chunk_entries=16, min_chunk_entries=2,
              fsync="never")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=40), min_size=1,
                        max_size=12),
       step=st.integers(1, 7))
def test_chunks_copied_one_log_into_another_give_identical_files(tmp_path_factory, batches, step):
    base = tmp_path_factory.mktemp("copy")
    src = Stream.open(base / "src", StreamConfig(**CONFIG))
    dst = Stream.open(base / "dst", StreamConfig(**CONFIG))
    dst.set_follower(True)
    try:
        fill(src, batches, {len(batches) // 2: 3})
        # closed first: a rollover's tracking snapshot, reserved after the flush returned, is
        # written by then
        src.close()
        chunks = raw_chunks(src)
        for i in range(0, len(chunks), step):  # in runs, as replication receives them
            dst.append_chunks(chunks[i:i + step])
        assert dst.local_end == src.local_end
        assert dst.last_epoch == src.last_epoch
        assert dst.tracking() == src.tracking()
        assert dst.query_sequence("producer-1") == src.query_sequence("producer-1")
    finally:
        src.close()
        dst.close()
    assert files_of(base / "dst") == files_of(base / "src")
    assert len(list_files(str(base / "src"))[0]) >= 1


def test_truncate_then_append_converges(tmp_path):
    """A member that holds chunks of an old epoch the leader never had: cut back to where the
    logs agree, then the leader's chunks make it the same files."""
    cfg = StreamConfig(**{**CONFIG, "max_segment_bytes": 1 << 20})  # no rollover snapshots
    leader = Stream.open(tmp_path / "leader", cfg)
    old = Stream.open(tmp_path / "old", cfg)
    old.set_follower(True)
    try:
        fill(leader, [[50] * 10] * 6)
        common = leader.local_end
        old.append_chunks(raw_chunks(leader))
        # the old member, leader of epoch 1 still, wrote more that nobody else got
        old.set_follower(False)
        fill(old, [[70] * 9] * 8)
        assert old.local_end > common
        # the new leader, epoch 2, wrote different chunks at the same offsets
        leader.set_epoch(2)
        fill(leader, [[30] * 5] * 11)
        old.set_follower(True)
        # the handshake: the old member's last chunk of epoch 1 is not the leader's
        assert leader.epoch_at(old.last_chunk_id) != (old.last_epoch, old.local_end)
        cut = old.truncate(common)
        assert cut == common and old.local_end == common
        old.append_chunks(raw_chunks(leader, common))
        assert old.local_end == leader.local_end
        assert old.tracking() == leader.tracking()
    finally:
        leader.close()
        old.close()
    assert files_of(tmp_path / "old") == files_of(tmp_path / "leader")


def test_truncate_inside_a_chunk_cuts_at_its_start_and_across_segments(tmp_path):
    s = Stream.open(tmp_path / "s", StreamConfig(**CONFIG))
    try:
        fill(s, [[100] * 12] * 10)
        starts = list(s.segment_starts())
        assert len(starts) > 2
        with s.replication_reader(0) as r:
            ids = []
            while (c := r.read_raw()) is not None:
                ids.append((c.chunk_id, c.next_offset))
        # a chunk of several records: cut inside it
        chunk_id, nxt = next((a, b) for a, b in ids if b - a > 2 and a > starts[1])
        assert s.truncate(chunk_id + 1) == chunk_id
        assert s.local_end == chunk_id
        assert [x for x in s.segment_starts()] == [x for x in starts if x <= chunk_id]
        # the log goes on from there, readable
        s.set_follower(False)
        s.append_batch([b"after"], None)
        s.flush()
        with s.reader(OffsetSpec.offset(chunk_id)) as r:
            got = [(o, bytes(b)) for c in r for o, b in c.records]
        assert got == [(chunk_id, b"after")]
    finally:
        s.close()


def test_refused_chunks(tmp_path):
    cfg = StreamConfig(**CONFIG)
    src = Stream.open(tmp_path / "src", cfg)
    dst = Stream.open(tmp_path / "dst", cfg)
    dst.set_follower(True)
    try:
        src.set_epoch(5)
        fill(src, [[10] * 4] * 3)
        chunks = raw_chunks(src)
        with pytest.raises(StorageError, match="next offset"):
            dst.append_chunks(chunks[1:2])
        bad = bytearray(chunks[0][0])
        bad[CHUNK_HEADER_BYTES + 5] ^= 0xFF  # in the filter or data: data below
        bad_crc = bytearray(chunks[0][0])
        bad_crc[HEADER_CRC_AT] ^= 0xFF
        with pytest.raises(StorageError, match="CRC"):
            dst.append_chunks([(bytes(bad_crc), True)])
        assert dst.local_end == 0
        dst.append_chunks(chunks[:1])
        # an older epoch than the last one written: refused (a deposed leader's)
        older = Stream.open(tmp_path / "older", cfg)
        try:
            older.set_epoch(4)
            older.append_batch([b"x"] * (dst.local_end - 0), None)  # pad to the same offset
            older.append_batch([b"stale"], None)
            older.flush()
            stale = [c for c in raw_chunks(older) if c[0][24:32] == dst.local_end.to_bytes(8, "big")]
        finally:
            older.close()
        assert stale, "a chunk at the replica's next offset"
        with pytest.raises(StaleEpochError):
            dst.append_chunks([(stale[0][0], False)])
        # a replica takes no appends of its own
        with pytest.raises(StreamClosedError, match="replica"):
            dst.append_batch([b"own"], None)
    finally:
        src.close()
        dst.close()


def test_commit_gate_holds_confirms_and_readers(tmp_path):
    """A replicated stream: confirms and readers wait for the cluster's commit, not the disk."""
    s = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    try:
        s.gate_commit(0)
        confirmed = []
        s.append_batch([b"a", b"b"], None, on_durable=lambda o, e: confirmed.append((o, e)))
        s.flush()  # two chunks: the commit moves at chunk boundaries
        s.append_batch([b"c"], None, on_durable=lambda o, e: confirmed.append((o, e)))
        s.flush()
        assert s.local_end == 3 and s.next_offset == 0 and confirmed == []
        with s.reader(OffsetSpec.first()) as r:
            assert list(r) == []
        s.set_commit(2, 0)
        assert confirmed == [(1, None)] and s.next_offset == 2
        with s.reader(OffsetSpec.first()) as r:
            assert [o for c in r for o, _ in c.records] == [0, 1]
        s.set_commit(3, 2)
        assert confirmed == [(1, None), (2, None)] and s.committed_chunk_id == 2
    finally:
        s.close()


def test_ungate_gives_the_commit_back_to_the_local_log(tmp_path):
    s = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    try:
        s.gate_commit(0)
        confirmed = []
        s.append_batch([b"a"], None, on_durable=lambda o, e: confirmed.append((o, e)))
        s.flush()
        assert confirmed == [] and s.next_offset == 0
        s.ungate()
        assert confirmed == [(0, None)] and s.next_offset == 1 and s.commit_gate is None
        s.append_batch([b"b"], None, on_durable=lambda o, e: confirmed.append((o, e)))
        s.flush()
        assert confirmed[-1] == (1, None)
        s.gate_commit(2)
        s.append_batch([b"c"], None, on_durable=lambda o, e: confirmed.append((o, e)))
        s.flush()
        assert s.fail_held(StreamClosedError("gone")) == 1
        assert confirmed[-1][0] == 2 and isinstance(confirmed[-1][1], StreamClosedError)
    finally:
        s.close()
