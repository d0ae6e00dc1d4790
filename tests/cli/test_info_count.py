"""`info`'s message_count counts messages, not the offsets tracking takes (issue 25 item 23):
each stored consumer offset is a tracking chunk with an offset of its own."""

from __future__ import annotations

import json

from tests.cli.test_commands import cli


def test_message_count_leaves_out_tracking_entries(broker, stream_name):
    assert cli("declare", stream_name, url=broker.url).returncode == 0
    assert cli("publish", stream_name, url=broker.url, stdin="a\nb\nc\n").returncode == 0
    for name in ("job1", "job2"):  # a named consumer stores its offset: a tracking chunk each
        r = cli("consume", stream_name, "--no-follow", "--name", name, url=broker.url)
        assert r.stdout.splitlines() == ["a", "b", "c"], r.stderr
    assert cli("reset-offset", stream_name, "job1", "first", url=broker.url).returncode == 0
    assert cli("publish", stream_name, url=broker.url, stdin="d\n").returncode == 0
    info = json.loads(cli("info", stream_name, url=broker.url).stdout)
    assert info["next_offset"] - info["first_offset"] == 7  # 4 messages, 3 stored offsets
    assert info["message_count"] == 4
    r = cli("delete", stream_name, url=broker.url)
    assert r.stdout == f"deleted {stream_name} (4 messages)\n"
