"""Deliveries taken off proton's event queue before they become Python ``Event`` objects.

Why: proton's Python reactor turns every event into an ``Event`` that wraps its delivery, link,
session, connection and transport (a Python wrapper each, with attachment lookups), finds the
handler through those wrappers, then dispatches the event twice (to the handler and to the
global I/O handler). For a ``PN_DELIVERY`` on a publisher link that is ~9 µs of a ~20 µs
message, while the broker's own work on it uses only the delivery's C pointer. A
``DeliveryShortcut`` replaces the container's collector: ``peek`` offers each ``PN_DELIVERY``
to ``take(delivery_pointer)`` first; an event it took is popped at once, every other event goes
through proton's usual path unchanged (the reactor only calls ``peek``, ``pop`` and ``more``).

``take`` runs on the event loop, as a handler would, and must return True only for deliveries
it fully handled. A delivery kept beyond the call must be held with ``pn_incref`` and released
with ``pn_decref`` (on the event loop), since no wrapper holds a reference for it.
"""

from __future__ import annotations

from typing import Any, Callable

from cproton import PN_DELIVERY, pn_collector_peek, pn_collector_pop, pn_event_delivery, pn_event_type
from proton import Collector, Event

__all__ = ["DeliveryShortcut", "install"]


class DeliveryShortcut(Collector):
    def __init__(self, take: Callable[[Any], bool]):
        super().__init__()
        self.take = take

    def peek(self) -> Event | None:
        impl = self._impl
        take = self.take
        while True:
            event = pn_collector_peek(impl)
            if not event:  # a NULL pointer: the queue is empty
                return None
            if pn_event_type(event) == PN_DELIVERY and take(pn_event_delivery(event)):
                pn_collector_pop(impl)
                continue
            return Event.wrap(event)


def install(container: Any, take: Callable[[Any], bool]) -> None:
    """Give ``container`` (not yet running: nothing collected yet) a ``DeliveryShortcut``."""
    container._collector = DeliveryShortcut(take)
