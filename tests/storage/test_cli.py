"""``amqp-stream inspect`` and ``amqp-stream read``, run as the real command."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading

from storage import Stream, StreamConfig
from storage.format import CHUNK_HEADER_BYTES, SEGMENT_HEADER_BYTES

HERE = os.path.dirname(__file__)
FIXTURE = os.path.join(HERE, "fixtures", "rabbitmq")
CLI = os.path.join(os.path.dirname(sys.executable), "amqp-stream")
with open(os.path.join(HERE, "fixtures", "rabbitmq.expected.json")) as _f:
    EXPECTED = json.load(_f)


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def _records(out: str) -> list[tuple[int, bytes]]:
    return [(o["offset"], base64.b64decode(o["message_b64"]))
            for o in map(json.loads, out.splitlines())]


def test_inspect_json_lists_every_chunk_of_a_rabbitmq_directory():
    p = run("inspect", FIXTURE, "--json")
    chunks = [json.loads(line) for line in p.stdout.splitlines()]
    want = EXPECTED["chunks"]
    assert len(chunks) == len(want)
    for got, exp in zip(chunks, want, strict=True):
        for key in ("segment", "chunk_id", "entries", "records", "timestamp", "filter_size"):
            assert got[key] == exp[key], key
        assert got["type"] == {0: "user", 1: "tracking-delta", 2: "tracking-snapshot"}[exp["type"]]
        assert got["crc_ok"] is True and got["indexed"] is True
        assert got["simple_entries"] is False  # RabbitMQ writes the reserved byte as zero
        assert isinstance(got["position"], int)


def test_inspect_shows_tracking_records_and_trailers(tmp_path):
    p = run("inspect", FIXTURE, "--json")
    tracking = {c["chunk_id"]: c["tracking"] for c in map(json.loads, p.stdout.splitlines())}
    assert tracking[2] == [{"type": "offset", "id": "c1", "value": 1}]  # a delta
    assert tracking[3] == [{"type": "sequence", "id": "p1", "value": 7}]  # a trailer
    assert tracking[11] == [{"type": "sequence", "id": "p1", "value": 7, "chunk_id": 3},
                            {"type": "offset", "id": "c1", "value": 5}]  # a snapshot
    assert tracking[0] == []
    with Stream.open(tmp_path, StreamConfig(fsync="never")) as s:  # ours, as a table
        s.append_batch([b"m"], writer=("pub", 41))
        s.store_offset("reader", 0)
    out = run("inspect", str(tmp_path)).stdout
    assert "sequence 'pub' = 41" in out and "offset 'reader' = 0" in out and "clean" in out


def test_inspect_table_and_a_corrupt_directory(tmp_path):
    assert "clean" in run("inspect", FIXTURE).stdout
    d = tmp_path / "bad"
    shutil.copytree(FIXTURE, d)
    seg = d / "00000000000000000000.segment"
    raw = bytearray(seg.read_bytes())
    raw[SEGMENT_HEADER_BYTES + CHUNK_HEADER_BYTES + 16 + 6] ^= 0x01  # a data byte of chunk 0
    seg.write_bytes(bytes(raw))
    p = run("inspect", str(d), "--json", ok=False)
    assert p.returncode == 1
    first = json.loads(p.stdout.splitlines()[0])
    assert first["chunk_id"] == 0 and first["crc_ok"] is False
    # read refuses to serve it
    p = run("read", str(d), "--no-follow", ok=False)
    assert p.returncode == 1 and "CRC" in p.stderr and "00000000000000000000.segment" in p.stderr


def test_read_json_all_records_and_filters():
    want = [(r["offset"], bytes.fromhex(r["body_hex"])) for r in EXPECTED["records"]]
    assert _records(run("read", FIXTURE, "--json", "--no-follow").stdout) == want
    apple = _records(run("read", FIXTURE, "--json", "--no-follow", "--filter", "apple").stdout)
    assert [o for o, _ in apple] == [7, 8, 9, 10]  # the whole chunk holding "apple"
    unf = _records(run("read", FIXTURE, "--json", "--no-follow", "--filter", "zzz",
                       "--match-unfiltered").stdout)
    assert [o for o, _ in unf] == [0, 1, 14]
    assert [o for o, _ in _records(run("read", FIXTURE, "--json", "--no-follow",
                                       "--from", "9").stdout)] == [9, 10, 12, 13, 14]
    assert [o for o, _ in _records(run("read", FIXTURE, "--json", "--no-follow",
                                       "--from", "1700000005000").stdout)] == [12, 13, 14]
    assert [o for o, _ in _records(run("read", FIXTURE, "--json", "--no-follow",
                                       "--from", "last").stdout)] == [14]
    text = run("read", FIXTURE, "--no-follow", "--from", "14").stdout
    assert text.startswith("14\t") and "no filter" in text
    bad = run("read", FIXTURE, "--from", "yesterday", ok=False)
    assert bad.returncode == 2 and "offset spec" in bad.stderr
    missing = run("read", FIXTURE + "-missing", ok=False)
    assert missing.returncode == 2 and "not a directory" in missing.stderr
    assert run("inspect", FIXTURE + "-missing", ok=False).returncode == 2


def test_read_follows_a_stream_being_written(tmp_path):
    d = tmp_path / "live"
    with Stream.open(d, StreamConfig(fsync="never", max_segment_chunks=3)) as s:
        s.append(b"before")
        s.flush()
        # offset 1 is beyond the end now (= next); the reader follows from there
        proc = subprocess.Popen([CLI, "read", str(d), "--json", "--from", "1"],
                                stdout=subprocess.PIPE, text=True)
        guard = threading.Timer(60, proc.kill)  # a hang fails the test instead of blocking
        guard.start()
        try:
            lines = []
            for batch in (range(0, 5), range(5, 10)):  # the second batch: surely following
                for i in batch:  # crosses segments (3 chunks each)
                    s.append(b"live-%d" % i, "v")
                    s.flush()
                lines += [proc.stdout.readline() for _ in batch]
        finally:
            guard.cancel()
            proc.terminate()
            proc.wait(timeout=10)
    got = _records("".join(lines))
    assert got == [(i + 1, b"live-%d" % i) for i in range(10)]
