"""``Consumer.whole``: a per-chunk stage-2 answer (the indexes of a chunk's matching records)
gives the same deliveries, with the same ``x-stream-offset``, as the slice-by-slice path, and a
None answer falls back to it. In-process: a real stream on disk, a real ``Consumer`` sending
over proton's engine to a receiving engine (no socket)."""

from __future__ import annotations

from proton import Message

from amqp_stream.amqp.consuming import Consumer
from amqp_stream.amqp.source_filters import SourceFilters
from amqp_stream.filtering import install
from bench import proton_floor
from tests.broker.in_process import StreamEntry
from sqlfilter import compile_sql
from storage import OffsetSpec, Stream, StreamConfig

install()



def _consume(stream: Stream, sql: str, whole) -> list[tuple[int, bytes]]:
    """(x-stream-offset, body) of every delivery, in order."""
    server_t, client_t, sender, receiver = proton_floor._pair()
    filters = SourceFilters(start=OffsetSpec.first(), stage2=compile_sql(sql), stage2_kind="sql")
    consumer = Consumer(sender, StreamEntry(stream), filters, lambda c, soon: None)
    consumer.whole = whole
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


def test_a_chunk_answer_gives_the_same_deliveries(tmp_path):
    stream = Stream.open(tmp_path / "s", StreamConfig(fsync="never"))
    for batch in range(5):
        stream.append_batch([bytes(Message(properties={"k": i % 10}, body=f"{batch}-{i}").encode())
                             for i in range(97)])
    stream.flush()
    asked = []

    def whole(chunk):
        asked.append(chunk.records[0][0])
        if len(asked) % 2:  # every other chunk: no answer, slice by slice
            return None
        return [i for i, (_, data) in enumerate(chunk.records) if match(data)]

    match = compile_sql("k = 3").bytes_matcher()
    plain = _consume(stream, "k = 3", None)
    assert len(plain) == 50
    assert _consume(stream, "k = 3", whole) == plain
    assert len(asked) >= 2  # both paths taken: chunks answered whole and chunks not
