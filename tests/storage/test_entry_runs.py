"""``EntryRun``s (a client frame's records of one size, left in the frame's bytes) and
``EntrySpans`` (records of varying sizes, likewise) are stored as the same records given one
body each: for random queues of runs (with and without bytes to drop before each entry), plain
bodies, sub-batch entries, filter values, consumer offsets, a named publisher's batches (of
bodies, and of runs deduplicated against what was stored: all kept, some or none) and chunk,
segment and byte limits small enough to cut runs anywhere (rollovers with tracking snapshots,
derived keys), the segments, indexes and sidecars are byte-identical (timestamps aside) and
the callbacks see the same offsets."""

from __future__ import annotations

import gzip
import itertools
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import storage.chunking
import storage.format
from amqp_stream.derived_keys import deriver
from storage import StorageError, Stream, StreamConfig
from storage.format import EntryRun, EntrySpans, SubBatchEntry, encode_entries
from tests.stream.test_publish_packed import _files


def _run(bodies: list[bytes], skip: int) -> EntryRun:
    pad = bytes(range(skip))  # what is dropped: a publishing id
    raw = b"".join(pad + struct.pack(">I", len(b)) + b for b in bodies)
    return EntryRun(memoryview(raw), len(bodies), len(bodies[0]), skip)


def _spans(bodies: list[bytes], skip: int) -> EntrySpans:
    pad = bytes(range(skip))  # what is dropped: a publishing id, a filter value and its length
    entries = [pad + struct.pack(">I", len(b)) + b for b in bodies]
    raw = b"#" + b"".join(entries) + b"##"  # a frame's head before, bytes after
    return EntrySpans(raw, list(itertools.accumulate(map(len, entries), initial=1)), skip)


def _given(item: tuple) -> EntryRun | EntrySpans:
    return _run(item[1], item[2]) if item[0] == "run" else _spans(item[1], item[2])


@st.composite
def _item(draw):
    """``("run", bodies, skip)``, ``("spans", bodies, skip)``, ``("body", body)`` or
    ``("batch", records)``."""
    kind = draw(st.sampled_from(("run", "run", "spans", "spans", "body", "batch")))
    if kind == "spans":
        return ("spans", [bytes([(k * 7) % 256]) * draw(st.integers(0, 30))
                          for k in range(draw(st.integers(1, 80)))],  # 32 on: masked
                draw(st.sampled_from((0, 8, 13))))
    if kind == "run":
        size = draw(st.integers(0, 30))
        count = draw(st.integers(1, 50))
        return ("run", [bytes([(k * 7) % 256]) * size for k in range(count)],
                draw(st.sampled_from((0, 8))))
    if kind == "body":
        return ("body", draw(st.binary(max_size=30)))
    return ("batch", [bytes([k]) * 3 for k in range(draw(st.integers(1, 4)))])


@st.composite
def _scenario(draw):
    turns = []
    for _ in range(draw(st.integers(1, 5))):
        action = draw(st.sampled_from(("append", "append", "append", "named", "offset",
                                       "named runs", "named runs")))
        items = draw(st.lists(_item(), min_size=1, max_size=4)) if action == "append" else []
        if action == "named runs":  # runs and bodies; ids from ``back`` below the last stored
            items = draw(st.lists(_item().filter(lambda i: i[0] != "batch"), min_size=1,
                                  max_size=3)) + [draw(st.sampled_from((0, 0, 1, 5, 200)))]
        turns.append((action, items, draw(st.booleans())))  # values for each record?
    lo = draw(st.integers(1, 40))
    derived = draw(st.booleans())
    config = StreamConfig(min_chunk_entries=lo, max_chunk_entries=draw(st.integers(lo, 100)),
                          max_chunk_bytes=draw(st.sampled_from((150, 600, 1 << 20))),
                          max_segment_bytes=draw(st.sampled_from((2_000, 1 << 30))),
                          filter_size=draw(st.sampled_from((0, 16))),
                          derived_keys=("k",) if derived else (),
                          derive=deriver(("k",)) if derived else None)
    return config, turns


