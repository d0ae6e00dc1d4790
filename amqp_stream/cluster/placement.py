"""Where a new stream's members and leader go: pure functions over the live nodes and the
layouts that exist (no I/O; coordination calls them with what it read from ZooKeeper).

As RabbitMQ's ``rabbit_queue_location`` places a stream (balanced placement, below its
1000-queue random threshold):

- members: ``x-initial-cluster-size`` of them (default ``DEFAULT_SIZE``, or every node when
  there are fewer); every node when the size covers them all, otherwise the declaring node
  plus the nodes holding the fewest members;
- leader (``x-queue-leader-locator``): ``client-local`` (RabbitMQ's default) the declaring
  node when it is a member; ``balanced`` the member leading the fewest streams;
  ``least-leaders`` is RabbitMQ's older name for ``balanced`` and maps to it;
- a node drained for maintenance (``cluster drain``) is not chosen to lead while another
  member can (RabbitMQ's ``rabbit_queue_location`` filters drained nodes out the same way);
  it may still be a member.
Ties go to the node name that sorts first, so every node computes the same answer.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping, Sequence

from amqp_stream.cluster.layout import StreamLayout

__all__ = ["DEFAULT_SIZE", "place", "choose_members", "choose_leader"]

DEFAULT_SIZE = 3
LOCATOR_ARG = "x-queue-leader-locator"
SIZE_ARG = "x-initial-cluster-size"
_ALIASES = {"least-leaders": "balanced", "random": "balanced", "min-masters": "balanced"}


def _counts(nodes: Iterable[str], layouts: Iterable[StreamLayout],
            leaders_only: bool) -> dict[str, int]:
    counts = dict.fromkeys(nodes, 0)
    for layout in layouts:
        for name in ((layout.leader,) if leaders_only else layout.members):
            if name in counts:
                counts[name] += 1
    return counts


def choose_members(size: int, nodes: Sequence[str], local: str,
                   layouts: Iterable[StreamLayout]) -> tuple[str, ...]:
    """``size`` live nodes for a new stream: the declaring node ``local`` and those holding
    the fewest members of other streams (all of ``nodes`` when ``size`` covers them)."""
    if size < 1:
        raise ValueError(f"a stream needs at least one member, not {size}")
    if len(nodes) <= size:
        return tuple(sorted(nodes))
    others = _counts((n for n in nodes if n != local), layouts, leaders_only=False)
    ranked = sorted(others, key=lambda n: (others[n], n))
    chosen = ([local] if local in nodes else []) + ranked
    return tuple(sorted(chosen[:size]))


def choose_leader(locator: str, members: Sequence[str], local: str,
                  layouts: Iterable[StreamLayout], drained: Collection[str] = ()) -> str:
    """The member to lead a new stream under ``locator``, not a ``drained`` one unless
    every member is."""
    locator = _ALIASES.get(locator, locator)
    if locator not in ("client-local", "balanced"):
        raise ValueError(f"unknown leader locator {locator!r}")
    members = [m for m in members if m not in drained] or list(members)
    if locator == "client-local" and local in members:
        return local
    led = _counts(members, layouts, leaders_only=True)
    return min(members, key=lambda n: (led[n], n))


def place(stream: str, arguments: Mapping, nodes: Sequence[str], local: str,
          layouts: Iterable[StreamLayout], drained: Collection[str] = ()) -> StreamLayout:
    """The first layout (epoch 1) of ``stream`` declared on node ``local`` with validated
    ``arguments`` (``amqp_stream.arguments``), among the live ``nodes``."""
    if not nodes:
        raise ValueError("no live node to place a stream on")
    layouts = list(layouts)
    size = int(arguments.get(SIZE_ARG, DEFAULT_SIZE))
    members = choose_members(size, nodes, local, layouts)
    leader = choose_leader(str(arguments.get(LOCATOR_ARG, "client-local")), members, local,
                           layouts, drained)
    return StreamLayout(stream, 1, leader, members)
