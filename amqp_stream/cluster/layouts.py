"""Where replication learns the cluster's layout: the one seam between it and coordination.

Why a Protocol: coordination (ZooKeeper through kazoo) is built apart; replication only needs
this node's name, the nodes' addresses, and each stream's layout and declared arguments.
``StaticLayouts`` is the plain source the tests and a hand-made cluster use: a JSON file, read
again when it changes, so a test moves a leader by rewriting it::

    {"node": "n1",
     "nodes": [{"name": "n1", "host": "127.0.0.1", "amqp_port": 5672, "stream_port": 5552,
                "replication_port": 5560}, ...],
     "streams": [{"stream": "s", "epoch": 1, "leader": "n1", "members": ["n1", "n2", "n3"],
                  "arguments": {}}],
     "secret": "the cluster's secret (auth.py; --cluster-secret overrides it)"}
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Protocol

from amqp_stream.cluster.layout import Node, StreamLayout

__all__ = ["Layouts", "StaticLayouts"]


class Layouts(Protocol):
    """What replication asks of coordination. Called on the broker's loop thread, polled
    (``refresh`` then the getters) a few times a second; answers must be cheap."""

    node_name: str

    def refresh(self) -> bool:
        """Take in changes; True when anything may have changed since the last call."""

    def nodes(self) -> Mapping[str, Node]:
        """Every node by name (its advertised addresses)."""

    def layouts(self) -> Mapping[str, StreamLayout]:
        """Every replicated stream's current layout, by stream name."""

    def arguments(self, stream: str) -> dict:
        """The stream's declared arguments (to create a member's local log)."""


class StaticLayouts:
    """``Layouts`` from a JSON file (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self._mtime: int | None = None
        self._nodes: dict[str, Node] = {}
        self._layouts: dict[str, StreamLayout] = {}
        self._arguments: dict[str, dict] = {}
        self.node_name = ""
        self.secret: str | None = None  # the file's "secret" (read once, at start)
        self.refresh()

    def refresh(self) -> bool:
        mtime = os.stat(self.path).st_mtime_ns
        if mtime == self._mtime:
            return False
        with open(self.path, encoding="utf-8") as f:
            doc = json.load(f)
        self.node_name = str(doc["node"])
        if self.secret is None and doc.get("secret") is not None:
            self.secret = str(doc["secret"])
        self._nodes = {n.name: n for n in map(Node.from_json, doc.get("nodes", []))}
        self._layouts = {}
        self._arguments = {}
        for s in doc.get("streams", []):
            layout = StreamLayout.from_json(s)
            self._layouts[layout.stream] = layout
            self._arguments[layout.stream] = dict(s.get("arguments") or {})
        if self.node_name not in self._nodes:
            raise ValueError(f"{self.path}: node {self.node_name!r} is not among its nodes")
        self._mtime = mtime
        return True

    def nodes(self) -> Mapping[str, Node]:
        return self._nodes

    def layouts(self) -> Mapping[str, StreamLayout]:
        return self._layouts

    def arguments(self, stream: str) -> dict:
        return dict(self._arguments.get(stream, {}))
