"""A replicated stream with broker-derived filter keys (``x-stream-derived-filter-keys``):
each replica builds every chunk's sidecar entry and skip-table rows from the chunk it takes,
so its ``.derived`` and ``.skip`` files are the leader's, byte for byte, and a filtered
consumer on a replica, or on the next leader after a failover, gets exactly what it gets on
the leader, skipping chunks and blocks as the leader does."""

from __future__ import annotations

import random
import struct
import urllib.request
from pathlib import Path

import pytest
from proton import Message

from amqp_stream.client.stream import StreamClient, offset_spec, publish_frame
from amqp_stream.cluster.layout import StreamLayout
from amqp_stream.cluster.testing import Cluster
from storage.format import decode_records
from tests.cluster.checker import check, log_dir, log_end, raw_chunks
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(120)

STREAM = "derived"
ARGS = {"x-stream-derived-filter-keys": "customer,n", "x-stream-max-segment-size-bytes": 30_000}
MEMBERS = ("n1", "n2", "n3")


def _bodies(first: int, n: int, customers: list[str]) -> list[bytes]:
    return [bytes(Message(body=f"{i}", properties={"customer": customers[i], "n": i}).encode())
            for i in range(first, first + n)]


def _publish(c: Cluster, node: str, bodies: list[bytes], first_id: int) -> None:
    with StreamClient(c.brokers[node].stream_url) as client:
        client.declare_publisher(1, STREAM)
        # a frame at a time, each confirmed before the next: a chunk each (frames sent back
        # to back may share chunks, and then the log may hold fewer segments than the test needs)
        for at in range(0, len(bodies), 250):
            client.send(publish_frame(1, [(first_id + at + k, None, b)
                                          for k, b in enumerate(bodies[at:at + 250])]))
            while client.confirmed < min(at + 250, len(bodies)):
                assert client.pump(10), "confirms stopped"


def _filtered(c: Cluster, node: str, properties: dict, expected: int) -> list[tuple[int, bytes]]:
    """Records a subscription with ``properties`` gets on ``node`` (stops at ``expected``)."""
    chunks: list[bytes] = []
    with StreamClient(c.brokers[node].stream_url,
                      on_chunk=lambda chunk: chunks.append(bytes(chunk))) as client:
        client.subscribe(1, STREAM, offset_spec("first"), credit=5, properties=properties)
        while client.records < expected:
            assert client.pump(10), f"deliveries on {node} stopped at {client.records}"
    out = []
    for chunk in chunks:
        entries = struct.unpack_from(">H", chunk, 2)[0]
        out.extend(decode_records(chunk[48:], struct.unpack_from(">Q", chunk, 24)[0],
                                  entries=entries))
    return out


def _skipped(c: Cluster, node: str) -> float:
    text = urllib.request.urlopen(c.brokers[node].metrics_url, timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(("amqp_stream_derived_blocks_skipped_total",
                                   "amqp_stream_derived_chunks_skipped_total"))
               and f'stream="{STREAM}"' in line)


def _index_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in (".derived", ".skip")}


def test_replicas_index_derived_keys_as_the_leader_and_filter_alike(tmp_path):
    rnd = random.Random(7)
    customers = [f"c{rnd.randrange(300)}" for _ in range(2500)]
    c = Cluster(tmp_path)
    c.set_layouts([(StreamLayout(STREAM, 1, "n1", MEMBERS), ARGS)])
    try:
        c.start()
        bodies = _bodies(0, 2000, customers)
        _publish(c, "n1", bodies, 1)
        dirs = {n: log_dir(d, STREAM) for n, d in c.data_dirs().items()}
        end = raw_chunks(dirs["n1"])[-1][2]
        wait_for(lambda: all(log_end(d) == end for d in dirs.values()), 20,
                 "every member at the leader's end")
        leader_files = _index_files(dirs["n1"])
        assert len([n for n in leader_files if n.endswith(".derived")]) >= 3  # several segments
        for node in ("n2", "n3"):
            assert _index_files(dirs[node]) == leader_files, node
        cases = [({"sql-filter": f"customer = '{customers[1999]}'"},
                  lambda i: customers[i] == customers[1999]),
                 ({"sql-filter": "n BETWEEN 1200 AND 1249"}, lambda i: 1200 <= i <= 1249)]
        for props, match in cases:
            expected = [(i, b) for i, b in enumerate(bodies) if match(i)]
            assert _filtered(c, "n1", props, len(expected)) == expected
            assert _filtered(c, "n3", props, len(expected)) == expected
        assert _skipped(c, "n3") > 0  # the replica's reader used the sidecar it built

        # failover: n1 gone, n2 leads epoch 2; its log (indexed as a replica) goes on
        c.brokers["n1"].kill()
        c.set_layouts([(StreamLayout(STREAM, 2, "n2", MEMBERS), ARGS)], only=["n2", "n3"])
        more = _bodies(2000, 500, customers)
        wait_for(lambda: f"leading {STREAM!r} (epoch 2" in c.log("n2"), 20, "n2 leading")
        _publish(c, "n2", more, 2001)
        bodies += more
        end = raw_chunks(dirs["n2"])[-1][2]
        wait_for(lambda: log_end(dirs["n3"]) == end, 20, "n3 at n2's end")
        assert _index_files(dirs["n3"]) == _index_files(dirs["n2"])
        for props, match in [({"sql-filter": f"customer = '{customers[2499]}'"},
                               lambda i: customers[i] == customers[2499])]:
            # (offsets past 2000 are one further: the new leader's epoch opens with a
            # tracking chunk)
            expected_bodies = [b for i, b in enumerate(bodies) if match(i)]
            on_n2 = _filtered(c, "n2", props, len(expected_bodies))
            assert [b for _, b in on_n2] == expected_bodies
            assert _filtered(c, "n3", props, len(expected_bodies)) == on_n2
        check({n: c.data_dirs()[n] for n in ("n2", "n3")}, STREAM, [], at_least=end)
    finally:
        c.close()
