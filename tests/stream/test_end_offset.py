"""The ``end-offset`` Subscribe property (this broker's extension): once the subscription's
reader has passed every chunk below the end (sent or skipped by the filters) the broker sends
one empty chunk whose id is the end, and nothing after it. A filtered read of a range learns
where it ends from the broker, not from a quiet socket."""

from __future__ import annotations

import pytest
from proton import Message, symbol

from amqp_stream import client as amqp
from amqp_stream.client.stream import StreamClient, offset_spec, publish_frame
from amqp_stream.errors import BadRequest
from amqp_stream.stream_listener.subscription_filters import parse
from storage.format import CHUNK_HEADER
from tests.polling import wait_for


def publish_chunks(url: str, stream: str, groups: list[tuple[str | None, int]]) -> int:
    """One Publish frame per group, each confirmed before the next (one chunk each); the
    messages carry ``n`` (their offset) and the group's filter value (also as the annotation an
    AMQP publisher's filter value is, which the Spark source checks)."""
    n = 0
    with StreamClient(url) as c:
        c.create(stream)
        c.declare_publisher(1, stream)
        for value, count in groups:
            c.send(publish_frame(1, [(n + i, value, _message(n + i, value)) for i in range(count)]))
            n += count
            while c.confirmed < n:
                assert c.pump(10), "confirms stopped"
    return n


def _message(n: int, value: str | None) -> bytes:
    annotations = {symbol("x-stream-filter-value"): value} if value is not None else None
    return bytes(Message(body=b"x", properties={"n": n}, annotations=annotations).encode())


def subscribe_until_end(url: str, stream: str, properties: dict) -> list[tuple[int, int, int]]:
    """(chunk id, entries, records) of every chunk delivered up to the empty end chunk."""
    got: list[tuple[int, int, int]] = []
    with StreamClient(url, on_chunk=lambda c: got.append(_head(c))) as c:
        c.subscribe(1, stream, offset_spec("first"), credit=2, properties=properties)
        while not got or got[-1][1] != 0:
            assert c.pump(30), f"no end chunk; delivered so far {got}"
    return got


def _head(chunk) -> tuple[int, int, int]:
    h = CHUNK_HEADER.unpack_from(chunk)
    return h[6], h[2], h[3]


def test_end_offset_parsed_and_checked():
    assert parse({"end-offset": "42"}).end_offset == 42
    assert parse({}).end_offset is None
    for bad in ("-1", "ten", ""):
        with pytest.raises(BadRequest, match="end-offset"):
            parse({"end-offset": bad})


@pytest.mark.parametrize("properties", [{"filter.0": "a"}, {"sql-filter": "n < 10"}],
                         ids=["stage 1", "stage 2"])
def test_filtered_subscription_ends_with_an_empty_chunk_past_skipped_chunks(broker, stream_name, properties):
    """The last match lies in the first chunk, 300 chunks the filter rules out follow: the
    broker still says where the range ends."""
    end = publish_chunks(broker.stream_url, stream_name, [("a", 10)] + [("b", 5)] * 300)
    got = subscribe_until_end(broker.stream_url, stream_name, {**properties, "end-offset": str(end)})
    assert got[0] == (0, 10, 10)
    assert got[-1] == (end, 0, 0)
    assert len(got) == 2


def test_end_inside_a_chunk_and_nothing_after_the_end(broker, stream_name):
    publish_chunks(broker.stream_url, stream_name, [(None, 10)] * 5)
    got = subscribe_until_end(broker.stream_url, stream_name, {"end-offset": "25"})
    assert got == [(0, 10, 10), (10, 10, 10), (20, 10, 10), (25, 0, 0)]
    # more credit does not bring anything past the end
    delivered: list = []
    with StreamClient(broker.stream_url, on_chunk=lambda c: delivered.append(_head(c))) as c:
        c.subscribe(1, stream_name, offset_spec("first"), credit=50, properties={"end-offset": "25"})
        while not delivered or delivered[-1][1] != 0:
            assert c.pump(30)
        c.unsubscribe(1)  # the subscription is still there and answers
    assert delivered == got


def test_end_after_tracking_chunks_at_the_stream_end(broker, stream_name):
    """A range that ends in tracking chunks (stored offsets) at the end of the stream: they are
    never delivered, and the end chunk still comes."""
    publish_chunks(broker.stream_url, stream_name, [(None, 10)])
    with StreamClient(broker.stream_url) as c:
        c.store_offset("q", stream_name, 9)
        assert c.query_offset("q", stream_name) == 9
    with amqp.connect(broker.url) as a:
        # the store is queued for the writer like an append and the query answers from memory
        # at once (``Stream.store_offset``): on a loaded broker the chunk comes after it
        wait_for(lambda: a.info(stream_name)["next_offset"] > 10, 10,
                 "a tracking chunk after the messages")
        end = a.info(stream_name)["next_offset"]  # what a Spark read plans with
    assert subscribe_until_end(broker.stream_url, stream_name, {"end-offset": str(end)}) == [(0, 10, 10), (end, 0, 0)]
    got: list = []
    with StreamClient(broker.stream_url, on_chunk=lambda c: got.append(_head(c))) as c:
        c.subscribe(1, stream_name, offset_spec("10"), credit=2, properties={"end-offset": str(end)})
        while not got:
            assert c.pump(30), "no end chunk after the tracking chunks"
    assert got == [(end, 0, 0)]


def test_stage_2_prefetch_stops_at_the_end(broker, stream_name):
    """A stage-2 subscription scans ahead while its credit is used up, several small stored
    chunks a loop turn (``Subscription._prefetch``): it stops at the end offset, so nothing
    past it is built, nor sent."""
    publish_chunks(broker.stream_url, stream_name, [(None, 10)] * 10)
    got = subscribe_until_end(broker.stream_url, stream_name, {"sql-filter": "n >= 0",
                                                               "end-offset": "50"})
    assert got == [(i, 10, 10) for i in range(0, 50, 10)] + [(50, 0, 0)]
