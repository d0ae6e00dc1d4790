"""A Subscribe's properties: RabbitMQ's stage-1 filter and this broker's stage-2 extension.

Strategy: the stream protocol's Subscribe carries a map of strings. RabbitMQ reads ``filter.N``
(stage-1 values, ORed) and ``match-unfiltered``; this broker also reads, as an extension, the
stage-2 filters its AMQP listener offers, compiled by ``sqlfilter`` exactly as there:

- ``sql-filter``: an SQL filter expression (``amqp:sql-filter``'s language);
- ``property.<field>``: an ``amqp:properties-filter`` entry. The value is a string, converted to
  the one type the field takes: text for ``message-id``, ``correlation-id``, ``to``,
  ``subject``, ``reply-to``, ``group-id``, ``reply-to-group-id``; a symbol for
  ``content-type`` and ``content-encoding``; UTF-8 bytes for ``user-id``; milliseconds for
  ``creation-time`` and ``absolute-expiry-time``; an integer for ``group-sequence``;
- ``application-property.<key>``: an ``amqp:application-properties-filter`` entry with a string
  reference (so it matches string values only); ``&p:`` / ``&s:`` make it a prefix or suffix.

All property entries must match (AND). SQL and property filters do not go together.

``end-offset`` (an extension, not a filter): the subscription ends at that offset. Once its
reader has passed every chunk below it (read, or skipped by the filters), the broker sends one
empty chunk (0 entries, 0 records, no data) whose chunk id is the end offset, and nothing more:
a filtered read of a range knows where it ends without waiting on a timer.

Anything unusable is a ``BadRequest`` (the Subscribe is refused with ``PRECONDITION_FAILED``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import proton

from amqp_stream.errors import BadRequest
from amqp_stream.streamproto.constants import END_OFFSET_PROPERTY, FILTER_PROPERTY_PREFIX, MATCH_UNFILTERED_PROPERTY

__all__ = ["SubscriptionFilters", "parse", "SQL_FILTER_PROPERTY", "PROPERTY_PREFIX",
           "APPLICATION_PROPERTY_PREFIX", "END_OFFSET_PROPERTY"]

SQL_FILTER_PROPERTY = "sql-filter"
PROPERTY_PREFIX = "property."
APPLICATION_PROPERTY_PREFIX = "application-property."

_SYMBOL_FIELDS = ("content-type", "content-encoding")
_TIMESTAMP_FIELDS = ("creation-time", "absolute-expiry-time")


@dataclass
class SubscriptionFilters:
    values: list[str] = field(default_factory=list)  # stage 1
    match_unfiltered: bool = False
    match: Callable[[bytes], bool] | None = None  # stage 2, over a record's stored bytes
    stage2: str | None = None  # "sql" or "properties", for the log
    compiled: Any = None  # the compiled stage-2 filter (its requirement: broker-derived keys)
    end_offset: int | None = None  # ``end-offset``: where the subscription ends


def _property_value(name: str, text: str) -> object:
    if name in _SYMBOL_FIELDS:
        return proton.symbol(text)
    if name == "user-id":
        return text.encode("utf-8")
    try:
        if name in _TIMESTAMP_FIELDS:
            return proton.timestamp(int(text))
        if name == "group-sequence":
            return proton.uint(int(text))
    except (ValueError, OverflowError):
        raise BadRequest(f"property.{name} needs an integer, not {text!r}") from None
    return text


def parse(properties: Mapping[str, str]) -> SubscriptionFilters:
    from amqp_stream import fast_match
    from amqp_stream.filtering import install
    from sqlfilter import FilterError, compile_property_filter, compile_sql

    install()

    out = SubscriptionFilters()
    props: dict[str, object] = {}
    app: dict[str, object] = {}
    for key, value in properties.items():
        if key.startswith(FILTER_PROPERTY_PREFIX):
            out.values.append(value)
        elif key.startswith(PROPERTY_PREFIX):
            name = key[len(PROPERTY_PREFIX):]
            props[name] = _property_value(name, value)
        elif key.startswith(APPLICATION_PROPERTY_PREFIX):
            app[key[len(APPLICATION_PROPERTY_PREFIX):]] = value
    out.match_unfiltered = properties.get(MATCH_UNFILTERED_PROPERTY, "false").lower() == "true"
    end = properties.get(END_OFFSET_PROPERTY)
    if end is not None:
        if not end.isdigit():
            raise BadRequest(f"{END_OFFSET_PROPERTY} needs an offset (a whole number >= 0), not {end!r}")
        out.end_offset = int(end)
    sql = properties.get(SQL_FILTER_PROPERTY)
    if sql is not None and (props or app):
        raise BadRequest("sql-filter and property filters do not go together")
    kind = "sql" if sql is not None else "properties" if props or app else None
    try:
        if sql is not None:
            out.compiled = compile_sql(sql)
        elif kind is not None:
            out.compiled = compile_property_filter(props or None, app or None)
        out.match = fast_match.bytes_matcher(out.compiled)  # (None without a filter)
    except FilterError as exc:
        raise BadRequest(f"invalid {kind} filter: {exc}") from None
    out.stage2 = kind
    return out
