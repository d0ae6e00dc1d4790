"""Reading a partition over RabbitMQ's stream protocol (option ``streamUrl``).

Why: the AMQP 1.0 read goes through proton's reactor and builds a ``proton.Message`` per
delivery (~4,600 rows/s for 2 partitions). Here a task subscribes at its range's start with the
pushed-down filters (``filter.N``, ``match-unfiltered``, and this broker's ``sql-filter``:
docs/stream-protocol.md), takes Deliver chunks whole, splits their records with the storage
format's own ``decode_records`` (sub-batches too), decodes each message's sections with
``amqp_stream.wire`` and turns it into a row with the same ``message_to_row`` as the AMQP path.

``wire_message`` gives ``message_to_row`` the values the AMQP path's ``StreamMessage`` holds:
properties as proton reports them (times in seconds, absent zero times left out), offsets
counted from the chunk's first offset, and no chunk timestamp (the AMQP listener adds no
``x-stream-chunk-timestamp``, so the ``timestamp`` column is the creation time on both paths).

Where a read ends: at the first chunk that reaches the range's end. A filtered read may get no
such chunk (the broker skips chunks that stage 1 or 2 rule out, and the stream protocol has no
drain as AMQP's link credit has), and a range may end in a tracking chunk that is never sent:
every chunk of the range was committed when the query was planned, so a socket quiet for
``_IDLE`` seconds ends the read. That is a time-out, not a signal from the broker: a broker
slower than that to scan past filtered chunks would cut the read short (known limitation).
"""

from __future__ import annotations

from typing import Any, Iterator

from amqp_stream import client as amqp
from amqp_stream.client.names import _ZERO_IS_ABSENT, FILTER_VALUE
from amqp_stream.client.stream import StreamClient
from amqp_stream.spark.mapping import message_to_row
from amqp_stream.spark.offsets import OffsetRange
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.pushdown import Pushdown
from amqp_stream.streamproto import OffsetSpec
from amqp_stream.wire import MessageView, decode, split_sections
from storage.format import CHUNK_HEADER_BYTES, decode_header, decode_records

__all__ = ["read_range_stream", "subscribe_properties", "wire_message"]

_IDLE = 0.5  # seconds of a quiet socket that end a read (see the module docstring)
_DATA, _SEQUENCE, _VALUE = 0x75, 0x76, 0x77
_SUBSCRIPTION = 1


class _Message:
    """The fields of ``client.StreamMessage`` that ``message_to_row`` reads."""

    __slots__ = ("offset", "body", "filter_value", "properties", "application_properties",
                 "chunk_timestamp")

    def __init__(self, offset: int, body: Any, filter_value: str | None, properties: dict,
                 application_properties: dict, chunk_timestamp: int | None = None):
        self.offset = offset
        self.body = body
        self.filter_value = filter_value
        self.properties = properties
        self.application_properties = application_properties
        self.chunk_timestamp = chunk_timestamp


def _properties(raw: dict) -> dict:
    """Properties as ``StreamMessage.from_message`` has them from proton: absent fields, empty
    strings and zero times left out, times in seconds."""
    out = {}
    for key, v in raw.items():
        if v is None or v == "" or v == b"" or (v == 0 and key in _ZERO_IS_ABSENT):
            continue
        if key in ("absolute_expiry_time", "creation_time"):
            v = int(v) / 1000.0
        out[key] = v
    return out


def _body(data: bytes) -> Any:
    """The body as proton's ``Message.body`` gives it: a data section's bytes, an amqp-value's
    value, an amqp-sequence's list."""
    for code, _start, vstart, end in split_sections(data):
        if code == _DATA or code == _VALUE or code == _SEQUENCE:
            value, _ = decode(data[vstart:end])
            return bytes(value) if isinstance(value, (bytearray, memoryview)) else value
    return None


def wire_message(data: bytes, offset: int) -> _Message:
    """A stored message's bytes as the AMQP path's ``StreamMessage`` would read it."""
    view = MessageView.from_bytes(data)
    fv = view.message_annotations.get(FILTER_VALUE)
    return _Message(offset, _body(data), str(fv) if fv is not None else None,
                    _properties(view.properties), dict(view.application_properties))


def subscribe_properties(pd: Pushdown, match_unfiltered: bool) -> dict[str, str]:
    """The Subscribe properties that carry ``pd`` (docs/stream-protocol.md)."""
    props = {f"filter.{i}": v for i, v in enumerate(pd.filter_values or ())}
    if props and match_unfiltered:
        props["match-unfiltered"] = "true"
    if pd.sql:
        props["sql-filter"] = pd.sql
    return props


def read_range_stream(opts: SourceOptions, rng: OffsetRange, pd: Pushdown, declared) -> Iterator[tuple]:
    """The rows of ``[rng.start, rng.end)`` that pass ``pd``, read over the stream protocol."""
    if rng.end <= rng.start or pd.empty:
        return
    chunks: list[bytes] = []
    assert opts.stream_url is not None
    try:
        client = StreamClient(opts.stream_url, user=opts.user, password=opts.password,
                              timeout=opts.timeout, on_chunk=lambda c: chunks.append(bytes(c)))
    except amqp.ClientError as exc:
        raise amqp.ConsumerError(f"cannot read stream {opts.stream!r}: {exc}") from exc
    try:
        try:
            client.subscribe(_SUBSCRIPTION, opts.stream, OffsetSpec.offset(rng.start), credit=8,
                             properties=subscribe_properties(pd, opts.match_unfiltered))
        except amqp.ClientError as exc:
            raise amqp.ConsumerError(f"cannot read stream {opts.stream!r} over {opts.stream_url}: "
                                     f"{exc} (invalid SQL filter?)") from exc
        done = False
        while not done:
            if not chunks and not client.pump(_IDLE):
                return
            while chunks:
                chunk = chunks.pop(0)
                rows, done = _rows(chunk, rng, pd, declared)
                yield from rows
                if done:
                    break
    finally:
        client.close()


def _rows(chunk: bytes, rng: OffsetRange, pd: Pushdown, declared) -> tuple[list[tuple], bool]:
    """The rows of one delivered chunk within the range, and whether the range is done."""
    h = decode_header(chunk, path="deliver")
    # the data section ends the chunk; the Bloom filter stays on the broker's side (the
    # header still gives its size), so the data is counted from the end
    start = len(chunk) - h.data_length - h.trailer_length
    if start < CHUNK_HEADER_BYTES:
        raise amqp.ConsumerError(f"a delivered chunk of {len(chunk)} bytes is shorter than its header says")
    rows: list[tuple] = []
    for offset, data in decode_records(chunk[start:start + h.data_length], h.chunk_id,
                                       entries=h.entries if h.entries == h.records else 0):
        if offset < rng.start:
            continue
        if offset >= rng.end:
            return rows, True
        m = wire_message(data, offset)
        if pd.accepts(m.filter_value):
            rows.append(message_to_row(m, declared))  # type: ignore[arg-type]
    return rows, h.chunk_id + h.records >= rng.end
