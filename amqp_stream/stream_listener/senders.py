"""Worker threads that send stream-protocol output holding chunk data, off the event loop.

Why: a consumer's chunks go out with ``os.sendfile``, which copies the segment's pages into the
socket in the kernel and releases the GIL meanwhile. Issued from the loop thread, every copy of
every consumer is serialised on that one thread (89-93 % of its time with 16 consumers of one
stream, issue 28); from a few worker threads they run on every core while the loop goes on
reading frames and choosing chunks.

How: a ``StreamConnection`` whose output queue holds a ``FileRange`` hands the whole queue (a
``Batch``: its small frames as one buffer, each data section with its own ``os.dup`` of the
segment's descriptor) to ``Senders.submit`` and queues nothing more to the socket until the
batch comes back; so per connection the bytes keep their order (a Deliver's head, then its data
section, frames in order) while different connections are sent in parallel. A worker sends on
the connection's own duplicate of the socket (``StreamConnection.wsock``: the loop may close
its socket meanwhile without the number being reused under the worker) and stops at the first
``EAGAIN``; the loop then gets the batch back through its mailbox (``StreamConnection.batch_sent``)
with what went out, what is left (put back in front of the queue, sent when the socket is
writable again) and the error, if any. Credit, ``pending`` and the consumers' backpressure
stay the loop's: nothing here touches a subscription.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from typing import Any, Callable

__all__ = ["Batch", "Senders", "sender_threads"]

log = logging.getLogger("amqp_stream.stream_listener")

_MSG_MORE = getattr(socket, "MSG_MORE", 0)
_BUFFERS = (bytes, bytearray, memoryview)


def sender_threads(setting: int) -> int:
    """Threads for ``--stream-send-threads``: -1 = one per core, 0 = none (the loop sends)."""
    return (os.cpu_count() or 1) if setting < 0 else setting


class Batch:
    """Output of one connection on its way through a worker: ``items`` (buffers and
    ``FileRange``s, each range owning its descriptor), then what the worker did."""

    __slots__ = ("sock", "items", "sent", "calls", "rest", "error")

    def __init__(self, sock: socket.socket, items: list[Any]):
        self.sock = sock
        self.items = items
        self.sent = 0
        self.calls = 0  # send/sendfile calls made (the connection's send_cnt)
        self.rest: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        """Send the items in order until done, the socket is full, or an error."""
        items = self.items
        sock = self.sock
        fd = sock.fileno()
        i = 0
        try:
            while i < len(items):
                item = items[i]
                if type(item) not in _BUFFERS:  # a FileRange
                    while item.left:
                        self.calls += 1
                        n = os.sendfile(fd, item.fd, item.pos, item.left)
                        if n == 0:  # the file is shorter than its index said
                            raise EOFError(f"segment ended {item.left} bytes early")
                        self.sent += n
                        item.pos += n
                        item.left -= n
                    os.close(item.fd)
                    item.owned = False
                else:
                    self.calls += 1
                    n = sock.send(item, _MSG_MORE if i + 1 < len(items) else 0)
                    self.sent += n
                    if n < len(item):
                        items[i] = memoryview(item)[n:]
                        break
                i += 1
        except (BlockingIOError, InterruptedError):
            pass
        except BaseException as exc:  # handed to the loop, which closes that connection only
            self.error = exc
        self.rest = items[i:]


class Senders:
    """A pool of ``count`` daemon threads running ``Batch``es; each done batch is handed to
    ``post`` (the loop's mailbox) with the callback given at submit. The threads live as long
    as the process (they hold nothing but the batch in hand between jobs)."""

    def __init__(self, count: int, post: Callable[..., None]):
        self.count = count
        self.post = post
        self.jobs: queue.SimpleQueue[tuple[Batch, Callable[[Batch], None]]] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def submit(self, batch: Batch, done: Callable[[Batch], None]) -> None:
        if len(self.threads) < self.count:  # started as work comes: idle brokers hold none
            t = threading.Thread(target=self._work, name=f"stream-sender-{len(self.threads)}",
                                 daemon=True)
            self.threads.append(t)
            t.start()
        self.jobs.put((batch, done))

    def _work(self) -> None:
        while True:
            batch, done = self.jobs.get()
            batch.run()
            self.post(done, batch)
