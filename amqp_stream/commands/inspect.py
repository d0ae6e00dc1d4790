"""``amqp-stream inspect DIR``: the segments and chunks of a stream directory, as they are on disk.

Why: a debug dump of the log format (like osiris's ``dump_chunk``) that works on any stream
directory, ours or RabbitMQ's, without opening it as a stream: nothing is recovered or written,
so it is safe on a directory a broker is writing and it shows a crashed directory as it is.
Chunks are found by walking the headers from the end of each segment's header (not through the
index), with recovery's walk (``storage.walk``), and each one is checked (CRC of the data section,
at least one record) and compared with its index record. Tracking is shown as it is stored: the
records of each tracking chunk (delta, snapshot) and of each user chunk's trailer (publisher
sequences), decoded with ``storage.tracking.chunk_tracking``. A segment's broker-derived key
index (``NNN.derived``, ``storage.derived``) is shown with it: its keys and size, and per user
chunk the blocks it describes (how many are indexed, their Bloom bytes), and its skip table
(``NNN.skip``, ``storage.skiptable``): rows, the index records they cover, whether their CRC
holds. Both are derived data: a chunk they do not cover, or an entry or table whose CRC fails,
is read whole or walked, so neither is a problem.

Exit code 0 when every chunk is whole, indexed and passes its CRC; 1 when something is not
(a torn or corrupt chunk, an index disagreeing with its segment, an orphan or a stale file); 2
when the path is no stream's log (missing, not a directory, or without segment or index files).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone

from amqp_stream.commands.logdir import find_log
from storage import derived, skiptable
from storage.errors import CorruptionError
from storage.files import index_path, list_files, read_index_records, segment_path
from storage.format import (FLAG_SIMPLE_ENTRIES, SEGMENT_HEADER, SEGMENT_HEADER_BYTES, SEGMENT_MAGIC,
                            TrackingRecord)
from storage.tracking import chunk_tracking
from storage.walk import walk_segment

_TYPES = {0: "user", 1: "tracking-delta", 2: "tracking-snapshot"}
_RECORD_TYPES = {0: "sequence", 1: "offset", 2: "timestamp"}


def _record(r: TrackingRecord) -> dict:
    out = {"type": _RECORD_TYPES[r.type], "id": r.id.decode("utf-8", "backslashreplace"),
           "value": r.value}
    if r.chunk_id is not None:
        out["chunk_id"] = r.chunk_id
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", help="a stream directory (holds NNN.segment and NNN.index)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per chunk (and per problem) instead of a table")


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return "?"


def run(args: argparse.Namespace) -> int:
    directory = args.directory
    if not os.path.isdir(directory):
        print(f"amqp-stream inspect: error: {directory}: not a directory", file=sys.stderr)
        return 2  # bad usage, as for a directory that is not a stream's log (find_log)
    directory = find_log(directory, "inspect")
    if directory is None:
        return 2
    out = sys.stdout
    segments, indexes = list_files(directory)
    problems = 0

    def emit(obj: dict) -> None:
        if args.json:
            out.write(json.dumps(obj) + "\n")
        elif "error" in obj:
            out.write(f"  !! segment {obj.get('segment')} byte {obj.get('position', '-')}: "
                      f"{obj['error']}\n")
        else:
            out.write(
                f"  {obj['position']:>12} {obj['chunk_id']:>14} {obj['type']:<17} "
                f"{_iso(obj['timestamp'])} {obj['entries']:>6} {obj['records']:>7} "
                f"{obj['filter_size']:>4}/{obj['filter_scheme']} {obj['data_length']:>9} "
                f"{'ok' if obj['crc_ok'] else 'BAD':>4} {'' if obj['indexed'] else 'unindexed'}\n")
            d = obj.get("derived")
            if d:
                out.write(f"  {'':>12} {'':>14} derived: {d['blocks']} blocks of {d['records']} "
                          f"records, {d['indexed_blocks']} indexed, {d['bloom_bytes']} Bloom bytes\n")
            for r in obj.get("tracking", ()):
                where = f" (chunk {r['chunk_id']})" if "chunk_id" in r else ""
                out.write(f"  {'':>12} {'':>14} {r['type']} {r['id']!r} = {r['value']}{where}\n")

    for start in sorted(set(indexes) - set(segments)):
        problems += 1
        emit({"segment": start, "error": "stale index (no segment beside it)"})
    for start in segments:
        spath = segment_path(directory, start)
        size = os.path.getsize(spath)
        records = {}
        if start in indexes:
            ifd = os.open(index_path(directory, start), os.O_RDONLY)
            try:
                records = {r.position: r for r in read_index_records(ifd)}
            finally:
                os.close(ifd)
        else:
            problems += 1
            emit({"segment": start, "error": "orphan segment (no index beside it)"})
        side = derived.load(directory, start)
        table = skiptable.describe(directory, start)
        entries = {e.position: e for e in side[1]} if side else {}
        if not args.json:
            out.write(f"segment {os.path.basename(spath)}  {size} bytes, "
                      f"{len(records)} index records\n")
            if side is not None:
                out.write(f"  derived index {derived.derived_name(start)}: keys "
                          f"{', '.join(side[0])}; {side[3]} bytes, {len(side[1])} chunk entries"
                          + (f", {side[2]} failing their CRC" if side[2] else "") + "\n")
            if table is not None:
                out.write(f"  skip table {os.path.basename(skiptable.skip_path(directory, start))}: "
                          f"{table['rows']} rows, {table['bytes']} bytes"
                          + (f", index records {table['first']}..{table['last']}" if table["rows"]
                             and table["ok"] else "")
                          + ("" if table["ok"] else ", CRC fails (not used)") + "\n")
            out.write(f"  {'position':>12} {'chunk_id':>14} {'type':<17} {'timestamp':<29} "
                      f"{'entries':>6} {'records':>7} {'filter':>6} {'data':>9} {'crc':>4}\n")
        elif side is not None or table is not None:
            obj: dict[str, object] = {"segment": start}
            if side is not None:
                obj.update({"derived_keys": side[0], "derived_bytes": side[3],
                            "derived_entries": len(side[1]), "derived_bad_entries": side[2]})
            if table is not None:
                obj["skip_table"] = table
            out.write(json.dumps(obj) + "\n")
        fd = os.open(spath, os.O_RDONLY)
        try:
            head = os.pread(fd, SEGMENT_HEADER_BYTES, 0)
            if len(head) < SEGMENT_HEADER_BYTES or SEGMENT_HEADER.unpack(head)[0] != SEGMENT_MAGIC:
                problems += 1
                emit({"segment": start, "position": 0, "error": f"bad segment header {head!r}"})
                continue
            seen = set()
            for chunk in walk_segment(fd, spath, with_filter=True):
                pos, h = chunk.position, chunk.header
                if h is None or chunk.torn:
                    problems += 1
                    error = {"segment": start, "position": pos, "error": chunk.problem}
                    if h is not None:
                        error["chunk_id"] = h.chunk_id
                    emit(error)
                    break
                rec = records.get(pos)
                indexed = rec is not None and rec.chunk_id == h.chunk_id
                seen.add(pos)
                problems += (not chunk.valid) + (not indexed)
                records_found: list[dict] = []
                if chunk.valid and (h.type or h.trailer_length):
                    try:
                        records_found = [_record(r) for r in chunk_tracking(fd, pos, h, spath)]
                    except CorruptionError as exc:
                        problems += 1
                        emit({"segment": start, "position": pos, "chunk_id": h.chunk_id,
                              "error": exc.reason})
                e = entries.get(pos)
                dinfo = None
                if e is not None and e.chunk_id == h.chunk_id:
                    dinfo = {"blocks": len(e.blocks), "records": e.records,
                             "indexed_blocks": sum(1 for b in e.blocks if b.k),
                             "bloom_bytes": sum(b.m // 8 for b in e.blocks)}
                emit({"segment": start, "position": pos, "chunk_id": h.chunk_id,
                      "derived": dinfo,
                      "type": _TYPES.get(h.type, str(h.type)), "timestamp": h.timestamp,
                      "epoch": h.epoch, "entries": h.entries, "records": h.records,
                      "filter_size": h.filter_size, "filter_scheme": h.filter_scheme,
                      "filter_param": h.filter_param, "filter_hex": chunk.filter_bits.hex(),
                      "simple_entries": bool(h.flags & FLAG_SIMPLE_ENTRIES),
                      "data_length": h.data_length, "trailer_length": h.trailer_length,
                      "crc_ok": chunk.crc_ok, "indexed": indexed, "tracking": records_found})
            for p in sorted(set(records) - seen):
                problems += 1
                emit({"segment": start, "position": p, "chunk_id": records[p].chunk_id,
                      "error": "index record without a chunk"})
        finally:
            os.close(fd)
    if not args.json:
        out.write("clean\n" if not problems else f"{problems} problem(s)\n")
    return 0 if not problems else 1
