"""Property filters: ``amqp:properties-filter`` and ``amqp:application-properties-filter``.

Why: the simplest stage-2 filters of "AMQP Filter Expressions" (filtex §4), which the official
RabbitMQ clients send. RabbitMQ 4.2 (rabbit_amqp_filter_prop.erl) is the baseline:

- properties-filter: map of symbol field name (``message-id``, ``user-id``, ...) to a reference
  value of the one type RabbitMQ allows for that field (FIELD_TYPES below); anything else makes the
  whole filter invalid. Extension: a null reference is also accepted (filtex §4.1.1: the field
  must be present), which RabbitMQ rejects for this filter.
- application-properties-filter: map of *string* key (a symbol key is invalid) to a simple-typed
  reference value (compound values are invalid); null matches when the key is present.
- The application properties a filter sees are RabbitMQ's: ``mc:routing_headers/2`` (mc_amqp.erl,
  ``application_properties_as_simple_map``), the same map its SQL filter reads, keeps only
  entries whose value is a string, symbol, binary, number, boolean or null. A decimal, a NaN or
  ±infinite float (its binary parser keeps those "as is"), a list, map, array or described value
  is dropped: here such an entry is *absent*, so no reference matches it, not even null. The SQL
  filter sees the same thing (``runtime.norm`` makes those values null, and null and absent are
  alike there): one behaviour for both filters. A decimal or a NaN/±inf float *reference* is
  accepted (RabbitMQ parses it to an "as is" term) but equals no message value: it never
  matches.
- 1 to 16 entries per filter map; all entries of all given filters must match (AND).
- Matching (RabbitMQ compares its unwrapped values with Erlang ``==``): numbers compare by value
  across types (10 matches 10.0; timestamps are numbers of ms); a boolean only equals a boolean;
  strings and symbols of the same text are equal; binaries equal binaries, uuids uuids.
  Known difference, left open: in RabbitMQ strings, symbols, binaries and uuids are all Erlang
  binaries, so a binary reference also matches a string of the same UTF-8 bytes (and a uuid
  reference a 16-byte binary); the SQL filter does that (``runtime.eq``), this filter does not.
- A *string* reference (not a symbol) may carry a modifier: ``&p:x`` prefix, ``&s:x`` suffix
  (compared on characters; as in RabbitMQ they also apply to binary values, on the UTF-8 bytes),
  ``&&x`` the literal ``&x``; any other leading ``&`` makes the filter invalid.

Compiled once per link into a list of (field, test) pairs and a picker per section (made by the
installed reader, ``sqlfilter.view``); ``evaluate_view`` picks just those keys from the
reader's views (``KeyedView.pick``), so from stored bytes only their values are decoded.
"""

from __future__ import annotations

import decimal
import uuid
from typing import Any, Callable, Mapping

from sqlfilter.base import Filter, _from_bytes
from sqlfilter.errors import FilterError
from sqlfilter.required import prefiltered
from sqlfilter.runtime import norm
from sqlfilter.view import MessageView, as_view, kind as _kind, reader

__all__ = ["compile_property_filter", "PropertyFilter", "MAX_ENTRIES", "FIELD_TYPES"]

#: "Impose a limit on the complexity of each filter expression" (filtex §7.1; RabbitMQ: 16)
MAX_ENTRIES = 16

PREFIX = "&p:"
SUFFIX = "&s:"
ESCAPE = "&&"

_STRING = "string"
_SYMBOL = "symbol"
_BINARY = "binary"
_ULONG = "ulong"
_UUID = "uuid"
_TIMESTAMP = "timestamp"
_UINT = "uint"

#: the reference types RabbitMQ 4.2 accepts per properties field
FIELD_TYPES: dict[str, frozenset[str]] = {
    "message-id": frozenset((_ULONG, _UUID, _BINARY, _STRING)),
    "user-id": frozenset((_BINARY,)),
    "to": frozenset((_STRING,)),
    "subject": frozenset((_STRING,)),
    "reply-to": frozenset((_STRING,)),
    "correlation-id": frozenset((_ULONG, _UUID, _BINARY, _STRING)),
    "content-type": frozenset((_SYMBOL,)),
    "content-encoding": frozenset((_SYMBOL,)),
    "absolute-expiry-time": frozenset((_TIMESTAMP,)),
    "creation-time": frozenset((_TIMESTAMP,)),
    "group-id": frozenset((_STRING,)),
    "group-sequence": frozenset((_UINT,)),
    "reply-to-group-id": frozenset((_STRING,)),
}

_MISSING = object()
_NUMBER_TYPES = (int, float)
_Test = Callable[[Any], bool]


#: AMQP types of the reader's own (``sqlfilter.view.Reader.amqp_types``) as the reference types
#: here: RabbitMQ keeps a decimal "as is" (it equals no message value); the other integer
#: types are numbers, an array or described value is compound
_KINDS = {"symbol": _SYMBOL, "char": "char", "timestamp": _TIMESTAMP, "ulong": _ULONG,
          "uint": _UINT, "decimal32": "as-is", "decimal64": "as-is", "decimal128": "as-is",
          "ushort": "number", "ubyte": "number", "byte": "number", "short": "number",
          "int": "number", "float": "number"}


