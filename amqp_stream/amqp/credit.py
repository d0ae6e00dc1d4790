"""Flow-control rules as small state objects: publisher credit and a consumer's turn.

Publisher credit (RabbitMQ's rule): a publisher gets ``max_credit`` (170) link credit at attach;
when its credit has fallen to half or less, it is topped up to ``max_credit`` again, but only
while fewer than ``max_unconfirmed`` of its messages wait for the disk. A slow disk therefore
slows publishers down instead of filling the broker's memory.

Credit counts messages, memory is bytes: a link's held bytes (received, pre-settled or not,
parts of a message still arriving, until the disk has them) are bounded too. At
``max_bytes`` on the link, or when the whole broker holds ``ByteBudget.limit``, the link gets
no more credit and ``over()`` says so; the adapter then stops reading the connection (credit
already granted cannot be taken back, so that is the hard bound: the rest waits in the
client's and the kernel's buffers) until confirms bring it back under.

A consumer's turn: a consumer link is served in bounded turns so one link cannot starve the
others on the single event loop. A turn ends after ``max_batch`` deliveries (1,024: ~2 ms of a
loaded 2-core machine for small messages, within the 5 ms a turn may spend on stage 2; each turn
costs a loop iteration, a socket write and the metrics, ~0.15-0.2 µs a delivery more at 256), or after
``max_scanned`` messages in a row that the filters dropped (RabbitMQ yields after 200; an AMQP
consumer counts them per slice of records it evaluates at once, ``next_slice``), or after
``max_eval_seconds`` of stage-2 evaluation (a costly filter on large messages: the budget is in
work, not only in messages), or when the session has more than ``max_buffered`` bytes waiting
for the socket, or when the socket is backed up and proton already holds ``max_held`` of the
link's deliveries.

That last rule is the bound in deliveries: proton keeps each delivery (~800 B) until it is
written (pre-settled) or settled by the client (unsettled), so 1 MiB of 100-byte messages is
~7,500 deliveries, ~6 MiB. A link stops only while its connection's socket is backed up, never
on its unsettled count alone: a client that reads its socket is never stalled, however many
deliveries it leaves unsettled (RabbitMQ caps neither). ``send_buffer`` is the socket send
buffer a connection gets once one of its links holds ``max_held`` unsettled deliveries: the
kernel's autotuned buffer (up to 4 MiB) took ~30,000 small deliveries before the socket
backed up (16 KiB held less, but made the broker write in more, smaller pieces: ~25 % more
CPU a message for a client that settles in batches).
"""

from __future__ import annotations

import time

from amqp_stream.core import ByteBudget

__all__ = ["PublisherCredit", "ConsumerTurn"]

EVAL_CHECK = 16  # stage-2 evaluations between two looks at the clock
MAX_SLICE = 128  # records a consumer evaluates in one go (``ConsumerTurn.next_slice``)
SEND_BUFFER = 64 * 1024  # SO_SNDBUF of a connection that leaves deliveries unsettled (Linux doubles it)


class PublisherCredit:
    def __init__(self, max_credit: int = 170, max_unconfirmed: int = 4096,
                 max_bytes: int = 64 << 20, budget: ByteBudget | None = None):
        self.max_credit = max_credit
        self.max_unconfirmed = max_unconfirmed
        self.max_bytes = max_bytes
        self.budget = budget or ByteBudget(1 << 62)
        self.unconfirmed = 0
        self.held_bytes = 0

    def hold(self, n: int) -> None:
        """``n`` bytes arrived on the link."""
        self.held_bytes += n
        self.budget.take(n)

    def release(self, n: int) -> None:
        """``n`` held bytes are on disk, or were dropped."""
        self.held_bytes -= n
        self.budget.give(n)

    def over(self) -> bool:
        """Too many bytes held by this link or the broker: stop reading this publisher."""
        return self.held_bytes >= self.max_bytes or self.budget.over

    def initial(self) -> int:
        """Credit to grant at attach."""
        return self.max_credit

    def received(self, settled: bool) -> None:
        """A transfer arrived; an unsettled one waits for the disk until ``confirmed``."""
        if not settled:
            self.unconfirmed += 1

    def confirmed(self, count: int = 1) -> None:
        self.unconfirmed = max(0, self.unconfirmed - count)

    def top_up(self, credit: int) -> int:
        """How much credit to add now, given the link's current ``credit``."""
        if (credit > self.max_credit // 2 or self.unconfirmed >= self.max_unconfirmed
                or self.over()):
            return 0
        return self.max_credit - credit


class ConsumerTurn:
    def __init__(self, max_batch: int = 1024, max_scanned: int = 200,
                 max_buffered: int = 1 << 20, max_eval_seconds: float = 0.005,
                 max_held: int = 1024, send_buffer: int = SEND_BUFFER,
                 max_slice: int = MAX_SLICE):
        self.max_batch = max_batch
        self.max_slice = max_slice
        self.max_scanned = max_scanned
        self.max_buffered = max_buffered
        self.max_held = max_held
        self.send_buffer = send_buffer
        self.max_eval_seconds = max_eval_seconds
        self.delivered = 0
        self.scanned = 0
        self.evaluated = 0
        self.next_check = 1
        self.deadline = 0.0

    def start(self) -> None:
        self.delivered = 0
        self.scanned = 0
        self.evaluated = 0
        self.next_check = 1
        self.deadline = time.perf_counter() + self.max_eval_seconds

    def _time_left(self) -> bool:
        """Count one stage-2 evaluation; True while the turn's evaluation time lasts. The clock
        is read at evaluations 1, 2, 4, 8, 16 and then every ``EVAL_CHECK``: a costly filter
        ends the turn after its first message, a cheap one pays one clock read per 16."""
        self.evaluated += 1
        if self.evaluated < self.next_check:
            return True
        self.next_check = self.evaluated + min(self.evaluated, EVAL_CHECK)
        return time.perf_counter() < self.deadline

    def on_evaluated(self) -> bool:
        """Count a stage-2 evaluation that matched; True while the turn may go on."""
        return self._time_left()

    def on_delivered(self) -> bool:
        """Count a delivery; True while the turn may go on."""
        self.delivered += 1
        self.scanned = 0
        return self.delivered < self.max_batch

    def next_slice(self) -> int:
        """How many records to evaluate in one go next: 1, 1, 2, 4, ... (the records evaluated
        this turn so far) up to ``max_slice``, the clock read before each slice; 0 when the
        turn's evaluation time is spent. A costly filter ends the turn after its first
        record, as with ``on_evaluated``; a cheap one pays one clock read per slice."""
        if self.evaluated and time.perf_counter() >= self.deadline:
            return 0
        return min(self.max_slice, self.evaluated) or 1

    def on_slice(self, evaluated: int, matched: int) -> bool:
        """Count a slice of ``evaluated`` records of which ``matched`` matched; True while the
        turn may go on (fewer than ``max_scanned`` drops since the last slice with a match)."""
        self.evaluated += evaluated
        self.scanned = 0 if matched else self.scanned + evaluated
        return self.scanned < self.max_scanned

    def on_sent(self, n: int) -> bool:
        """Count ``n`` deliveries; True while the turn may go on."""
        self.delivered += n
        return self.delivered < self.max_batch

    def on_dropped(self) -> bool:
        """Count a message the filters dropped; True while the turn may go on (fewer than
        ``max_scanned`` drops in a row, and evaluation time left)."""
        self.scanned += 1
        if self.scanned >= self.max_scanned:
            return False
        return self._time_left()
