"""`consume --name`, `tracking` and `reset-offset` as real subprocesses against the session
broker: a named consumer resumes where it stopped, the listing shows offsets and writers, and a
name moved with a spec resumes where the broker resolved it."""

from __future__ import annotations

import json

import pytest

from tests.broker.amqp import Client, Delivery
from tests.broker.test_dedup import send
from tests.cli.test_commands import EVENTS, LINES, cli, consume

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def events(broker, stream_name, tmp_path) -> str:
    """A stream holding EVENTS (0..4), published from a JSON-lines file."""
    assert cli("declare", stream_name, url=broker.url).returncode == 0
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    r = cli("publish", stream_name, "--file", str(path), url=broker.url)
    assert r.returncode == 0, r.stderr
    yield stream_name
    cli("delete", stream_name, url=broker.url)


def ids(stdout: str) -> list[int]:
    return [json.loads(line)["id"] for line in stdout.splitlines()]


def test_a_named_consume_resumes_where_the_name_stopped(broker, events):
    r = consume(broker, events, "--name", "job", "--count", "2")
    assert (r.returncode, ids(r.stdout)) == (0, [1, 2]), r.stderr
    r = consume(broker, events, "--name", "job", "--count", "2")
    assert (r.returncode, ids(r.stdout)) == (0, [3, 4]), r.stderr
    # another name starts at --from; the first goes on after 4
    assert consume(broker, events, "--name", "other", "--from", "next").stdout == ""
    assert ids(consume(broker, events, "--name", "job").stdout) == [5]
    assert consume(broker, events, "--name", "job").stdout == ""
    # an unnamed consume is not affected
    assert ids(consume(broker, events).stdout) == [e["id"] for e in EVENTS]


def test_tracking_lists_offsets_and_writers(broker, events):
    assert consume(broker, events, "--name", "reader", "--count", "3").returncode == 0
    with Client(broker.url) as c:
        assert send(c, events, "pub-1", [(7, "x")]) == [Delivery.ACCEPTED]
    # offsets 0..6: the 5 events, the record of reader's stored offset (tracking records take
    # an offset, as osiris's), pub-1's message; reader processed up to 2: 4 offsets behind
    r = cli("tracking", events, url=broker.url)
    assert (r.returncode, r.stdout) == (0, "type\tname\ttracking_value\tlag\noffset\treader\t2\t4\n"
                                           "writer\tpub-1\t7\t\n"), r.stderr
    assert cli("tracking", events, "--offset", url=broker.url).stdout.splitlines()[1:] == ["offset\treader\t2\t4"]
    assert cli("tracking", events, "--writer", url=broker.url).stdout.splitlines()[1:] == ["writer\tpub-1\t7\t"]
    r = cli("tracking", events, "--json", url=broker.url)
    assert json.loads(r.stdout) == {"offsets": {"reader": 2}, "sequences": {"pub-1": 7}, "lag": {"reader": 4}}
    # the lag follows the stream: two more messages, two more behind; caught up, only the
    # record of its own stored offset is after it
    with Client(broker.url) as c:
        assert send(c, events, "pub-1", [(8, "y"), (9, "z")]) == [Delivery.ACCEPTED] * 2
    assert json.loads(cli("tracking", events, "--json", url=broker.url).stdout)["lag"] == {"reader": 6}
    assert consume(broker, events, "--name", "reader").returncode == 0
    assert json.loads(cli("tracking", events, "--json", url=broker.url).stdout)["lag"] == {"reader": 1}
    r = cli("tracking", events + "-nope", url=broker.url)
    assert r.returncode == 1 and "not found" in r.stderr


def test_reset_offset_moves_a_name(broker, events):
    r = cli("reset-offset", events, "job", "offset", "3", url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"consumer job on {events}: stored offset 2, resumes at offset 3\n"), r.stderr
    assert ids(consume(broker, events, "--name", "job").stdout) == [4, 5]
    assert cli("reset-offset", events, "job", "2", url=broker.url).returncode == 0
    assert ids(consume(broker, events, "--name", "job").stdout) == [3, 4, 5]
    r = cli("reset-offset", events, "job", "timestamp", "0", url=broker.url)
    # offset 0 cannot be "after" a stored offset: 0 is stored and the name resumes at 1 (as
    # RabbitMQ's reset_offset stores 0)
    assert r.stdout == f"consumer job on {events}: stored offset 0, resumes at offset 1\n"
    assert ids(consume(broker, events, "--name", "job").stdout) == [2, 3, 4, 5]
    assert cli("reset-offset", events, "job", "next", url=broker.url).returncode == 0
    assert consume(broker, events, "--name", "job").stdout == ""
    for bad in (["sometime"], ["offset", "x"], ["first", "second"]):
        r = cli("reset-offset", events, "job", *bad, url=broker.url)
        assert r.returncode == 2 and ("not an offset spec" in r.stderr or "offset N" in r.stderr), r.stderr
    r = cli("reset-offset", events + "-nope", "job", "first", url=broker.url)
    assert r.returncode == 1 and "not found" in r.stderr
