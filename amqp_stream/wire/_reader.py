"""``READER``: the wire's side of ``sqlfilter``'s message-view protocol (``sqlfilter.view``).

Why here: filters are a language over message sections and import nothing of ours; how a
stored message is read (``MessageView``, its key picks) and which of proton's types stand for
AMQP types Python has none for is this package's business. The protocol is structural:
nothing here imports ``sqlfilter`` (the broker installs ``READER`` with ``sqlfilter.use``).
"""

from __future__ import annotations

from typing import Mapping

import proton

from amqp_stream.wire._errors import MessageFormatError
from amqp_stream.wire._pick import KeyPicker
from amqp_stream.wire._view import MessageView, as_view

__all__ = ["READER", "AMQP_TYPES"]

#: the codec's and proton's types for AMQP types Python has none for, by AMQP type name
#: (``_codec``'s value representation; proton's own wrappers come with messages a client built)
AMQP_TYPES: Mapping[type, str] = {
    proton.symbol: "symbol", proton.char: "char", proton.timestamp: "timestamp",
    proton.ulong: "ulong", proton.uint: "uint", proton.ushort: "ushort", proton.ubyte: "ubyte",
    proton.byte: "byte", proton.short: "short", proton.int32: "int", proton.float32: "float",
    proton.decimal32: "decimal32", proton.decimal64: "decimal64",
    proton.decimal128: "decimal128", proton.Described: "described", proton.Array: "array",
}


class _Reader:
    """Views of stored bytes (lazy, picked by ``KeyPicker``), of a ``proton.Message``, or a
    ``MessageView`` as it is."""

    view_type = MessageView
    format_error = MessageFormatError
    amqp_types = AMQP_TYPES

    # the functions themselves, not methods calling them: ``from_bytes`` runs once per stored
    # record a filter reads, and a wrapper would add a call to each
    view = staticmethod(as_view)
    from_bytes = staticmethod(MessageView.from_bytes)
    picker = KeyPicker

    def __repr__(self) -> str:
        return "amqp_stream.wire.READER"


READER = _Reader()
