"""Damaged chunks on the replication path, on real files: a leader's ``read_raw`` (chunks sent
as they lie on disk with ``os.sendfile``) and a follower's ``append_chunks``.

The damage kinds are ``test_damaged_chunks``'s (``DAMAGE``), done to the middle chunk of the
older segment. What must hold: ``read_raw`` gives only chunks whose header is the one written
and whose bytes lie inside the segment file (the data may differ only under a CRC that fails,
which the follower refuses), or raises ``CorruptionError`` naming the segment; the follower
refuses a batch holding the damaged chunk before writing any of it.
"""

from __future__ import annotations

import os
import zlib

import pytest

from storage import CorruptionError, StorageError, Stream
from storage.format import decode_header
from tests.storage.test_damaged_chunks import CHUNKS, DAMAGE, DAMAGED, HB, _config, _damaged, _index
from tests.storage.test_replication_verbs import files_of

pytestmark = pytest.mark.timeout(60)

# Known hole (not fixed): the last indexed chunk has no next index record to check its header
# against, only the file's size; a smaller size or another record count goes out as good (the
# follower then refuses the leader's next chunk as not at its next offset, for ever).
#: what the newest indexed chunk's check (against the file's size only: no next index record)
#: does not see, as docs/storage.md says; for it the test holds the other kinds of damage
TAIL_HOLE = ("records less", "records more", "data length less", "no filter")


def _raw_all(stream: Stream, written: dict) -> tuple[list[tuple[bytes, bool]], Exception | None]:
    """Every chunk ``read_raw`` gives until the end or an error, each checked before it is read
    (as the leader sends it: ``size`` bytes at ``position``)."""
    got: list[tuple[bytes, bool]] = []
    with stream.replication_reader(0) as r:
        for _ in range(10 * CHUNKS):  # (a reader going round in circles fails here, not hangs)
            try:
                c = r.read_raw()
            except CorruptionError as exc:
                return got, exc
            if c is None:
                return got, None
            h, data = written[c.chunk_id]
            assert (c.size, c.next_offset) == (h.size, h.chunk_id + h.records)
            assert c.position + c.size <= os.fstat(c.fd).st_size  # (never a damaged length)
            chunk = os.pread(c.fd, c.size, c.position)
            sent = decode_header(chunk)
            at = HB + sent.filter_size
            if chunk[at:at + sent.data_length] != data or sent.crc != h.crc:
                assert zlib.crc32(chunk[at:at + sent.data_length]) != sent.crc  # refused there
            else:
                assert sent == h
            got.append((chunk, c.first))
    raise AssertionError("read_raw did not come to an end")


@pytest.mark.parametrize("damage, chunk", [(d, DAMAGED) for d in DAMAGE]
                         + [(d, CHUNKS - 1) for d in DAMAGE if d not in TAIL_HOLE])
def test_read_raw_gives_chunks_as_written_or_names_the_damage(tmp_path, damage, chunk):
    s, written, seg = _damaged(str(tmp_path / "s"), False, damage, chunk)
    try:
        got, error = _raw_all(s, written)
    finally:
        s.close()
    assert error is None or error.path == seg
    assert [decode_header(c).chunk_id for c, _ in got] == sorted(written)[:len(got)]


@pytest.mark.parametrize("damage", [d for d in DAMAGE if d != "index past the end"])
def test_a_follower_refuses_the_damaged_chunk_before_writing_any(tmp_path, damage):
    """The damaged chunk as a leader that did not check would send it (its bytes where the
    index puts it), between intact ones. (An index record past the end damages no chunk.)"""
    s, written, _ = _damaged(str(tmp_path / "s"), False, damage)
    s.close()
    index = _index(str(tmp_path / "s"))
    chunks = []
    for number in range(DAMAGED + 2):
        seg, _, rec = index[number]
        size = written[rec[0]][0].size
        with open(seg, "rb") as f:
            f.seek(rec[3])
            chunks.append((f.read(size), number == 0))
    follower = Stream.open(str(tmp_path / "f"), _config(False))
    follower.set_follower(True)
    try:
        before = files_of(tmp_path / "f")
        with pytest.raises(StorageError):
            follower.append_chunks(chunks)
        assert files_of(tmp_path / "f") == before
        assert follower.local_end == 0
    finally:
        follower.close()
