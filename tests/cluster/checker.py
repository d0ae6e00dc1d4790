"""The cluster checker: reads every member's data directory (the files alone, as the broker
wrote them) and compares them with each other and with what clients saw confirmed.

Why files: what a member holds is what survives; the checker trusts no broker answer. The
Jepsen-style tests reuse it after their faults: ``check`` raises ``AssertionError`` naming the
first difference, and returns what it found.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from amqp_stream.wire import decode, split_sections
from storage import OffsetSpec
from storage.errors import CorruptionError
from storage.reader import DirectorySource, Reader

DATA_SECTION = 0x75

__all__ = ["log_dir", "local_end", "log_end", "last_epoch", "raw_chunks", "records", "body_of", "Report", "check"]


def log_dir(data_dir: str | os.PathLike[str], stream: str) -> Path:
    """The storage directory of ``stream`` under a broker's data directory."""
    root = Path(data_dir) / "streams"
    for d in root.iterdir():
        meta = d / "stream.json"
        if meta.is_file() and json.loads(meta.read_text("utf-8"))["name"] == stream:
            return d / "log"
    raise FileNotFoundError(f"no stream {stream!r} under {root}")


def raw_chunks(directory: str | os.PathLike[str]) -> list[tuple[int, int, int, bytes]]:
    """Every chunk of a log as ``(chunk id, epoch, next offset, bytes as on disk)``."""
    out = []
    with Reader(DirectorySource(os.fspath(directory)), OffsetSpec.first()) as r:
        while (c := r.read_raw()) is not None:
            out.append((c.chunk_id, c.epoch, c.next_offset, os.pread(c.fd, c.size, c.position)))
    return out


def log_end(directory: str | os.PathLike[str]) -> int | None:
    """The end of the log in ``directory``, for polling a live member: ``None`` while it reads
    as cut short (a member truncating its tail under the reader, as a deposed leader does)."""
    return _last(directory, 2)


def last_epoch(directory: str | os.PathLike[str]) -> int | None:
    """The epoch of the last chunk of the log in ``directory`` (0: empty), polled as
    ``log_end``."""
    return _last(directory, 1)


def _last(directory: str | os.PathLike[str], field: int) -> int | None:
    try:
        chunks = raw_chunks(directory)
    except CorruptionError:
        return None
    return chunks[-1][field] if chunks else 0


def local_end(broker, stream: str) -> int:
    """The end of ``stream``'s log in ``broker``'s data directory (0: empty or none yet)."""
    try:
        chunks = raw_chunks(log_dir(broker.data_dir, stream))
    except FileNotFoundError:
        return 0
    return chunks[-1][2] if chunks else 0


def records(directory: str | os.PathLike[str], end: int | None = None) -> list[tuple[int, bytes]]:
    """``(offset, stored bytes)`` of every user record below ``end``."""
    out = []
    with Reader(DirectorySource(os.fspath(directory)), OffsetSpec.first()) as r:
        for chunk in r:
            out += [(o, bytes(b)) for o, b in chunk.records if end is None or o < end]
    return out


def body_of(stored: bytes) -> bytes:
    """The body of a stored AMQP message: its data sections' bytes, joined."""
    parts = []
    for code, _, value, end in split_sections(stored):
        if code == DATA_SECTION:
            parts.append(bytes(decode(stored[value:end])[0]))
    return b"".join(parts)


@dataclass
class Report:
    ends: dict[str, int]  # each member's log end
    common: int  # the end up to which every member is byte-identical
    found: int  # confirmed messages found below it
    extra: dict[str, int] = field(default_factory=dict)  # chunks past ``common``, by member


def check(members: Mapping[str, str | os.PathLike[str]], stream: str,
          confirmed: Iterable[bytes], at_least: int = 0) -> Report:
    """Every member's log is byte-identical, chunk for chunk, up to the shortest one's end
    (from the latest first offset retention left on any of them),
    which must reach ``at_least`` (the commit offset the test knows of); every ``confirmed``
    body (unique bytes each; ``body_of`` a stored AMQP message) is in exactly one record below
    it: none lost, none duplicated."""
    logs = {name: raw_chunks(log_dir(d, stream)) for name, d in members.items()}
    ends = {name: (chunks[-1][2] if chunks else 0) for name, chunks in logs.items()}
    common = min(ends.values())
    assert common >= at_least, f"a member's log ends at {common}, before {at_least}: {ends}"
    # retention runs on each member: compare from the latest first offset any of them keeps
    first = max((chunks[0][0] for chunks in logs.values() if chunks), default=0)
    reference_name = next(iter(logs))
    reference = [c for c in logs[reference_name] if first <= c[0] and c[2] <= common]
    for name, chunks in logs.items():
        mine = [c for c in chunks if first <= c[0] and c[2] <= common]
        for a, b in zip(reference, mine, strict=False):
            assert a == b, (f"{name} differs from {reference_name} at chunk {b[0]} (epoch "
                            f"{b[1]} vs {a[1]})")
        assert len(mine) == len(reference), f"{name}: {len(mine)} chunks, {len(reference)}"
    counts: dict[bytes, int] = {}
    for _, stored in records(log_dir(members[reference_name], stream), common):
        body = body_of(stored)
        counts[body] = counts.get(body, 0) + 1
    found = 0
    for body in confirmed:
        holding = counts.get(body, 0)
        assert holding == 1, f"confirmed message {body!r} is in {holding} records"
        found += 1
    extra = {name: sum(1 for c in chunks if c[2] > common) for name, chunks in logs.items()}
    return Report(ends, common, found, extra)
