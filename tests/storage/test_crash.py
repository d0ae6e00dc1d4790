"""Crash tests with a real process: a writer (fsync always) is SIGKILLed at random moments, many
times, on the same directory. After each kill every append it reported durable must be there, in
order and byte for byte; no partial chunk is ever visible, to a reader of the files alone before
recovery nor after; every chunk read passes its CRC (readers check it)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from storage import OffsetSpec, Stream, open_reader
from tests.storage.crash_writer import CONFIG, body_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = 20


def durable_max(path) -> tuple[int, int]:
    """(highest offset reported durable, number of reports) from the writer's file."""
    best, n = -1, 0
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line and not line.startswith(b"ready"):
                best, n = max(best, int(line)), n + 1
    return best, n


def read_all_files_only(d) -> list[tuple[int, bytes]]:
    with open_reader(str(d), OffsetSpec.first()) as r:
        return [(o, bytes(b)) for c in r for o, b in c.records]


def wait_ready(path, proc, timeout=30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and b"ready" in open(path, "rb").read():
            return
        assert proc.poll() is None, "writer died before it was ready"
        time.sleep(0.01)
    raise AssertionError("writer not ready")


def test_sigkilled_writer_loses_nothing_it_reported_durable(tmp_path):
    d = tmp_path / "stream"
    rng = random.Random(20261122)
    total_reports = 0
    seen_end = 0
    for k in range(KILLS):
        report = tmp_path / f"durable-{k}.txt"
        proc = subprocess.Popen([sys.executable, "-m", "tests.storage.crash_writer", str(d),
                                 str(report), str(rng.randrange(1 << 30))], cwd=ROOT)
        try:
            wait_ready(report, proc)
            time.sleep(rng.uniform(0.0, 0.1))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        best, n = durable_max(report)
        total_reports += n
        # before recovery: a reader of the files alone sees whole, correct chunks only
        before = read_all_files_only(d)
        assert before == [(o, body_for(o)) for o in range(len(before))]
        assert len(before) > best, f"kill {k}: durable offset {best} not readable"
        # recovery keeps at least that, and exactly what was written before
        with Stream.open(d, CONFIG) as s:
            after = read_all_files_only(d)
            assert after[:len(before)] == before
            assert after == [(o, body_for(o)) for o in range(len(after))]
            assert s.next_offset == len(after) >= seen_end
            seen_end = s.next_offset
        # the segments end exactly at their last chunk (no torn bytes left)
        from storage.recovery import scan_segment
        for name in sorted(os.listdir(d)):
            if name.endswith(".segment"):
                fd = os.open(d / name, os.O_RDONLY)
                try:
                    chunks, end = scan_segment(fd, str(d / name))
                    assert end == os.fstat(fd).st_size
                finally:
                    os.close(fd)
    assert total_reports > KILLS  # the kills did land while appends were being confirmed
    assert len([n for n in os.listdir(d) if n.endswith(".segment")]) > 1  # rollovers happened
