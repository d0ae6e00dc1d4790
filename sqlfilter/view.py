"""The message-view protocol: what a filter reads of a message, and who hands it messages.

Why: ``sqlfilter`` is a language over the sections of a message; how those sections are kept
(encoded bytes, a client's message object) is the business of the layer above, which
implements these protocols (the broker's is ``amqp_stream.wire``: its ``MessageView`` and
``READER``). So this package imports nothing but the standard library, lark and ``grammar``.

- ``MessageView``: the five filterable sections as mappings (absent: empty). Values are plain
  Python values (None, bool, int, float, str, bytes, ``uuid.UUID``, ``decimal.Decimal``, list,
  dict) or the reader's own types for the AMQP types Python has none for (a symbol, a char, a
  timestamp ...), which it names in ``Reader.amqp_types``.
- ``KeyedView``: a view that can also hand over just the keys a filter reads
  (``pick(properties_picker, application_properties_picker)``); the filter makes the pickers
  once, at compile time, with ``Reader.picker``.
- ``Reader``: how messages become views, and how the reader's own types are named. The process
  that filters messages installs one with ``use`` before compiling filters: what ``matches``
  and ``bytes_matcher`` read, and what ``runtime.norm`` knows of values. Without one, filters
  read only objects that are views themselves (``MessageView`` above).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, runtime_checkable

__all__ = ["MessageView", "KeyedView", "Reader", "use", "reader", "kind", "as_view", "AMQP_KINDS"]


@runtime_checkable
class MessageView(Protocol):
    """The filterable sections of one message, each a mapping (empty when absent)."""

    @property
    def header(self) -> Mapping[str, Any]: ...

    @property
    def properties(self) -> Mapping[str, Any]: ...

    @property
    def application_properties(self) -> Mapping[str, Any]: ...

    @property
    def message_annotations(self) -> Mapping[str, Any]: ...

    @property
    def footer(self) -> Mapping[str, Any]: ...


class KeyedView(MessageView, Protocol):
    """A view that hands over (at least) the keys of a picker, decoding no more than those.

    A section whose picker is None is not read (None in its place)."""

    def pick(self, properties: Any, application_properties: Any
             ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]: ...

    def pick_properties(self, picker: Any) -> Mapping[str, Any]: ...

    def pick_application_properties(self, picker: Any) -> Mapping[str, Any]: ...


@runtime_checkable
class Reader(Protocol):
    """How a filter is handed messages of one representation.

    ``view_type``: the reader's own view class; an instance of exactly that class is a
    ``KeyedView`` (generated code tests ``type(view) is view_type``, then picks).
    ``format_error``: what reading a malformed message's sections raises (a filter answers
    unknown for it). ``amqp_types``: each Python type of the reader's own for an AMQP type
    Python has none for, with that type's name: "symbol", "char", "timestamp", "ulong", "uint",
    "ushort", "ubyte", "byte", "short", "int", "float", "decimal32", "decimal64",
    "decimal128", "described", "array" (an array iterates over its elements).
    """

    def __hash__(self) -> int: ...  # a compiled filter is cached per (text, reader)

    @property
    def view_type(self) -> type: ...

    @property
    def format_error(self) -> type[Exception]: ...

    @property
    def amqp_types(self) -> Mapping[type, str]: ...

    def view(self, message: Any) -> MessageView:
        """A view of a message: encoded bytes, a message object the reader knows, or a view."""
        ...

    def from_bytes(self, data: bytes) -> KeyedView:
        """A (lazy) view of an encoded message."""
        ...

    def picker(self, names: Iterable[str]) -> Any:
        """What ``KeyedView.pick`` takes for these keys (made once per compiled filter)."""
        ...


#: the installed reader's own types → their AMQP type names (``runtime.norm`` reads it)
AMQP_KINDS: dict[type, str] = {}
_installed: list[Reader] = []


def use(new: Reader) -> None:
    """Install the reader that filters compiled from now on read messages with (one per
    process: the broker's, or a tool's). Installing the same reader again does nothing."""
    if _installed and _installed[0] is new:
        return
    if not isinstance(new, Reader):
        raise TypeError(f"{type(new).__name__} is not a sqlfilter.view.Reader")
    _installed[:] = [new]
    AMQP_KINDS.clear()
    AMQP_KINDS.update(new.amqp_types)


def reader() -> Reader | None:
    """The installed reader (None: filters read only objects that are views)."""
    return _installed[0] if _installed else None


def kind(value: Any) -> str | None:
    """The AMQP type name of a value of one of the reader's own types (None for the others)."""
    return AMQP_KINDS.get(type(value))


def as_view(message: Any) -> MessageView:
    """A view of ``message`` through the installed reader; without one, a view as it is."""
    installed = reader()
    if installed is not None:
        return installed.view(message)
    if isinstance(message, (bytes, bytearray, memoryview)):
        raise TypeError(f"cannot read a {type(message).__name__} as a message: no reader is "
                        "installed (sqlfilter.view.use)")
    return message
