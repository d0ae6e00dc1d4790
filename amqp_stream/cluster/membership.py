"""An operator's changes to a stream's members: ``add-replica`` and ``delete-replica``, as
pure functions from the layout (and the live nodes) to the layout to write, with RabbitMQ's
rules (``rabbit_stream_queue:add_replica/3``, ``rabbit_stream_coordinator``'s
``delete_replica``):

- a replica is added only on a running node of the cluster (RabbitMQ: ``node_not_running``);
  adding a member again changes nothing; the new member is *catching up*: it replicates but
  counts toward the quorum only once its durable tail reaches the commit end (the leader
  then writes the layout that counts it), so an empty member cannot stall confirms;
- the last member is never deleted (RabbitMQ: "Cannot delete the last member of a
  stream"); deleting a node that is not a member changes nothing; the leader is deleted
  only after its leadership moved (the CLI moves it first, to the most caught-up voter);
- one voter at a time: each write adds or removes at most one voter, so any majority of the
  new voters shares a member with any majority of the old (Raft's single-server changes);
- the epoch goes up by one, as RabbitMQ's stream coordinator restarts every member under a
  new epoch on ``add_replica`` / ``delete_replica``: the leader carries on under it in place
  (``LeaderRole.reepoch``: nothing failed or cut), the replicas follow it afresh, and a
  replica link or report of the old membership is refused as stale. (The promotion of a
  caught-up member completes the add and keeps the epoch.)
"""

from __future__ import annotations

from typing import Mapping

from amqp_stream.cluster.coordination import LayoutRefused
from amqp_stream.cluster.layout import Node, StreamLayout

__all__ = ["add_replica", "delete_replica", "LayoutRefused"]


def add_replica(layout: StreamLayout, node: str, live: Mapping[str, Node]) -> StreamLayout:
    if node not in live:
        raise LayoutRefused(f"node {node} is not running in the cluster (node_not_running); "
                            f"running: {', '.join(sorted(live)) or 'none'}")
    if node in layout.members:
        return layout
    if layout.leader not in live:
        raise LayoutRefused(f"stream {layout.stream!r} has no running leader ({layout.leader} "
                            f"is down): try again once a leader is elected")
    return StreamLayout(layout.stream, layout.epoch + 1, layout.leader,
                        tuple(sorted((*layout.members, node))), (*layout.catching_up, node))


def delete_replica(layout: StreamLayout, node: str) -> StreamLayout:
    if node not in layout.members:
        return layout
    if len(layout.members) <= 1:
        raise LayoutRefused(f"Cannot delete the last member of a stream ({layout.stream!r} "
                            f"has only {node}) (last_stream_member)")
    if node == layout.leader:
        raise LayoutRefused(f"{node} leads {layout.stream!r}: move its leadership first "
                            f"(amqp-stream transfer-leadership)")
    return StreamLayout(layout.stream, layout.epoch + 1, layout.leader,
                        tuple(m for m in layout.members if m != node),
                        tuple(m for m in layout.catching_up if m != node))
