"""A minimal in-memory AMQP 1.0 broker on proton: the ceiling for ``bench.broker``.

Why: the real broker's throughput is bounded by proton and Python before anything of ours runs.
This broker does only what cannot be avoided: it accepts a transfer, appends its bytes to a list
per address and settles it as accepted at once (no storage, no fsync, no filter value, no
management node); it delivers a list's bytes to a receiver from the start, as credit allows, and
honours drain. Publishers get the same credit as from the real broker (170, topped up when half is
used), and deliveries reach it the way they reach the real broker (as C pointers, through
``bench.event_shortcut``), so the two differ only in what happens to a message. Measured
in the same run with the same client, it says how close the real broker comes to what proton in
Python can do at all.

    python -m bench.inmemory_broker --port 5673
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections import defaultdict

from cproton import (pn_delivery, pn_delivery_link, pn_delivery_partial, pn_delivery_pending,
                     pn_delivery_readable, pn_delivery_remote_state, pn_delivery_settle,
                     pn_delivery_settled, pn_delivery_update, pn_link_advance, pn_link_credit,
                     pn_link_flow, pn_link_is_sender, pn_link_recv, pn_link_send)
from proton import Delivery, Endpoint, Handler, Link
from proton.reactor import Container

from bench import event_shortcut

__all__ = ["InMemoryBroker", "main"]

_ACTIVE = Endpoint.REMOTE_ACTIVE
ACCEPTED = Delivery.ACCEPTED


class InMemoryBroker(Handler):
    """Every address is a list of encoded messages; receivers read it from offset 0."""

    def __init__(self, host: str, port: int, credit: int = 170):
        super().__init__()
        self.url = f"{host}:{port}"
        self.credit = credit
        self.queues: dict[str, list[bytes]] = defaultdict(list)
        self.positions: dict[Link, int] = {}
        self.waiting: dict[str, set[Link]] = defaultdict(set)
        self.addresses: dict = {}  # receiver link pointer -> its address

    def on_reactor_init(self, event) -> None:
        event.container.listen(self.url)

    def on_connection_bound(self, event) -> None:
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        event.transport.require_auth(False)

    def on_connection_remote_open(self, event) -> None:
        event.connection.container = "inmemory-broker"
        event.connection.open()

    def on_session_remote_open(self, event) -> None:
        event.session.open()

    def on_link_remote_open(self, event) -> None:
        link = event.link
        if link.is_receiver:
            link.target.address = link.remote_target.address
            self.addresses[link._impl] = link.target.address  # set anew for a reused pointer
            link.open()
            link.flow(self.credit)
        else:
            address = link.remote_source.address
            link.source.address = address
            link.open()
            self.positions[link] = 0
            self.waiting[address].add(link)

    def on_link_remote_close(self, event) -> None:
        link = event.link
        self.positions.pop(link, None)
        if link.is_sender:
            self.waiting[link.source.address].discard(link)
        link.close()

    def on_session_remote_close(self, event) -> None:
        event.session.close()

    def on_connection_remote_close(self, event) -> None:
        for link in list(self.positions):
            if link.connection is event.connection:
                self.positions.pop(link, None)
                self.waiting[link.source.address].discard(link)
        event.connection.close()

    def on_transport_closed(self, event) -> None:
        if event.connection is not None:
            for link in list(self.positions):
                if link.connection is event.connection:
                    self.positions.pop(link, None)
                    self.waiting[link.source.address].discard(link)

    def take(self, impl) -> bool:
        """Every ``PN_DELIVERY``, as the delivery's C pointer (``bench.event_shortcut``,
        as the real broker gets them), handled with proton's C functions, so that the two
        brokers differ only in what happens to a message."""
        link_impl = pn_delivery_link(impl)
        if not pn_link_is_sender(link_impl):
            if not pn_delivery_readable(impl) or pn_delivery_partial(impl):
                return True
            _, data = pn_link_recv(link_impl, pn_delivery_pending(impl))
            pn_link_advance(link_impl)
            address = self.addresses[link_impl]
            self.queues[address].append(bytes(data))
            if not pn_delivery_settled(impl):
                pn_delivery_update(impl, ACCEPTED)
            pn_delivery_settle(impl)
            credit = pn_link_credit(link_impl)
            if credit <= self.credit // 2:
                pn_link_flow(link_impl, self.credit - credit)
            for consumer in self.waiting.get(address, ()):
                if consumer.credit > 0:
                    self._pump(consumer)
        elif pn_delivery_settled(impl) or pn_delivery_remote_state(impl):
            pn_delivery_settle(impl)
        return True

    def on_link_flow(self, event) -> None:
        if event.link.is_sender and event.link in self.positions:
            self._pump(event.link)

    def _pump(self, link: Link) -> None:
        queue = self.queues[link.source.address]
        position = self.positions[link]
        presettled = link.snd_settle_mode == Link.SND_SETTLED
        impl = link._impl
        end = min(len(queue), position + pn_link_credit(impl))
        while position < end:
            delivery = pn_delivery(impl, position.to_bytes(8, "big"))
            pn_link_send(impl, queue[position])
            pn_link_advance(impl)
            if presettled:
                pn_delivery_settle(delivery)
            position += 1
        self.positions[link] = position
        if link.drain_mode and link.credit > 0:
            link.drained()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inmemory_broker", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5673)
    parser.add_argument("--credit", type=int, default=170,
                        help="link credit granted to publishers, topped up at half (the broker's default, RabbitMQ's rule)")
    args = parser.parse_args(argv)
    broker = InMemoryBroker(args.host, args.port, args.credit)
    container = Container(broker)
    event_shortcut.install(container, broker.take)

    def stop(*_: object) -> None:
        raise SystemExit(0)  # interrupts the select the reactor sleeps in

    signal.signal(signal.SIGTERM, stop)
    try:
        container.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
