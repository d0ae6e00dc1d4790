"""Ctrl-C that always ends a command.

Python raises ``KeyboardInterrupt`` wherever the main thread is when SIGINT arrives. Inside
proton that can be a cffi callback (``pn_pyref_incref``) or a wrapper's ``__del__``, where the
exception is printed ("Exception ignored ...") and dropped: a following ``consume`` then went
on waiting for messages (4 runs in 60 here, and a CI run lost to it). So while a command runs,
the CLI's handler also remembers the interrupt, and the loops that wait call ``check()``
between waits, raising it again where it cannot be lost. A second Ctrl-C ends the process at
once (exit 130), in case a cleanup itself hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any, Iterator

__all__ = ["handled", "check"]

_hit = False


def _on_sigint(signum: int, frame: Any) -> None:
    global _hit
    if _hit:
        os._exit(130)
    _hit = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT as above for the ``with`` block (only in the main thread: elsewhere, and after
    the block, whatever handler there was)."""
    global _hit
    _hit = False
    try:
        previous = signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread: signals are not ours to take
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _hit = False


def check() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C came (and was perhaps lost) since ``handled``."""
    if _hit:
        raise KeyboardInterrupt
