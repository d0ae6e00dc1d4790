"""Filters checked before connecting, for the commands that consume (consume, perf).

Why: a broker leaves a filter it cannot use out of the attach reply and sends everything; a
typo in `--sql` would print every message (or run a whole load test) and say little. The client
ships the broker's compiler, so a bad filter is refused here, before any connection, with the
compiler's reason and position (exit 2). The check compiles exactly what the broker will decode:
the filter map is encoded and decoded as on the wire first.
"""

from __future__ import annotations

from typing import Any, Mapping

from proton import Data

from amqp_stream.client import build_filters

__all__ = ["check_filters"]


def check_filters(option: str, *, sql: str | None = None, properties: Mapping[str, Any] | None = None,
                  application_properties: Mapping[str, Any] | None = None) -> str | None:
    """None when the stage-2 filter compiles, else the error text for ``option``: the reason and,
    for SQL syntax errors, the expression with a caret under the position."""
    from sqlfilter import FilterError, compile_property_filter, compile_sql

    filters = _on_the_wire(build_filters(offset=None, sql=sql, properties=properties,
                                         application_properties=application_properties))
    try:
        for key, value in filters.items():
            if str(key) == "sql-filter":
                compile_sql(value.value)
            elif str(key) == "amqp:properties-filter":
                compile_property_filter(properties=value.value)
            elif str(key) == "amqp:application-properties-filter":
                compile_property_filter(application_properties=value.value)
    except FilterError as exc:
        text = f"{option}: {exc.reason}"
        if exc.position is not None and sql is not None:
            text += f" at character {exc.position}\n  {sql}\n  {' ' * (exc.position - 1)}^"
        return text
    return None


def _on_the_wire(filters: dict) -> dict:
    data = Data()
    data.put_object(filters)
    decoded = Data()
    decoded.decode(data.encode())
    decoded.rewind()
    decoded.next()
    found = decoded.get_object()
    assert isinstance(found, dict)  # what was put in
    return dict(found)
