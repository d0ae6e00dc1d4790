"""Replication's ``Layouts`` read from coordination's view: where the two halves meet.

Why an adapter rather than ``ClusterNode`` itself: ``ClusterNode`` answers the core (declare,
delete, apply views); replication only polls the latest ``ClusterView``. The view names the
live nodes only, but a replica whose leader just died keeps its layout until the election and
must still know where that leader was: so every node ever seen is remembered here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from amqp_stream.cluster.layout import Node, StreamLayout

if TYPE_CHECKING:
    from amqp_stream.cluster.coordination import ClusterView
    from amqp_stream.cluster.node import ClusterNode

__all__ = ["ViewLayouts"]


class ViewLayouts:
    """``Layouts`` (``amqp_stream.cluster.layouts``) over a ``ClusterNode``'s view."""

    def __init__(self, cluster: ClusterNode):
        self.cluster = cluster
        self.node_name = cluster.name
        self._seen: ClusterView | None = None
        self._nodes: dict[str, Node] = {cluster.name: cluster.node}

    def refresh(self) -> bool:
        view = self.cluster.view  # a new object for every change (read or written)
        if view is self._seen:
            return False
        self._seen = view
        self._nodes.update(view.nodes)
        return True

    def nodes(self) -> Mapping[str, Node]:
        return self._nodes

    def layouts(self) -> Mapping[str, StreamLayout]:
        # the view taken by the last refresh: one reconcile sees one view
        return self._seen.layouts if self._seen is not None else {}

    def arguments(self, stream: str) -> dict:
        view = self._seen if self._seen is not None else self.cluster.view
        return dict(view.arguments.get(stream, {}))
