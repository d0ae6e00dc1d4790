"""Three (or more) broker processes on loopback replicating through static layouts, for the
tests (``tests/cluster``) and the benchmarks (``bench.replication``).

Each node runs ``amqp-stream serve --cluster-static FILE``; the file (one per node: the same
layouts, the node's own name) stands in for coordination. ``set_layouts`` rewrites the files
(atomically) of the nodes given, so a test moves a leader, raises the epoch or leaves a node
with a stale view, as a coordination service would or would fail to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from amqp_stream.cluster.auth import new_secret
from amqp_stream.cluster.layout import Node, StreamLayout
from amqp_stream.testing import BrokerProcess, free_ports

__all__ = ["Cluster"]


class Cluster:
    def __init__(self, root: Path, names: Iterable[str] = ("n1", "n2", "n3"),
                 fsync: str = "always", extra_args: Iterable[str] = ()):
        self.root = root
        self.brokers: dict[str, BrokerProcess] = {}
        self.nodes: dict[str, Node] = {}
        self.files: dict[str, Path] = {}
        for name in names:
            (root / name).mkdir(parents=True, exist_ok=True)
            path = root / name / "layouts.json"
            b = BrokerProcess(root / name / "data", ["--cluster-static", str(path),
                                                     "--fsync", fsync, *extra_args],
                              log_path=root / name / "broker.log")
            (repl_port,) = free_ports(1)
            self.brokers[name] = b
            self.files[name] = path
            self.nodes[name] = Node(name, b.host, b.port, b.stream_port, repl_port)
        self.layouts: dict[str, list[tuple[StreamLayout, dict]]] = {n: [] for n in self.brokers}
        self.secret = new_secret()  # every node's file holds it (auth.py)

    def set_layouts(self, layouts: list[tuple[StreamLayout, dict]],
                    only: Iterable[str] | None = None) -> None:
        """Write ``(layout, arguments)`` pairs into the files of ``only`` (default: all)."""
        for name in (only if only is not None else self.brokers):
            self.layouts[name] = layouts
            doc = {"node": name, "nodes": [n.to_json() for n in self.nodes.values()],
                   "streams": [{**lay.to_json(), "arguments": args} for lay, args in layouts],
                   "secret": self.secret}
            tmp = self.files[name].with_suffix(".tmp")
            tmp.write_text(json.dumps(doc), "utf-8")
            os.replace(tmp, self.files[name])

    def start(self, *names: str) -> None:
        for name in names or self.brokers:
            self.brokers[name].start()

    def data_dirs(self) -> dict[str, Path]:
        return {name: b.data_dir for name, b in self.brokers.items()}

    def log(self, name: str) -> str:
        return self.brokers[name].log_text()

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()
