"""The broker's streams: name -> open ``storage.Stream`` with its declared arguments.

Strategy: each stream has a directory under ``<data-dir>/streams/`` named after the stream
(percent-encoded, or a hash for very long names). It holds ``stream.json`` (name, arguments,
creation time; replaced atomically: temp file, fsync, ``os.replace``, fsync of the directory)
and ``log/``, the storage directory (segments and indexes). At start every directory with a
``stream.json`` is opened again with its arguments, so a restart recovers every stream.
Deleting a stream closes it, renames its directory into ``<data-dir>/trash/`` (one atomic step;
the stream is gone even if the process dies now) and removes it; leftovers in ``trash/`` are
removed at the next start.

The writer thread's "committed end moved" notifications arrive through ``on_moved(name)``,
which the server hands over to its event loop; nothing here touches proton.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import storage
from amqp_stream import derived_keys
from amqp_stream.columns import column_matcher
from storage.files import fsync_dir, index_path, read_index_tuples, replace_file
from amqp_stream.config import BrokerConfig
from amqp_stream.errors import ResourceDeleted
from sqlfilter.required import needles_of
from storage.format import CHUNK_USER, SubBatchEntry, run_entries

__all__ = ["StreamEntry", "Registry", "stream_config"]

log = logging.getLogger(__name__)

META = "stream.json"
LOG_DIR = "log"


@dataclass
class StreamEntry:
    name: str
    arguments: dict
    directory: Path
    stream: Any  # storage.Stream
    consumers: set = field(default_factory=set)  # consumer objects (the server's)
    publishers: set = field(default_factory=set)
    listener: Callable[[], None] | None = None
    metrics: Any = None  # metrics.StreamMetrics, set by the server
    deleted: bool = False
    # per segment start: (index records counted, how many were tracking chunks, whether the
    # segment is done); see ``counts``
    tracking_seen: dict[int, tuple[int, int, bool]] = field(default_factory=dict)

    def counts(self) -> tuple[int, int, int]:
        """``(first offset kept, next offset, messages kept)``, one consistent view: the
        messages are the committed offsets less those of tracking chunks (one each: a consumer
        offset or a snapshot is a chunk of one record), which are no messages.

        The tracking chunks are read from the index files, each record once, and only those
        below the committed end read first: the writer writes a group's index records before
        it moves the committed end (and confirms), so a record beyond it is not counted yet
        (``next - first`` does not hold it either), nor taken as read. A segment is done once a
        newer one exists (the writer rolls over after writing the old one's last record) and
        all its records are committed; until then it is read on from where the last call
        stopped. Segments retention removed are forgotten."""
        stream = self.stream
        nxt = int(stream.next_offset)  # first: everything counted below is committed
        starts = tuple(stream.segment_starts())
        for gone in set(self.tracking_seen) - set(starts):
            del self.tracking_seen[gone]
        first = starts[0] if starts else nxt
        tracking = 0
        for i, start in enumerate(starts):
            if start >= nxt:
                break
            read, count, done = self.tracking_seen.get(start, (0, 0, False))
            if not done:
                try:
                    fd = os.open(index_path(str(stream.directory), start), os.O_RDONLY)
                except FileNotFoundError:  # retention removed it (and all before it) just now
                    self.tracking_seen.pop(start, None)
                    first = starts[i + 1] if i + 1 < len(starts) else nxt
                    tracking = 0
                    continue
                try:
                    records = read_index_tuples(fd, read)
                finally:
                    os.close(fd)
                k = 0
                for r in records:
                    if r[0] >= nxt:
                        break
                    k += 1
                    if r[4] != CHUNK_USER:
                        count += 1
                read += k
                done = i < len(starts) - 1 and k == len(records)
                self.tracking_seen[start] = (read, count, done)
            tracking += count
        return first, nxt, max(0, nxt - first - tracking)

    def append(self, reference: str | None, bodies: list, ids: list[int], values: list,
               on_durable: Callable[[int, Exception | None], None], records: int | None = None,
               nbytes: int | None = None, frames: list[int] | None = None,
               entries: int | None = None, ascending: bool = False) -> None:
        """Queue one publisher's messages of a loop turn, for both protocols' publishers: a
        named publisher's (``reference``) go through deduplication (``ids``, its publishing
        ids); the stream's metrics count what is stored (``records``: when a sub-entry batch
        holds several; ``nbytes``: the bytes to count, default the bodies' lengths) and what
        deduplication dropped; ``frames``: where each client frame starts in ``bodies``
        (``storage.Stream.append_batch``); ``entries``: some bodies are ``EntryRun``s or
        ``EntrySpans`` (a frame's records left in its bytes), and the entries all take;
        ``ascending``: the caller checked that ``ids`` are strictly ascending. Raises
        ``ResourceDeleted`` or what storage raises."""
        if self.deleted:
            raise ResourceDeleted(f"stream '{self.name}' was deleted")
        given = records or entries or len(bodies)
        if reference:
            kept = self.stream.append_deduplicated(reference, bodies, ids, values, on_durable,
                                                   frames, entries, ascending)
            if len(kept) < (entries or len(bodies)):
                log.debug("%d duplicate(s) from publisher %r on %r confirmed, not stored",
                          (entries or len(bodies)) - len(kept), reference, self.name)
                if entries is not None:
                    bodies = run_entries(bodies)
                    entries = None
                bodies = [bodies[i] for i in kept]
                records = sum(b.records if type(b) is SubBatchEntry else 1 for b in bodies)
                nbytes = None
        else:
            self.stream.append_batch(bodies, values, on_durable=on_durable, records=records,
                                     frames=frames, entries=entries)
        m = self.metrics
        if m is not None:
            stored = records or entries or len(bodies)
            if stored < given:
                m.deduplicated_messages.inc(given - stored)
            m.published_messages.inc(stored)
            m.published_bytes.inc(sum(map(len, bodies)) if nbytes is None else nbytes)

    def reader(self, spec: Any, filter_values: Any = (), match_unfiltered: bool = False,
               stage2: Any = None) -> "storage.Reader":
        """A consumer's reader, for both protocols' consumers: stage 1 by ``filter_values``;
        for a compiled ``stage2`` filter, what it requires of a record, so that the reader
        skips chunks and blocks the stream's derived keys rule out and gives, of each chunk it
        reads, only the records holding the filter's bytes (stage 2 still decides each one),
        or, in a chunk of one layout, exactly the records that match (``amqp_stream.columns``:
        ``storage.reader.Matches``, stage 2 done)."""
        return self.stream.reader(spec, filter_values, match_unfiltered,
                                  derived=derived_keys.wanted(self.stream.config.derived_keys, stage2),
                                  needles=needles_of(stage2),
                                  bounds=derived_keys.bounds(self.stream.config.derived_keys, stage2),
                                  columns=column_matcher(stage2))


def dir_name(name: str) -> str:
    """A file-system-safe directory name for a stream: ``[A-Za-z0-9_-]`` as is, every other
    byte of the UTF-8 name as ``%HH``; long names are cut and made unique with a hash."""
    out = []
    for byte in name.encode("utf-8"):
        ch = chr(byte)
        out.append(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else f"%{byte:02X}")
    safe = "".join(out)
    if len(safe) > 120:
        safe = safe[:80] + "-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    return safe


def stream_config(arguments: dict, config: BrokerConfig) -> "storage.StreamConfig":
    """The storage settings for a stream's arguments and the broker's settings."""
    import bloom
    kwargs: dict[str, Any] = dict(
        filter_size=int(arguments.get("x-stream-filter-size-bytes", config.filter_size)),
        filter_scheme=int(bloom.Scheme.OSIRIS if config.filter_scheme == "osiris" else bloom.Scheme.MMH3),
        fsync=config.fsync,
        fsync_interval_ms=config.fsync_interval_ms,
    )
    kwargs.update(derived_keys.storage_settings(arguments.get(derived_keys.ARGUMENT) or ()))
    if "x-stream-max-segment-size-bytes" in arguments:
        kwargs["max_segment_bytes"] = int(arguments["x-stream-max-segment-size-bytes"])
    if "x-max-length-bytes" in arguments:
        kwargs["retention_bytes"] = int(arguments["x-max-length-bytes"])
    if "x-max-age" in arguments:
        age_ms = storage.parse_interval_ms(str(arguments["x-max-age"]), rabbitmq=True)
        if age_ms:
            kwargs["retention_age_ms"] = age_ms
    return storage.StreamConfig(**kwargs)


class Registry:
    """Open streams by name. ``on_moved(name)`` is called from storage's writer thread."""

    def __init__(self, config: BrokerConfig, on_moved: Callable[[str], None]):
        self.config = config
        self.root = Path(config.data_dir) / "streams"
        self.trash = Path(config.data_dir) / "trash"
        self.on_moved = on_moved
        self.entries: dict[str, StreamEntry] = {}
        self.broken: list[str] = []  # stream directories that could not be opened at start
        self.node = f"amqp-stream@{socket.gethostname()}"

    # -- lifecycle -------------------------------------------------------------------------
    def open_all(self) -> list[str]:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.trash.exists():
            shutil.rmtree(self.trash, ignore_errors=True)
        for directory in sorted(self.root.iterdir()):
            meta_path = directory / META
            if not meta_path.is_file():
                if directory.is_dir():
                    log.warning("removing %s: a stream directory without %s (an interrupted "
                                "declare)", directory, META)
                    shutil.rmtree(directory, ignore_errors=True)
                continue
            try:
                meta = json.loads(meta_path.read_text("utf-8"))
                name, arguments = meta["name"], meta["arguments"]
                if not isinstance(name, str) or not isinstance(arguments, dict):
                    raise ValueError("name must be a string and arguments a map")
                if name in self.entries:
                    raise ValueError(f"a second directory for stream {name!r}")
                self._open(name, arguments, directory)
            except Exception as exc:  # one damaged stream must not keep the others offline
                log.error("stream directory %s not opened (left as it is): %s: %s", directory,
                          type(exc).__name__, exc)
                self.broken.append(str(directory))
        return sorted(self.entries)

    def _open(self, name: str, arguments: dict, directory: Path) -> StreamEntry:
        (directory / LOG_DIR).mkdir(parents=True, exist_ok=True)
        stream = storage.Stream.open(directory / LOG_DIR, stream_config(arguments, self.config))
        return self._register(name, arguments, directory, stream)

    def _register(self, name: str, arguments: dict, directory: Path, stream: Any) -> StreamEntry:
        entry = StreamEntry(name, dict(arguments), directory, stream)
        entry.listener = lambda: self.on_moved(name)
        stream.add_listener(entry.listener)
        self.entries[name] = entry
        return entry

    def _open_new(self, name: str, arguments: dict, directory: Path) -> StreamEntry:
        """A declare's files, all or nothing: storage, then ``stream.json`` (a crash in between
        leaves a directory without it, which the next start removes); registered only once
        both are on disk. On any failure the directory is removed and nothing is registered,
        so a retry declares the stream again instead of answering for a phantom."""
        stream = None
        try:
            (directory / LOG_DIR).mkdir(parents=True)
            stream = storage.Stream.open(directory / LOG_DIR, stream_config(arguments, self.config))
            meta = {"name": name, "arguments": arguments, "created_ms": int(time.time() * 1000)}
            replace_file(str(directory / META), json.dumps(meta, sort_keys=True).encode("utf-8"))
            fsync_dir(str(self.root))
        except BaseException:
            if stream is not None:
                try:
                    stream.close()
                except Exception:
                    log.exception("closing stream %r after a failed declare", name)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return self._register(name, arguments, directory, stream)

    def close_all(self) -> None:
        for entry in list(self.entries.values()):
            try:
                entry.stream.close()
            except Exception:
                log.exception("closing stream %r", entry.name)

    # -- the management protocol (amqp_stream.management.Streams) ---------------------------
    def exists(self, name: str) -> bool:
        return name in self.entries

    def get(self, name: str) -> StreamEntry | None:
        return self.entries.get(name)

    def arguments(self, name: str) -> dict:
        return dict(self.entries[name].arguments)

    def create(self, name: str, arguments: dict) -> StreamEntry:
        self.root.mkdir(parents=True, exist_ok=True)
        directory = self.root / dir_name(name)
        n = 0
        while directory.exists():  # a hash collision or a leftover: never share a directory
            n += 1
            directory = self.root / f"{dir_name(name)}~{n}"
        directory.mkdir()
        entry = self._open_new(name, arguments, directory)
        log.info("declared stream %r arguments=%s in %s", name, arguments, directory)
        return entry

    def delete(self, name: str) -> int | None:
        entry = self.entries.pop(name, None)
        if entry is None:
            return None
        count = self.message_count(entry)
        entry.deleted = True
        try:
            if entry.listener is not None:
                entry.stream.remove_listener(entry.listener)
            entry.stream.close()
        except Exception:
            log.exception("closing deleted stream %r", name)
        self.trash.mkdir(parents=True, exist_ok=True)
        target = self.trash / f"{entry.directory.name}-{uuid.uuid4().hex[:8]}"
        os.replace(entry.directory, target)
        fsync_dir(str(self.root))
        shutil.rmtree(target, ignore_errors=True)
        log.info("deleted stream %r (%d messages)", name, count)
        return count

    def message_count(self, entry: StreamEntry) -> int:
        """Messages kept: the committed offsets kept, less those of tracking chunks."""
        return entry.counts()[2]

    def info(self, name: str) -> dict:
        entry = self.entries[name]
        first, nxt, messages = entry.counts()
        return {
            "name": name,
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "exclusive": False,
            "type": "stream",
            "arguments": dict(entry.arguments),
            "message_count": messages,
            "consumer_count": len(entry.consumers),
            "leader": self.node,
            "replicas": [self.node],
            "members": [self.node],
            "first_offset": first,
            "next_offset": nxt,
        }
