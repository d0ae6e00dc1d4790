"""Crash test for tracking with a real process: a writer with named publishers and named
consumers (``tracking_writer``) is SIGKILLed at random moments, many times, on one directory
with rollovers and retention. After each kill: every publishing id and consumer offset it was
told is durable is recovered (or exceeded), the recovered sequence of each publisher covers
every message of it in the log, and no publishing id is ever in the log twice (each life
resumes after the recovered sequence, as a retrying publisher would)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from storage import OffsetSpec, Stream, open_reader
from tests.storage.test_crash import wait_ready
from tests.storage.tracking_writer import CONFIG, CONSUMERS, PUBLISHERS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = 12


def durable_reports(path) -> tuple[dict[str, int], dict[str, int], int]:
    seqs: dict[str, int] = {}
    offsets: dict[str, int] = {}
    n = 0
    with open(path) as f:
        for line in f.read().splitlines():
            kind, *rest = line.split()
            if kind == "S":
                seqs[rest[0]] = max(seqs.get(rest[0], 0), int(rest[1]))
            elif kind == "O":
                offsets[rest[0]] = max(offsets.get(rest[0], 0), int(rest[1]))
            n += kind != "ready"
    return seqs, offsets, n


def test_sigkilled_writer_keeps_every_durable_offset_and_sequence_and_never_duplicates(tmp_path):
    d = tmp_path / "stream"
    rng = random.Random(20261125)
    durable_seqs: dict[str, int] = {}
    durable_offsets: dict[str, int] = {}
    reports = 0
    for k in range(KILLS):
        report = tmp_path / f"durable-{k}.txt"
        proc = subprocess.Popen([sys.executable, "-m", "tests.storage.tracking_writer", str(d),
                                 str(report), str(rng.randrange(1 << 30))], cwd=ROOT)
        try:
            wait_ready(report, proc)
            time.sleep(rng.uniform(0.02, 0.2))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        seqs, offsets, n = durable_reports(report)
        reports += n
        for p, v in seqs.items():
            durable_seqs[p] = max(durable_seqs.get(p, 0), v)
        for c, v in offsets.items():
            durable_offsets[c] = max(durable_offsets.get(c, 0), v)
        with Stream.open(d, CONFIG) as s:
            got_seqs = {p: s.query_sequence(p) for p in PUBLISHERS}
            got_offsets = {c: s.query_offset(c) for c in CONSUMERS}
            first = s.first_offset
        with open_reader(str(d), OffsetSpec.first()) as r:
            in_log: dict[str, list[int]] = {p: [] for p in PUBLISHERS}
            for chunk in r:
                for _, body in chunk.records:
                    ref, pid, _ = bytes(body).decode().split(":")
                    in_log[ref].append(int(pid))
        for p in PUBLISHERS:
            assert got_seqs[p] >= durable_seqs.get(p, 0), f"kill {k}: {p} lost a durable id"
            ids = in_log[p]
            assert ids == sorted(set(ids)), f"kill {k}: {p} has an id twice or out of order"
            if ids:
                assert got_seqs[p] >= ids[-1], f"kill {k}: {p} stored beyond its sequence"
        for c in CONSUMERS:
            want = durable_offsets.get(c)
            if want is not None and want >= first:  # a snapshot drops offsets below the first
                assert got_offsets[c] is not None and got_offsets[c] >= want, \
                    f"kill {k}: {c} lost a durable offset"
    assert reports > KILLS  # the kills landed while appends and stores were being confirmed
    names = sorted(n for n in os.listdir(d) if n.endswith(".segment"))
    assert int(names[0].split(".")[0]) > 0  # retention deleted old segments meanwhile
