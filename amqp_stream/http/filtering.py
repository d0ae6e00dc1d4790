"""What a consumer filters on and what that saves it, for ``/api/consumers`` and
``/api/stream/consumers`` (this broker's extension fields ``filter``, ``filtering``,
``offset``, ``offset_lag``; the web UI shows them).

Why here: the two protocols keep their filters differently (an AMQP link its accepted source
filter entries, ``SourceFilters.echo``; a stream subscription its Subscribe properties), and
both consumers' readers count the same work (``storage.ReaderStats``); one shape serves both.
"""

from __future__ import annotations

from typing import Any

from amqp_stream.amqp.source_filters import _descriptor_kind
from amqp_stream.http.state import json_value
from amqp_stream.stream_listener.subscription_filters import (APPLICATION_PROPERTY_PREFIX,
                                                              PROPERTY_PREFIX,
                                                              SQL_FILTER_PROPERTY)
from amqp_stream.streamproto.constants import FILTER_PROPERTY_PREFIX, MATCH_UNFILTERED_PROPERTY

__all__ = ["amqp_filter", "stream_filter", "savings", "lag"]


def _shape(values: list[str], unfiltered: bool, sql: str | None,
           properties: dict[str, Any]) -> dict[str, Any] | None:
    if not values and sql is None and not properties:
        return None
    return {"values": values, "match_unfiltered": unfiltered, "sql": sql,
            "properties": properties}


def amqp_filter(filters: Any) -> dict[str, Any] | None:
    """An AMQP consumer's filter from its accepted source filter entries (``echo``): stage-1
    values, SQL (or JMS selector) text, property filters; None without any."""
    sql: str | None = None
    properties: dict[str, Any] = {}
    for _key, described in filters.echo or ():
        kind = _descriptor_kind(getattr(described, "descriptor", None))
        value = getattr(described, "value", None)
        if kind in ("sql", "selector") and isinstance(value, str):
            sql = value
        elif kind in ("properties", "application_properties") and isinstance(value, dict):
            properties.update({str(k): json_value(v) for k, v in value.items()})
    return _shape(list(filters.filter_values), bool(filters.match_unfiltered), sql, properties)


def stream_filter(properties: dict[str, str]) -> dict[str, Any] | None:
    """A subscription's filter from its Subscribe properties (``filter.N``, ``sql-filter``,
    ``property.*``, ``application-property.*``); None without any."""
    values = [v for k, v in sorted(properties.items()) if k.startswith(FILTER_PROPERTY_PREFIX)]
    props = {k: v for k, v in properties.items()
             if k.startswith((PROPERTY_PREFIX, APPLICATION_PROPERTY_PREFIX))}
    return _shape(values, properties.get(MATCH_UNFILTERED_PROPERTY) == "true",
                  properties.get(SQL_FILTER_PROPERTY), props)


def savings(consumer: Any) -> dict[str, Any]:
    """What the consumer's reader did and what it sent (both since it started reading: a
    single active consumer's reader restarts when it becomes active): chunks stage 1 (or
    broker-derived keys) skipped unread, chunks read, bytes read from the segment files, and
    the messages and bytes sent."""
    stats = consumer.reader.stats
    return {"chunks_read": stats.chunks_read, "chunks_skipped": stats.chunks_skipped,
            "bytes_read": stats.bytes_read, "messages_sent": consumer.sent_messages,
            "bytes_sent": consumer.sent_bytes}


def lag(consumer: Any) -> int | None:
    """Offsets between the stream's committed end and the next one the consumer is sent;
    None for an AMQP consumer a cluster node serves from a member elsewhere (no log here)."""
    stream = getattr(consumer.entry, "stream", None)
    if stream is None:
        return None
    return max(0, int(stream.next_offset) - int(consumer.next_offset))