def _amqp_type(value: Any) -> str | None:
    """The AMQP type name of a reference value as the reader decodes it (None if compound)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    own = _kind(value)
    if own is not None:
        if own == "float" and value - value != 0:
            return "as-is"
        return _KINDS.get(own)
    if isinstance(value, str):
        return _STRING
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _BINARY
    if isinstance(value, uuid.UUID):
        return _UUID
    if isinstance(value, decimal.Decimal):
        return "as-is"  # RabbitMQ keeps a decimal "as is": it equals no message value
    if isinstance(value, float) and value - value != 0:
        return "as-is"  # ... and so NaN and ±inf
    if isinstance(value, _NUMBER_TYPES):
        return "number"
    return None


# --- tests for one entry ------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, _NUMBER_TYPES) and not isinstance(v, bool)


def _test_for(ref: Any, kind: str) -> _Test:
    """The test of one entry. A test that is true only for values equal (as ``=`` of the SQL
    filter sees them) to one value carries it as ``test.equals`` (``sqlfilter.required``)."""
    test = _make_test(ref, kind)
    if kind == "as-is":
        test.equals = None  # type: ignore[attr-defined]  # equals nothing
    elif kind in (_SYMBOL, "char") or (kind == _STRING and getattr(test, "inline", None)):
        test.equals = str(ref)[1:] if str(ref).startswith(ESCAPE) else str(ref)  # type: ignore[attr-defined]
    elif kind not in ("null", _STRING):
        test.equals = ref  # type: ignore[attr-defined]
    return test


def _make_test(ref: Any, kind: str) -> _Test:
    if kind == "null":
        return lambda v: True  # the field is present: that is all
    if kind == "as-is":
        return lambda v: False
    if kind == _STRING:
        return _string_test(ref)
    if kind == "boolean":
        return lambda v: v is ref if isinstance(v, bool) else False
    if kind in (_ULONG, _UINT, _TIMESTAMP, "number"):
        number = int(ref) if isinstance(ref, int) else ref
        return lambda v: _is_number(v) and v == number
    if kind in (_SYMBOL, "char"):
        text = str(ref)
        return _inline(lambda v: isinstance(v, str) and v == text, f"v == {text!r}")
    if kind == _BINARY:
        raw = bytes(ref)
        return lambda v: isinstance(v, bytes) and v == raw
    if kind == _UUID:
        return lambda v: isinstance(v, uuid.UUID) and v == ref
    raise FilterError(f"unsupported reference value {ref!r}")  # not reached: checked before


def _inline(test: _Test, expression: str) -> _Test:
    """Tag ``test`` with an equivalent Python expression over ``v`` for the generated code.

    Only a str compares equal to a str (symbols and chars are str subclasses, which the
    reference matches too), so ``v == 'text'`` is the whole test.
    """
    test.inline = expression  # type: ignore[attr-defined]
    return test


def _string_test(ref: str) -> _Test:
    text = str(ref)
    if text.startswith(PREFIX):
        prefix = text[len(PREFIX):]
        raw = prefix.encode("utf-8")
        return lambda v: v.startswith(prefix) if isinstance(v, str) else (
            isinstance(v, bytes) and v.startswith(raw))
    if text.startswith(SUFFIX):
        suffix = text[len(SUFFIX):]
        raw = suffix.encode("utf-8")
        return lambda v: v.endswith(suffix) if isinstance(v, str) else (
            isinstance(v, bytes) and v.endswith(raw))
    if text.startswith(ESCAPE):
        text = text[1:]
    elif text.startswith("&"):
        raise FilterError(f"reference value {text!r}: '&' starts a modifier (&p:, &s:, &&)")
    return _inline(lambda v: isinstance(v, str) and v == text, f"v == {text!r}")


# --- compiling ------------------------------------------------------------------------------------
def _entries(name: str, spec: Any) -> list:
    if not isinstance(spec, Mapping):
        raise FilterError(f"{name} must be a map, not {type(spec).__name__}")
    if not 1 <= len(spec) <= MAX_ENTRIES:
        raise FilterError(f"{name} must have 1 to {MAX_ENTRIES} entries, not {len(spec)}")
    return list(spec.items())


def _compile_properties(spec: Any) -> list[tuple[str, _Test]]:
    out = []
    for key, ref in _entries("amqp:properties-filter", spec):
        if not isinstance(key, str) or key not in FIELD_TYPES:
            raise FilterError(f"amqp:properties-filter: unknown field {key!r}")
        kind = _amqp_type(ref)
        if kind != "null" and kind not in FIELD_TYPES[key]:
            allowed = ", ".join(sorted(FIELD_TYPES[key]))
            raise FilterError(f"amqp:properties-filter: {key} takes {allowed}, not {kind or type(ref).__name__}")
        out.append((key.replace("-", "_"), _test_for(ref, kind)))
    return out


def _compile_application_properties(spec: Any) -> list[tuple[str, _Test]]:
    out = []
    for key, ref in _entries("amqp:application-properties-filter", spec):
        if not isinstance(key, str) or _kind(key) in ("symbol", "char"):
            raise FilterError(f"amqp:application-properties-filter: key {key!r} is not a string")
        kind = _amqp_type(ref)
        if kind is None:
            raise FilterError(f"amqp:application-properties-filter: {key!r} needs a simple value, "
                              f"not {type(ref).__name__}")
        out.append((str(key), _test_for(ref, kind)))
    return out


def _generate(f: "PropertyFilter") -> Callable[[Any], bool]:
    """One straight-line Python function for the filter's entries, compiled once per link.

    Same reasoning as the SQL filter's code generation: a loop over (key, test) pairs with a
    call per entry costs ~3x a hand-written test; the generated code inlines plain string
    equality (the common case) and calls the entry's test for everything else. For a
    view of the installed reader the sections come from a key pick (only the named keys are
    decoded from stored bytes); other views give their dicts.
    """
    installed = reader()
    env: dict[str, Any] = {"MessageView": installed.view_type if installed else _NoView,
                           "_MISSING": _MISSING, "norm": norm,
                           "_picker": f._picker, "_app_picker": f._app_picker}
    lines = ["def evaluate_view(view):", "    if type(view) is MessageView:"]
    if f._picker is None:
        lines.append("        app = view.pick_application_properties(_app_picker)")
    elif f._app_picker is None:
        lines.append("        fields = view.pick_properties(_picker)")
    else:
        lines.append("        fields, app = view.pick(_picker, _app_picker)")
    lines.append("    else:")
    if f._properties:
        lines.append("        fields = view.properties")
    if f._application_properties:
        lines.append("        app = view.application_properties")

    def test_expression(i: int, test: _Test) -> str:
        inline = getattr(test, "inline", None)
        if inline is not None:
            return inline
        env[f"_t{i}"] = test
        return f"_t{i}(v)"

    for i, (key, test) in enumerate(f._properties + f._application_properties):
        section = "fields" if i < len(f._properties) else "app"
        lines.append(f"    v = {section}.get({key!r}, _MISSING)")
        lines.append(f"    if v is _MISSING or not ({test_expression(i, test)}): return False")
        if section == "app":
            # a value RabbitMQ drops from the map counts as absent (module docstring)
            lines.append("    t = type(v)")
            lines.append("    if t is not str and t is not int and v is not None"
                         " and norm(v) is None: return False")
    lines.append("    return True")
    exec(compile("\n".join(lines), "<property filter>", "exec"), env)
    return env["evaluate_view"]


class _NoView:
    """The view type of a filter compiled with no reader installed: no view is of it."""


class PropertyFilter(Filter):
    """A compiled pair of property filters (either may be empty, not both)."""

    def __init__(self, properties: list[tuple[str, _Test]],
                 application_properties: list[tuple[str, _Test]]):
        self._properties = tuple(properties)
        self._application_properties = tuple(application_properties)
        installed = reader()
        picker = installed.picker if installed else lambda names: list(names)
        self._picker = picker(k for k, _ in properties) if properties else None
        self._app_picker = (picker(k for k, _ in application_properties)
                            if application_properties else None)
        self.sections = frozenset(
            name for name, entries in (("properties", properties),
                                       ("application_properties", application_properties))
            if entries)

        self._evaluate = _generate(self)

    def evaluate_view(self, view: MessageView) -> bool:
        return self._evaluate(view)

    def entries(self) -> tuple[tuple[str, str, _Test], ...]:
        """(section, field, test) of every entry, ANDed (``sqlfilter.required`` reads them)."""
        return (tuple(("properties", k, t) for k, t in self._properties)
                + tuple(("application_properties", k, t) for k, t in self._application_properties))

    def matches(self, message: Any) -> bool:
        # the generated function always answers a bool: no unknown to map to False
        return self._evaluate(as_view(message))

    def bytes_matcher(self) -> Callable[[bytes], bool]:
        evaluate, view = self._evaluate, _from_bytes()  # always a bool (see above)
        return prefiltered(self, lambda data: evaluate(view(data)))

    def __repr__(self) -> str:
        return (f"PropertyFilter(properties={[k for k, _ in self._properties]}, "
                f"application_properties={[k for k, _ in self._application_properties]})")


def compile_property_filter(properties: Mapping | None = None,
                            application_properties: Mapping | None = None) -> PropertyFilter:
    """Compile the maps of ``amqp:properties-filter`` and ``amqp:application-properties-filter``.

    Keys and reference values are as the installed reader decodes them (its own types for
    symbol field names, ulong, timestamp, uint ...: ``sqlfilter.view.Reader.amqp_types``;
    ``uuid.UUID``, ``bytes``, ``str``).
    Raises ``FilterError`` for anything RabbitMQ 4.2 would not put in place.
    """
    if properties is None and application_properties is None:
        raise FilterError("a property filter needs properties or application properties")
    return PropertyFilter(
        _compile_properties(properties) if properties is not None else [],
        _compile_application_properties(application_properties)
        if application_properties is not None else [],
    )
