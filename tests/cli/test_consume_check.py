"""`consume --filter`'s client-side check never drops silently (issue 25 item 19): messages
published over the stream protocol (with rstream, a real client) carry their filter value beside
the message, not in it; the check counts and explains what it dropped, and `--check` chooses
where it reads the value."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.cli.test_commands import cli, consume

rstream = pytest.importorskip("rstream")
from rstream import AMQPMessage, Producer  # noqa: E402

pytestmark = pytest.mark.timeout(180)

REGIONS = ["eu", "us", "eu", "us", "apac"]


def _publish_over_the_stream_protocol(broker, stream: str) -> None:
    async def region_of(m: AMQPMessage) -> str:
        return m.application_properties["region"]

    async def go():
        async with Producer("127.0.0.1", broker.stream_port, username="guest", password="guest",
                            filter_value_extractor=region_of) as p:
            done = asyncio.Event()
            confirmed = []

            def on_confirm(status):
                confirmed.append(status)
                if len(confirmed) == len(REGIONS):
                    done.set()
            await p.send_batch(stream, [AMQPMessage(body=f"m{i}".encode(), application_properties={"region": r})
                                        for i, r in enumerate(REGIONS)], on_publish_confirm=on_confirm)
            await done.wait()
            assert all(s.is_confirmed for s in confirmed)
    asyncio.run(asyncio.wait_for(go(), 60))


@pytest.fixture
def stream_published(broker, stream_name):
    assert cli("declare", stream_name, url=broker.url).returncode == 0
    _publish_over_the_stream_protocol(broker, stream_name)
    yield stream_name
    cli("delete", stream_name, url=broker.url)


def test_dropped_messages_are_counted_and_explained(broker, stream_published):
    r = consume(broker, stream_published, "--filter", "us")
    assert (r.returncode, r.stdout) == (0, "")
    assert "warning: dropping messages with no x-stream-filter-value annotation (offset 0 the first)" in r.stderr
    assert ("the client-side check of --filter dropped 5 messages of 5 the broker sent: 5 with no "
            "x-stream-filter-value annotation (a stream-protocol publisher's filter value is not in the "
            "message: --check property:NAME") in r.stderr


def test_check_reads_an_application_property(broker, stream_published):
    r = consume(broker, stream_published, "--filter", "us", "--check", "property:region", "--json")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["body"] for x in r.stdout.splitlines()] == ["m1", "m3"]
    assert ("dropped 3 messages of 5 the broker sent: 3 with another filter value (stage 1 selects "
            "whole chunks)") in r.stderr


def test_check_none_prints_what_the_broker_sent(broker, stream_published):
    for flag in (["--check", "none"], ["--raw"]):
        r = consume(broker, stream_published, "--filter", "us", *flag)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["m0", "m1", "m2", "m3", "m4"]  # one chunk: all of it
        assert "dropped" not in r.stderr


def test_a_bad_check_is_a_usage_error(broker, stream_published):
    r = consume(broker, stream_published, "--filter", "us", "--check", "propery:region")
    assert r.returncode == 2 and "annotation, property:NAME or none" in r.stderr
