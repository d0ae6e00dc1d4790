"""``framing.batch_frames`` (Publish frames a batch at a time) writes the frames
``framing.entry_frames`` (message by message, ``client.stream.publish_frame``) writes, byte for
byte and cut at the same places: random schemas, values, filter values, first ids, frame
limits and frame sizes; and the usual batch takes the batch-at-a-time way."""

from __future__ import annotations

import sys
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from amqp_stream.spark import framing
from amqp_stream.spark.encoding import ArrowEncoder
from amqp_stream.spark.framing import batch_frames, entry_frames
from amqp_stream.spark.mapping import WritePlan
from amqp_stream.spark.row_concat import Pieces
from amqp_stream.streamproto import Publish, decode
from tests.spark.test_arrow_kernels import batches

BENCH = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                    StructField("amount", DoubleType()), StructField("message_id", StringType()),
                    StructField("k", LongType())])


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 1795823780.661)


def _both(enc: ArrowEncoder, batch, first: int, limit: int, publisher: int):
    """The frames of both ways, each as its bytes; the batch way from the messages' unjoined
    pieces, as the sink frames them."""
    messages = enc.encode_pieces(batch)
    if messages is None:
        return None, None
    index = enc.plan.filter_index
    fast = batch_frames(messages, None if index is None else batch.column(index), first, limit, publisher)
    slow = list(entry_frames(enc.encode(batch), enc.filter_values(batch), first, limit, publisher))
    return _joined(fast), _joined(slow)


def _joined(frames):
    """Each frame's buffers as its bytes."""
    return None if frames is None else [(b"".join(parts), count) for parts, count in frames]


def test_batch_frames_are_the_entry_frames(monkeypatch):
    """``limit`` is drawn around the sums of the entries' sizes, where a cut moves by a byte."""
    runs: list[bool] = []

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(batches(max_rows=30), st.integers(0, 2**63 - 2**20), st.integers(1, 8), st.integers(0, 255), st.data())
    def check(case, first, per_frame, publisher, data):
        schema, batch, fv, _ = case
        monkeypatch.setattr(framing, "FRAME_MESSAGES", per_frame)
        enc = ArrowEncoder(WritePlan.for_schema(schema, fv), schema)
        messages = enc.encode(batch)
        values = enc.filter_values(batch) or [None] * len(messages)
        sizes = [14 + len(m) + len((v or "").encode()) for m, v in zip(messages, values, strict=True)]
        sums = [sum(sizes[:k]) for k in range(1, len(sizes) + 1)] or [1]
        limit = max(1, data.draw(st.sampled_from(sums)) + data.draw(st.integers(-3, 3)))
        fast, slow = _both(enc, batch, first, limit, publisher)
        if fast is not None:
            assert fast == slow
        runs.append(fast is not None)

    check()
    assert sum(runs) > len(runs) / 6, f"batch_frames wrote {sum(runs)} of {len(runs)} batches"


def _bench_batch(rows: int, start: int = 0):
    ids = range(start, start + rows)
    return pa.RecordBatch.from_arrays([
        pa.array(list(ids), pa.int32()), pa.array([f"r{i % 100:02d}" for i in ids]),
        pa.array([i * 0.25 for i in ids]), pa.array([f"m-{i}" for i in ids]), pa.array([i * 3 for i in ids], pa.int64())],
        names=BENCH.names)


@pytest.mark.parametrize("limit", [1 << 20, 50_000, 100])
def test_the_usual_batch_is_framed_a_batch_at_a_time(limit):
    """The bench's five columns, 3,300 rows (a slice, so offsets do not start at 0): several
    frames, cut by count or by size, the same bytes; each decodes to its messages."""
    batch = _bench_batch(3400).slice(100)
    enc = ArrowEncoder(WritePlan.for_schema(BENCH, "region"), BENCH)
    assert isinstance(enc.encode_pieces(batch), Pieces)  # joined once, with the frames' fields
    fast, slow = _both(enc, batch, 7, limit, 3)
    assert fast is not None and len(fast) >= 4
    assert fast == slow
    messages = enc.encode(batch)
    seen = 0
    for frame, count in fast:
        publish = decode(memoryview(frame)[4:])
        assert isinstance(publish, Publish) and publish.publisher_id == 3 and publish.version == 2
        assert [m[0] for m in publish.messages] == list(range(7 + seen, 7 + seen + count))
        assert [bytes(m[2]) for m in publish.messages] == messages[seen:seen + count]
        assert [m[1] for m in publish.messages] == batch.column(1).to_pylist()[seen:seen + count]
        seen += count
    assert seen == batch.num_rows


