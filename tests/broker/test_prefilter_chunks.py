"""Chunks dropped whole by the bytes a stage-2 filter requires, over both protocols: a consumer
whose filter requires a string gets exactly its matches, and the chunks that hold none of the
string's bytes are counted as dropped (``prefilter_chunks_skipped``) instead of being split into
records; a filter that requires nothing drops no chunk."""

from __future__ import annotations

from proton import Described, Message, symbol
from proton.reactor import AtMostOnce

from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import OFFSET, SQL, Client, offset
from tests.stream.test_derived_keys import _deliveries, _metric

GROUPS, PER_GROUP = 12, 30  # a group fits the first chunk after idle (min_chunk_entries 32)
NEEDLE_GROUP = GROUPS - 1  # the last: a consumer reads every chunk before its last match


def _messages() -> list[list[Message]]:
    """GROUPS writes; only group NEEDLE_GROUP holds customer 'needle-x' (every third record)."""
    return [[Message(body=f"{g}/{i}", properties={
        "customer": "needle-x" if g == NEEDLE_GROUP and i % 3 == 0 else f"other-{g}-{i}", "n": i})
        for i in range(PER_GROUP)] for g in range(GROUPS)]


def test_amqp_consumers_drop_chunks_without_the_required_bytes(tmp_path):
    groups = _messages()
    expected = [m.body for g in groups for m in g if m.properties["customer"] == "needle-x"]
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("s")
            stored = 0
            for group in groups:  # each group committed before the next: chunks never span two
                sender = c.sender("s", options=AtMostOnce())
                for m in group:
                    sender.send(m)
                sender.close()
                stored += len(group)
                r = c.receiver("s", [(OFFSET, offset(stored - 1))], credit=1)
                c.receive_all(r, 1)
                r.close()
            dropped = _metric(b.metrics_url, "stage2_dropped_messages_total", "s")
            r = c.receiver("s", [(OFFSET, offset("first")),
                                 (symbol("q"), Described(SQL, "customer = 'needle-x' AND n >= 0"))],
                           credit=len(expected))
            assert [m.body for m in c.receive_all(r, len(expected))] == expected
            r.close()
            assert _metric(b.metrics_url, "prefilter_chunks_skipped_total", "s") >= GROUPS - 1
            # every record read and not delivered counts as dropped by stage 2, whether its
            # search left it out or its evaluation did
            now = _metric(b.metrics_url, "stage2_dropped_messages_total", "s")
            assert now - dropped == stored - len(expected)
            before = _metric(b.metrics_url, "prefilter_chunks_skipped_total", "s")
            r = c.receiver("s", [(OFFSET, offset("first")), (symbol("q"), Described(SQL, "n = 0"))],
                           credit=GROUPS)  # a number: its needles (the key, then an encoding
            # of 0) are in every chunk, once
            assert [m.body for m in c.receive_all(r, GROUPS)] == [f"{g}/0" for g in range(GROUPS)]
            r.close()
            assert _metric(b.metrics_url, "prefilter_chunks_skipped_total", "s") == before
            assert _metric(b.metrics_url, "stage2_dropped_messages_total", "s") - now == stored - GROUPS
    finally:
        b.close()


def test_stream_subscriptions_drop_chunks_without_the_required_bytes(broker):
    groups = _messages()
    bodies = [bytes(m.encode()) for g in groups for m in g]
    expected = [(i, bodies[i]) for i, m in enumerate(m for g in groups for m in g)
                if m.properties["customer"] == "needle-x"]
    name = "prefilter-chunks"
    with StreamClient(broker.stream_url) as c:
        assert c.create(name)
        c.declare_publisher(1, name)
        for g in range(GROUPS):  # confirmed before the next: chunks never span two groups
            first = g * PER_GROUP
            c.send(publish_frame(1, [(i, None, bodies[i]) for i in range(first, first + PER_GROUP)]))
            while c.confirmed < first + PER_GROUP:
                assert c.pump(10), "confirms stopped"
    got = _deliveries(broker.stream_url, name, {"sql-filter": "customer = 'needle-x'"}, len(expected))
    assert got == expected
    assert _metric(broker.metrics_url, "prefilter_chunks_skipped_total", name) >= GROUPS - 1