def _store(directory: Path, config: StreamConfig, turns: list, runs: bool) -> tuple[list, dict]:
    """Append ``turns`` one at a time (each committed before the next), the ``EntryRun``s as
    they are (``runs``) or as one body per record; the callbacks' offsets and the files."""
    seen: list = []
    named = 0
    with Stream.open(directory, config) as s:
        for action, items, valued in turns:
            if action == "offset":
                s.store_offset("consumer", len(seen))
            elif action == "named":  # a writer batch: tracking state, snapshots at rollovers
                named += 2
                s.append_deduplicated("producer", [b"n0", b"n1"], [named - 1, named],
                                      on_durable=lambda o, e: seen.append(("named", o, e)))
            elif action == "named runs":
                *parts, back = items
                flat = [b for i in parts for b in (i[1] if i[0] != "body" else [i[1]])]
                given = [_given(i) if i[0] != "body" else i[1] for i in parts] if runs else flat
                ids = list(range(max(0, named + 1 - back), max(0, named + 1 - back) + len(flat)))
                named = max(named, ids[-1])
                values = [("v", None, b"w")[k % 3] for k in range(len(flat))] if valued else None
                kept = s.append_deduplicated("producer", given, ids, values,
                                             lambda o, e: seen.append(("runs", o, e)),
                                             entries=len(flat) if runs else None)
                seen.append(("kept", kept))
            else:
                given: list = []
                flat: list = []
                frames, extra = [], 0
                for item in items:
                    frames.append(len(flat))
                    if item[0] in ("run", "spans"):
                        flat += item[1]
                        given += [_given(item)] if runs else item[1]
                    elif item[0] == "body":
                        flat.append(item[1])
                        given.append(item[1])
                    else:
                        raw = encode_entries(item[1])
                        entry = SubBatchEntry(1, len(item[1]), len(raw), gzip.compress(raw, mtime=0))
                        flat.append(entry)
                        given.append(entry)
                        extra += len(item[1]) - 1
                values = [("v", None, b"w")[k % 3] for k in range(len(flat))] if valued else None
                records = len(flat) + extra if any(i[0] == "batch" for i in items) else None
                s.append_batch(given, values, lambda o, e: seen.append((o, e)), records,
                               frames=frames, entries=len(flat) if runs else None)
            s.flush(10)
    return seen, _files(directory)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario(), st.sampled_from((1, 20, storage.format._MASKED_FROM)),
       st.sampled_from((2, storage.chunking.PARTS_MAX)))
@example((StreamConfig(min_chunk_entries=3, max_chunk_entries=7, max_chunk_bytes=150),
          [("append", [("run", [b"abcdefghij"] * 40, 8), ("body", b"x"),
                       ("run", [b"yz"] * 9, 0)], False)]), 1, 2)
def test_runs_store_the_bytes_of_one_body_per_record(scenario, masked_from, parts_max):
    """``masked_from``: the entries from which ``EntrySpans`` cuts a chunk's part with a numpy
    mask (the spans here hold at most 80); ``parts_max``: the parts of a chunk written apart,
    above which they are joined (2: joins are common)."""
    config, turns = scenario
    default, storage.format._MASKED_FROM = storage.format._MASKED_FROM, masked_from
    parts_default, storage.chunking.PARTS_MAX = storage.chunking.PARTS_MAX, parts_max
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fast = _store(Path(tmp, "runs"), config, turns, runs=True)
            plain = _store(Path(tmp, "plain"), config, turns, runs=False)
            sidecars = {name: [Path(tmp, d, name).read_bytes() for d in ("runs", "plain")]
                        for name in os.listdir(Path(tmp, "plain"))
                        if name.endswith((".derived", ".skip"))}
    finally:
        storage.format._MASKED_FROM = default
        storage.chunking.PARTS_MAX = parts_default
    assert fast[0] == plain[0]
    assert fast[1].keys() == plain[1].keys() and fast[1]
    for name in fast[1]:
        assert fast[1][name] == plain[1][name], name
    for name, (a, b) in sidecars.items():
        assert a == b, name


def test_a_chunk_across_many_frames_is_written_from_its_parts(tmp_path):
    """A writer that is behind cuts chunks across client frames (up to ``max_chunk_bytes``):
    40 frames' spans make one chunk's data section of 40 parts, not one joined copy (fresh
    memory for the whole chunk), and the segment holds the bytes of one body per record."""
    bodies = [[b"f%02d-%03d" % (f, k) + b"." * (k % 7) for k in range(50)] for f in range(40)]
    spans = [_spans(frame, 0) for frame in bodies]
    data = storage.chunking.Entries(spans).span(0, 40 * 50)
    assert type(data) is list and len(data) == 40
    assert b"".join(data) == encode_entries([b for frame in bodies for b in frame])
    for queue, name in ((spans, "runs"), ([b for frame in bodies for b in frame], "plain")):
        with Stream.open(tmp_path / name, StreamConfig(max_chunk_entries=4000)) as s:
            s.append_batch(queue, None, lambda o, e: None, entries=2000 if name == "runs" else None)
            s.flush(10)
    assert _files(tmp_path / "runs") == _files(tmp_path / "plain")


def test_a_run_that_does_not_add_up_is_refused(tmp_path):
    with pytest.raises(StorageError):
        EntryRun(b"\0" * 9, 2, 1, 0)  # 2 entries of 1 byte take 10 bytes
    with Stream.open(tmp_path / "s") as s:
        run = _run([b"ab"] * 3, 8)
        with pytest.raises(StorageError):
            s.append_batch([run, b"c"], entries=3)  # 4 entries
        with pytest.raises(StorageError):
            s.append_batch([run], [None], entries=3)  # a value per record
        with pytest.raises(StorageError):
            s.append_batch([run], writer=("p", 1), entries=3)  # named: an id per record
        with pytest.raises(StorageError):
            s.append_batch([run], writer=("p", 1), entries=3, sequences=[1, 0, 1])  # ascending
        assert s.append_batch([b"c", run], entries=4) == 0
        s.flush(10)
        assert s.next_offset == 4
