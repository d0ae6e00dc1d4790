"""Reading a partition over RabbitMQ's stream protocol (option ``streamUrl``).

Why: the AMQP 1.0 read goes through proton's reactor and builds a ``proton.Message`` per
delivery (~4,600 rows/s for 2 partitions). Here a task subscribes at its range's start with the
pushed-down filters (``filter.N``, ``match-unfiltered``, and this broker's ``sql-filter``:
docs/stream-protocol.md), takes Deliver chunks whole, splits their records with the storage
format's own ``decode_records`` (sub-batches too), gathers the messages of a batch (whole
chunks up to ``BATCH_ROWS`` or ``BATCH_BYTES``, or what came before the socket has nothing more
for now) and yields them as an Arrow record batch: read as columns by ``stored_arrays`` when
they share one shape (a writer's messages do), else one walk a message by ``stored_columns``
(today's ``stored_message`` for anything unusual).

``stored_message`` decodes a message in one walk over its sections (the usual smallulong
descriptors); anything else, and any message it cannot read, goes to ``wire_message`` (the
``MessageView`` reading, which names what is wrong), so both give the same values.
``wire_message`` gives the columns the values the AMQP path's ``StreamMessage`` holds:
properties as proton reports them (times in seconds, absent zero times left out), offsets
counted from the chunk's first offset, and no chunk timestamp (the AMQP listener adds no
``x-stream-chunk-timestamp``, so the ``timestamp`` column is the creation time on both paths).

Where a read ends: the Subscribe carries the range's end as this broker's ``end-offset``
property (docs/stream-protocol.md); once the broker's reader has passed every chunk below it
(sent, or skipped by stage 1 or 2, or a tracking chunk) it sends an empty chunk whose id is
the end, and the read ends there, or earlier at a delivered chunk that reaches the end. No
timer decides it: a slow broker makes the read slower, never shorter. ``timeout`` seconds
without a frame fail the read (a broker that is gone, or one that ignores ``end-offset``).

A Deliver carries the chunk's header and its data section only (no Bloom filter, no trailer,
as osiris sends them), so the data starts right after the header.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
from pyspark.sql.types import StructType

from amqp_stream import client as amqp
from amqp_stream.client.names import _ZERO_IS_ABSENT, FILTER_VALUE
from amqp_stream.client.stream import StreamClient
from amqp_stream.spark.batches import BATCH_BYTES, BATCH_ROWS, Columns
from amqp_stream.spark.offsets import OffsetRange
from amqp_stream.spark.options import SourceOptions
from amqp_stream.spark.pushdown import Pushdown
from amqp_stream.spark.stored_arrays import StoredBatches
from amqp_stream.streamproto import OffsetSpec
from amqp_stream.streamproto.constants import END_OFFSET_PROPERTY
from amqp_stream.wire import MessageView, decode, split_sections
from amqp_stream.spark.encoding import PROPERTY_ORDER
from storage.format import CHUNK_HEADER, CHUNK_HEADER_BYTES, chained, decode_header, decode_records, record_starts

__all__ = ["read_range_stream", "subscribe_properties", "wire_message", "stored_message"]

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


_ANNOTATIONS, _PROPERTIES, _APPLICATION = 0x72, 0x73, 0x74


class _Unusual(Exception):
    """A message ``stored_message`` leaves to ``wire_message``."""


def stored_message(data: bytes, offset: int) -> _Message:
    """``wire_message(data, offset)`` in one walk: each section's value decoded once, the first
    of each kind kept (the stored order rule, ``amqp_stream.wire``)."""
    try:
        first: dict[int, Any] = {}
        pos, n = 0, len(data)
        while pos < n:
            if data[pos] != 0 or data[pos + 1] != 0x53:
                raise _Unusual
            code = data[pos + 2]
            value, pos = decode(data, pos + 3)
            if code == _DATA or code == _SEQUENCE:
                code = _VALUE  # the body: the first of the body sections
            if code not in first:
                first[code] = value
        annotations, properties, application = (first.get(c) for c in (_ANNOTATIONS, _PROPERTIES, _APPLICATION))
        annotations = {} if annotations is None else annotations
        application = {} if application is None else application
        if type(annotations) is not dict or type(application) is not dict:
            raise _Unusual
        if properties is None:
            properties = {}
        elif type(properties) is list:
            properties = _properties({k: v for k, v in zip(PROPERTY_ORDER, properties, strict=False) if v is not None})
        else:
            raise _Unusual
        body = first.get(_VALUE)
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        fv = annotations.get(FILTER_VALUE)
        return _Message(offset, body, str(fv) if fv is not None else None, properties, application)
    except Exception:  # noqa: BLE001 - the MessageView reading decides, and names what is wrong
        return wire_message(data, offset)


def subscribe_properties(pd: Pushdown, match_unfiltered: bool, end: int) -> dict[str, str]:
    """The Subscribe properties that carry ``pd`` and the range's ``end`` (docs/stream-protocol.md)."""
    props = {f"filter.{i}": v for i, v in enumerate(pd.filter_values or ())}
    props[END_OFFSET_PROPERTY] = str(end)
    if props and match_unfiltered:
        props["match-unfiltered"] = "true"
    if pd.sql:
        props["sql-filter"] = pd.sql
    return props


