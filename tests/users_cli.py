"""What the permission tests share: the ``amqp-stream users`` command run as a real process, and
the users they make (one per permission, each with only that one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["users_cli", "make_users", "PASSWORD", "PERMISSIONS"]

PASSWORD = "s3cret-pw"
#: user -> (configure, write, read) on vhost "/"; streams of the tests start with "p-", and
#: AMQP 1.0 publishing checks write on the default exchange (amq.default), as RabbitMQ does
PERMISSIONS = {
    "maker": ("^p-", "", ""),
    "writer": ("", "^(p-.*|amq\\.default)$", ""),
    "reader": ("", "", "^p-"),
}


def users_cli(data_dir: Path, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "amqp_stream", "users", "--data-dir",
                           str(data_dir), *args], capture_output=True, text=True, timeout=60,
                          **kwargs)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def make_users(data_dir: Path) -> None:
    """``stranger`` without any permission, then ``PERMISSIONS``' users, through the command
    (``reader``'s permissions last: once it can log in, the broker has read all of them)."""
    users_cli(data_dir, "add", "stranger", PASSWORD)
    for name, (configure, write, read) in PERMISSIONS.items():
        users_cli(data_dir, "add", name, PASSWORD)
        users_cli(data_dir, "set-permissions", "-p", "/", name, configure, write, read)
