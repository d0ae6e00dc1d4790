"""`amqp-stream declare --derived-keys`: the broker-derived filter keys argument from the
command line, checked by the broker, and a filtered consume of such a stream."""

from __future__ import annotations

import json

from tests.cli.test_commands import LINES, cli


def test_declare_with_derived_keys_then_a_filter_on_one_gets_exactly_its_messages(broker, stream_name, tmp_path):
    r = cli("declare", stream_name, "--derived-keys", "region, p.subject", url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"created {stream_name}\n"), r.stderr
    info = json.loads(cli("info", stream_name, url=broker.url).stdout)
    assert info["arguments"]["x-stream-derived-filter-keys"] == ["region", "p.subject"]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    assert cli("publish", stream_name, "--file", str(path), url=broker.url).returncode == 0
    r = cli("consume", stream_name, "--no-follow", "--json", "--sql", "region = 'eu'", url=broker.url)
    assert r.returncode == 0, r.stderr
    ids = [json.loads(json.loads(line)["body"])["id"] for line in r.stdout.splitlines()]
    assert ids == [1, 3]
    cli("delete", stream_name, url=broker.url)


def test_bad_derived_keys_are_refused_by_the_broker(broker, stream_name):
    r = cli("declare", stream_name, "--derived-keys", "region,,x", url=broker.url)
    assert r.returncode == 1 and "'' is not a property name" in r.stderr
    r = cli("declare", stream_name, "--derived-keys", ",".join(f"k{i}" for i in range(17)), url=broker.url)
    assert r.returncode == 1 and "1..16 keys" in r.stderr
