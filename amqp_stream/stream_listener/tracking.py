"""Stored offsets and publisher sequences over the stream protocol: StoreOffset, QueryOffset,
QueryPublisherSequence and DeclarePublisher's reference, on the stream's own tracking state
(``Stream.store_offset``, ``query_offset``, ``query_sequence``: the one state the AMQP 1.0
extension in ``amqp_stream.amqp.tracking`` uses too).

Why here: each command's answers follow RabbitMQ's ``rabbit_stream_reader`` rather than
storage's errors. StoreOffset has no response, so what cannot be stored (an unknown stream, a
reference of more than 255 bytes, a writer that failed) is logged and dropped, as RabbitMQ
drops it. Queries for a reference that cannot be stored answer "nothing stored" (QueryOffset
``NO_OFFSET``, QueryPublisherSequence 0), as osiris answers an unknown one. While a stream's
writer recovers from a write error its state may be ahead of the disk: queries are refused
with ``INTERNAL_ERROR`` then (``InternalError``), never answered from a state that may be lost.
A publisher reference longer than 255 bytes refuses the DeclarePublisher
(``PRECONDITION_FAILED``).
"""

from __future__ import annotations

import logging
from typing import Any

from amqp_stream.errors import BadRequest, InternalError
from storage import StorageError, StreamClosedError
from storage.tracking import MAX_ID_BYTES

__all__ = ["check_reference", "store_offset", "query_offset", "query_sequence"]

log = logging.getLogger("amqp_stream.stream_listener")


def check_reference(reference: str) -> None:
    """A DeclarePublisher's non-empty reference must fit the tracking records."""
    if len(reference.encode("utf-8")) > MAX_ID_BYTES:
        raise BadRequest(f"a publisher reference is at most {MAX_ID_BYTES} bytes")


def store_offset(entry: Any, reference: str, offset: int, peer: str) -> None:
    """StoreOffset on ``entry`` (None: no such stream); nothing is answered."""
    if entry is None or entry.deleted:
        log.info("stream connection %s: StoreOffset for %r ignored: no such stream", peer,
                 reference)
        return
    try:
        entry.stream.store_offset(reference, offset)
    except StreamClosedError as exc:
        log.warning("stream connection %s: offset %d of %r on %r not stored: %s", peer, offset,
                    reference, entry.name, exc)
    except StorageError as exc:
        log.info("stream connection %s: StoreOffset on %r ignored: %s", peer, entry.name, exc)


def query_offset(entry: Any, reference: str) -> int | None:
    """The offset stored for consumer ``reference``; None when none is."""
    try:
        return entry.stream.query_offset(reference)
    except StreamClosedError as exc:
        raise InternalError(f"stream '{entry.name}': {exc}") from None
    except StorageError:  # a reference that cannot be stored has nothing stored
        return None


def query_sequence(entry: Any, reference: str) -> int:
    """The last publishing id stored for ``reference``; 0 when unknown."""
    try:
        return entry.stream.query_sequence(reference)
    except StreamClosedError as exc:
        raise InternalError(f"stream '{entry.name}': {exc}") from None
    except StorageError:
        return 0
