"""One walk over a segment's chunks, header after header from the segment header on.

Why one: recovery (which chunks of a segment are whole, to cut a torn tail) and the ``inspect``
tool (a dump of every chunk as it is on disk) must agree on what a valid chunk is, so both walk
with ``walk_segment`` and judge each chunk with ``check_chunk``. Recovery also probes arbitrary
positions with ``check_chunk`` when it looks for a valid chunk after a bad one. Nothing here
writes; a segment a writer is appending to is walked as far as it is written.

A chunk is valid when its header decodes (``format.decode_header``), it has at least one record
and one entry's worth of data, it lies wholly within the file, and the CRC of its data section
matches. The walk goes on after a chunk whose CRC (or record count) is bad, since its header
still says where the next one starts; it stops after a header that does not decode or a chunk
that runs past the end of the file.
"""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple

from storage.crc import crc32
from storage.errors import CorruptionError
from storage.files import pread_exact
from storage.format import (
    CHUNK_HEADER_BYTES,
    CHUNK_MAGIC_VERSION,
    SEGMENT_HEADER_BYTES,
    SIMPLE_ENTRY,
    ChunkHeader,
    decode_header,
)

__all__ = ["SegmentChunk", "check_chunk", "walk_segment"]


class SegmentChunk(NamedTuple):
    """What is at ``position`` of a segment.

    ``header`` is None when no chunk header decodes there; ``torn`` when the chunk runs past the
    end of the file; ``crc_ok`` when its data section was read and matches the header's CRC;
    ``problem`` says why the chunk is not valid (None: valid). ``filter_bits`` only when asked.
    """

    position: int
    header: ChunkHeader | None
    problem: str | None
    torn: bool = False
    crc_ok: bool = False
    filter_bits: bytes = b""

    @property
    def valid(self) -> bool:
        return self.problem is None

    @property
    def end(self) -> int | None:
        """The byte position after this chunk (where the next one starts), if a header decodes."""
        return None if self.header is None else self.position + self.header.size


def check_chunk(fd: int, position: int, file_size: int, path: str, *,
                with_filter: bool = False) -> SegmentChunk:
    """Judge the chunk at ``position`` (reading its header, its data section, and with
    ``with_filter`` its filter bytes)."""
    if position < SEGMENT_HEADER_BYTES:
        return SegmentChunk(position, None, "inside the segment header")
    head = os.pread(fd, CHUNK_HEADER_BYTES, position)
    if len(head) < CHUNK_HEADER_BYTES:
        return SegmentChunk(position, None, f"torn chunk header: {len(head)} bytes in the file")
    if head[0] != CHUNK_MAGIC_VERSION:
        return SegmentChunk(position, None, f"bad chunk magic/version byte {head[0]:#04x}")
    try:
        h = decode_header(head, path=path, position=position)
    except CorruptionError as exc:
        return SegmentChunk(position, None, exc.reason)
    if position + h.size > file_size:
        return SegmentChunk(position, h, f"torn chunk: needs {h.size} bytes, "
                                         f"{file_size - position} in the file", torn=True)
    bits = b""
    if with_filter and h.filter_size:
        bits = pread_exact(fd, h.filter_size, position + CHUNK_HEADER_BYTES)
    data = pread_exact(fd, h.data_length, position + CHUNK_HEADER_BYTES + h.filter_size)
    crc_ok = len(data) == h.data_length and crc32(data) == h.crc
    problem = None
    if not crc_ok:
        problem = "CRC mismatch in the data section"
    elif h.records < 1 or h.data_length < SIMPLE_ENTRY.size:
        problem = f"chunk with {h.records} records and {h.data_length} data bytes"
    return SegmentChunk(position, h, problem, crc_ok=crc_ok, filter_bits=bits)


def walk_segment(fd: int, path: str, *, with_filter: bool = False) -> Iterator[SegmentChunk]:
    """Every chunk of the open segment ``fd``, in file order, from the segment header to the end
    of the file (as long as it is when the walk starts), each judged by ``check_chunk``. Stops
    after a chunk whose header does not decode or that is torn (nothing after it can be found
    by walking)."""
    file_size = os.fstat(fd).st_size
    pos = SEGMENT_HEADER_BYTES
    while pos < file_size:
        chunk = check_chunk(fd, pos, file_size, path, with_filter=with_filter)
        yield chunk
        if chunk.header is None or chunk.torn:
            return
        pos += chunk.header.size
