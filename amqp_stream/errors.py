"""The broker's one error root: every refusal carries what each protocol needs to say it.

Strategy: code that decides (addresses, attach filters, declare arguments, the management node,
publishing) raises a ``BrokerError`` subclass; the protocol adapter turns it into its own
answer: the AMQP 1.0 error ``condition`` on a link, connection or delivery, the HTTP-like
``status`` of a ``/management`` reply, and (for the stream protocol) ``stream_code``, RabbitMQ's
response code. One table here, so the three answers to one refusal cannot drift apart; callers
match on the class, never on the text.
"""

from __future__ import annotations

import errno

__all__ = ["from_storage", "BrokerError", "BadRequest", "NotFound", "Forbidden", "PreconditionFailed",
           "AlreadyExists", "NotAllowed", "NotImplementedByBroker", "ResourceDeleted", "ResourceLimit",
           "DecodeError", "SizeExceeded", "InternalError", "ShuttingDown", "ClusterUnavailable", "Released"]


class BrokerError(Exception):
    """A refusal: ``description`` for humans, ``condition``/``status``/``stream_code`` for
    the protocols."""

    condition = "amqp:internal-error"
    status = 500
    stream_code = 0x0F  # RabbitMQ's internal_error (0x0C is vhost_access_failure)

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


class BadRequest(BrokerError):
    """Bad input: a malformed address, filter, argument or field."""
    condition, status, stream_code = "amqp:invalid-field", 400, 0x11  # precondition_failed


class NotFound(BrokerError):
    condition, status, stream_code = "amqp:not-found", 404, 0x02  # stream_does_not_exist


class Forbidden(BrokerError):
    condition, status, stream_code = "amqp:unauthorized-access", 403, 0x10  # access_refused


class PreconditionFailed(BrokerError):
    """It exists with other arguments (a second declare that differs)."""
    condition, status, stream_code = "amqp:precondition-failed", 409, 0x11


class AlreadyExists(PreconditionFailed):
    """A name that is taken where a new one is needed (a super stream's exchange or partition);
    RabbitMQ's stream protocol says stream_already_exists."""
    stream_code = 0x05


class NotAllowed(BrokerError):
    """A method the path does not take."""
    condition, status, stream_code = "amqp:not-allowed", 405, 0x11


class NotImplementedByBroker(BrokerError):
    """Something valid that this broker does not do (exchanges, purge of a stream)."""
    condition, status, stream_code = "amqp:not-implemented", 501, 0x0F


class ResourceDeleted(BrokerError):
    condition, status, stream_code = "amqp:resource-deleted", 410, 0x02


class ResourceLimit(BrokerError):
    """Out of a resource: disk full, too many unconfirmed bytes."""
    condition, status, stream_code = "amqp:resource-limit-exceeded", 503, 0x0F


class DecodeError(BrokerError):
    condition, status, stream_code = "amqp:decode-error", 400, 0x0F


class SizeExceeded(BrokerError):
    condition, status, stream_code = "amqp:link:message-size-exceeded", 413, 0x0F


class InternalError(BrokerError):
    pass


class ClusterUnavailable(BrokerError):
    """The cluster's coordination (ZooKeeper) cannot be reached: declares, deletes and
    definition changes wait for it a bounded time, then fail with this."""
    condition, status, stream_code = "amqp:internal-error", 503, 0x0F


class Released(BrokerError):
    """Not taken, and nothing of it confirmed: the client may send it again. AMQP settles
    the delivery ``released`` (no condition: the outcome carries none), as RabbitMQ does
    when a message's queue went without confirming it; a cluster node forwarding to a
    stream's leader says it when no leader took the message in time."""
    condition, status, stream_code = "amqp:internal-error", 503, 0x06  # stream_not_available


class ShuttingDown(BrokerError):
    condition, status, stream_code = "amqp:connection:forced", 503, 0x0F


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def from_storage(exc: BaseException) -> BrokerError:
    """The refusal for a storage failure: ``ResourceLimit`` when an ``OSError`` in its cause
    chain says the disk is full (storage keeps the OSError as the cause), else
    ``InternalError``."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, BrokerError):
            return cause
        if isinstance(cause, OSError) and cause.errno in _DISK_FULL:
            return ResourceLimit(f"disk full: {exc}")
        cause = cause.__cause__ or cause.__context__
    return InternalError(f"the message could not be stored: {exc}")
