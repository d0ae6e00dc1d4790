"""The docs' example commands run as printed (a new user copies them): each `$ amqp-stream ...`
line of an example block is run as a real process, paths the example makes up replaced by a
temporary directory."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _examples(doc: str, command: str) -> list[str]:
    """The `$ amqp-stream COMMAND ...` lines of the doc's example blocks."""
    prefix = f"$ amqp-stream {command} "
    return [line[2:] for line in (DOCS / doc).read_text().splitlines() if line.startswith(prefix)]


def test_the_users_examples_of_users_md_run_as_printed(tmp_path):
    lines = _examples("users.md", "users")
    assert len(lines) >= 2
    password = tmp_path / "password.txt"
    password.write_text("s3cret-pw\n")
    for line in lines:
        line = line.replace("/var/lib/amqp-stream", str(tmp_path))
        argv, _, stdin = line.partition(" < ")
        args = shlex.split(argv)[1:]
        with open(password if stdin else "/dev/null") as feed:
            done = subprocess.run([sys.executable, "-m", "amqp_stream", *args], stdin=feed,
                                  capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (line, done.stderr)
    listed = subprocess.run([sys.executable, "-m", "amqp_stream", "users", "--data-dir",
                             str(tmp_path), "list-permissions", "--format", "json"],
                            capture_output=True, text=True, timeout=60, check=True)
    assert {"user": "orders-reader", "vhost": "/", "configure": "^$", "write": "^$",
            "read": "^orders$"} in json.loads(listed.stdout)
