"""Stage 2 over the stream protocol while the broker reads consecutive stored chunks at once
(``Reader.read_span``, ``Subscription._add_span``): what a client gets is what chunk by chunk
reading gives, each run of consecutive matches of one stored chunk a chunk of its own, with
that stored chunk's timestamp, whatever the chunks' sizes, their records' layouts (one size
and layout, so the columns tell for a span at once; several, so they do not) and the filter.
Real broker process, the conformance client granting credit as rstream does (ten ahead, one
back per chunk), so that the broker scans ahead of the credit (``_prefetch``)."""

from __future__ import annotations

import itertools
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Message

from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient, offset_first
from tests.stream.test_derived_keys import _metric

pytestmark = pytest.mark.timeout(300)

#: (filter, which ``k`` it matches)
FILTERS = {
    "k = 1": lambda k: k == 1,
    "k < 2": lambda k: k < 2,
    "k IN (0, 3)": lambda k: k in (0, 3),
    "zone = 'z02'": lambda k: k == 2,
    "k <> 2": lambda k: k != 2,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("stage2-spans") / "data",
                       extra_args=["--fsync", "never"]) as b:
        yield b


def _message(k: int, i: int, layout: int) -> bytes:
    """Layout 0: one size and layout for every record; 1: the body's length varies; 2:
    another key first."""
    props = {"k": k, "zone": "z%02d" % k}
    if layout == 2:
        props = {"a": 1, **props}
    return bytes(Message(body=b"m%d" % i if layout == 1 else b"m%06d" % i, properties=props).encode())


def _next_millisecond() -> None:
    """Wait for the clock's next millisecond: the next stored chunk's timestamp differs."""
    now = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == now:
        pass


_names = itertools.count()


_ks = st.one_of(st.lists(st.integers(0, 3), min_size=1, max_size=120),  # (runs of matches)
                st.builds(lambda n: [i % 4 for i in range(n)], st.integers(1, 300)))  # (apart)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.tuples(_ks, st.sampled_from([0, 0, 0, 1, 2])), min_size=2, max_size=12),
       sql=st.sampled_from(sorted(FILTERS)), initial=st.sampled_from([1, 3, 10, 100]))
def test_spans_deliver_what_stored_chunks_give_one_by_one(broker, frames, sql, initial):
    wanted = FILTERS[sql]
    stream = f"spans-{next(_names)}"
    c = StreamClient("127.0.0.1", broker.stream_port, timeout=10)
    assert c.create_stream(stream) == OK
    assert c.declare_publisher(1, stream) == OK
    records: list[tuple[int, bytes]] = []  # (k, message) of each offset
    for ks, layout in [*frames, ([next(k for k in range(4) if wanted(k))], 0)]:
        ids = list(range(len(records), len(records) + len(ks)))
        records += [(k, _message(k, i, layout)) for i, k in zip(ids, ks, strict=True)]
        c.publish(1, [(i, records[i][1]) for i in ids])
        c.wait_confirms(1, ids)  # (one stored chunk or more each)
        _next_millisecond()
    last = len(records) - 1  # the last record matches, alone in its chunk: the read ends there
    # the stored chunks as they are (a stage-1 reader that takes every chunk): the expected
    # chunks are each one's runs of matches, under its timestamp
    assert c.subscribe(0, stream, offset_first(), credit=1000,
                       properties={"filter.0": "none", "match-unfiltered": "true"}) == OK
    expected: list[tuple[int, int, list[bytes]]] = []
    at = 0
    while at <= last:
        stored = c.next_chunk()
        run: list[bytes] = []
        for offset in range(stored.chunk_id, stored.chunk_id + stored.num_records):
            if wanted(records[offset][0]):
                if not run:
                    first = offset
                run.append(records[offset][1])
            elif run:
                expected.append((first, stored.timestamp, run))
                run = []
        if run:
            expected.append((first, stored.timestamp, run))
        at = stored.chunk_id + stored.num_records
    assert c.unsubscribe(0) == OK
    assert c.subscribe(1, stream, offset_first(), credit=initial,
                       properties={"sql-filter": sql}) == OK
    got: list[tuple[int, int, list[bytes]]] = []
    while not got or got[-1][0] < last:
        chunk = c.next_chunk()
        assert chunk.num_entries == chunk.num_records and zlib.crc32(chunk.data) == chunk.crc
        bodies = [body for _, body in chunk.records()]
        got.append((chunk.chunk_id, chunk.timestamp, bodies))
        c.credit(1, 1)
    c.close()
    assert got == expected
    matched = sum(len(run) for _, _, run in expected)
    assert _metric(broker.metrics_url, "stage2_dropped_messages_total", stream) == len(records) - matched
