"""Offset tracking and publisher sequences: the state osiris keeps beside a stream's data.

Why here: consumers resume where they stopped and publishers are deduplicated from state kept
in the stream itself, in osiris's own format (``osiris_tracking.erl``), so the same directory
gives RabbitMQ and this broker the same answers, and retention cannot separate the state from
the data it describes.

Strategy (as osiris does it):
- Three kinds of record (``format.TrackingRecord``): type 0, a publisher reference's last
  publishing id ("sequence"); type 1, a consumer name's stored offset; type 2, a timestamp
  (written by RabbitMQ only; carried along here).
- A user chunk's trailer holds the sequences of the publishers whose messages it carries; a
  tracking delta chunk (type 1) holds stored offsets; a tracking snapshot chunk (type 2) holds
  the whole state, and is the first chunk of every segment once there is any state, so the
  newest segment alone is enough to rebuild it: ``load`` replays the newest segment's snapshot,
  deltas and trailers, reading only those chunks' entry or trailer bytes.
- A snapshot drops consumer offsets below the stream's first offset and timestamps before its
  first timestamp, and keeps only the ``max_sequences`` most recently written publishers
  (osiris's ``max_sequences``; its default is 255, ours ``StreamConfig.tracking_max_sequences``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from storage.errors import CorruptionError, StorageError
from storage.files import index_path, pread_exact, read_index_records, segment_path
from storage.format import (
    CHUNK_HEADER_BYTES,
    CHUNK_TRACKING_DELTA,
    CHUNK_TRACKING_SNAPSHOT,
    CHUNK_USER,
    SIMPLE_ENTRY,
    TRACKING_OFFSET,
    TRACKING_SEQUENCE,
    TRACKING_TYPE_TIMESTAMP,
    ChunkHeader,
    TrackingRecord,
    decode_header,
    decode_tracking,
)

__all__ = ["MAX_ID_BYTES", "U64_MAX", "TrackingState", "chunk_tracking", "load", "tracking_id"]

MAX_ID_BYTES = 255  # the id length is one byte
U64_MAX = (1 << 64) - 1


def tracking_id(name: str | bytes, what: str) -> bytes:
    """A consumer name or publisher reference as the bytes stored (UTF-8 for ``str``)."""
    raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    if not 0 < len(raw) <= MAX_ID_BYTES:
        raise StorageError(f"a {what} is 1..{MAX_ID_BYTES} bytes, not {len(raw)}")
    return raw


class TrackingState:
    """The state as written: ``offsets`` name -> offset, ``sequences`` reference ->
    ``(chunk id, sequence)``, ``timestamps`` name -> ms."""

    __slots__ = ("offsets", "sequences", "timestamps")

    def __init__(self) -> None:
        self.offsets: dict[bytes, int] = {}
        self.sequences: dict[bytes, tuple[int, int]] = {}
        self.timestamps: dict[bytes, int] = {}

    @property
    def empty(self) -> bool:
        return not (self.offsets or self.sequences or self.timestamps)

    def apply(self, chunk_id: int, records: Iterable[TrackingRecord]) -> None:
        """A trailer's or a delta's records, found in chunk ``chunk_id``."""
        for r in records:
            if r.type == TRACKING_SEQUENCE:
                self.sequences[r.id] = (chunk_id, r.value)
            elif r.type == TRACKING_OFFSET:
                self.offsets[r.id] = r.value
            else:
                self.timestamps[r.id] = r.value

    def reset(self, snapshot: Iterable[TrackingRecord]) -> None:
        """Replace the state with a snapshot's (osiris: ``init(SnapshotBin, ...)``)."""
        self.offsets, self.sequences, self.timestamps = {}, {}, {}
        for r in snapshot:
            if r.type == TRACKING_SEQUENCE:
                self.sequences[r.id] = (r.chunk_id or 0, r.value)
            elif r.type == TRACKING_OFFSET:
                self.offsets[r.id] = r.value
            else:
                self.timestamps[r.id] = r.value

    def snapshot(self, first_offset: int, first_timestamp: int,
                 max_sequences: int) -> list[TrackingRecord]:
        """Trim the state as osiris does before a snapshot, and return the snapshot's records
        (sorted by type, then id, so the same state gives the same bytes)."""
        self.offsets = {k: v for k, v in self.offsets.items() if v >= first_offset}
        self.timestamps = {k: v for k, v in self.timestamps.items() if v >= first_timestamp}
        if len(self.sequences) > max_sequences:
            newest = sorted(self.sequences.items(), key=lambda kv: kv[1][0])[-max_sequences:] \
                if max_sequences else []
            self.sequences = dict(newest)
        out = [TrackingRecord(TRACKING_SEQUENCE, k, seq, chid)
               for k, (chid, seq) in sorted(self.sequences.items())]
        out += [TrackingRecord(TRACKING_OFFSET, k, v) for k, v in sorted(self.offsets.items())]
        out += [TrackingRecord(TRACKING_TYPE_TIMESTAMP, k, v) for k, v in sorted(self.timestamps.items())]
        return out


