"""A leader's chunk damaged on disk, on real broker processes (n1 leads, n2 follows, n3 joins
late and catches up from the start through the leader's ``read_raw``).

The damage is a data length near 2 GiB (``test_damaged_chunks``'s "data length huge"): a
leader sending by the header alone announces a frame of that size and sends the rest of the
segment (its ``sendfile`` then short: "segment ended early", again at each reconnection). What
must hold: the leader names the damaged segment in its log and sends nothing from that chunk
on; the joining member holds exactly the leader's chunks before it."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("rstream")

from amqp_stream.cluster.layout import StreamLayout  # noqa: E402
from amqp_stream.cluster.testing import Cluster  # noqa: E402
from storage.format import decode_header  # noqa: E402
from tests.cluster.checker import log_dir, log_end, raw_chunks  # noqa: E402
from tests.cluster.test_replication import STREAM, bodies, producer, publish  # noqa: E402
from tests.polling import wait_for  # noqa: E402
from tests.storage.test_damaged_chunks import DAMAGE, _index  # noqa: E402


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.set_layouts([(StreamLayout(STREAM, 1, "n1", ("n1", "n2", "n3")), {})])
    c.start("n1", "n2")
    yield c
    c.close()


def test_a_joining_member_gets_the_chunks_before_a_damaged_one_and_never_it(cluster):
    confirmed: list[bytes] = []

    async def go():
        async with producer(cluster, "n1") as p:
            for k in range(6):
                await publish(p, bodies(f"d{k}", 100), confirmed)
    asyncio.run(go())
    dirs = cluster.data_dirs()
    n1, n3 = log_dir(dirs["n1"], STREAM), dirs["n3"]
    chunks = raw_chunks(n1)
    wait_for(lambda: log_end(log_dir(dirs["n2"], STREAM)) == chunks[-1][2], 20, "n2 caught up")
    user = [i for i, c in enumerate(chunks) if c[3][1] == 0]
    number = user[len(user) // 2]
    assert 0 < number < len(chunks) - 1, "a damaged chunk with chunks before and after it"
    seg, ipath, rec = _index(n1)[number]
    DAMAGE["data length huge"](seg, ipath, rec, decode_header(chunks[number][3]))
    cluster.start("n3")
    wait_for(lambda: seg in cluster.log("n1"), 30, "the leader naming the damaged segment")
    wait_for(lambda: _end(n3) == chunks[number][0], 20, "n3 holding the chunks before it")
    held = raw_chunks(log_dir(n3, STREAM))
    assert [c[3] for c in held] == [c[3] for c in chunks[:number]]


def _end(data_dir) -> int | None:
    try:
        return log_end(log_dir(data_dir, STREAM))
    except FileNotFoundError:  # (the stream not created yet)
        return None
