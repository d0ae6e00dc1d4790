"""Consuming a stream with explicit credit: ``Consumer``, ``StreamMessage``, ``build_filters``.

Strategy: the consumer attaches ``/queues/<name>`` with the stream source filters as described
values, reads back the filter set the broker echoed (``accepted_filters``, ``missing_filters``)
and manages credit itself: ``receive`` keeps a window of credit open, ``drain`` asks the broker to
use up the credit now, which is how ``read_available`` detects the current end of the stream.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NoReturn, Sequence

from proton import Delivery, Described, Endpoint, Link, Message, ProtonException, Timeout, symbol, timestamp
from proton.utils import BlockingReceiver, LinkDetached

from amqp_stream.client.errors import ClientError, ConsumerError, StreamNotFound
from amqp_stream.client.links import _Collector, _condition_text, _LinkOpts, queue_address
from amqp_stream.client.names import (_SQL_FILTER_KEY, _ZERO_IS_ABSENT, APPLICATION_PROPERTIES_FILTER,
                                      CHUNK_TIMESTAMP, CONSUMER_NAME, FILTER_VALUE, MATCH_UNFILTERED, OFFSET_SPEC,
                                      PROPERTIES_FILTER, PROPERTY_NAMES, SQL_FILTER, STREAM_FILTER,
                                      STREAM_OFFSET)

if TYPE_CHECKING:
    from amqp_stream.client.connection import Client

__all__ = ["Consumer", "StreamMessage", "build_filters", "offset_value"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _described(name: str, value: Any) -> Described:
    return Described(symbol(name), value)


def offset_value(offset: Any) -> Any:
    """An offset spec as sent: ``first``/``last``/``next``/interval string, int, datetime."""
    if isinstance(offset, bool):
        raise ValueError("offset must be first/last/next, an interval, an int or a datetime")
    if isinstance(offset, int):
        if offset < 0:
            raise ValueError("offset must be >= 0")
        return offset
    if isinstance(offset, _dt.datetime):
        if offset.tzinfo is None:
            offset = offset.replace(tzinfo=_dt.timezone.utc)
        return timestamp((offset - _EPOCH) // _dt.timedelta(milliseconds=1))  # exact, no float
    if isinstance(offset, str):
        text = offset.strip()
        return int(text) if text.isdigit() else text
    raise ValueError(f"unsupported offset spec {offset!r}")


def build_filters(*, offset: Any = "first", filter_values: str | Sequence[str] | None = None,
                  match_unfiltered: bool = False, sql: str | None = None,
                  properties: Mapping[str, Any] | None = None,
                  application_properties: Mapping[str, Any] | None = None) -> dict:
    """The source filter map (symbol key -> described value) for a stream consumer."""
    f: dict = {}
    if offset is not None:
        f[symbol(OFFSET_SPEC)] = _described(OFFSET_SPEC, offset_value(offset))
    if filter_values is not None:
        values = [filter_values] if isinstance(filter_values, str) else [str(v) for v in filter_values]
        if values:
            f[symbol(STREAM_FILTER)] = _described(STREAM_FILTER, values[0] if len(values) == 1 else values)
    if match_unfiltered:
        f[symbol(MATCH_UNFILTERED)] = _described(MATCH_UNFILTERED, True)
    if sql is not None and (properties or application_properties):
        raise ValueError("a link has one kind of stage-2 filter: SQL or property filters, not both")
    if sql is not None:
        f[symbol(_SQL_FILTER_KEY)] = _described(SQL_FILTER, sql)
    if properties:
        f[symbol(PROPERTIES_FILTER)] = _described(
            PROPERTIES_FILTER, {symbol(k.replace("_", "-")): v for k, v in properties.items()})
    if application_properties:
        f[symbol(APPLICATION_PROPERTIES_FILTER)] = _described(
            APPLICATION_PROPERTIES_FILTER, dict(application_properties))
    return f


@dataclass
class StreamMessage:
    """A delivered message: ``offset`` from ``x-stream-offset``, the sections decoded."""

    offset: int | None
    body: Any
    filter_value: str | None = None
    properties: dict = field(default_factory=dict)
    application_properties: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    message: Message | None = None
    delivery: Any = field(default=None, compare=False, repr=False)  # unsettled: a named consumer's

    @property
    def chunk_timestamp(self) -> int | None:
        """``x-stream-chunk-timestamp`` (ms) when the broker adds it; otherwise None."""
        v = self.annotations.get(CHUNK_TIMESTAMP)
        return int(v) if v is not None else None

    @classmethod
    def from_message(cls, msg: Message) -> "StreamMessage":
        ann = {str(k): v for k, v in (msg.annotations or {}).items()}
        props = {}
        for key, attr in PROPERTY_NAMES.items():
            v = getattr(msg, attr)
            # proton reports absent fields as empty/zero values (and content types as 'None')
            if v is None or v == "" or v == b"" or (v == 0 and key in _ZERO_IS_ABSENT):
                continue
            if key in ("content_type", "content_encoding") and str(v) == "None":
                continue
            props[key] = bytes(v) if isinstance(v, memoryview) else v
        off = ann.get(STREAM_OFFSET)
        fv = ann.get(FILTER_VALUE)
        body = msg.body
        if isinstance(body, memoryview):
            body = bytes(body)
        return cls(offset=int(off) if off is not None else None, body=body,
                   filter_value=str(fv) if fv is not None else None, properties=props,
                   application_properties=dict(msg.properties or {}), annotations=ann, message=msg)


class Consumer:
    """A stream consumer with explicit credit.

    ``accepted_filters`` is the filter map the broker echoed (``None`` when it echoed none);
    ``missing_filters`` the keys asked for but left out, so a tool can warn or detach.
    ``receive(timeout)`` returns the next ``StreamMessage`` or ``None`` on timeout, keeping up to
    ``credit`` messages in flight. The link asks for pre-settled deliveries: reading a stream
    consumes nothing, so a disposition per message would only cost both sides. With
    ``consumer_name`` the link is a named consumer (the broker's tracking extension): it starts
    after the offset stored for that name, and each message stays unsettled until
    ``accept(message)``. ``read_available()`` yields what is committed now and stops
    at the current end of the stream (found with drain).
    """

    def __init__(self, client: Client, stream: str, filters: dict, *, credit: int = 256,
                 name: str | None = None, consumer_name: str | None = None):
        if credit < 1:
            raise ValueError("credit must be >= 1")
        self.client, self.stream, self.credit = client, stream, credit
        self.address = queue_address(stream)
        self.requested_filters = filters
        self.consumer_name = consumer_name
        # a named consumer's deliveries wait for ``accept``: the broker stores what was accepted
        self._handler = _Collector(client, settle=consumer_name is None)
        props = {symbol(CONSUMER_NAME): consumer_name} if consumer_name is not None else None
        with client.lock:
            conn = client.live()
            link = conn.container.create_receiver(
                client.engine(), self.address, name=name or client._name("consumer"), handler=self._handler,
                options=_LinkOpts(snd_settle=Link.SND_SETTLED if consumer_name is None
                                  else Link.SND_UNSETTLED, source_filter=filters or None,
                                  properties=props))
            try:
                self._receiver = BlockingReceiver(conn, link, None, credit=0)
            except LinkDetached as exc:
                self._refused(str(exc), exc.condition)
            except ProtonException as exc:
                # the broker attached with a null source and may detach with a condition
                try:
                    conn.wait(lambda: link.state & Endpoint.REMOTE_CLOSED, timeout=2)
                except ProtonException:
                    pass
                cond = link.remote_condition
                self._refused(f"{exc} ({_condition_text(cond)})", getattr(cond, "name", None))
            self.link = link
            self.accepted_filters = self._echoed()

    def _refused(self, why: str, condition: str | None) -> NoReturn:
        if condition == "amqp:not-found":
            raise StreamNotFound(f"stream {self.stream!r} not found: {why}", 404)
        raise ConsumerError(f"cannot consume stream {self.stream!r}: {why}", condition)

    def _echoed(self) -> dict | None:
        data = self.link.remote_source.filter
        data.rewind()
        if data.next() is None:
            return None
        obj = data.get_object()
        return dict(obj) if isinstance(obj, dict) else None

    @property
    def missing_filters(self) -> list[str]:
        """Filter keys the broker did not put in place (compared with what was asked)."""
        got = {str(k) for k in (self.accepted_filters or {})}
        return [str(k) for k in self.requested_filters if str(k) not in got]

    def _top_up(self) -> None:
        outstanding = self.link.credit + len(self._handler.items)
        if outstanding <= self.credit // 2:
            self.link.flow(self.credit - outstanding)

    def _pop(self) -> StreamMessage:
        msg, d = self._handler.items.popleft()
        m = StreamMessage.from_message(msg)
        if not d.settled:
            m.delivery = d
        return m

    def accept(self, message: StreamMessage) -> None:
        """A named consumer is done with ``message``: settle it ``accepted`` (the broker stores
        the highest offset accepted as this name's, and the name resumes after it)."""
        d = message.delivery
        if d is None:
            return
        with self.client.lock:
            if not d.settled:
                d.update(Delivery.ACCEPTED)
                d.settle()
            message.delivery = None

    def receive(self, timeout: float | None = None) -> StreamMessage | None:
        """The next message, or ``None`` after ``timeout`` seconds (default: the client's)."""
        with self.client.lock:
            h = self._handler
            if not h.items:
                h.raise_error()
                self._top_up()
                try:
                    self.client.live().wait(lambda: bool(h.items) or h.error is not None,
                                            timeout=self.client.timeout if timeout is None else timeout)
                except Timeout:
                    return None
                except ProtonException as exc:
                    raise ConsumerError(f"consuming stream {self.stream!r}: {exc}",
                                        getattr(exc, "condition", None)) from exc
                h.raise_error()
            m = self._pop()
            self._top_up()
            return m

    def drain(self, timeout: float | None = None) -> int:
        """Ask the broker to use up the credit now (at most ``credit``); returns how many
        messages are buffered afterwards. 0 means the end of the stream was reached."""
        with self.client.lock:
            h = self._handler
            want = max(self.credit - self.link.credit - len(h.items), 0)
            self.link.drain(want)
            try:
                self.client.wait(lambda: self.link.credit == 0 or h.error is not None, timeout,
                                 f"drain of {self.stream!r}")
            except ClientError as exc:
                raise ConsumerError(f"consuming stream {self.stream!r}: {exc}", exc.condition) from exc
            finally:
                self.link.drain_mode = False
            h.raise_error()
            return len(h.items)

    def read_available(self, end: int | None = None, timeout: float | None = None) -> Iterator[StreamMessage]:
        """Yield messages until the current end of the stream (or the first offset >= ``end``).

        The lock is not held while the caller works on a yielded message.
        """
        items = self._handler.items
        while True:
            with self.client.lock:
                if not items and self.drain(timeout) == 0:
                    return
                batch = [self._pop() for _ in range(len(items))]
            for m in batch:
                if end is not None and m.offset is not None and m.offset >= end:
                    return
                yield m

    def close(self) -> None:
        with self.client.lock:
            try:
                if not (self.link.state & Endpoint.LOCAL_CLOSED):
                    self._receiver.close()
            except Exception:
                pass

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.client.leave(exc_type, self.close)