def test_filter_values_null_in_some_rows_go_message_by_message():
    """A frame of such a batch may be v1 or v2: left to ``entry_frames``."""
    batch = _bench_batch(10)
    regions = pa.array([None if i % 3 else f"r{i}" for i in range(10)])
    batch = pa.RecordBatch.from_arrays([batch.column(0), regions, *batch.columns[2:]], names=BENCH.names)
    enc = ArrowEncoder(WritePlan.for_schema(BENCH, "region"), BENCH)
    messages = enc.encode_pieces(batch)
    assert messages is not None
    assert batch_frames(messages, batch.column(1), 1, 1 << 20, 1) is None
    none = pa.RecordBatch.from_arrays([batch.column(0), pa.nulls(10, pa.string()), *batch.columns[2:]],
                                      names=BENCH.names)
    fast, slow = _both(enc, none, 1, 1 << 20, 1)
    assert fast is not None and fast == slow and decode(memoryview(fast[0][0])[4:]).version == 1


def test_compute_calls_do_not_search_for_a_missing_module_each_time():
    """pyarrow's compute functions import ``dateutil.relativedelta`` at every call; where it is
    not installed, each failed import searched ``sys.path`` again (~0.1 ms a call)."""
    ArrowEncoder(WritePlan.for_schema(BENCH, "region"), BENCH)  # the kernels set up
    import pyarrow.compute as pc
    searched: list[str] = []

    class Watch:
        @staticmethod
        def find_spec(name, path=None, target=None):
            searched.append(name)
            return None

    column = pa.array([b"ab", b"c"])
    sys.meta_path.insert(0, Watch)  # type: ignore[arg-type]
    try:
        for _ in range(3):
            pc.binary_join_element_wise(column, column, b"")
    finally:
        sys.meta_path.remove(Watch)  # type: ignore[arg-type]
    assert searched == []


def test_frames_sent_together_arrive_whole_and_in_order(broker, stream_name):
    """``StreamClient.send_parts`` (the sink's frames of a batch in one ``sendmsg``): more
    buffers than one call takes (1,024), a small send buffer (sends cut anywhere): every
    frame arrives whole and in order, every message stored once."""
    import socket

    from amqp_stream import client as amqp
    from amqp_stream.client.stream import StreamClient
    rows = 1500
    batch = pa.RecordBatch.from_arrays([pa.array(range(rows), pa.int32()), pa.array(["eu"] * rows)],
                                       names=["n", "region"])
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType())])
    enc = ArrowEncoder(WritePlan.for_schema(schema, "region"), schema)
    parts = []
    for i, data in enumerate(enc.encode(batch)):  # a frame a message, each as two buffers
        frame = next(iter(entry_frames([data], ["eu"], i + 1, 1 << 20, 1)))[0][0]
        parts += [frame[:7], memoryview(frame)[7:]]
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
    with StreamClient(broker.stream_url) as client:
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        client.declare_publisher(1, stream_name)
        client.send_parts(parts)
        while client.confirmed + client.errors < rows:
            assert client.pump(30)
        assert (client.confirmed, client.errors) == (rows, 0)
    with amqp.connect(broker.url) as c, c.consumer(stream_name) as con:
        got = [(m.application_properties["n"], m.filter_value) for m in con.read_available()]
    assert got == [(i, "eu") for i in range(rows)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.booleans()), max_size=12), st.integers(1, 12))
def test_merged_batches_keep_every_rows_id(shapes, rows):
    """``stream_sink.merged`` joins batches whose ids follow on into batches of at least
    ``rows`` (fewer only before a gap or at the end), and every row keeps its publishing id."""
    from amqp_stream.spark.stream_sink import merged
    given_, expected, first = [], [], 1
    for size, gap in shapes:
        first += 5 if gap else 0  # an earlier attempt's rows skipped: the ids jump
        given_.append((pa.RecordBatch.from_arrays([pa.array(range(first, first + size), pa.int64())], names=["id"]), first))
        expected += list(range(first, first + size))
        first += size
    out = list(merged(iter(given_), rows))
    assert [i for batch, _ in out for i in batch.column(0).to_pylist()] == expected
    for k, (batch, start) in enumerate(out):
        ids = batch.column(0).to_pylist()
        assert not ids or ids[0] == start
        assert ids == list(range(start, start + len(ids)))  # one id after another
        if k + 1 < len(out) and batch.num_rows < rows:  # a short batch: the next one's ids jump
            assert out[k + 1][1] != start + batch.num_rows


def test_merged_batches_join_alike_without_concat_batches():
    """pyarrow before 19 has no ``concat_batches`` (setup.cfg takes 15): the fallback joins
    the same rows, columns and types into one batch."""
    from amqp_stream.spark.stream_sink import _joined

    class Arrow18:  # pyarrow as it was before ``concat_batches``
        Table = pa.Table

    batches = [pa.RecordBatch.from_arrays([pa.array([i, i + 1], pa.int64()), pa.array(["a", None])],
                                          names=["id", "s"]) for i in (1, 3, 5)]
    joined = _joined(Arrow18, batches)
    assert isinstance(joined, pa.RecordBatch)
    assert joined.equals(pa.concat_batches(batches))
