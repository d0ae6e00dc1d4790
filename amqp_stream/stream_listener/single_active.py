"""Single active consumer on the stream protocol, as ``rabbit_stream_reader`` of RabbitMQ 4.2
serves it: the Subscribe properties, ConsumerUpdate out and its answer in.

Strategy: the group state is ``amqp_stream.single_active.Coordinator``'s; this module turns
its notices into ConsumerUpdate requests and the answers into deliveries. A subscription with
``single-active-consumer=true`` needs a ``name`` (without it: PRECONDITION_FAILED, as
RabbitMQ); with ``super-stream`` its group is the partition's (the partition index is the
stream's place among the super stream's partitions; -1 when it is not one, as RabbitMQ). It
starts with deliveries off. The member that becomes active gets ConsumerUpdate(active=true)
and its deliveries start only when it answers: from the offset the answer gives (type NONE:
the Subscribe's own), read afresh. A member told to step down (super streams) stops at once;
its answer lets the coordinator activate the next one. A member that unsubscribes, or whose
connection closes or drops, leaves its group at once (a single node has no partitions to
wait out).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

from amqp_stream import super_streams
from amqp_stream.errors import PreconditionFailed
from amqp_stream.single_active import Coordinator, Notice, PartitionConflict
from amqp_stream.streamproto import OffsetType
from amqp_stream.streamproto import frames as f

if TYPE_CHECKING:
    from amqp_stream.stream_listener.consuming import Subscription

__all__ = ["Groups", "Member"]

log = logging.getLogger("amqp_stream.stream_listener")


class Member:
    """A subscription's place in a group: ``Subscription.single_active``."""

    def __init__(self, name: str, stream: str, offset_spec: Any):
        self.name = name
        self.stream = stream
        self.offset_spec = offset_spec  # the Subscribe's, for an answer of type NONE
        self.active = False  # what the coordinator last said


def wanted(properties: Mapping[str, str]) -> tuple[str, str | None] | None:
    """(name, super stream) when the Subscribe asks for single active consumer. As
    ``rabbit_stream_reader`` reads them: only the exact value ``true`` asks for it (any other
    is a plain subscription), and a ``name`` must be present (the empty one is a name)."""
    if properties.get("single-active-consumer") != "true":
        return None
    name = properties.get("name")
    if name is None:
        raise PreconditionFailed("a single active consumer must have a name")
    return name, properties.get("super-stream") or None


class Groups:
    """The broker's groups, and the ConsumerUpdate requests waiting for their answer."""

    def __init__(self, core: Any, restart: Callable[[Any, Any], None]):
        self.core = core
        self.coordinator = Coordinator()
        self._restart = restart  # (subscription, offset spec): read from there, deliver
        self._requests: dict[tuple[Any, int], Notice] = {}

    def join(self, sub: Any, name: str, super_stream: str | None,
             offset_spec: Any) -> list[Notice]:
        """Register a new subscription (its deliveries are off until it is told and answers);
        the notices are for ``send`` once the Subscribe is answered."""
        stream = sub.entry.name
        partition = -1
        if super_stream is not None:
            try:
                partition = super_streams.partitions(self.core, super_stream).index(stream)
            except Exception:
                partition = -1
        try:
            _, notices = self.coordinator.register(stream, name, partition, sub)
        except PartitionConflict as exc:
            raise PreconditionFailed(str(exc)) from None
        sub.active = False
        sub.single_active = Member(name, stream, offset_spec)
        return notices

    def leave(self, sub: Any) -> None:
        """The subscription ends (unsubscribed, stream deleted, connection gone)."""
        member = getattr(sub, "single_active", None)
        if member is None:
            return
        sub.single_active = None
        self.send(self.coordinator.unregister(member.stream, member.name, sub))

    def forget(self, conn: Any) -> None:
        """The connection is gone: its unanswered requests with it."""
        for key in [k for k in self._requests if k[0] is conn]:
            del self._requests[key]

    def answer(self, conn: Any, frame: f.ConsumerUpdateResponse) -> None:
        notice = self._requests.pop((conn, frame.correlation_id), None)
        if notice is None:
            log.info("stream connection %s: ConsumerUpdate answer %d to no request", conn.peer,
                     frame.correlation_id)
            return
        sub = cast("Subscription", notice.owner)  # the listener's owners are its subscriptions
        member = getattr(sub, "single_active", None)
        if member is None or sub.closed:
            return
        if member.active:
            if notice.active:  # an answer to an older step-down finds it active again: wait
                spec = frame.offset_spec
                self._restart(sub, member.offset_spec if spec.type == OffsetType.NONE else spec)
            return
        if notice.stepping_down:
            self.send(self.coordinator.activate(member.stream, member.name))

    def send(self, notices: list[Notice]) -> None:
        for notice in notices:
            sub = cast("Subscription", notice.owner)
            member = sub.single_active
            conn = sub.conn
            if member is None or not conn.serving:
                continue
            member.active = notice.active
            sub.active = False  # on again when the answer comes (if it is still active)
            corr = conn.proto.next_correlation_id()
            self._requests[(conn, corr)] = notice
            conn.send(f.ConsumerUpdate(corr, sub.id, notice.active))
            conn.write()  # now: the change may come from another connection's frame
            log.info("stream subscription %d of %s (group %r on %r): ConsumerUpdate active=%s",
                     sub.id, conn.peer, member.name, member.stream, notice.active)
