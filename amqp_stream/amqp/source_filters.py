"""Attach-time source filters: which entries a consumer asked for, which are put in place, and
what the attach reply echoes. Pure functions over decoded values; no link, no socket.

Strategy (../shared/design/amqp-interface.md, RabbitMQ 4.2's behaviour):
- The filter set is a map of symbol keys to described values; the descriptor (a symbol or its
  ulong code) says what an entry is, the key is free. Entries are read in wire order.
- Each entry is checked when it is read. An invalid, unsupported or malformed entry is left out
  of the reply with a reason (the caller logs it); the client decides whether to detach.
- Conflicts: offset spec, stage-1 values and match-unfiltered are single slots; the property
  filters (properties + application-properties, ANDed), the SQL filter and the JMS selector are
  alternative kinds of stage-2 filter. An entry later on the wire replaces an earlier one in its
  slot (and an SQL filter or selector replaces both property filters, and vice versa).
- A JMS selector (``apache.org:selector-filter:string``, under any key: Qpid JMS uses
  ``jms-selector``) is compiled with ``sqlfilter.compile_selector`` and echoed like any accepted
  entry, as ActiveMQ and Artemis do.
- The echo holds exactly the accepted entries, in the order received; ``None`` when no filter
  was asked, an empty list when none was accepted.
- A hard failure (an offset spec that cannot be understood) raises ``errors.BadRequest``: the link
  is refused (null source, then detach with the condition).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from proton import Array, Described, symbol, timestamp

from amqp_stream.errors import BadRequest
from storage import OffsetSpec, StorageError, parse_interval_ms

__all__ = ["SourceFilters", "StartSpec", "parse_source_filters",
           "OFFSET_SPEC", "STREAM_FILTER", "MATCH_UNFILTERED", "PROPERTIES_FILTER",
           "APP_PROPERTIES_FILTER", "SQL_FILTER", "SELECTOR_FILTER", "SELECTOR_FILTER_CODE",
           "FILTER_CAPABILITIES", "parse_interval"]

OFFSET_SPEC = symbol("rabbitmq:stream-offset-spec")
STREAM_FILTER = symbol("rabbitmq:stream-filter")
MATCH_UNFILTERED = symbol("rabbitmq:stream-match-unfiltered")
PROPERTIES_FILTER = symbol("amqp:properties-filter")
APP_PROPERTIES_FILTER = symbol("amqp:application-properties-filter")
SQL_FILTER = symbol("amqp:sql-filter")
SELECTOR_FILTER = symbol("apache.org:selector-filter:string")
SELECTOR_FILTER_CODE = 0x0000468C00000004

FILTER_CAPABILITIES = (symbol("AMQP_FILTEX_PROP_V1_0"), symbol("AMQP_FILTEX_SQL_V1_0"))

# descriptor (symbol text or ulong code) -> what the entry is
_DESCRIPTORS: dict[Any, str] = {
    "rabbitmq:stream-offset-spec": "offset",
    "rabbitmq:stream-filter": "values",
    "rabbitmq:stream-match-unfiltered": "unfiltered",
    "amqp:properties-filter": "properties",
    "amqp:application-properties-filter": "application_properties",
    "amqp:sql-filter": "sql",
    "apache.org:selector-filter:string": "selector",
    0x0000000000000173: "properties",
    0x0000000000000174: "application_properties",
    0x0000000000000120: "sql",
    SELECTOR_FILTER_CODE: "selector",
}

StartSpec = OffsetSpec  # where a consumer starts: storage's offset spec, the one home


@dataclass
class SourceFilters:
    start: OffsetSpec = field(default_factory=OffsetSpec.next)
    filter_values: tuple[str, ...] = ()
    match_unfiltered: bool = False
    stage2: Any = None  # a compiled sqlfilter.Filter, or None
    stage2_kind: str | None = None  # "sql", "selector" or "properties"
    echo: list[tuple[Any, Any]] | None = None  # accepted (key, described value) in wire order
    dropped: list[tuple[Any, str]] = field(default_factory=list)  # (key, reason)

    def describe(self) -> str:
        """A short text for logs: what is in place."""
        parts = [f"start={self.start}"]
        if self.filter_values:
            parts.append(f"values={list(self.filter_values)}")
        if self.match_unfiltered:
            parts.append("match-unfiltered")
        if self.stage2_kind:
            parts.append(f"stage2={self.stage2_kind}")
        return " ".join(parts)


def parse_interval(text: str) -> int | None:
    """Seconds for an interval like ``10m`` (RabbitMQ's form, above zero), or None."""
    try:
        return parse_interval_ms(text, rabbitmq=True) // 1000
    except StorageError:
        return None


def parse_start(value: Any, now_ms: int) -> OffsetSpec:
    """The offset spec value; raises ``errors.BadRequest`` for anything it cannot understand."""
    if isinstance(value, bool):
        raise BadRequest(f"offset spec must not be a boolean: {value!r}")
    if isinstance(value, timestamp):
        return OffsetSpec.timestamp(int(value))
    if isinstance(value, int):
        if value < 0:
            raise BadRequest(f"offset spec must be >= 0, not {value}")
        return OffsetSpec.offset(int(value))
    if isinstance(value, str):
        try:
            return OffsetSpec.parse(str(value), now_ms=now_ms, rabbitmq=True)
        except StorageError:
            raise BadRequest(f"offset spec {value!r} is not first, last, next, an offset, "
                             f"a timestamp or an interval like 10m") from None
    raise BadRequest(f"offset spec of type {type(value).__name__} is not supported")


def _descriptor_kind(descriptor: Any) -> str | None:
    if isinstance(descriptor, (symbol, str)):
        return _DESCRIPTORS.get(str(descriptor))
    if isinstance(descriptor, int) and not isinstance(descriptor, bool):
        return _DESCRIPTORS.get(int(descriptor))
    return None


Compiler = Callable[..., Any]


def _default_compilers() -> tuple[Compiler, Compiler, Compiler]:
    import sqlfilter
    from amqp_stream.filtering import install

    install()

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise sqlfilter.FilterError("this filter kind is not available in this build")
    return (getattr(sqlfilter, "compile_sql", missing),
            getattr(sqlfilter, "compile_property_filter", missing),
            getattr(sqlfilter, "compile_selector", missing))


def parse_source_filters(entries: Sequence[tuple[Any, Any]] | None, *, now_ms: int,
                         compile_sql: Compiler | None = None,
                         compile_property_filter: Compiler | None = None,
                         compile_selector: Compiler | None = None) -> SourceFilters:
    """Decide what is put in place for the filter-set ``entries`` ((key, value) in wire order;
    ``None`` when the source has no filter field)."""
    result = SourceFilters()
    if entries is None:
        return result
    if compile_sql is None or compile_property_filter is None or compile_selector is None:
        default_sql, default_prop, default_selector = _default_compilers()
        compile_sql = compile_sql or default_sql
        compile_property_filter = compile_property_filter or default_prop
        compile_selector = compile_selector or default_selector
    compilers = {"sql": compile_sql, "selector": compile_selector}
    from sqlfilter import FilterError

    accepted: list[tuple[Any, Any, str]] = []  # (key, value, slot)
    props: dict[str, Any] = {}  # "properties"/"application_properties" -> map
    sql_filter: Any = None  # a compiled SQL filter or selector
    sql_kind = "sql"

    def evict(*slots: str) -> None:
        accepted[:] = [a for a in accepted if a[2] not in slots]

    for key, value in entries:
        if not isinstance(key, symbol):
            result.dropped.append((key, f"filter key {key!r} is a {type(key).__name__}, not a symbol"))
            continue
        if not isinstance(value, Described):
            result.dropped.append((key, "filter value is not a described type"))
            continue
        kind = _descriptor_kind(value.descriptor)
        if kind is None:
            result.dropped.append((key, f"unsupported filter descriptor {value.descriptor!r}"))
            continue
        inner = value.value
        if kind == "offset":
            result.start = parse_start(inner, now_ms)  # hard failure raises
            evict("offset")
            accepted.append((key, value, "offset"))
        elif kind == "values":
            if isinstance(inner, Array):
                inner = list(inner.elements)
            if isinstance(inner, str):
                values: tuple[str, ...] = (str(inner),)
            elif isinstance(inner, list) and all(isinstance(v, str) for v in inner):
                values = tuple(str(v) for v in inner)
            else:
                result.dropped.append((key, "rabbitmq:stream-filter must be a string or a list of strings"))
                continue
            result.filter_values = values
            evict("values")
            accepted.append((key, value, "values"))
        elif kind == "unfiltered":
            if not isinstance(inner, bool):
                result.dropped.append((key, "rabbitmq:stream-match-unfiltered must be a boolean"))
                continue
            result.match_unfiltered = inner
            evict("unfiltered")
            accepted.append((key, value, "unfiltered"))
        elif kind in ("properties", "application_properties"):
            if not isinstance(inner, dict):
                result.dropped.append((key, f"{_name(kind)} must be a map"))
                continue
            try:
                compile_property_filter(**{kind: inner})
            except FilterError as exc:
                result.dropped.append((key, f"invalid {_name(kind)}: {exc}"))
                continue
            except Exception as exc:  # a value the compiler could not even look at
                result.dropped.append((key, f"invalid {_name(kind)}: {type(exc).__name__}: {exc}"))
                continue
            if sql_filter is not None:
                sql_filter = None
                evict("sql", "selector")
            props[kind] = inner
            evict(kind)
            accepted.append((key, value, kind))
        elif kind in ("sql", "selector"):
            what = "SQL filter" if kind == "sql" else "JMS selector"
            if not isinstance(inner, str):
                result.dropped.append((key, f"{_name(kind)} must be a string"))
                continue
            try:
                compiled = compilers[kind](str(inner))
            except FilterError as exc:
                result.dropped.append((key, f"invalid {what}: {exc}"))
                continue
            except Exception as exc:
                result.dropped.append((key, f"invalid {what}: {type(exc).__name__}: {exc}"))
                continue
            if props:
                props.clear()
                evict("properties", "application_properties")
            sql_filter, sql_kind = compiled, kind
            evict("sql", "selector")
            accepted.append((key, value, kind))

    if sql_filter is not None:
        result.stage2, result.stage2_kind = sql_filter, sql_kind
    elif props:
        result.stage2 = compile_property_filter(**props)
        result.stage2_kind = "properties"
    result.echo = [(k, v) for k, v, _ in accepted]
    return result


_NAMES = {"properties": "amqp:properties-filter",
          "application_properties": "amqp:application-properties-filter",
          "sql": "amqp:sql-filter", "selector": "apache.org:selector-filter:string"}


def _name(kind: str) -> str:
    return _NAMES[kind]


def echo_map(echo: Iterable[tuple[Any, Any]]) -> dict:
    """The reply's filter map (dicts keep insertion order, so the wire order is kept)."""
    return {k: v for k, v in echo}