def chunk_tracking(fd: int, position: int, h: ChunkHeader,
                   path: str = "?") -> list[TrackingRecord]:
    """The tracking records of the chunk at ``position``: a tracking chunk's single entry, or a
    user chunk's trailer (empty when it has none). Reads only those bytes."""
    if h.type == CHUNK_USER:
        if not h.trailer_length:
            return []
        at = position + CHUNK_HEADER_BYTES + h.filter_size + h.data_length
        buf = pread_exact(fd, h.trailer_length, at)
        if len(buf) != h.trailer_length:
            raise CorruptionError(path, at, "trailer runs past the end of the segment")
        return decode_tracking(buf, path=path, position=at)
    at = position + CHUNK_HEADER_BYTES + h.filter_size
    data = pread_exact(fd, h.data_length, at)
    if len(data) != h.data_length or len(data) < SIMPLE_ENTRY.size:
        raise CorruptionError(path, at, "tracking chunk's entry runs past the end of the segment")
    (length,) = SIMPLE_ENTRY.unpack_from(data, 0)
    if length & 0x80000000 or SIMPLE_ENTRY.size + length != len(data):
        raise CorruptionError(path, at, "a tracking chunk holds one simple entry")
    return decode_tracking(data[SIMPLE_ENTRY.size:], snapshot=h.type == CHUNK_TRACKING_SNAPSHOT,
                           path=path, position=at)


def _tracking_chunks(fd: int, directory: str, start: int,
                     path: str) -> list[tuple[int, ChunkHeader]]:
    """The chunks of a segment that carry tracking, from its index and chunk headers."""
    ifd = os.open(index_path(directory, start), os.O_RDONLY)
    try:
        records = read_index_records(ifd)
    finally:
        os.close(ifd)
    out = []
    for rec in records:
        h = decode_header(pread_exact(fd, CHUNK_HEADER_BYTES, rec.position), path=path,
                          position=rec.position)
        if h.type != CHUNK_USER or h.trailer_length:
            out.append((rec.position, h))
    return out


def load(directory: str, start: int,
         chunks: Sequence[tuple[int, ChunkHeader]] | None = None) -> TrackingState:
    """The state at the end of the segment ``start`` (the newest), replayed from its chunks
    ``(position, header)`` in file order: recovery's scan, of which only the chunks that carry
    tracking are needed; None reads the segment's index and chunk headers instead."""
    state = TrackingState()
    path = segment_path(directory, start)
    fd = os.open(path, os.O_RDONLY)
    try:
        if chunks is None:
            chunks = _tracking_chunks(fd, directory, start, path)
        for position, h in chunks:
            if h.type == CHUNK_TRACKING_SNAPSHOT:
                state.reset(chunk_tracking(fd, position, h, path))
            elif h.type == CHUNK_TRACKING_DELTA or h.trailer_length:
                state.apply(h.chunk_id, chunk_tracking(fd, position, h, path))
    finally:
        os.close(fd)
    return state
