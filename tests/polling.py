"""Waiting for another process's state (its fds, metrics, stream end) in tests: a bounded poll of
a condition, never a bare sleep standing in for synchronisation."""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["wait_for"]


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` every 50 ms until it holds; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
