"""Publishing with a bounded window of unsettled deliveries: ``Publisher``, ``Outcome``,
``build_message``.

Strategy: ``publish`` only blocks when the window is full. Outcomes are collected in publish
order; ``flush`` waits for all of them and raises ``PublishError`` if any was not accepted.
Connection loss and timeouts also raise ``PublishError``, naming how many messages are
unconfirmed (an at-least-once caller retries them all). ``presettled=True`` sends
fire-and-forget. A named publisher (``reference``) numbers its messages with strictly
increasing publishing ids, and the broker drops (accepts without storing) any message whose id
is not above the last one it stored for that reference: a retry after a lost connection resends
everything unconfirmed without storing it twice.
"""

from __future__ import annotations

import datetime as _dt
from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from proton import Delivery, Endpoint, Link, Message, ProtonException, symbol, ulong
from proton.utils import LinkDetached

from amqp_stream.client.errors import ClientError, PublishError, StreamNotFound
from amqp_stream.client.links import _Collector, _condition_text, _LinkOpts, exchange_address, queue_address
from amqp_stream.client.names import (_TIME_PROPERTIES, FILTER_VALUE, PROPERTY_NAMES, PUBLISHER_REFERENCE,
                                      PUBLISHING_ID)

if TYPE_CHECKING:
    from amqp_stream.client.connection import Client

__all__ = ["Outcome", "Publisher", "build_message"]



@dataclass(frozen=True)
class Outcome:
    """The broker's answer to one published message: ``state`` is accepted/rejected/released/
    modified (or ``presettled``); ``seq`` the publish sequence number within the publisher."""

    seq: int
    state: str
    condition: str | None = None
    message_id: Any = None

    @property
    def accepted(self) -> bool:
        return self.state in ("accepted", "presettled")


_STATES: dict[int, str] = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
                           Delivery.RELEASED: "released", Delivery.MODIFIED: "modified"}


def build_message(body: Any, *, properties: Mapping[str, Any] | None = None,
                  application_properties: Mapping[str, Any] | None = None,
                  filter_value: str | None = None, message_id: Any = None,
                  annotations: Mapping[str, Any] | None = None, durable: bool | None = None) -> Message:
    """A ``proton.Message``: ``bytes`` bodies go in a data section, anything else in amqp-value.

    ``properties`` use the snake names of ``PROPERTY_NAMES``; time properties take a
    ``datetime`` or seconds since the epoch.
    """
    msg = Message(body=body, inferred=isinstance(body, (bytes, bytearray, memoryview)))
    if isinstance(body, (bytearray, memoryview)):
        msg.body = bytes(body)
    for key, value in (properties or {}).items():
        attr = PROPERTY_NAMES.get(key)
        if attr is None:
            raise ValueError(f"unknown AMQP property {key!r}; known: {', '.join(PROPERTY_NAMES)}")
        if value is None:
            continue
        if key in _TIME_PROPERTIES and isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            value = value.timestamp()
        setattr(msg, attr, value)
    if message_id is not None:
        msg.id = message_id
    if application_properties:
        # proton's Message.__init__ assigns None to properties unannotated, so its stubs type
        # the attribute as None only; the encoder takes a dict here
        msg.properties = dict(application_properties)  # type: ignore[assignment]
    ann: dict[str | int, Any] = {symbol(k): v for k, v in (annotations or {}).items()}
    if filter_value is not None:
        ann[symbol(FILTER_VALUE)] = str(filter_value)
    if ann:
        msg.annotations = ann
    if durable is not None:
        msg.durable = durable
    return msg


