"""``scripts/apt-install`` (what ``scripts/bootstrap`` runs for system packages) with another apt
holding the locks, as apt itself takes them (fcntl record locks on the dpkg frontend lock, the
dpkg lock and the package lists' lock), issue 25 item 2: nothing to install means no apt at all,
however long the locks are held; something to install waits for the lock instead of failing at
once (apt-get install), or retries (apt-get update, whose lists lock apt's timeout option does
not cover) until a deadline. Changes nothing on the machine: the package asked for does not
exist, so apt stops at "Unable to locate package" once it has the dpkg lock, and the lists lock
stays held while update is retried, so no update runs. (That update, once it gets the lock, goes
on as usual is not tested here: it would fetch the package lists.)"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "apt-install"
DPKG_LOCKS = ["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"]
LISTS_LOCK = "/var/lib/apt/lists/lock"
HOLD_S = 2.0

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("apt-get") is None,
                       reason="takes the machine's apt locks: root on a Debian-like system (as in CI)"),
]


@contextlib.contextmanager
def apt_locks(paths: list[str]) -> Iterator[list[int]]:
    """Hold apt's locks as another apt-get would (waiting for any holder first)."""
    fds = []
    try:
        for path in paths:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
            fds.append(fd)
            fcntl.lockf(fd, fcntl.LOCK_EX)
        yield fds
    finally:
        for fd in fds:
            os.close(fd)  # (closing releases the record lock)


def _run(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=90,
                       env=dict(os.environ, APT_LOCK_TIMEOUT="60"))
    return r, time.monotonic() - t0


def test_installed_packages_need_no_apt_and_no_lock():
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\\n", "dpkg", "bash"], capture_output=True,
                               text=True, check=True).stdout.split()
    with apt_locks([*DPKG_LOCKS, LISTS_LOCK]):
        r, elapsed = _run(*installed)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert elapsed < 10  # had it called apt, it would wait out the held locks (60 s) or fail


def test_an_install_waits_for_the_dpkg_lock():
    with apt_locks(DPKG_LOCKS) as fds:
        released = threading.Timer(HOLD_S, lambda: [os.close(os.dup(fd)) for fd in fds])
        # (closing any descriptor of the file releases this process's lock on it)
        released.start()
        try:
            r, elapsed = _run("--no-update", "amqp-stream-no-such-package")
        finally:
            released.cancel()
    assert r.returncode != 0
    assert "Could not get lock" not in r.stderr, r.stderr  # it got the lock: it waited
    assert "Unable to locate package amqp-stream-no-such-package" in r.stderr
    assert elapsed >= HOLD_S - 0.5


def test_update_is_retried_while_the_lists_lock_is_held_and_gives_up_at_the_deadline():
    """The lock is held throughout, so apt never gets to change anything: the script retries
    (saying so) and gives up after APT_LOCK_TIMEOUT seconds with apt's own error."""
    with apt_locks([LISTS_LOCK]):
        t0 = time.monotonic()
        r = subprocess.run([str(SCRIPT), "amqp-stream-no-such-package"], capture_output=True, text=True,
                           timeout=90, env=dict(os.environ, APT_LOCK_TIMEOUT="3"))
        elapsed = time.monotonic() - t0
    assert r.returncode == 1
    assert r.stderr.count("apt-install: waiting for another apt to release the package lists") >= 1
    assert "Could not get lock /var/lib/apt/lists/lock" in r.stderr  # the last attempt's error
    assert elapsed >= 3
