"""Recovery cost of offset tracking and publisher sequences at open (issue 14).

Run: ``.venv/bin/python -m bench.tracking [--records 200000] [--names 10000] [--references 1000]
[--repeat 5] [--dir /tmp/...]``

Two streams of the same user records (100-byte entries, batches of 100, 4 MB segments, fsync
never): one with tracking, where every batch is a named publisher's (``--references`` publisher
references, round robin, each batch's last publishing id in its chunk's trailer) and every
consumer name (``--names``) stores its offset twice over the run (delta chunks, a writer round
every 10 batches); and the baseline without any tracking. Figures (best of ``--repeat``):
- ``Stream.open`` + ``close`` of each: recovery, which scans the newest segment, plus for the
  tracked one the replay of its snapshot, deltas and trailers; warm (files in the page cache)
  and cold (``os.sync()`` then ``posix_fadvise(DONTNEED)`` on every file before each open);
- the tracking replay alone (``storage.tracking.load`` on the newest segment);
- what the newest segment holds: its snapshot's size, delta chunks, chunks with a trailer.
The open is checked: every name's offset and every reference's sequence come back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from bench.storage import drop_cache
from storage import Stream, StreamConfig
from storage.recovery import recover
from storage.tracking import load

CONFIG = StreamConfig(fsync="never", max_segment_bytes=4 << 20, max_chunk_entries=100,
                      filter_size=0)
BATCH = 100
ROUND = 10  # batches per writer round (flush)


def build(directory: str, records: int, names: int, references: int,
          tracked: bool) -> tuple[dict[str, int], dict[str, int]]:
    """Write the stream; return the offsets and sequences it must recover (tracked only)."""
    body = b"x" * 100
    batches = records // BATCH
    stores = 2 * names if tracked else 0
    per_batch = -(-stores // batches) if stores else 0
    offsets: dict[str, int] = {}
    sequences: dict[str, int] = {}
    store_i = 0
    with Stream.open(directory, CONFIG) as s:
        for b in range(batches):
            if tracked:
                ref = f"publisher-{b % references:05d}"
                sequences[ref] = sequences.get(ref, 0) + BATCH
                first = s.append_batch([body] * BATCH, writer=(ref, sequences[ref]))
                for _ in range(per_batch):
                    if store_i < stores:
                        name = f"consumer-{store_i % names:06d}"
                        s.store_offset(name, first)
                        offsets[name] = first
                        store_i += 1
            else:
                s.append_batch([body] * BATCH)
            if b % ROUND == ROUND - 1:
                s.flush()
    return offsets, sequences


def time_open(directory: str, repeat: int, cold: bool) -> float:
    best = float("inf")
    for _ in range(repeat):
        if cold:
            drop_cache(directory)
        t = time.perf_counter()
        Stream.open(directory, CONFIG).close()
        best = min(best, time.perf_counter() - t)
    return best


def time_replay(directory: str, repeat: int) -> tuple[float, int, int, int]:
    """Best time of the replay alone, and the snapshot's bytes, deltas, trailers it read."""
    last = recover(directory)[-1]
    chunks = last.tracking or []
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        load(directory, last.start, chunks)
        best = min(best, time.perf_counter() - t)
    snap = sum(h.data_length for _, h in chunks if h.type == 2)
    deltas = sum(1 for _, h in chunks if h.type == 1)
    trailers = sum(1 for _, h in chunks if h.type == 0)
    return best, snap, deltas, trailers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--names", type=int, default=10_000)
    ap.add_argument("--references", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-tracking-", dir=args.dir)
    try:
        plain, tracked = os.path.join(root, "plain"), os.path.join(root, "tracked")
        t = time.perf_counter()
        build(plain, args.records, args.names, args.references, tracked=False)
        build_plain = time.perf_counter() - t
        t = time.perf_counter()
        offsets, sequences = build(tracked, args.records, args.names, args.references, True)
        build_tracked = time.perf_counter() - t
        with Stream.open(tracked, CONFIG) as s:
            got_offsets, got_sequences = s.tracking()
        assert got_offsets == {k.encode(): v for k, v in offsets.items()}, "offsets lost"
        assert got_sequences == {k.encode(): v for k, v in sequences.items()}, "sequences lost"
        segments = len([n for n in os.listdir(tracked) if n.endswith(".segment")])
        print(f"{args.records:,} records of 100 bytes in batches of {BATCH}, {segments} segments "
              f"of 4 MB; tracked: {len(offsets):,} consumer names, {len(sequences):,} publisher "
              f"references")
        print(f"  write: plain {build_plain:.2f} s, tracked {build_tracked:.2f} s "
              f"(x{build_tracked / build_plain:.2f})")
        newest = [recover(d)[-1].size for d in (plain, tracked)]
        print(f"  newest segment (what recovery scans): plain {newest[0] / 1e6:.2f} MB, "
              f"tracked {newest[1] / 1e6:.2f} MB")
        for cold in (False, True):
            base = time_open(plain, args.repeat, cold)
            with_trk = time_open(tracked, args.repeat, cold)
            label = "cold" if cold else "warm"
            print(f"  open+close, {label}: without tracking {base * 1000:8.1f} ms, with "
                  f"{with_trk * 1000:8.1f} ms (x{with_trk / base:.2f}, "
                  f"+{(with_trk - base) * 1000:.1f} ms)")
        replay, snap, deltas, trailers = time_replay(tracked, args.repeat)
        print(f"  tracking replay alone (newest segment): {replay * 1000:.1f} ms: snapshot of "
              f"{snap:,} bytes, {deltas} delta chunks, {trailers} chunks with a trailer")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