class Publisher:
    """Publishes to one stream with a bounded window of unsettled deliveries.

    ``publish`` returns the message's sequence number (0, 1, ...); it blocks only while
    ``window`` messages are unsettled. ``flush`` waits until every message has an outcome and
    returns the outcomes since the previous flush, raising ``PublishError`` if any was not
    accepted. With ``presettled`` the broker sends no outcomes; ``flush`` then only makes sure
    the bytes were written to the socket.

    With a ``reference`` (1..255 bytes of UTF-8) the link is a named publisher: every ``send``
    gives a ``publishing_id`` above the previous one (``Client.publisher_sequence`` tells the
    last one the broker stored for the reference).
    """

    def __init__(self, client: Client, stream: str, *, window: int = 256, presettled: bool = False,
                 timeout: float | None = None, reference: str | None = None,
                 routing_key: str | None = None):
        if window < 1:
            raise ValueError("window must be >= 1")
        if reference is not None and not 0 < len(reference.encode("utf-8")) <= 255:
            raise ValueError(f"a publisher reference is 1..255 bytes of UTF-8, got {reference!r}")
        self.client, self.stream, self.window, self.presettled = client, stream, window, presettled
        self.reference = reference
        self._last_id = -1
        self.timeout = client.timeout if timeout is None else timeout
        if routing_key is None:
            self.address, self.target = queue_address(stream), f"stream {stream!r}"
        else:  # ``stream`` names an exchange
            self.address, self.target = exchange_address(stream, routing_key), f"exchange {stream!r}"
        self._seq = 0
        self._pending: deque[tuple[int, Delivery, Any]] = deque()
        self._done: list[Outcome] = []
        self.accepted = 0
        self.failed: list[Outcome] = []
        with client.lock:
            try:
                # Own handler: a detach of this link is noted here and raised by this
                # publisher, not by whatever else the connection is waiting for.
                self._watch = _Collector(client)
                self._sender = client.live().create_sender(
                    self.address, name=client._name("publisher"), handler=self._watch,
                    options=_LinkOpts(snd_settle=Link.SND_SETTLED if presettled else Link.SND_UNSETTLED,
                                      properties={symbol(PUBLISHER_REFERENCE): reference} if reference else None))
            except LinkDetached as exc:
                cls = StreamNotFound if exc.condition == "amqp:not-found" else PublishError
                raise (cls(f"cannot publish to {self.target}: {exc}", 404) if cls is StreamNotFound
                       else PublishError(f"cannot publish to {self.target}: {exc}", condition=exc.condition)) from exc
            except ProtonException as exc:
                raise PublishError(f"cannot publish to {self.target}: {exc}") from exc
        self.link = self._sender.link

    @property
    def unsettled(self) -> int:
        return len(self._pending)

    @property
    def sent(self) -> int:
        """Messages numbered for sending: never fewer than went to the link (a count the
        caller keeps after ``send`` returns misses one when a Ctrl-C lands in between, and
        the broker may store it), at most one more (numbered, not yet sent)."""
        return self._seq

    def publish(self, body: Any, *, properties: Mapping[str, Any] | None = None,
                application_properties: Mapping[str, Any] | None = None,
                filter_value: str | None = None, message_id: Any = None,
                annotations: Mapping[str, Any] | None = None, publishing_id: int | None = None) -> int:
        """Build and send one message (see ``build_message``); returns its sequence number."""
        return self.send(build_message(body, properties=properties, application_properties=application_properties,
                                       filter_value=filter_value, message_id=message_id, annotations=annotations),
                         publishing_id)

    def _next_seq(self) -> int:
        """Wait for room in the window on a live link, then number the next message (the
        caller holds the client's lock)."""
        if len(self._pending) >= self.window:
            self._wait(lambda: self._collect() < self.window, "publish window")
        self._check_link()
        seq = self._seq
        self._seq += 1
        return seq

    def send(self, message: Message, publishing_id: int | None = None) -> int:
        """Send a prepared ``proton.Message``; returns its sequence number. A named publisher
        gives each message a ``publishing_id`` above the previous one (set as the message's
        ``x-publishing-id`` annotation)."""
        self._next_id(publishing_id)
        if publishing_id is not None:
            annotations = dict(message.annotations or {})
            annotations[symbol(PUBLISHING_ID)] = ulong(publishing_id)
            message.annotations = annotations
        with self.client.lock:
            seq = self._next_seq()
            try:
                # a Message goes as one Delivery (proton's int is for raw bytes)
                delivery = cast(Delivery, self.link.send(message))
            except ProtonException as exc:
                raise self._lost(str(exc)) from exc
            if self.presettled:
                self._done.append(Outcome(seq, "presettled", message_id=message.id))
                self.accepted += 1
            else:
                self._pending.append((seq, delivery, message.id))
            return seq

    def send_encoded(self, data: bytes, publishing_id: int | None = None) -> int:
        """Send a message already encoded as AMQP sections (no ``proton.Message`` is built:
        ~75 µs a message saved). A named publisher's message must carry its ``publishing_id``
        as the ``x-publishing-id`` annotation already (the broker reads it from there); here the
        id is only checked to be above the previous one. Returns the sequence number."""
        self._next_id(publishing_id)
        with self.client.lock:
            seq = self._next_seq()
            link = self.link
            try:
                delivery = link.delivery(link.delivery_tag())
                link.stream(data)
                link.advance()
            except ProtonException as exc:
                raise self._lost(str(exc)) from exc
            if self.presettled:
                delivery.settle()
                self._done.append(Outcome(seq, "presettled"))
                self.accepted += 1
            else:
                self._pending.append((seq, delivery, None))
            return seq

    def _next_id(self, publishing_id: int | None) -> None:
        if self.reference is not None:
            if publishing_id is None or not self._last_id < publishing_id < 1 << 64:
                raise ValueError(f"publisher {self.reference!r}: publishing ids must strictly increase "
                                 f"within 0..2**64-1 (last {self._last_id}, got {publishing_id})")
            self._last_id = publishing_id
        elif publishing_id is not None:
            raise ValueError("a publishing id needs a publisher with a reference")

    def _collect(self) -> int:
        """Move deliveries that have an outcome (in publish order) from pending to done."""
        pending = self._pending
        while pending:
            seq, d, mid = pending[0]
            state = d.remote_state
            if not (d.settled or state in _STATES):
                break
            pending.popleft()
            name = _STATES.get(state, "accepted" if d.settled and state == 0 else f"state-{state}")
            cond = None
            if name != "accepted":
                cond = _condition_text(d.remote.condition) if d.remote.condition else None
            out = Outcome(seq, name, cond, mid)
            if name == "accepted":
                self.accepted += 1
            else:
                self.failed.append(out)
            self._done.append(out)
            d.settle()
        return len(pending)

    def _check_link(self) -> None:
        if self.link.state & Endpoint.REMOTE_CLOSED:
            raise self._lost(f"the broker detached the publisher: {_condition_text(self.link.remote_condition)}",
                             getattr(self.link.remote_condition, "name", None))

    def _lost(self, why: str, condition: str | None = None) -> PublishError:
        return PublishError(f"publishing to {self.target} failed: {why}; {len(self._pending)} message(s) "
                            f"unconfirmed, {self.accepted} accepted", self._done, len(self._pending), condition)

    def _wait(self, cond: Callable[[], Any], what: str) -> None:
        try:
            self.client.wait(lambda: cond() or bool(self.link.state & Endpoint.REMOTE_CLOSED),
                             self.timeout, what)
        except ClientError as exc:
            raise self._lost(str(exc), exc.condition) from exc
        self._collect()
        self._check_link()

    def flush(self, *, check: bool = True) -> list[Outcome]:
        """Wait for the outcome of every message sent; return those since the last flush.

        Raises ``PublishError`` (with all outcomes) if ``check`` and any message was not accepted.
        """
        with self.client.lock:
            if self.presettled:
                # Nothing to wait for but the socket: let the loop write what is buffered.
                transport = self.client.engine().transport
                self._wait(lambda: self.link.queued == 0 and (transport is None or transport.pending() <= 0),
                           "writing pre-settled messages")
            elif self._pending:
                self._wait(lambda: self._collect() == 0, "outcomes")
            done, self._done = self._done, []
        bad = [o for o in done if not o.accepted]
        if check and bad:
            first = bad[0]
            raise PublishError(f"{len(bad)} of {len(done)} message(s) to {self.target} not accepted; "
                               f"first: #{first.seq} {first.state} ({first.condition or 'no condition'})",
                               done, 0, first.condition)
        return done

    wait = flush

    def close(self) -> None:
        with self.client.lock:
            try:
                if not (self.link.state & Endpoint.LOCAL_CLOSED):
                    self._sender.close()
            except Exception:
                pass

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.client.leave(exc_type, self.close)


# ---------------------------------------------------------------------------------------------
# consuming
