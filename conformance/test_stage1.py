"""Stage 1: chunk-level Bloom filtering with rabbitmq:stream-filter / match-unfiltered.

Rules from amqp-interface.md (source filter table), storage-format.md "Chunk filter" and
RabbitMQ's stream filtering docs (rabbitmq.com/docs/stream-filtering: a Bloom filter per
chunk, false positives possible so the client filters again, never false negatives; values
are ORed; match-unfiltered also passes messages without a filter value).

Stage 1 may deliver more than asked (a chunk passes whole, Bloom false positives), so these
tests check the superset property with the client-side ("stage 3") filter, and only assert
exclusion where the rule is exact: a chunk holding no filter value has no filter at all and
passes only with match-unfiltered.
"""

from __future__ import annotations

import pytest
from proton import Message, symbol

from conformance.amqp import (address, match_unfiltered, offset_spec, sql_filter,
                              stream_filter)

pytestmark = pytest.mark.timeout(120)

FV = symbol("x-stream-filter-value")


def msg(i: int, value: str | None) -> Message:
    """Message i; its filter value is also an application property `v` for stage 3."""
    props = {"i": i}
    annotations = {}
    if value is not None:
        props["v"] = value
        annotations[FV] = value
    return Message(body=f"m{i}", properties=props, annotations=annotations or None)


def stage3(received, values, unfiltered=False) -> list[int]:
    """What the client keeps: messages whose value is asked (or unfiltered if allowed)."""
    keep = []
    for r in received:
        v = r.props.get("v")
        if v in values or (unfiltered and v is None):
            keep.append(r.props["i"])
    return keep


def ids(received) -> list[int]:
    return [r.props["i"] for r in received]


def test_single_value_no_false_negatives_and_skips(client, stream):
    """Every message whose value is asked is delivered (no false negatives); chunks holding
    only other values are mostly skipped (stream-filtering docs; storage-format.md)."""
    values = [f"value-{k}" for k in range(20)]
    messages = [msg(i, values[i % 20]) for i in range(60)]
    client.publish(stream, messages, each=True)  # one message (one value) per chunk
    got = client.read(stream, [offset_spec("first"), stream_filter("value-3")])
    assert stage3(got, {"value-3"}) == [3, 23, 43]
    assert ids(got) == sorted(ids(got)), "delivery out of offset order"
    # 57 single-value chunks of other values: a 2-hash Bloom filter lets a handful through at most
    assert len(got) < 30, f"stage 1 skipped almost nothing: {len(got)} of 60 delivered"


def test_values_are_ored(client, stream):
    """A list of values matches chunks that may hold any of them (amqp-interface.md table;
    stream-filtering docs)."""
    colours = ["red", "green", "blue", "yellow"]
    client.publish(stream, [msg(i, colours[i % 4]) for i in range(24)], each=True)
    got = client.read(stream, [offset_spec("first"), stream_filter(["red", "blue"])])
    assert stage3(got, {"red", "blue"}) == [i for i in range(24) if i % 4 in (0, 2)]


def test_unfiltered_chunks_need_match_unfiltered(client, stream):
    """A chunk whose messages have no filter value has no filter; it is delivered only with
    match-unfiltered (storage-format.md "Chunk filter" matching rules; osiris_bloom)."""
    client.publish(stream, [msg(0, "a"), msg(1, None), msg(2, "b"), msg(3, None), msg(4, "a")],
                   each=True)
    without = client.read(stream, [offset_spec("first"), stream_filter("a")])
    assert 1 not in ids(without) and 3 not in ids(without)
    assert stage3(without, {"a"}) == [0, 4]
    with_mu = client.read(stream, [offset_spec("first"), stream_filter("a"), match_unfiltered(True)])
    assert stage3(with_mu, {"a"}, unfiltered=True) == [0, 1, 3, 4]


def test_match_unfiltered_false_is_the_default(client, stream):
    """match-unfiltered false behaves as absent (amqp-interface.md table)."""
    client.publish(stream, [msg(0, None), msg(1, "x")], each=True)
    got = client.read(stream, [offset_spec("first"), stream_filter("x"), match_unfiltered(False)])
    assert ids(got) == [1]


def test_mixed_chunks_no_false_negatives(client, stream):
    """Pipelined publishing puts many values in one chunk; every asked message still arrives
    (no false negatives) whatever the chunk layout (stream-filtering docs)."""
    values = ["alpha", "beta", None, "gamma"]
    messages = [msg(i, values[i % 4]) for i in range(400)]
    client.publish(stream, messages)
    got = client.read(stream, [offset_spec("first"), stream_filter(["beta"]), match_unfiltered(True)])
    assert stage3(got, {"beta"}, unfiltered=True) == [i for i in range(400) if i % 4 in (1, 2)]
    assert ids(got) == sorted(ids(got))


def test_no_filter_delivers_everything(client, stream):
    """A consumer without stage-1 values gets every chunk, filtered or not
    (storage-format.md: a reader with no values matches every chunk)."""
    client.publish(stream, [msg(0, "a"), msg(1, None), msg(2, "b")], each=True)
    assert ids(client.read(stream, [offset_spec("first")])) == [0, 1, 2]


def test_stage1_with_offset_and_live_tail(client, stream):
    """Stage 1 applies to chunks written after the attach too (a tailing consumer)."""
    client.publish(stream, [msg(0, "a")], each=True)
    c = client.consumer(address(stream), [offset_spec("next"), stream_filter("b")], credit=10)
    client.publish(stream, [msg(1, "c"), msg(2, None), msg(3, "b")], each=True)
    got = c.receive(1)
    got += c.drain()
    assert 2 not in ids(got)
    assert stage3(got, {"b"}) == [3]


def test_stage1_and_stage2_together_are_exact(client, stream):
    """Stage 1 (chunks) then stage 2 (messages): with an SQL filter on the same property the
    result is exact (amqp-interface.md "Consuming": stage 1 skips chunks, stage 2 drops
    messages; RabbitMQ docs: combine Bloom filter and SQL filter)."""
    values = ["x", "y", "z"]
    client.publish(stream, [msg(i, values[i % 3]) for i in range(90)])
    got = client.read(stream, [offset_spec("first"), stream_filter("y"), sql_filter("v = 'y'")])
    assert ids(got) == [i for i in range(90) if i % 3 == 1]
