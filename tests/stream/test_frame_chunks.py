"""A client's Publish frame of at least ``min_chunk_entries`` (32) messages shares no chunk with
another frame, even when several frames reach the broker in one read (one loop turn, one
append). rstream's ``test_consume_filtering`` needs it: rstream's post-filter stops at the
first record of a chunk it cannot decode, so a chunk that starts inside one 50-message
``send_batch`` and goes on into the next loses the next one's match. A frame larger than the
chunk limit is still cut as osiris's writer batches it (issue 25 item 5: ``send_batch`` of
4,999 ends in a chunk of 935), and frames of a few messages still share chunks."""

from __future__ import annotations

import pytest

from amqp_stream.client.stream import StreamClient, offset_spec, publish_frame
from amqp_stream.streamproto.traffic import CHUNK_HEADER, chunk_header
from amqp_stream.testing import BrokerProcess
from storage.format import decode_records

MESSAGE = b"\x00\x53\x75\xa0\x03abc"  # an AMQP data section


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Stored chunks as they are (``--stream-join-bytes 0``: none joined on the way out)."""
    with BrokerProcess(tmp_path_factory.mktemp("frame-chunks") / "data",
                       extra_args=["--stream-join-bytes", "0"]) as b:
        yield b


def _chunks(broker, stream: str, frames: list[int], reference: str = "") -> list[tuple[int, int]]:
    """Publish frames of these sizes in one write (filter value: the message's place in its
    frame), wait for every confirm, and read the stream back: (chunk id, records) of each
    chunk."""
    url = broker.stream_url
    with StreamClient(url) as c:
        c.create(stream)
        c.declare_publisher(1, stream, reference)
        data, pid = [], 1
        for size in frames:
            data.append(publish_frame(1, [(pid + k, str(k), MESSAGE) for k in range(size)]))
            pid += size
        c.send(b"".join(data))
        while c.confirmed < sum(frames):
            assert c.pump(10), "confirms stopped"
    got: list[tuple[int, int]] = []
    with StreamClient(url, on_chunk=lambda chunk: got.append(
            (chunk_header(chunk).chunk_id, chunk_header(chunk).num_records))) as c:
        c.subscribe(1, stream, offset_spec("first"))
        while c.records < sum(frames):
            assert c.pump(10), "deliveries stopped"
    return got


def _frame_starts(frames: list[int]) -> list[int]:
    starts, at = [], 0
    for size in frames:
        starts.append(at)
        at += size
    return starts


def _spans(chunks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(first, first + n) for first, n in chunks]


def test_frames_of_fifty_sent_together_each_start_a_chunk_and_share_none(broker, stream_name):
    for reference in ("", "named"):  # both the plain and the deduplicating path
        frames = [50] * 10
        chunks = _chunks(broker, f"{stream_name}{reference}", frames, reference)
        firsts = {first for first, _ in chunks}
        for start in _frame_starts(frames):
            assert start in firsts, (reference, start, chunks)
        for first, end in _spans(chunks):  # no chunk holds parts of two frames
            assert first // 50 == (end - 1) // 50, (reference, chunks)


def test_a_frame_above_the_limit_is_cut_as_osiris_batches_it(broker, stream_name):
    """One frame of 4,999 (rstream's send_batch): 32, 64 ... 2,048 and 935, as RabbitMQ."""
    chunks = _chunks(broker, stream_name, [4999])
    assert [n for _, n in chunks] == [32, 64, 128, 256, 512, 1024, 2048, 935]


def test_small_frames_still_share_chunks(broker, stream_name):
    """Frames below 32 messages are no chunk unit: 40 frames of 5 sent together are not 40
    chunks (the first chunk after idle takes 32 of them, whatever their frames)."""
    chunks = _chunks(broker, stream_name, [5] * 40)
    assert len(chunks) < 10 and chunks[0] == (0, 32), chunks


def test_frames_of_three_publishers_in_one_read_are_stored_in_the_order_they_came(broker, stream_name):
    """Publishers 1 and 3 on one stream, 2 on another between them, all frames in one write
    (one loop turn): the stream holds 1's, 3's, then 1's second frame, in that order, though
    a publisher's frames of a turn are one append (the last other publisher of the same stream
    is flushed first, not only the publisher of the frame just before)."""
    other = f"{stream_name}-other"
    with StreamClient(broker.stream_url) as c:
        c.create(stream_name)
        c.create(other)
        for pub, stream in ((1, stream_name), (2, other), (3, stream_name)):
            c.declare_publisher(pub, stream)
        c.send(b"".join(publish_frame(pub, [(i, None, b"\x00\x53\x75\xa0\x02" + body)])
                        for pub, i, body in ((1, 1, b"a1"), (2, 1, b"b1"), (3, 1, b"c1"),
                                             (1, 2, b"a2"))))
        while c.confirmed < 4:
            assert c.pump(10), "confirms stopped"
    bodies: list[bytes] = []

    def on_chunk(chunk: bytes) -> None:
        h = chunk_header(chunk)
        start = CHUNK_HEADER.size + h.bloom_size  # the header, its Bloom filter, the data
        bodies.extend(body[-2:] for _, body in decode_records(
            bytes(chunk[start:start + h.data_length]), h.chunk_id, entries=h.num_entries))

    with StreamClient(broker.stream_url, on_chunk=on_chunk) as c:
        c.subscribe(1, stream_name, offset_spec("first"))
        while c.records < 3:
            assert c.pump(10), "deliveries stopped"
    assert bodies == [b"a1", b"c1", b"a2"]
