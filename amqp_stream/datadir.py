"""One broker per data directory: an exclusive lock on ``<data-dir>/broker.lock``.

Strategy: two brokers on one data directory would each open (or fail to open) the same stream
logs, declare a stream again under a second directory and lose what was published there at the
next start. The broker takes an ``flock`` on a file in the data directory before it opens any
stream and holds it for the life of the process (the kernel releases it when the process dies,
even by SIGKILL, so a crash never leaves a stale lock). The holder's pid is written in the file
so that the second broker's error can name it.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirLocked", "DataDirLock", "acquire"]

log = logging.getLogger(__name__)

LOCK_FILE = "broker.lock"


class DataDirLocked(RuntimeError):
    """Another process holds the data directory."""

    def __init__(self, directory: str, pid: int | None):
        holder = f"process {pid}" if pid else "another process"
        super().__init__(f"data directory {directory} is in use by {holder} "
                         f"(lock file {os.path.join(directory, LOCK_FILE)})")
        self.directory = directory
        self.pid = pid


class DataDirLock:
    """The held lock: keep a reference for the life of the process; ``release()`` at exit."""

    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        path = os.path.join(self.directory, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirLocked(self.directory, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    except (ValueError, UnicodeDecodeError, OSError):
        return None  # the holder has not written it yet


def acquire(directory: str) -> DataDirLock | None:
    """Lock ``directory`` for this process, or log why not (naming the holder) and return None."""
    try:
        return DataDirLock(directory)
    except DataDirLocked as exc:
        log.error("%s; a second broker on the same data directory would lose data", exc)
    except OSError as exc:
        log.error("cannot lock data directory %s: %s", directory, exc.strerror or exc)
    return None
