"""The leader's commit offset: the end that a quorum of the stream's members, the leader
included, holds durably (under each member's fsync policy).

Why apart: it is the one rule that makes a confirm safe, and it is pure bookkeeping (tails
in, a commit end out), so it is tested without sockets. As osiris's writer: each replica
reports its durable tail; the commit is the quorum-th highest tail. As Raft (and unlike a
bare count), a leader counts only tails that reach into its own epoch (``floor``: its log's
end when it took over): chunks of older epochs become committed with the first chunk of its
epoch that a quorum holds, never by counting members alone, so a later leader (chosen by
highest epoch, then offset) always holds what was committed.

The commit end a member learnt is also kept in a small file beside its log (``store`` /
``load``), so a restarted member serves what was committed at once, not only once its
leader (or a quorum's tails) tells it again.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable

__all__ = ["CommitTracker", "COMMIT_FILE", "store", "load"]

COMMIT_FILE = "replication-commit.json"  # in the stream's log directory


def store(directory: str, end: int, chunk_id: int) -> None:
    """Record a commit end this member learnt (from its leader, or as leader from a quorum's
    tails), atomically (a temporary file renamed over the last one). Not fsynced: a value
    lost to a machine crash leaves an older one, or none, and an older commit end is always
    safe to serve (a commit end only grows); a process crash loses nothing written."""
    path = os.path.join(directory, COMMIT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({"end": end, "chunk_id": chunk_id}))
    os.replace(tmp, path)


def load(stream: Any) -> tuple[int, int]:
    """The commit end ``stream``'s member stored last, never beyond what its log holds now
    (an fsync policy other than ``always`` can lose a tail to a machine crash); (0, -1) when
    there is none."""
    try:
        with open(os.path.join(stream.directory, COMMIT_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        end, chunk_id = int(doc["end"]), int(doc["chunk_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0, -1
    if end >= stream.local_end:
        return int(stream.local_end), int(stream.last_chunk_id)
    return max(0, end), chunk_id


class CommitTracker:
    """Tails by member; ``on_commit(end, chunk_id)`` when the commit end moves (called on
    the thread that reported the tail, outside the lock). Only ``voters`` (default: every
    member) count toward the quorum; the others' tails are kept for their lag and catch-up."""

    def __init__(self, members: tuple[str, ...], quorum: int, floor: int, commit: int,
                 on_commit: Callable[[int, int], None],
                 voters: tuple[str, ...] | None = None):
        self.members = members
        self.voters = members if voters is None else voters
        self.quorum = quorum
        self.floor = floor
        self.commit = commit
        self.tails: dict[str, tuple[int, int]] = {}
        self.on_commit = on_commit
        self._lock = threading.Lock()

    def report(self, member: str, end: int, chunk_id: int) -> None:
        """``member`` holds the log up to ``end`` (its last chunk ``chunk_id``) durably."""
        if member not in self.members:
            return
        with self._lock:
            old = self.tails.get(member)
            if old is not None and old[0] >= end:
                return
            self.tails[member] = (end, chunk_id)
            moved = self._advance()
        if moved is not None:
            self.on_commit(*moved)

    def _advance(self) -> tuple[int, int] | None:
        """Under the lock: the new commit (end, chunk id) when the voters' tails moved it."""
        ranked = sorted((t for m, t in self.tails.items() if m in self.voters), reverse=True)
        if len(ranked) < self.quorum:
            return None
        end, chunk_id = ranked[self.quorum - 1]
        if end <= self.commit or end <= self.floor:
            return None
        self.commit = end
        return end, chunk_id

    def reconfigure(self, members: tuple[str, ...], voters: tuple[str, ...], quorum: int,
                    floor: int | None = None) -> None:
        """The stream's members changed under the same leader and epoch (a replica added,
        caught up or deleted): count the new voters from now on (one voter more or less at
        a time, so the old and new majorities share a member, as Raft's single-server
        changes). ``floor``: a new epoch began at this end (``LeaderRole.reepoch``)."""
        with self._lock:
            self.members, self.voters, self.quorum = members, voters, quorum
            if floor is not None:
                self.floor = max(self.floor, floor)
            for gone in [m for m in self.tails if m not in members]:
                del self.tails[gone]
            moved = self._advance()
        if moved is not None:
            self.on_commit(*moved)

    def forget(self, member: str) -> None:
        """``member`` went (its connection closed): its tail no longer counts."""
        with self._lock:
            self.tails.pop(member, None)

    def lag(self) -> dict[str, int]:
        """Offsets each member's tail trails the highest one."""
        with self._lock:
            top = max((t[0] for t in self.tails.values()), default=0)
            return {m: top - t[0] for m, t in self.tails.items()}
