"""``inspect`` and ``read`` pointed at the wrong directory (the stream's directory instead of its
``log/``, the data directory, an empty one) find the log or fail with exit 2, instead of
reporting ``clean`` or nothing with exit 0 as if the stream were empty."""

from __future__ import annotations

import json

from amqp_stream.testing import BrokerProcess
from tests.cli.test_commands import cli


def test_inspect_and_read_find_the_log_or_exit_2(tmp_path):
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        assert cli("declare", "ev", url=b.url).returncode == 0
        assert cli("publish", "ev", url=b.url, stdin="one\ntwo\n").returncode == 0
    stream_dir = data / "streams" / "ev"
    log = stream_dir / "log"

    r = cli("inspect", str(stream_dir), "--json")
    assert r.returncode == 0, r.stderr
    assert sum(json.loads(line)["records"] for line in r.stdout.splitlines()) == 2
    assert f"reading the stream's log {log}" in r.stderr
    r = cli("read", str(stream_dir), "--no-follow")
    assert r.returncode == 0, r.stderr
    assert [line.split("\t")[0] for line in r.stdout.splitlines()] == ["0", "1"]

    for command in (["inspect"], ["read", "--no-follow"]):
        r = cli(command[0], str(data), *command[1:])
        assert r.returncode == 2 and r.stdout == ""
        assert f"a data directory, not a stream's log; the streams' logs: ev: {log}" in r.stderr
        empty = tmp_path / "empty"
        empty.mkdir(exist_ok=True)
        r = cli(command[0], str(empty), *command[1:])
        assert r.returncode == 2 and r.stdout == ""
        assert "no segment or index files here" in r.stderr


def test_a_missing_path_is_bad_usage_as_docs_storage_md_says(tmp_path):
    """docs/storage.md: a path that is no stream's log is refused with exit 2."""
    for command in (["inspect"], ["read", "--no-follow"]):
        for path in (tmp_path / "missing", tmp_path / "a-file"):
            if path.name == "a-file":
                path.write_text("")
            r = cli(command[0], str(path), *command[1:])
            assert (r.returncode, r.stdout) == (2, "")
            assert r.stderr == f"amqp-stream {command[0]}: error: {path}: not a directory\n"
