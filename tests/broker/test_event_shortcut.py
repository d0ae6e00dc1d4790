"""event_shortcut: deliveries reach ``take`` as C pointers; whatever it declines, and every
other event, comes out of ``peek`` as proton's usual ``Event``.

Two real proton engines (client and server connections with their transports) exchange frames
in memory, so the events are the ones a socket would produce.
"""

from __future__ import annotations

from cproton import pn_delivery_link, pn_delivery_pending, pn_link_advance, pn_link_recv
from proton import Connection, Delivery, Event, Transport

from bench.event_shortcut import DeliveryShortcut


def _pump(a: Transport, b: Transport) -> None:
    """Move bytes between two transports until neither has any to send."""
    moved = True
    while moved:
        moved = False
        for src, dst in ((a, b), (b, a)):
            pending = src.pending()
            if pending > 0:
                dst.push(src.peek(pending))
                src.pop(pending)
                moved = True


def _events(collector: DeliveryShortcut) -> list[Event]:
    out = []
    while (event := collector.peek()) is not None:
        out.append(event)
        collector.pop()
    return out


class _Pair:
    """A client sender attached to a server receiver that grants credit."""

    def __init__(self, take):
        self.collector = DeliveryShortcut(take)
        self.server = Connection()
        self.server.collect(self.collector)
        self.server_transport = Transport(Transport.SERVER)
        self.server_transport.bind(self.server)
        self.client = Connection()
        self.client_transport = Transport()
        self.client_transport.bind(self.client)
        self.client.open()
        session = self.client.session()
        session.open()
        self.sender = session.sender("publisher")
        self.sender.target.address = "/queues/s"
        self.sender.open()
        self.pump()
        self.setup_events = _events(self.collector)
        self.server.open()
        self.server.session_head(0).open()
        self.receiver = self.server.link_head(0)
        self.receiver.open()
        self.receiver.flow(10)
        self.pump()

    def pump(self) -> None:
        _pump(self.client_transport, self.server_transport)

    def send(self, tag: bytes, body: bytes) -> None:
        self.sender.delivery(tag)
        self.sender.send(body)
        self.sender.advance()
        self.pump()


def test_taken_deliveries_never_become_events_and_the_rest_do():
    received = []

    def take(impl) -> bool:
        tag = Delivery.wrap(impl).tag
        if tag.startswith("leave"):
            return False
        link = pn_delivery_link(impl)
        n, data = pn_link_recv(link, pn_delivery_pending(impl))
        pn_link_advance(link)
        received.append((tag, bytes(data)))
        return True

    pair = _Pair(take)
    kinds = {e.type for e in pair.setup_events}
    assert Event.CONNECTION_REMOTE_OPEN in kinds and Event.LINK_REMOTE_OPEN in kinds
    _events(pair.collector)

    pair.send(b"t1", b"hello")
    pair.send(b"t2", b"world")
    assert _events(pair.collector) == []  # both taken: no Event built for them
    assert received == [("t1", b"hello"), ("t2", b"world")]

    pair.send(b"leave-1", b"for the handler")
    events = _events(pair.collector)
    assert [e.type for e in events] == [Event.DELIVERY]
    assert events[0].delivery.tag == "leave-1"
    assert received == [("t1", b"hello"), ("t2", b"world")]


def test_other_events_between_deliveries_keep_their_order():
    pair = _Pair(lambda impl: True)
    _events(pair.collector)
    pair.send(b"t1", b"x")
    pair.sender.close()
    pair.pump()
    types = [e.type for e in _events(pair.collector)]
    assert Event.DELIVERY not in types
    assert types[0] == Event.LINK_REMOTE_CLOSE
