"""Flow-control rules as small state objects: publisher credit and a consumer's turn.

Publisher credit (RabbitMQ's rule): a publisher gets ``max_credit`` (170) link credit at attach;
when its credit has fallen to half or less, it is topped up to ``max_credit`` again, but only
while fewer than ``max_unconfirmed`` of its messages wait for the disk. A slow disk therefore
slows publishers down instead of filling the broker's memory.

A consumer's turn: a consumer link is served in bounded turns so one link cannot starve the
others on the single event loop. A turn ends after ``max_batch`` deliveries, or after
``max_scanned`` messages in a row that the filters dropped (RabbitMQ yields after 200), or when
the session has more than ``max_buffered`` bytes waiting for the socket.
"""

from __future__ import annotations

__all__ = ["PublisherCredit", "ConsumerTurn"]


class PublisherCredit:
    def __init__(self, max_credit: int = 170, max_unconfirmed: int = 4096):
        self.max_credit = max_credit
        self.max_unconfirmed = max_unconfirmed
        self.unconfirmed = 0

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
        if credit > self.max_credit // 2 or self.unconfirmed >= self.max_unconfirmed:
            return 0
        return self.max_credit - credit


class ConsumerTurn:
    def __init__(self, max_batch: int = 256, max_scanned: int = 200,
                 max_buffered: int = 1 << 20):
        self.max_batch = max_batch
        self.max_scanned = max_scanned
        self.max_buffered = max_buffered
        self.delivered = 0
        self.scanned = 0

    def start(self) -> None:
        self.delivered = 0
        self.scanned = 0

    def on_delivered(self) -> bool:
        """Count a delivery; True while the turn may go on."""
        self.delivered += 1
        self.scanned = 0
        return self.delivered < self.max_batch

    def on_dropped(self) -> bool:
        """Count a message the filters dropped; True while the turn may go on."""
        self.scanned += 1
        return self.scanned < self.max_scanned

    def buffer_full(self, buffered_bytes: int) -> bool:
        return buffered_bytes > self.max_buffered
