"""The client's errors: one root, ``ClientError``, carrying the AMQP condition when one came.

Strategy: callers catch ``ClientError`` for "the broker or the connection said no"; the
subclasses say which operation failed (management, publishing, consuming) and carry what a
caller needs to react (status and body, outcomes and how many are unconfirmed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from amqp_stream.client.publisher import Outcome

__all__ = ["ClientError", "ManagementError", "StreamNotFound", "PublishError", "ConsumerError"]


class ClientError(Exception):
    """Root of this module's errors. ``condition`` is the AMQP error condition when one came."""

    def __init__(self, message: str, condition: str | None = None):
        super().__init__(message)
        self.condition = condition


class ManagementError(ClientError):
    """The management node answered with an error status."""

    def __init__(self, message: str, status: int, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


class StreamNotFound(ManagementError):
    """The stream does not exist (404, or a link refused with ``amqp:not-found``)."""


class PublishError(ClientError):
    """Not every published message was accepted: rejected, released, connection lost, timeout.

    ``outcomes`` holds the outcomes known when it was raised; ``unconfirmed`` counts messages
    whose fate is unknown (they may or may not be stored).
    """

    def __init__(self, message: str, outcomes: Sequence["Outcome"] = (), unconfirmed: int = 0,
                 condition: str | None = None):
        super().__init__(message, condition)
        self.outcomes = list(outcomes)
        self.unconfirmed = unconfirmed


class ConsumerError(ClientError):
    """The consumer link was refused or closed, or the connection was lost while consuming."""

