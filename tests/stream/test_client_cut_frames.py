"""``StreamClient`` hands over the same chunks whatever its reads cut: a frame cut by the end of
a read is completed from the next read alone (the rest of that read handled where it lies), a
frame longer than a read joined over as many reads as it takes.

The broker's Deliver frames of chunks of several sizes are read with the client's usual 4 MiB
buffer and with buffers of a few bytes to 64 KiB, so that reads end inside frame headers, inside
chunk headers, inside records, and frames span one, two or many reads.
"""

from __future__ import annotations

import pytest

from amqp_stream.client.stream import StreamClient, offset_spec, publish_frame

MESSAGE = b"\x00\x53\x75\xa0"  # a data section of a vbin8 body


def _read(url: str, stream: str, records: int, read_size: int | None) -> list[bytes]:
    got: list[bytes] = []
    with StreamClient(url, on_chunk=lambda chunk: got.append(bytes(chunk))) as c:
        if read_size is not None:
            c._space = memoryview(bytearray(read_size))  # reads of this size at most
        c.subscribe(1, stream, offset_spec("first"), credit=3)
        while c.records < records:
            assert c.pump(10), "deliveries stopped"
    return got


@pytest.mark.parametrize("read_size", [9, 61, 1000, 4096, 65536])
def test_chunks_are_the_same_whatever_the_reads_cut(broker, stream_name, read_size):
    sizes = [1, 3, 50, 200, 7, 1000, 2, 400]
    with StreamClient(broker.stream_url) as c:
        c.create(stream_name)
        c.declare_publisher(1, stream_name)
        pid = 1
        for k, size in enumerate(sizes):
            body = bytes([k]) * (k * 37 % 200)
            c.send(publish_frame(1, [(pid + i, None, MESSAGE + bytes([len(body)]) + body) for i in range(size)]))
            pid += size
        while c.confirmed < sum(sizes):
            assert c.pump(10), "confirms stopped"
    whole = _read(broker.stream_url, stream_name, sum(sizes), None)
    assert max(map(len, whole)) > 65536  # a frame longer than the largest read below
    assert _read(broker.stream_url, stream_name, sum(sizes), read_size) == whole
