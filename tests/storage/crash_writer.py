"""A writer process for the crash tests: appends forever (fsync always) and records in a file
every offset it was told is durable. The test SIGKILLs it at random moments.

Usage: python -m tests.storage.crash_writer DIRECTORY DURABLE_FILE SEED
Bodies are a function of the offset (``body_for``), so the test can check every byte.
"""

from __future__ import annotations

import os
import random
import sys
import time

from storage import Stream, StreamConfig

CONFIG = StreamConfig(fsync="always", max_segment_bytes=256 * 1024, max_chunk_entries=64,
                      filter_size=16)
FAST = 5_000  # records per life at full speed; then slowly, so the log stays small


def body_for(offset: int) -> bytes:
    return b"rec-%d-" % offset + bytes([offset % 251]) * (offset * 7919 % 300)


def main() -> None:
    directory, durable_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    out = os.open(durable_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def durable(offset: int, error: Exception | None) -> None:
        if error is None:
            os.write(out, b"%d\n" % offset)

    stream = Stream.open(directory, CONFIG)
    nxt = start = stream.next_offset
    os.write(out, b"ready %d\n" % nxt)
    while True:
        if rng.random() < 0.5:
            stream.append(body_for(nxt), f"v{nxt % 5}", durable)
            nxt += 1
        else:
            n = rng.randint(1, 80)
            first = stream.append_batch([body_for(o) for o in range(nxt, nxt + n)],
                                        [None if o % 3 else f"v{o % 5}" for o in range(nxt, nxt + n)],
                                        durable)
            assert first == nxt
            nxt += n
        if rng.random() < 0.02:
            stream.flush()
        if nxt - start > FAST:
            time.sleep(0.002)


if __name__ == "__main__":
    main()
