"""Readers read a chunk's data section into one scratch buffer per thread
(``storage.files.pread_scratch``): every record they give must be a copy of its own, whatever
path chose it (columns, needles, a plain split, a Bloom filter, a derived key's blocks), so
that a chunk kept while other readers read on (a consumer's records waiting for credit) still
holds its own bytes. Random streams of one-layout messages (so the columns path answers),
readers of several kinds read in a random interleaving in one thread, every chunk kept; then
each record is compared with what was written at its offset."""

from __future__ import annotations

import tempfile

import proton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_stream import derived_keys
from amqp_stream.columns import column_matcher
from sqlfilter import compile_sql
from sqlfilter.required import needles_of
from storage import OffsetSpec, Stream, StreamConfig

FILTERS = ("k = 7", "k < 5", "region = 'r1'", "region IN ('r2', 'r3')", "k = 3 OR k = 4")


def _message(i: int, k: int, region: int) -> bytes:
    return bytes(proton.Message(body=b"m%05d" % i, properties={"region": f"r{region}", "k": k}).encode())


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
       entries=st.sampled_from([3, 64, 150]),
       readers=st.lists(st.tuples(st.sampled_from(FILTERS), st.sampled_from(["columns", "needles", "none"]),
                                  st.booleans(), st.booleans()), min_size=2, max_size=4),
       order=st.lists(st.integers(0, 3), max_size=200))
def test_records_stay_their_own_while_other_readers_read(values, entries, readers, order):
    bodies = [_message(i, k, r) for i, (k, r) in enumerate(values)]
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
            for i in [*order, *range(len(opened))] + [j for j in range(len(opened)) for _ in values]:
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
