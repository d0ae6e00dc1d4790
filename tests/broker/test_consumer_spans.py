"""Stage 2 over spans of stored chunks (``Reader.read_span``): an AMQP consumer delivers the
same messages, with the same ``x-stream-offset``, as when it reads chunk by chunk, whether the
columns tell for a span (records of one layout) or not (then the span is sliced as one chunk).
In-process: a real stream on disk, a real ``Consumer`` sending over proton's engine to a
receiving engine (no socket)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Message

from amqp_stream.amqp.consuming import Consumer
from amqp_stream.amqp.source_filters import SourceFilters
from amqp_stream.filtering import install
from bench import proton_floor
from sqlfilter import compile_sql
from storage import OffsetSpec, Stream, StreamConfig
from storage.reader import Reader
from bench.in_process import StreamEntry

install()


def _consume(stream: Stream, sql: str, start: OffsetSpec) -> list[tuple[int, object]]:
    """(x-stream-offset, body) of every delivery, in order."""
    server_t, client_t, sender, receiver = proton_floor._pair()
    filters = SourceFilters(start=start, stage2=compile_sql(sql), stage2_kind="sql")
    consumer = Consumer(sender, StreamEntry(stream, stage2_reads=True), filters, lambda c, soon: None)
    out = []
    while True:
        consumer.pump()
        proton_floor._pump(server_t, client_t)
        while (d := receiver.current) is not None and not d.partial:
            m = Message()
            m.decode(receiver.recv(d.pending))
            out.append((m.annotations["x-stream-offset"], m.body))
            receiver.advance()
        proton_floor._pump(client_t, server_t)
        if consumer.waiting:
            return out


def _message(i: int, shape: int) -> bytes:
    """Records of one layout (shape 0: the columns tell) or of others (a longer body, another
    property type: they do not)."""
    if shape == 0:
        return Message(properties={"k": i % 10}, body=f"b-{i % 1000:03d}").encode()
    if shape == 1:
        return Message(properties={"k": i % 10}, body="x" * (i % 7)).encode()
    return Message(properties={"k": str(i % 10)}, body=f"s-{i}").encode()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(st.tuples(st.integers(1, 300), st.sampled_from([0, 0, 0, 1, 2])),
                       min_size=1, max_size=12),
       sql=st.sampled_from(["k = 3", "k IN (1, 7)", "k = '3'", "k > 8 OR k = 0"]),
       start=st.integers(0, 400))
def test_spans_give_the_deliveries_of_chunk_by_chunk(tmp_path_factory, monkeypatch, chunks, sql,
                                                     start):
    d = tmp_path_factory.mktemp("s")
    stream = Stream.open(d, StreamConfig(fsync="never", max_chunk_entries=300))
    try:
        i = 0
        for size, shape in chunks:
            stream.append_batch([_message(i + j, shape) for j in range(size)])
            stream.flush()
            i += size
        spec = OffsetSpec.offset(min(start, i - 1))
        taken = []
        real = Reader.read_span

        def watched(self, *args):
            span = real(self, *args)
            taken.append(span is not None)
            return span

        with monkeypatch.context() as m:
            m.setattr(Reader, "read_span", watched)
            spans = _consume(stream, sql, spec)
        with monkeypatch.context() as m:
            m.setattr(Reader, "read_span", lambda self, *args: None)
            plain = _consume(stream, sql, spec)
        assert spans == plain
        assert [o for o, _ in plain] == sorted({o for o, _ in plain})
        if sum(1 for size, _ in chunks if size) >= 4 and start == 0:
            assert any(taken)  # (consecutive chunks from the first: spans read indeed)
    finally:
        stream.close()


def test_a_span_of_one_layout_and_one_of_mixed_layouts(tmp_path):
    """Both of a span's ways, seen taken: chunks of one layout (the columns choose) and a run
    with a chunk of other records (sliced as one chunk); the same deliveries as the plain path,
    and every match there."""
    stream = Stream.open(tmp_path / "s", StreamConfig(fsync="never", max_chunk_entries=1000))
    n = 0
    for shape in [0] * 9 + [1, 0]:  # a span ends past SPAN_RECORDS: the first 9 chunks
        stream.append_batch([_message(n + j, shape) for j in range(1000)])
        stream.flush()
        n += 1000
    found = []
    real = Reader.span_matches

    def watched(self, span):
        got = real(self, span)
        found.append(got is not None)
        return got

    Reader.span_matches = watched
    try:
        got = _consume(stream, "k IN (0, 3)", OffsetSpec.first())
    finally:
        Reader.span_matches = real
    assert [o for o, _ in got] == [o for o in range(n) if o % 10 in (0, 3)]  # (a span's first too)
    assert found == [True, False]
    stream.close()
