"""`amqp-stream consume --super-stream` and `--single-active-consumer`: real processes against the
session broker's stream port. Messages are published to each partition by name (the project's
stream-protocol client), so which partition and offset each line must name is known."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import proton
import pytest

from amqp_stream.client.stream import StreamClient, publish_frame
from tests.cli.test_commands import cli
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def super_stream(broker, stream_name):
    """A super stream of 3 partitions (`<name>-0..2`, binding keys 0..2); deleted after."""
    partitions = [f"{stream_name}-{i}" for i in range(3)]
    with StreamClient(broker.stream_url) as c:
        c.create_super_stream(stream_name, partitions, ["0", "1", "2"])
    yield stream_name
    with StreamClient(broker.stream_url) as c:
        c.delete_super_stream(stream_name)


def publish(broker, counts: dict[str, int], start: int = 0) -> None:
    """``counts[p]`` messages to partition ``p``, bodies `p:n` from ``start``; confirmed."""
    with StreamClient(broker.stream_url) as c:
        for pid, (partition, n) in enumerate(counts.items()):
            c.declare_publisher(pid, partition)
            c.send(publish_frame(pid, [(i, None, proton.Message(body=f"{partition}:{i}").encode())
                                       for i in range(start, start + n)]))
        want = sum(counts.values())
        wait_for(lambda: c.pump(0.2) is not None and c.confirmed >= want, 20, "confirms")


class Member:
    """`consume --super-stream --single-active-consumer` running as a process; its stdout lines
    and stderr lines collected by threads as they come."""

    def __init__(self, broker, stream: str, *args: str):
        command = [sys.executable, "-m", "amqp_stream", "consume", stream, "--stream-url",
                   broker.stream_url, *args]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "AMQP_STREAM_URL": broker.url})
        self.out: list[str] = []
        self.err: list[str] = []
        for pipe, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(pipe, lines), daemon=True).start()

    @staticmethod
    def _read(pipe, lines: list[str]) -> None:
        for line in pipe:
            lines.append(line.rstrip("\n"))

    def said(self, text: str, times: int = 1) -> bool:
        return sum(text in line for line in self.err) >= times

    def bodies(self, partition: str) -> list[str]:
        return [line.split("\t")[2] for line in self.out if line.startswith(f"{partition}\t")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_consume_super_stream_prints_every_partition_with_partition_and_offset(broker, super_stream):
    parts = [f"{super_stream}-{i}" for i in range(3)]
    publish(broker, {parts[0]: 2, parts[1]: 3, parts[2]: 1})
    r = cli("consume", super_stream, "--super-stream", "--stream-url", broker.stream_url,
            "--count", "6", url=broker.url)
    assert r.returncode == 0, r.stderr
    expected = {f"{p}\t{i}\t{p}:{i}" for p, n in zip(parts, (2, 3, 1), strict=True) for i in range(n)}
    assert sorted(r.stdout.splitlines()) == sorted(expected)
    for p in parts:  # each partition in its own order
        offsets = [int(line.split("\t")[1]) for line in r.stdout.splitlines() if line.startswith(p + "\t")]
        assert offsets == sorted(offsets)
    r = cli("consume", super_stream, "--super-stream", "--stream-url", broker.stream_url,
            "--count", "1", "--from", "2", "--json", url=broker.url)
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert (record["partition"], record["offset"], record["body"]) == (parts[1], 2, f"{parts[1]}:2")


def test_consume_super_stream_named_resumes_after_what_it_printed(broker, super_stream):
    parts = [f"{super_stream}-{i}" for i in range(3)]
    publish(broker, {p: 2 for p in parts})
    first = cli("consume", super_stream, "--super-stream", "--stream-url", broker.stream_url,
                "--name", "app", "--count", "4", url=broker.url)
    assert first.returncode == 0, first.stderr
    second = cli("consume", super_stream, "--super-stream", "--stream-url", broker.stream_url,
                 "--name", "app", "--count", "2", url=broker.url)
    assert second.returncode == 0, second.stderr
    # together, each message once: the second run starts after the offsets the first stored
    both = first.stdout.splitlines() + second.stdout.splitlines()
    assert sorted(both) == sorted(f"{p}\t{i}\t{p}:{i}" for p in parts for i in range(2))


def test_single_active_consumer_group_splits_partitions_and_takes_over_a_killed_member(broker, super_stream):
    parts = [f"{super_stream}-{i}" for i in range(3)]
    args = ("--super-stream", "--single-active-consumer", "--name", "group")
    a = Member(broker, super_stream, *args)
    b = None
    try:
        wait_for(lambda: all(a.said(f": active on {p} ") for p in parts), 30, "a active everywhere")
        b = Member(broker, super_stream, *args)
        # RabbitMQ's rule for a partition: active is the member at (partition index mod members)
        # in order of joining; with two members b takes partition 1, a keeps 0 and 2
        wait_for(lambda: b.said(f": active on {parts[1]} ") and a.said(f": inactive on {parts[1]} "),
                 30, "b taking partition 1")
        publish(broker, {p: 3 for p in parts})
        wait_for(lambda: len(a.out) + len(b.out) == 9, 30, "9 messages printed")
        assert a.bodies(parts[1]) == [] and b.bodies(parts[0]) == b.bodies(parts[2]) == []
        assert b.bodies(parts[1]) == [f"{parts[1]}:{i}" for i in range(3)]
        assert a.bodies(parts[0]) == [f"{parts[0]}:{i}" for i in range(3)]
        # b dies without a word (after the broker has its stored offset: b stores after each
        # chunk, at least once): a gets partition 1 back and resumes after what b stored
        with StreamClient(broker.stream_url) as c:
            wait_for(lambda: c.query_offset("group", parts[1]) == 2, 30, "b's offset stored")
        b.proc.send_signal(signal.SIGKILL)
        b.stop()
        wait_for(lambda: a.said(f": active on {parts[1]} ", times=2), 30, "a active on partition 1 again")
        publish(broker, {parts[1]: 2}, start=3)
        wait_for(lambda: len(a.bodies(parts[1])) >= 2, 30, "a printing partition 1")
        assert a.bodies(parts[1]) == [f"{parts[1]}:3", f"{parts[1]}:4"]
    finally:
        a.stop()
        if b is not None:
            b.stop()


@pytest.mark.parametrize("args,message", [
    (["--single-active-consumer"], "--single-active-consumer needs --name"),
    (["--super-stream", "--no-follow"], "--no-follow is for AMQP consumers"),
    (["--super-stream", "--property", "a=1"], "over the stream protocol use --sql"),
    (["--super-stream", "--stream-url", "amqp://127.0.0.1:1"], "not a stream-protocol URL"),
])
def test_consume_over_the_stream_protocol_refuses_bad_usage(broker, args, message):
    r = cli("consume", "s", *args, url=broker.url)
    assert r.returncode == 2 and message in r.stderr, (r.returncode, r.stderr)


def test_consume_missing_super_stream_fails_clearly(broker, stream_name):
    r = cli("consume", stream_name, "--super-stream", "--stream-url", broker.stream_url,
            "--count", "1", url=broker.url)
    assert r.returncode == 1 and f"super stream {stream_name!r} not found" in r.stderr, r.stderr


def test_single_active_consumer_on_a_plain_stream_hands_over_after_the_stored_offset(broker, stream_name):
    """Two members of group `g` on one stream: the first is active and prints; the second
    prints nothing until the first is killed, then goes on after the first's stored offset."""
    with StreamClient(broker.stream_url) as c:
        c.create(stream_name)
    try:
        first = Member(broker, stream_name, "--single-active-consumer", "--name", "g")
        wait_for(lambda: first.said(f": active on {stream_name} "), 30, "first active")
        second = Member(broker, stream_name, "--single-active-consumer", "--name", "g")
        try:
            publish(broker, {stream_name: 3})
            wait_for(lambda: len(first.out) == 3, 30, "first printing")
            assert first.bodies(stream_name) == [f"{stream_name}:{i}" for i in range(3)]
            with StreamClient(broker.stream_url) as c:
                wait_for(lambda: c.query_offset("g", stream_name) == 2, 30, "first's offset stored")
            assert second.out == [] and not second.said(": active on")
            first.proc.send_signal(signal.SIGKILL)
            first.stop()
            wait_for(lambda: second.said(f": active on {stream_name} (group g) from offset 3"), 30,
                     "second taking over")
            publish(broker, {stream_name: 2}, start=3)
            wait_for(lambda: len(second.out) == 2, 30, "second printing")
            assert second.bodies(stream_name) == [f"{stream_name}:{i}" for i in (3, 4)]
            offsets = [int(line.split("\t")[1]) for line in second.out]
            assert 2 < offsets[0] < offsets[1]  # after what the first printed (a stored offset
            # is a tracking chunk in the log, which takes an offset of its own)
        finally:
            first.stop()
            second.stop()
    finally:
        with StreamClient(broker.stream_url) as c:
            c.delete(stream_name)


def test_ctrl_c_stores_the_last_printed_offset_and_exits_130(broker, super_stream):
    parts = [f"{super_stream}-{i}" for i in range(3)]
    publish(broker, {parts[0]: 2})
    member = Member(broker, super_stream, "--super-stream", "--name", "cc")
    try:
        wait_for(lambda: len(member.out) == 2, 30, "two messages printed")
        member.proc.send_signal(signal.SIGINT)
        assert member.proc.wait(20) == 130
        with StreamClient(broker.stream_url) as c:
            assert c.query_offset("cc", parts[0]) == 1
            assert c.query_offset("cc", parts[1]) is None  # nothing printed there, nothing stored
    finally:
        member.stop()
