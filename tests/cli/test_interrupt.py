"""Ctrl-C always ends a command (``amqp_stream.commands.interrupt``): an interrupt that
something swallowed (proton's cffi callbacks and wrappers' ``__del__`` print and drop it) is
raised again by ``check``; a second one ends the process at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from amqp_stream.commands import interrupt


def test_an_interrupt_something_swallowed_is_raised_again_by_check():
    before = signal.getsignal(signal.SIGINT)
    with interrupt.handled():
        interrupt.check()  # nothing yet
        try:
            os.kill(os.getpid(), signal.SIGINT)  # (the handler runs before the next line)
        except KeyboardInterrupt:
            pass  # dropped, as an "Exception ignored" in a callback is
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    assert signal.getsignal(signal.SIGINT) is before
    interrupt.check()  # forgotten after the block


def test_a_second_interrupt_ends_the_process_with_130():
    code = textwrap.dedent("""
        import os, signal, sys
        from amqp_stream.commands import interrupt
        with interrupt.handled():
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                pass  # swallowed; a cleanup that hangs would follow
            print("first", flush=True)
            os.kill(os.getpid(), signal.SIGINT)
            print("still running", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130
    assert done.stdout == "first\n"
