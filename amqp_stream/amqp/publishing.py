"""A publisher link (our receiver): raw transfer bytes in, stored records and outcomes out.

Strategy: no ``proton.Message`` on this path, and no proton wrapper objects either: the server
hands each delivery over as its C pointer (``amqp_stream.amqp.adapter``), and this module uses
proton's C functions on it. The transfer's bytes are read as they arrive
(``pn_link_recv``), delivery annotations are cut out (``amqp_stream.wire``), the filter value is
read from the message annotations, and the bytes go to the stream's writer thread
(``stream.append_batch``, once per reactor turn for all the messages of that turn: the
server calls ``flush`` when the loop is quiet). The writer's ``on_durable`` callback runs on its
own thread, so it only posts to the broker's mailbox; the settlement (``accepted``, or
``rejected`` with a condition) of the whole batch happens back on the event loop. Credit follows
``amqp_stream.amqp.credit.PublisherCredit``.
Pre-settled transfers are appended and forgotten. A delivery waiting for the disk is held with
``pn_incref`` (released after its settlement), as a wrapper would hold it.

Exchanges (``/exchanges/<x>[/<key>]`` targets, and any ``to`` on the anonymous terminus) route
each message through ``amqp_stream.definitions`` as ``rabbit_amqp_session`` does: the message
goes into the batch of every stream it routes to and is accepted when the last of them is
durable (``fan``: rejected if any failed); unroutable, it is ``released``; an exchange gone
under a named link releases the message and detaches the link with ``amqp:not-found``, a
missing exchange or a bad ``to`` on the anonymous terminus rejects the message only. The
``/queues/<stream>`` link keeps its one-stream path: no routing, no section read.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Callable

from cproton import (pn_decref, pn_delivery_aborted, pn_delivery_partial, pn_delivery_pending,
                     pn_delivery_readable, pn_delivery_settle, pn_delivery_settled,
                     pn_delivery_update, pn_incref, pn_link_advance, pn_link_recv)
from proton import Condition, Delivery

from amqp_stream.amqp import addresses
from amqp_stream.amqp.credit import PublisherCredit
from amqp_stream.amqp.tracking import publishing_id
from amqp_stream.errors import (BadRequest, BrokerError, DecodeError, Forbidden, NotFound,
                                Released, SizeExceeded, from_storage)
from amqp_stream.wire import BadFilterValue, MessageFormatError, MessageView, stored_form

__all__ = ["Publisher", "check_exchange_target"]

log = logging.getLogger(__name__)

# batches waiting for the disk: key -> (publisher, unsettled delivery pointers, bytes held);
# event loop only
_batches: dict[int, tuple["Publisher", list, int]] = {}
_batch_keys = itertools.count()


def _batch_durable(key: int, error: Exception | None) -> None:
    """On the event loop: a batch handed to storage is durable (or failed)."""
    publisher, deliveries, held = _batches.pop(key)
    publisher._durable(deliveries, error, held)


def check_exchange_target(definitions: Any, name: str) -> None:
    """``rabbit_amqp_session:check_exchange`` when a link attaches to ``/exchanges/<name>``:
    ``NotFound`` when there is no such exchange, ``Forbidden`` when it is internal."""
    exchange = definitions.exchange(name)
    if exchange is None:
        raise NotFound(f"no exchange '{name}' in vhost '/'")
    if exchange.internal:
        raise Forbidden(f"forbidden to publish to internal exchange '{name}' in vhost '/'")


def routing_headers(view: MessageView) -> dict:
    """What a headers exchange matches (``mc_amqp:routing_headers`` with ``x_headers``): the
    message annotations, then the application properties (which win on a shared key)."""
    headers = {str(k): v for k, v in view.message_annotations.items() if isinstance(k, str)}
    headers.update(view.application_properties)
    return headers


def cc_keys(value: Any) -> list[str]:
    """The ``x-cc`` message annotation: more routing keys (``rabbit_amqp_session:
    lookup_routing_key``); ``BadRequest`` (``amqp:invalid-field``) unless a list of strings."""
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(k, str) for k in value):
        return [str(k) for k in value]
    raise BadRequest(f"bad value for 'x-cc' message-annotation: {value!r}")


ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED
RELEASED = Delivery.RELEASED


class Publisher:
    def __init__(self, link: Any, entry: Any, credit: PublisherCredit, max_message_size: int,
                 post: Callable[..., None], mark_dirty: Callable[["Publisher"], None],
                 lookup: Callable[[str], Any] | None = None,
                 end: Callable[[BrokerError], None] | None = None,
                 throttle: Callable[["Publisher", bool], None] | None = None,
                 reference: str | None = None, target: addresses.Target | None = None,
                 definitions: Any = None, may_write: Callable[[str], None] | None = None):
        self.link = link
        self.link_impl = link._impl
        # streams.StreamEntry; None for the anonymous terminus (a null target address), where
        # each message's ``to`` (/queues/<name>) picks the stream through ``lookup``
        self.entry = entry
        self.lookup = lookup
        # an exchange target (``/exchanges/<x>[/<key>]``; entry None): each message is routed
        # by ``definitions`` (``amqp_stream.definitions.Definitions``), as the anonymous
        # terminus's are
        self.target = target
        self.definitions = definitions
        # may_write(exchange): ``Forbidden`` unless the link's user may write to it (checked
        # per message for an exchange named by ``to`` on the anonymous terminus)
        self.may_write = may_write or (lambda exchange: None)
        # a delivery routed to several streams: pointer -> [batches not yet durable, refusal]
        self.fan: dict[Any, list] = {}
        self.credit = credit
        self.max_message_size = max_message_size
        self.post = post  # thread-safe: run fn(*args) on the event loop
        self.mark_dirty = mark_dirty  # ask for ``flush`` at the end of this reactor turn
        # on_unroutable(presettled): a message routed to no stream (the adapter counts it)
        self.on_unroutable: Callable[[bool], None] = lambda presettled: None
        self.end = end or (lambda error: None)  # the core ends this link (its stream is gone)
        # throttle(self, True): stop reading this link's connection (too many bytes held);
        # throttle(self, False): read it again
        self.throttle = throttle or (lambda publisher, on: None)
        self.throttled = False
        self.closed = False
        # a named publisher (``tracking.PUBLISHER_REFERENCE`` on attach): its messages carry
        # ``x-publishing-id`` and those not above the stream's last stored one are accepted
        # without being stored (``tracking``)
        self.reference = reference
        # the batch being formed, per stream:
        # name -> [entry, bodies, values, unsettled deliveries, bytes held]
        self.batches: dict[str, list] = {}
        # messages arriving in several transfers: delivery pointer -> the bytes so far
        self.partial: dict[Any, bytearray | None] = {}

    def start(self) -> None:
        self.link.flow(self.credit.initial())

    def close(self) -> None:
        """The link is gone: nothing more is read; messages being assembled are dropped (their
        waiting batches are still settled when the disk answers)."""
        self.closed = True
        for buffered in self.partial.values():
            if buffered is not None:
                self.credit.release(len(buffered))
        self.partial.clear()
        self.credit.budget.waiting.pop(self, None)

    def reject(self, impl: Any, refusal: BrokerError) -> None:
        """Settle the delivery at pointer ``impl`` as rejected with the refusal's condition
        (rare: the wrapper is fine here)."""
        delivery = Delivery.wrap(impl)
        delivery.local.condition = Condition(refusal.condition, refusal.description)
        delivery.update(REJECTED)
        delivery.settle()
        if self.entry is not None and self.entry.metrics is not None:
            self.entry.metrics.publish_rejected(refusal.condition)
        log.info("rejected a message on %r: %s %s",
                 self.entry.name if self.entry else "(anonymous terminus)", refusal.condition,
                 refusal.description)

    def on_delivery(self, impl: Any) -> None:
        """A ``PN_DELIVERY`` on this link, given as the delivery's C pointer (one call a message:
        proton's C functions, not a wrapper's properties, which cost a Python call each)."""
        link_impl = self.link_impl
        if pn_delivery_aborted(impl):
            buffered = self.partial.pop(impl, None)
            if buffered:
                self.credit.release(len(buffered))
            pn_delivery_settle(impl)
            pn_link_advance(link_impl)
            return
        if not pn_delivery_readable(impl):
            # an update of a delivery already read (e.g. the client settled it first): the
            # outcome still comes from the writer; nothing to read
            return
        n, data = pn_link_recv(link_impl, pn_delivery_pending(impl))
        if n < 0:  # end of the delivery (or a link error): nothing more to read
            data = b""
        partial = self.partial
        if pn_delivery_partial(impl):
            self._partial(impl, data)
            return
        oversize = n > self.max_message_size
        if partial and impl in partial:  # the last piece of a multi-transfer message
            buffered = partial.pop(impl)
            oversize = buffered is None or len(buffered) + n > self.max_message_size
            if not oversize:
                buffered += data
                data = bytes(buffered)
            elif buffered is not None:
                self.credit.release(len(buffered))
        if not oversize and n > 0:
            self.credit.hold(n)  # held until the disk has the message (or it is dropped)
            if self.credit.over():
                self._throttle()
        pn_link_advance(link_impl)
        presettled = pn_delivery_settled(impl)
        self.credit.received(presettled)
        if presettled:
            pn_delivery_settle(impl)
            if oversize:
                log.info("dropped a pre-settled message larger than %d bytes", self.max_message_size)
            else:
                self._append(None, data)
        elif oversize:
            self.credit.confirmed()
            self.reject(impl, SizeExceeded(f"message larger than the maximum of "
                                           f"{self.max_message_size} bytes"))
        else:
            self._append(impl, data)
        self.top_up()

    def _partial(self, impl: Any, data: Any) -> None:
        """A piece of a message that spans transfers: kept until its last piece (``None``
        once it is over the size limit: keep reading, keep nothing)."""
        partial = self.partial
        if impl in partial:
            buffered = partial[impl]
            if buffered is None:
                return
        else:
            buffered = partial[impl] = bytearray()
        if len(buffered) + len(data) > self.max_message_size:
            self.credit.release(len(buffered))
            partial[impl] = None
        else:
            buffered += data
            self.credit.hold(len(data))
            if self.credit.over():
                self._throttle()

    def _append(self, delivery: Any | None, data: bytes) -> None:
        """Check one message and queue it for this turn's batch (see ``flush``); ``delivery`` is
        the pointer of an unsettled delivery, None for a pre-settled one."""
        held = len(data)
        try:
            body, value = stored_form(data)
        except BadFilterValue as exc:
            self.credit.release(held)
            self._refuse(delivery, BadRequest(str(exc)))
            return
        except MessageFormatError as exc:
            self.credit.release(held)
            self._refuse(delivery, DecodeError(f"not an AMQP 1.0 message: {exc}"))
            return
        pid = None
        if self.reference is not None:
            try:
                pid = publishing_id(body)
            except BrokerError as exc:
                self.credit.release(held)
                self._refuse(delivery, exc)
                return
        entry = self.entry
        entries: Any = (entry,)  # a /queues/<stream> link: its stream, no routing
        if entry is None:
            entries = self._route(delivery, body)
            if not entries:  # refused, released or dropped already
                self.credit.release(held)
                return
            if delivery is not None and len(entries) > 1:
                self.fan[delivery] = [len(entries), None]
        for entry in entries:
            batch = self.batches.get(entry.name)
            if batch is None:
                if not self.batches:
                    self.mark_dirty(self)
                batch = self.batches[entry.name] = [entry, [], [], [], 0, []]
            batch[1].append(body)
            batch[2].append(value)
            batch[4] += held
            held = 0  # the bytes are held once, by the first batch
            if pid is not None:
                batch[5].append(pid)
            if delivery is not None:
                pn_incref(delivery)  # released in _settle_all
                batch[3].append(delivery)

    def _refuse(self, delivery: Any | None, refusal: BrokerError) -> None:
        if delivery is not None:
            self.credit.confirmed()
            self.reject(delivery, refusal)
        else:
            log.info("dropped a pre-settled message: %s %s", refusal.condition, refusal.description)

    def _route(self, delivery: Any | None, body: bytes) -> list:
        """The streams a message of an exchange link or the anonymous terminus goes to, as
        ``rabbit_amqp_session:lookup_target`` and ``rabbit_exchange:route``; empty when the
        message has been answered here (refused, released) instead."""
        target = self.target
        anonymous = target is None
        if target is None:
            target = self._anonymous_target(delivery, body)
            if target is None:
                return []
        names: list[str] | None = [target.stream] if target.stream is not None else (
            self._exchange_route(delivery, body, target, anonymous))  # /queues/<s>: to s
        if names is None:
            return []
        lookup = self.lookup or (lambda name: None)
        entries = [e for e in map(lookup, names) if e is not None]
        if not entries:
            self.on_unroutable(delivery is None)
            self._release(delivery)
        return entries

    def _anonymous_target(self, delivery: Any | None, body: bytes) -> addresses.Target | None:
        """The message's ``to`` (None: refused here)."""
        try:
            to = MessageView.from_bytes(body).properties.get("to")
        except (MessageFormatError, ValueError) as exc:
            self._refuse(delivery, DecodeError(f"cannot read the properties: {exc}"))
            return None
        try:
            return addresses.anonymous_target(to)
        except BrokerError as exc:
            self._refuse(delivery, exc)
            return None

    def _exchange_route(self, delivery: Any | None, body: bytes, target: addresses.Target,
                        anonymous: bool) -> list[str] | None:
        """The streams exchange ``target.exchange`` routes the message to (None: answered
        here). A refusal rejects the message on the anonymous terminus; on an exchange link
        (the exchange deleted, a bad ``x-cc``) it releases the message and detaches the link,
        as ``rabbit_amqp_session`` does."""
        definitions = self.definitions
        try:
            if anonymous:
                check_exchange_target(definitions, target.exchange)
                self.may_write(target.exchange)
            if b"x-cc" not in body:  # the common case: no section is decoded unless a
                # headers exchange asks for the application properties
                return definitions.route(target.exchange, target.routing_key,
                                         lambda: routing_headers(MessageView.from_bytes(body)))
            view = MessageView.from_bytes(body)
            names: list[str] = []
            for key in [target.routing_key, *cc_keys(view.message_annotations.get("x-cc"))]:
                names += definitions.route(target.exchange, key, lambda: routing_headers(view))
            return list(dict.fromkeys(names))
        except BrokerError as exc:
            if anonymous:
                self._refuse(delivery, exc)
            else:
                self._release(delivery)
                self.end(exc)
            return None
        except (MessageFormatError, ValueError) as exc:
            self._refuse(delivery, DecodeError(f"cannot read the message: {exc}"))
            return None

    def _release(self, delivery: Any | None) -> None:
        """An unroutable message: ``released`` (RabbitMQ's answer; pre-settled: dropped)."""
        if delivery is None:
            log.debug("dropped a pre-settled message that routes to no stream")
            return
        self.credit.confirmed()
        pn_delivery_update(delivery, RELEASED)
        pn_delivery_settle(delivery)

    def flush(self) -> None:
        """Hand this turn's messages to the writer thread, one ``append_batch`` per stream; one
        ``on_durable`` callback settles a whole batch (called once per reactor turn)."""
        batches = self.batches
        if not batches:
            return
        self.batches = {}
        for entry, bodies, values, waiting, held, pids in batches.values():
            self._flush_one(entry, bodies, values, waiting, held, pids)

    def _flush_one(self, entry: Any, bodies: list, values: list, waiting: list,
                   held: int, pids: list) -> None:
        # The callback runs on the writer thread and is dropped there: it must hold no proton
        # object (a wrapper freed on that thread would decref a C object while the event loop
        # uses proton). It holds a number; the loop maps it back. Pre-settled batches have one
        # too: their bytes are held until the disk has them.
        key = next(_batch_keys)
        _batches[key] = (self, waiting, held)
        post = self.post
        metrics, confirm = entry.metrics, len(waiting)  # RabbitMQ's global counters, per batch
        if metrics is not None:
            metrics.received(len(bodies), confirm)

        def callback(offset: int, error: Exception | None, key: int = key) -> None:
            if error is None and confirm and metrics is not None:
                metrics.confirmed(confirm)
            post(_batch_durable, key, error)
        try:
            entry.append(self.reference, bodies, pids, values, callback)
        except Exception as exc:  # storage refused (closed, writer failed, disk full)
            refusal = from_storage(exc)
            _batches.pop(key, None)
            self._release_bytes(held)
            self.credit.confirmed(self._settle_all(waiting, refusal))
            if len(waiting) < len(bodies):
                log.warning("dropped %d pre-settled messages: %s", len(bodies) - len(waiting), exc)
            self.top_up()
            return

    def _durable(self, deliveries: list, error: Exception | None, held: int) -> None:
        """On the event loop: the writer thread says a batch is durable (or failed)."""
        self._release_bytes(held)
        self.credit.confirmed(self._settle_all(deliveries,
                                               None if error is None else from_storage(error)))
        if not self.closed:
            self.top_up()

    def _settle_all(self, deliveries: list, refusal: BrokerError | None) -> int:
        """Accept (``refusal`` None) or reject a batch's deliveries, and release them. A
        closed link's deliveries are only settled: there is no one to tell. A delivery
        routed to several streams is settled with its last batch (rejected if any batch
        failed). Returns how many deliveries were settled."""
        if not self.fan:
            return self._settle(deliveries, refusal)
        deliveries, refused = self._fanned_in(deliveries, refusal)
        for impl, why in refused:  # an earlier batch of it failed
            self._settle([impl], why)
        return len(refused) + self._settle(deliveries, refusal)

    def _settle(self, deliveries: list, refusal: BrokerError | None) -> int:
        if self.closed:
            for impl in deliveries:
                pn_delivery_settle(impl)
                pn_decref(impl)
        elif refusal is None:
            for impl in deliveries:
                pn_delivery_update(impl, ACCEPTED)
                pn_delivery_settle(impl)
                pn_decref(impl)
        elif isinstance(refusal, Released):  # no one took it: the client may send it again
            log.info("released %d message(s) on %r: %s", len(deliveries),
                     self.entry.name if self.entry else "(anonymous terminus)", refusal.description)
            for impl in deliveries:
                pn_delivery_update(impl, RELEASED)
                pn_delivery_settle(impl)
                pn_decref(impl)
        else:
            for impl in deliveries:
                self.reject(impl, refusal)
                pn_decref(impl)
        return len(deliveries)

    def _fanned_in(self, deliveries: list,
                   refusal: BrokerError | None) -> tuple[list, list[tuple[Any, BrokerError]]]:
        """Of a batch's deliveries, those to settle now: a fanned-out one only with its last
        batch (the others release their reference here). Returns (to settle with
        ``refusal``, [(delivery, the refusal of an earlier batch of it)])."""
        fan = self.fan
        done: list = []
        refused: list = []
        for impl in deliveries:
            state = fan.get(impl)
            if state is None:
                done.append(impl)
                continue
            state[0] -= 1
            if refusal is not None and state[1] is None:
                state[1] = refusal
            if state[0]:
                pn_decref(impl)
                continue
            del fan[impl]
            if state[1] is not None and refusal is None:
                refused.append((impl, state[1]))
            else:
                done.append(impl)
        return done, refused

    def _throttle(self) -> None:
        """Too many bytes held (this link, or the broker): stop reading until they are on disk."""
        if not self.throttled and not self.closed:
            self.throttled = True
            self.throttle(self, True)
        if self.credit.budget.over:
            self.credit.budget.waiting[self] = self._recheck

    def _release_bytes(self, held: int) -> None:
        self.credit.release(held)
        self._recheck()

    def _recheck(self) -> None:
        if self.throttled and not self.credit.over():
            self.throttled = False
            if not self.closed:
                self.throttle(self, False)
                self.top_up()
        elif self.throttled and self.credit.budget.over:
            self.credit.budget.waiting[self] = self._recheck

    def top_up(self) -> None:
        if self.closed:
            return
        more = self.credit.top_up(self.link.credit)
        if more:
            self.link.flow(more)

