"""Readers read a chunk's data section into one scratch buffer per thread
(``storage.files.pread_scratch``): every record they give must be a copy of its own, whatever
path chose it (columns, needles, a plain split, a Bloom filter, a derived key's blocks), so
that a chunk kept while other readers read on (a consumer's records waiting for credit) still
holds its own bytes. Random streams of one-layout messages (so the columns path answers),
readers of several kinds read in a random interleaving in one thread, every chunk kept; then
each record is compared with what was written at its offset."""

from __future__ import annotations

import os
import tempfile

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_stream import derived_keys
from amqp_stream.columns import column_matcher
from sqlfilter import compile_sql
from sqlfilter.required import needles_of
from storage import CorruptionError, OffsetSpec, Stream, StreamConfig
from storage.reader import DirectorySource, Reader

FILTERS = ("k = 7", "k < 5", "region = 'r1'", "region IN ('r2', 'r3')", "k = 3 OR k = 4")


def _message(i: int, k: int, region: int) -> bytes:
    """(its body ends in NULs: a record's last bytes, which a copy must keep)"""
    return bytes(proton.Message(body=b"m%05d\0\0" % i, properties={"region": f"r{region}", "k": k}).encode())


def _write(directory: str, bodies: list[bytes], entries: int, derived: bool) -> None:
    config = StreamConfig(max_chunk_entries=entries, min_chunk_entries=entries,
                          **(derived_keys.storage_settings(["region"]) if derived else {}))
    with Stream.open(directory, config) as s:
        for at in range(0, len(bodies), entries):
            part = bodies[at:at + entries]
            s.append_batch(part, [b"r"] * len(part))
            s.flush()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), min_size=1, max_size=400),
       entries=st.sampled_from([3, 64, 150, 600]),
       readers=st.lists(st.tuples(st.sampled_from(FILTERS), st.sampled_from(["columns", "needles", "none"]),
                                  st.booleans(), st.booleans()), min_size=2, max_size=4),
       order=st.lists(st.integers(0, 3), max_size=200), runs=st.booleans())
def test_records_stay_their_own_while_other_readers_read(values, entries, readers, order, runs):
    # ``runs``: three times as many messages, regions in runs of 130 (a derived key's blocks
    # of 64 records then match in runs of adjacent blocks, read at once), else as drawn
    bodies = ([_message(i, i * 7 % 10, i // 130 % 8) for i in range(3 * len(values))] if runs
              else [_message(i, k, r) for i, (k, r) in enumerate(values)])
    with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as derived:
        _write(plain, bodies, entries, False)
        _write(derived, bodies, entries, True)
        streams = {False: Stream.open(plain, StreamConfig()),
                   True: Stream.open(derived, StreamConfig(**derived_keys.storage_settings(["region"])))}
        opened = []
        for sql, kind, on_derived, bloom_values in readers:
            f = compile_sql(sql)
            r = streams[on_derived].reader(
                OffsetSpec.first(), [b"r"] if bloom_values else (),
                derived=derived_keys.wanted(("region",), f) if on_derived else None,
                needles=needles_of(f) if kind != "none" else (),
                columns=column_matcher(f) if kind == "columns" else None)
            opened.append((r, f, []))
        try:
            # a random interleaving, then each reader to its end
            for i in [*order, *range(len(opened))] + [j for j in range(len(opened)) for _ in bodies]:
                r, _, kept = opened[i % len(opened)]
                chunk = r.read_chunk()
                if chunk is not None:
                    kept.append(chunk)
            for _, f, kept in opened:
                got = [(o, b) for chunk in kept for o, b in chunk.records]
                assert all(type(b) is bytes and b == bodies[o] for o, b in got)
                match = f.bytes_matcher()
                assert [o for o, b in got if match(b)] == [
                    i for i, b in enumerate(bodies) if f.matches(b)]
        finally:
            for r, _, _ in opened:
                r.close()
            for s in streams.values():
                s.close()


def test_runs_of_matching_blocks_read_at_once_give_every_match():
    """A derived key's blocks that may match lie next to each other (regions in runs of 130,
    chunks of 600 records: blocks of 64): each run is read with one ``pread`` and its
    records chosen in one step; every path gives every match, its own bytes."""
    test_records_stay_their_own_while_other_readers_read.hypothesis.inner_test(
        values=[(0, 0)] * 400, entries=600, order=[0, 1, 2, 3] * 3, runs=True,
        readers=[("region = 'r1'", "columns", True, False), ("region IN ('r2', 'r3')", "needles", True, False),
                 ("region = 'r5'", "none", True, False), ("k = 7", "columns", False, False)])


@pytest.mark.parametrize("kind", ["columns", "needles", "none"])
@pytest.mark.parametrize("on_derived", [True, False])
def test_a_damaged_record_in_a_run_of_blocks_is_refused(tmp_path, kind, on_derived):
    """One byte of a matching record changed on disk: whether its block is read in a run (a
    derived key) or its chunk whole, the read raises ``CorruptionError`` and no record of that
    chunk is given."""
    bodies = [_message(i, i * 7 % 10, i // 130 % 8) for i in range(1200)]
    directory = str(tmp_path / ("derived" if on_derived else "plain"))
    _write(directory, bodies, 600, on_derived)
    (segment,) = [p for p in os.listdir(directory) if p.endswith(".segment")]
    path = os.path.join(directory, segment)
    raw = bytearray(open(path, "rb").read())
    at = raw.index(b"m00200")  # region r1, in the first chunk's run of matching blocks
    raw[at + 5] ^= 0x01
    with open(path, "wb") as f:
        f.write(raw)
    f_ = compile_sql("region = 'r1'")
    # (read from the files alone: opening the stream would find the damage in its recovery)
    with Reader(DirectorySource(directory), OffsetSpec.first(),
                derived=derived_keys.wanted(("region",), f_) if on_derived else None,
                needles=needles_of(f_) if kind != "none" else (),
                columns=column_matcher(f_) if kind == "columns" else None) as r:
        with pytest.raises(CorruptionError):
            r.read_chunk()
