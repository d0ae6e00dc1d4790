"""Cutting a log back to an offset: what a cluster member does when it comes back holding
chunks the new leader never had (only unconfirmed data can be there).

Why a module of its own: it is the one place where the committed log shrinks, so it runs
only on a closed directory (``Stream.truncate`` stops the writer around it) and leaves what
recovery expects: index first, then segment, for whole segments removed (as retention
removes them); a cut segment is cut at a chunk boundary, then its index at the matching
record, each fsynced, then the directory. A crash in the middle leaves a log recovery opens;
the member's next handshake cuts it again.
"""

from __future__ import annotations

import os

from storage.files import (create_segment, fsync_dir, index_path, list_segments,
                           read_index_records, segment_path)
from storage.format import CHUNK_HEADER_BYTES, INDEX_HEADER_BYTES, INDEX_RECORD_BYTES, decode_header

__all__ = ["truncate_log", "reset_log"]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def truncate_log(directory: str, end: int, sync: bool = True) -> int:
    """Remove every chunk at or after ``end`` (a chunk holding ``end`` goes whole: the log is
    cut at chunk boundaries); returns the new end. A log cut to nothing gets an empty
    segment named ``end``, so it goes on from there."""
    starts = list_segments(directory)
    new_end = end
    for start in reversed(starts):
        if start < end:
            break
        _unlink(index_path(directory, start))
        _unlink(segment_path(directory, start))
        starts.pop()
    if starts:
        last = starts[-1]
        ifd = os.open(index_path(directory, last), os.O_RDWR)
        try:
            records = read_index_records(ifd)
            keep = 0  # the chunks kept: those starting before ``end`` ...
            while keep < len(records) and records[keep].chunk_id < end:
                keep += 1
            # ... but for one holding ``end`` (a chunk cannot be split)
            if keep and _end_of(directory, last, records[keep - 1].position) > end:
                keep -= 1
            if keep < len(records):
                new_end = records[keep].chunk_id
                # the segment first: an index ahead of its segment loses the records without
                # a chunk at recovery, where a segment ahead of its index would get them back
                sfd = os.open(segment_path(directory, last), os.O_RDWR)
                try:
                    os.ftruncate(sfd, records[keep].position)
                    if sync:
                        os.fsync(sfd)
                finally:
                    os.close(sfd)
                os.ftruncate(ifd, INDEX_HEADER_BYTES + keep * INDEX_RECORD_BYTES)
                if sync:
                    os.fsync(ifd)
            else:
                new_end = _end_of(directory, last, records[-1].position) if records else last
        finally:
            os.close(ifd)
        if keep == 0 and len(starts) > 1:  # an empty segment after others: it goes
            _unlink(index_path(directory, last))
            _unlink(segment_path(directory, last))
            starts.pop()
    if not starts:
        create_segment(directory, new_end, sync)
    if sync:
        fsync_dir(directory)
    return new_end


def _end_of(directory: str, start: int, position: int) -> int:
    """The offset after the chunk at ``position`` of segment ``start``."""
    fd = os.open(segment_path(directory, start), os.O_RDONLY)
    try:
        return decode_header(os.pread(fd, CHUNK_HEADER_BYTES, position)).next_offset
    finally:
        os.close(fd)


def reset_log(directory: str, start: int, sync: bool = True) -> None:
    """Drop the whole log and start it again empty at ``start``: a member whose log ends
    before the first offset its leader still keeps (retention removed what lies between)."""
    for first in reversed(list_segments(directory)):
        _unlink(index_path(directory, first))
        _unlink(segment_path(directory, first))
    create_segment(directory, start, sync)
    if sync:
        fsync_dir(directory)
