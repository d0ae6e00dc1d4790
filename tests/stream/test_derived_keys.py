"""Broker-derived filter keys over the stream protocol: Create takes the argument (a string of
comma-separated names), and a subscription whose stage-2 filter requires a value of an indexed
key (or bounds an indexed number) skips chunks and reads only the blocks that may match, delivering exactly what the same
subscription gets from a stream without the key."""

from __future__ import annotations

import random
import struct
import urllib.request

from proton import Message

from amqp_stream.client.stream import StreamClient, offset_spec, publish_frame
from storage.format import decode_records


def _metric(metrics_url: str, name: str, stream: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f'amqp_stream_{name}{{stream="{stream}"}}'):
            return float(line.split()[-1])
    return 0.0


def _deliveries(url: str, stream: str, properties: dict, expected: int) -> list[tuple[int, bytes]]:
    chunks: list[bytes] = []
    with StreamClient(url, on_chunk=lambda chunk: chunks.append(bytes(chunk))) as c:
        c.subscribe(1, stream, offset_spec("first"), credit=5, properties=properties)
        while c.records < expected:
            assert c.pump(10), "deliveries stopped"
    out = []
    for chunk in chunks:
        entries, chunk_id = struct.unpack_from(">H", chunk, 2)[0], struct.unpack_from(">Q", chunk, 24)[0]
        out.extend(decode_records(chunk[48:], chunk_id, entries=entries))
    return out


def test_subscriptions_requiring_an_indexed_value_skip_and_deliver_as_a_full_scan(broker):
    url = broker.stream_url
    rnd = random.Random(3)
    customers = [f"c{rnd.randrange(1000)}" for _ in range(4000)]
    bodies = [bytes(Message(body=f"{i}", properties={"customer": c, "n": i}).encode())
              for i, c in enumerate(customers)]
    names = {"plain": "derived-sp-plain", "derived": "derived-sp-derived"}
    for key, name in names.items():
        with StreamClient(url) as c:
            assert c.create(name, {"stream-derived-filter-keys": "customer,n"} if key == "derived" else None)
            c.declare_publisher(1, name)
            for first in range(0, len(bodies), 500):
                c.send(publish_frame(1, [(i, None, bodies[i]) for i in range(first, first + 500)]))
            while c.confirmed < len(bodies):
                assert c.pump(10), "confirms stopped"
    for props, match in (({"sql-filter": f"customer = '{customers[-1]}'"}, lambda i: customers[i] == customers[-1]),
                         ({"application-property.customer": customers[-2]}, lambda i: customers[i] == customers[-2]),
                         ({"sql-filter": "n BETWEEN 3900 AND 3949"}, lambda i: 3900 <= i <= 3949)):
        expected = [(i, b) for i, b in enumerate(bodies) if match(i)]
        before = {k: _metric(broker.metrics_url, "read_bytes_total", n) for k, n in names.items()}
        got = {k: _deliveries(url, n, props, len(expected)) for k, n in names.items()}
        assert got["plain"] == expected
        assert got["derived"] == expected
        read = {k: _metric(broker.metrics_url, "read_bytes_total", n) - before[k]
                for k, n in names.items()}
        assert read["derived"] < read["plain"] / 2, (props, read)
    assert _metric(broker.metrics_url, "derived_blocks_skipped_total", names["derived"]) \
        + _metric(broker.metrics_url, "derived_chunks_skipped_total", names["derived"]) > 0
