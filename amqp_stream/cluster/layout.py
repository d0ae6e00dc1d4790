"""The values every cluster role agrees on: nodes and each stream's layout.

Why plain frozen values: coordination produces them (from ZooKeeper), replication and the
listeners consume them; keeping them free of I/O lets each side be tested alone and lets a
layout be compared, logged and sent as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Node", "StreamLayout"]


@dataclass(frozen=True)
class Node:
    """A member of the cluster as clients and other nodes reach it (its advertised addresses)."""

    name: str
    host: str
    amqp_port: int
    stream_port: int
    replication_port: int
    # the management HTTP API's port (0: off, or a node that did not advertise it): the
    # other nodes' API asks it for this node's connections
    management_port: int = 0

    def to_json(self) -> dict:
        return {"name": self.name, "host": self.host, "amqp_port": self.amqp_port,
                "stream_port": self.stream_port, "replication_port": self.replication_port,
                "management_port": self.management_port}

    @classmethod
    def from_json(cls, doc: dict) -> Node:
        return cls(str(doc["name"]), str(doc["host"]), int(doc["amqp_port"]),
                   int(doc["stream_port"]), int(doc["replication_port"]),
                   int(doc.get("management_port", 0)))


@dataclass(frozen=True)
class StreamLayout:
    """Who holds one stream: its members (node names), which of them leads, under which epoch.

    The epoch grows by one at every leader change; it is written in each chunk's header
    (storage-format: bytes 16-23), and a member refuses chunks of an epoch older than the
    one it knows, so a deposed leader can get nothing confirmed.

    ``catching_up``: members added (``add-replica``) that replicate but do not count toward
    the quorum (nor stand in elections) until their durable tail reaches the commit end; the
    leader then writes the layout without them (Raft's non-voting learners): a new, empty
    member cannot stall confirms or lower what a majority holds.
    """

    stream: str
    epoch: int
    leader: str
    members: tuple[str, ...] = field(default_factory=tuple)
    catching_up: tuple[str, ...] = ()

    @property
    def replicas(self) -> tuple[str, ...]:
        return tuple(m for m in self.members if m != self.leader)

    @property
    def voters(self) -> tuple[str, ...]:
        """The members that count toward the quorum and may be elected."""
        return tuple(m for m in self.members if m not in self.catching_up)

    @property
    def quorum(self) -> int:
        """Voters that must hold a chunk durably before it is committed (leader included)."""
        return len(self.voters) // 2 + 1

    def to_json(self) -> dict:
        doc = {"stream": self.stream, "epoch": self.epoch, "leader": self.leader,
               "members": list(self.members)}
        if self.catching_up:
            doc["catching_up"] = list(self.catching_up)
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> StreamLayout:
        return cls(str(doc["stream"]), int(doc["epoch"]), str(doc["leader"]),
                   tuple(str(m) for m in doc["members"]),
                   tuple(str(m) for m in doc.get("catching_up", ())))
