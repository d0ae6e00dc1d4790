"""`amqp-stream perf --protocol stream` with super streams and single active consumer (Stream
PerfTest's `--super-streams`, `--super-stream-partitions`, `--single-active-consumer`,
`--consumer-names`), run as a subprocess against the session broker."""

from __future__ import annotations

import pytest

from amqp_stream.client import ClientError
from amqp_stream.client.stream import StreamClient, publish_frame
from amqp_stream.commands.perf_stream import _pin_next, _Sub
from amqp_stream.streamproto import OffsetSpec
from tests.cli.test_commands import _consumer_figures, _summary, cli
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(180)


def perf(broker, *args: str):
    r = cli("perf", "--protocol", "stream", "--stream-url", broker.stream_url, "--duration", "2",
            "--rate", "300", *args, url=broker.url)
    assert r.returncode == 0, r.stderr
    return _summary(r.stdout)


def test_perf_makes_a_super_stream_spreads_messages_and_deletes_it(broker):
    summary = perf(broker, "--super-streams", "--super-stream-partitions", "4")
    name = summary["stream"]
    partitions = [f"{name}-{i}" for i in range(4)]
    assert summary["partitions"] == ",".join(partitions)
    published = int(summary["published"])
    assert published > 0 and summary["consumed"] == str(published)
    assert _consumer_figures(summary["consumer_0"])["streams"] == ",".join(partitions)
    with StreamClient(broker.stream_url) as c, pytest.raises(ClientError, match="STREAM_DOES_NOT_EXIST"):
        c.partitions(name)  # temporary: deleted with its partitions


def test_perf_uses_an_existing_super_stream_and_keeps_it(broker, stream_name):
    parts = [f"{stream_name}-a", f"{stream_name}-b"]
    with StreamClient(broker.stream_url) as c:
        c.create_super_stream(stream_name, parts, ["a", "b"])
    try:
        summary = perf(broker, "--stream", stream_name, "--super-streams", "--super-stream-partitions", "5")
        assert summary["partitions"] == ",".join(parts)  # its own 2, not 5
        published = int(summary["published"])
        assert summary["consumed"] == str(published)
        with StreamClient(broker.stream_url) as c:
            assert c.partitions(stream_name) == parts
        # one message a frame at a set rate, partitions in turn: message n went to n mod 2
        for i, p in enumerate(parts):
            with StreamClient(broker.stream_url) as c:
                c.subscribe(1, p, OffsetSpec.first(), credit=1000)
                want = (published + 1 - i) // 2
                wait_for(lambda: c.pump(0.2) is not None and c.records >= want, 20, f"{p}'s records")
                assert c.records == want
    finally:
        with StreamClient(broker.stream_url) as c:
            c.delete_super_stream(stream_name)


def test_perf_single_active_consumers_sharing_a_name_are_one_active(broker):
    summary = perf(broker, "--consumers", "3", "--single-active-consumer", "--consumer-names", "app")
    published = int(summary["published"])
    figures = [_consumer_figures(summary[f"consumer_{i}"]) for i in range(3)]
    delivered = sorted(int(f["delivered"]) for f in figures)
    assert delivered == [0, 0, published]  # one member of the group got everything
    assert sorted(f["streams"] for f in figures) == ["-", "-", summary["stream"]]


def test_perf_single_active_consumers_with_names_of_their_own_are_all_active(broker):
    summary = perf(broker, "--consumers", "2", "--single-active-consumer")  # names %s-%d
    published = summary["published"]
    for i in range(2):
        assert _consumer_figures(summary[f"consumer_{i}"])["delivered"] == published


def test_perf_super_stream_group_gives_each_member_a_partition_and_counts_each_message_once(broker):
    summary = perf(broker, "--super-streams", "--consumers", "3", "--single-active-consumer",
                   "--consumer-names", "app")
    published = int(summary["published"])
    figures = [_consumer_figures(summary[f"consumer_{i}"]) for i in range(3)]
    # members join one at a time: partition i goes to the member at i mod 3, one each
    assert sorted(f["streams"] for f in figures) == summary["partitions"].split(",")
    delivered = [int(f["delivered"]) for f in figures]
    assert sum(delivered) == published == int(summary["consumed"])
    assert max(delivered) - min(delivered) <= 1  # one message a frame, partitions in turn


@pytest.mark.parametrize("args,message", [
    (["--protocol", "amqp", "--super-streams"], "need --protocol stream"),
    (["--protocol", "amqp", "--single-active-consumer"], "need --protocol stream"),
    (["--protocol", "stream", "--super-streams", "--super-stream-partitions", "0"], "must be 1..255"),
])
def test_perf_refuses_super_stream_options_it_cannot_honour(broker, args, message):
    r = cli("perf", "--duration", "1", *args, url=broker.url)
    assert r.returncode == 2 and message in r.stderr, (r.returncode, r.stderr)


def test_perf_group_member_stepping_down_stores_where_it_is(broker, stream_name):
    """Reading a filled super stream from first, the first member is active everywhere until
    the second joins and takes partition 1: the first stores the offset it counted there before
    it answers the step-down, so the second starts after it (each message once in the sum;
    without the store the second read partition 1 from the start again: 3019 of 2983)."""
    try:
        fill = perf(broker, "--stream", stream_name, "--super-streams", "--consumers", "0",
                    "--rate", "2000", "--duration", "1")
        summary = perf(broker, "--stream", stream_name, "--super-streams", "--producers", "0",
                       "--consumers", "2", "--single-active-consumer", "--consumer-names", "grp",
                       "--from", "first")
        assert summary["consumed"] == fill["published"]
    finally:
        with StreamClient(broker.stream_url) as c:
            c.delete_super_stream(stream_name)


def test_next_is_pinned_to_the_start_of_an_empty_stream_only(broker, stream_name):
    """``perf_stream._pin_next``: a group member that takes a partition over from one that
    stored nothing starts at the spec its subscription had; ``next`` on an empty stream becomes
    offset 0, so that the messages published before the takeover are counted (CI once counted
    600 of 601: the member that joined first answered its step-down after publishing began).
    A stream that holds messages keeps ``next``."""
    empty, full = f"{stream_name}-empty", f"{stream_name}-full"
    with StreamClient(broker.stream_url) as c:
        c.create(empty)
        c.create(full)
        c.declare_publisher(1, full)
        c.send(publish_frame(1, [(1, None, b"m")]))
        wait_for(lambda: c.pump(0.2) is not None and c.confirmed >= 1, 20, "the confirm")
        subs = [_Sub(empty, active=False, spec=OffsetSpec.next()),
                _Sub(full, active=False, spec=OffsetSpec.next()),
                _Sub(empty, active=False, spec=OffsetSpec.first())]
        _pin_next(c, subs)
        assert [s.spec for s in subs] == [OffsetSpec.offset(0), OffsetSpec.next(), OffsetSpec.first()]
        c.delete(empty)
        c.delete(full)
