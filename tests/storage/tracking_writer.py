"""A writer process for the tracking crash test: named publishers and named consumers on one
stream (fsync always, small segments, retention), recording in a file every publishing id and
consumer offset it was told is durable. The test SIGKILLs it at random moments.

Usage: python -m tests.storage.tracking_writer DIRECTORY DURABLE_FILE SEED
Each publisher resumes after ``query_sequence`` (as a publisher that retries would), so if
recovery gave back too low a sequence, the log would hold a publishing id twice. A body is
``reference:publishing id:index``.
"""

from __future__ import annotations

import os
import random
import sys
import time

from storage import Stream, StreamConfig

CONFIG = StreamConfig(fsync="always", max_segment_bytes=8 * 1024, max_chunk_entries=16,
                      retention_bytes=48 * 1024, filter_size=0)
PUBLISHERS = [f"pub-{k}" for k in range(6)]
CONSUMERS = [f"con-{k}" for k in range(4)]
FAST = 3_000  # records per life at full speed; then slowly, so the log stays small


def main() -> None:
    directory, durable_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    out = os.open(durable_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def reporter(line: bytes):
        def durable(_offset: int, error: Exception | None) -> None:
            if error is None:
                os.write(out, line)
        return durable

    stream = Stream.open(directory, CONFIG)
    seqs = {p: stream.query_sequence(p) for p in PUBLISHERS}
    offsets = {c: stream.query_offset(c) or 0 for c in CONSUMERS}
    os.write(out, b"ready\n")
    written = 0
    while True:
        if rng.random() < 0.7:
            ref = rng.choice(PUBLISHERS)
            n = rng.randint(1, 12)
            seq = seqs[ref] + n  # publishing ids seqs[ref] + 1 .. seq, one per message
            bodies = [f"{ref}:{seqs[ref] + 1 + j}:{j}".encode() for j in range(n)]
            stream.append_batch(bodies, writer=(ref, seq),
                                on_durable=reporter(f"S {ref} {seq}\n".encode()))
            seqs[ref] = seq
            written += n
        else:
            name = rng.choice(CONSUMERS)
            offsets[name] = max(offsets[name], stream.next_offset)
            stream.store_offset(name, offsets[name],
                                on_durable=reporter(f"O {name} {offsets[name]}\n".encode()))
        if written > FAST:
            time.sleep(0.002)


if __name__ == "__main__":
    main()
