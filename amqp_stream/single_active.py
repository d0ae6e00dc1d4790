"""Single active consumer groups: which member of a group gets the deliveries.

Strategy: RabbitMQ's ``rabbit_stream_sac_coordinator``, for one node (no Raft, no
disconnected or presumed-down members: a connection that ends leaves its groups at once).
A group is (stream, consumer name); its members are kept in arrival order. On a plain stream
(partition index -1) the first member is active and the next one takes over when it leaves.
On a partition of a super stream the active member is ``partition index mod group size``
(RabbitMQ's choice, so the consumers of a group spread over the partitions); when a member
joins or leaves and the choice moves, the current active member is first told to step down
(``active=False, stepping_down=True``) and the new one is told only once that one has
answered (``activate``): the old one can store its offset before the new one reads it.

Pure logic: the owner of a member is any hashable (the listener passes its subscription);
every call returns ``Notice``s for the caller to send as ConsumerUpdate.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable

__all__ = ["Coordinator", "Notice", "PartitionConflict", "WAITING", "ACTIVE", "DEACTIVATING"]

WAITING = "waiting"
ACTIVE = "active"
DEACTIVATING = "deactivating"  # told to step down, its answer not yet in


class PartitionConflict(Exception):
    """A group of that name on that stream exists with another partition index
    (RabbitMQ's ``partition_index_conflict``: the Subscribe gets PRECONDITION_FAILED)."""


@dataclasses.dataclass(frozen=True)
class Notice:
    """Tell ``owner`` whether it is active (a ConsumerUpdate)."""

    owner: Hashable
    stream: str
    name: str
    active: bool
    stepping_down: bool = False


@dataclasses.dataclass(eq=False)
class _Member:
    owner: Hashable
    status: str = WAITING


@dataclasses.dataclass
class _Group:
    partition: int
    members: list[_Member] = dataclasses.field(default_factory=list)

    def active(self) -> _Member | None:
        """The member holding the group (active or still stepping down)."""
        return next((m for m in self.members if m.status != WAITING), None)

    def choice(self) -> _Member | None:
        """The member that should be active."""
        if not self.members:
            return None
        if self.partition < 0:
            return self.members[0]
        return self.members[self.partition % len(self.members)]


class Coordinator:
    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}

    def register(self, stream: str, name: str, partition: int,
                 owner: Hashable) -> tuple[bool, list[Notice]]:
        """Add ``owner`` to the group; returns whether it is active now, and the notices."""
        group = self._groups.get((stream, name))
        if group is None:
            group = self._groups[(stream, name)] = _Group(partition)
        elif group.partition != partition:
            raise PartitionConflict(
                f"group {name!r} on stream {stream!r} has partition index {group.partition}, "
                f"not {partition}")
        member = next((m for m in group.members if m.owner == owner), None)
        if member is not None:
            return member.status != WAITING, []
        member = _Member(owner)
        group.members.append(member)
        current = group.active()
        if current is None:  # the first member
            notices = self._activate_choice(stream, name, group)
            return member.status == ACTIVE, notices
        if group.partition < 0:
            return False, []
        return False, self._rebalance(stream, name, group)

    def unregister(self, stream: str, name: str, owner: Hashable) -> list[Notice]:
        """Remove ``owner`` (unsubscribed, or its connection ended)."""
        group = self._groups.get((stream, name))
        if group is None:
            return []
        member = next((m for m in group.members if m.owner == owner), None)
        if member is None:
            return []
        group.members.remove(member)
        if not group.members:
            del self._groups[(stream, name)]
            return []
        if group.active() is None:
            if member.status == WAITING:
                return []  # still waiting for a stepping-down member's answer (which left)
            return self._activate_choice(stream, name, group)
        if group.partition < 0:
            return []
        return self._rebalance(stream, name, group)

    def activate(self, stream: str, name: str) -> list[Notice]:
        """A member that stepped down has answered: make the chosen one active."""
        group = self._groups.get((stream, name))
        if group is None:
            return []
        before = group.active()
        was_active = before is not None and before.status == ACTIVE
        for m in group.members:
            m.status = WAITING
        chosen = group.choice()
        if chosen is None:
            return []
        chosen.status = ACTIVE
        if chosen is before and was_active:
            return []
        return [Notice(chosen.owner, stream, name, True)]

    def _activate_choice(self, stream: str, name: str, group: _Group) -> list[Notice]:
        chosen = group.choice()
        if chosen is None:
            return []
        chosen.status = ACTIVE
        return [Notice(chosen.owner, stream, name, True)]

    def _rebalance(self, stream: str, name: str, group: _Group) -> list[Notice]:
        """A super stream partition's group changed: ask the active one to step down if the
        choice moved (its answer calls ``activate``)."""
        current = group.active()
        if current is None or current.status != ACTIVE or group.choice() is current:
            return []
        current.status = DEACTIVATING
        return [Notice(current.owner, stream, name, False, stepping_down=True)]

    def status(self, stream: str, name: str) -> list[tuple[Hashable, str]]:
        """The group's members in order with their status (for tests and diagnostics)."""
        group = self._groups.get((stream, name))
        return [] if group is None else [(m.owner, m.status) for m in group.members]