def read_range_stream(opts: SourceOptions, rng: OffsetRange, pd: Pushdown, schema: StructType,
                      stream: str | None = None) -> Iterator[Any]:
    """The rows of ``[rng.start, rng.end)`` that pass ``pd``, read over the stream protocol, as
    Arrow record batches of ``schema``: whole chunks up to ``BATCH_ROWS`` rows or ``BATCH_BYTES``,
    and the rows that came are yielded before the read waits for more (``stream``: a super
    stream's partition, the ``stream`` column)."""
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
                             properties=subscribe_properties(pd, opts.match_unfiltered, rng.end))
        except amqp.ClientError as exc:
            raise amqp.ConsumerError(f"cannot read stream {opts.stream!r} over {opts.stream_url}: "
                                     f"{exc} (invalid SQL filter?)") from exc
        batches = StoredBatches(Columns.of(schema, stream), pd.filter_values)
        done = False
        while not done:
            if not chunks and len(batches):  # what came so far, before waiting for more
                while not chunks and client.pump(0):  # but what is there already first: bigger batches
                    pass
                if not chunks:
                    yield from batches.drain()
            if not chunks and not client.pump(opts.timeout):
                raise amqp.ConsumerError(
                    f"reading stream {opts.stream!r} over {opts.stream_url}: nothing came for "
                    f"{opts.timeout:g} s before offset {rng.end} (option timeout; a broker without "
                    f"this broker's {END_OFFSET_PROPERTY} extension never says where a range ends)")
            while chunks:
                done = _rows(chunks.pop(0), rng, batches)
                if len(batches) >= BATCH_ROWS or batches.nbytes >= BATCH_BYTES:
                    yield from batches.drain()
                if done:
                    break
        yield from batches.drain()
    finally:
        client.close()


def _rows(chunk: bytes, rng: OffsetRange, batches: StoredBatches) -> bool:
    """Add the messages of one delivered chunk within the range to ``batches``; whether the
    range is done."""
    if CHUNK_HEADER.unpack_from(chunk)[2] == 0:  # entries: the broker's end-offset chunk
        return True
    h = decode_header(chunk, path="deliver")
    # the data section follows the header; the Bloom filter and the trailer stay on the
    # broker's side (the header still gives their sizes)
    start = CHUNK_HEADER_BYTES
    if len(chunk) < start + h.data_length:
        raise amqp.ConsumerError(f"a delivered chunk of {len(chunk)} bytes is shorter than its header says")
    spans = _record_spans(chunk, start, start + h.data_length, h.records if h.entries == h.records else None)
    if spans is None:  # sub-batches, or bytes decode_records judges
        records = decode_records(chunk[start:start + h.data_length], h.chunk_id,
                                 entries=h.entries if h.entries == h.records else 0)
        count = len(records)
    else:
        count = len(spans[0])
    # records are numbered from the chunk's id, one apart
    skip = max(0, rng.start - h.chunk_id)
    keep = max(0, min(count, rng.end - h.chunk_id) - skip)
    if spans is None:
        batches.extend(h.chunk_id + skip, [data for _, data in records[skip:skip + keep]])
    else:
        batches.extend_spans(h.chunk_id + skip, chunk, spans[0][skip:skip + keep], spans[1][skip:skip + keep])
    return h.chunk_id + h.records >= rng.end


def _record_spans(chunk: bytes, pos: int, end: int, count: int | None = None) -> tuple[Any, Any] | None:
    """(starts, ends) of the simple entries filling ``chunk[pos:end]`` (``record_starts``);
    None when a sub-batch is among them or the sizes do not add up."""
    spans = record_spans(chunk, pos, end, count)
    if spans is not None:
        return spans
    starts = record_starts(chunk, pos, end)
    if starts is None:
        return None
    s = np.array(starts, np.int64)
    e = np.empty_like(s)
    e[:-1] = s[1:] - 4
    e[-1] = end
    return s, e


def record_spans(chunk: bytes, pos: int, end: int, count: int | None = None) -> tuple[Any, Any] | None:
    """``_record_spans`` found by numpy, without a Python step a record; None when not found
    this way (the caller then walks the sizes with ``record_starts``), or not ``count``
    records (the header's), or more than four candidates a record (records that repeat their
    first bytes: the walk is cheaper than ~4 ns a candidate, as for a Publish frame's entries).

    Why: the sizes chain (each record's size says where the next begins), so the walk took a
    ``struct`` call a record, ~0.3 µs (a fifth of the read outside Spark). A writer's records
    begin alike (``00 53 72``: the same first section), so every place where the first
    record's first three bytes recur is a candidate start; those whose 4-byte size before them
    leads exactly to the next candidate, the first at ``pos + 4`` and the last ending at
    ``end``, are the walk's starts (the walk from ``pos`` meets them one after the other). A
    candidate inside a record (the three bytes in a value: an int 21,362 is ``00 00 53 72``)
    is dropped when no candidate's size leads to it; whatever is left must make that chain, or
    it is None (a record that begins otherwise, a sub-batch's flagged size, bytes that do not
    add up), and the walk decides."""
    n = end - pos
    if n < 8 or len(chunk) < end:
        return None
    buf = np.frombuffer(chunk, np.uint8, n, pos)
    b0, b1, b2 = buf[4], buf[5], buf[6]
    # the candidates' second byte at 5..n-2, so that a candidate's three bytes lie within
    q = np.flatnonzero(buf[5:n - 1] == b1) + 5
    r = q[(buf[q - 1] == b0) & (buf[q + 1] == b2)] - 1
    if not len(r) or r[0] != 4 or (count is not None and len(r) > 4 * count):
        return None
    ends = r + np.ndarray((n - 3,), ">u4", chunk, pos, (1,))[r - 4].astype(np.int64)
    walked = chained(r, ends, ends + 4, count)
    if walked is None:
        return None
    r, ends = walked
    if ends[-1] != n or ((ends - r) & 0x80000000).any():
        return None
    return r + pos, ends + pos
