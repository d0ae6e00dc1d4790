"""A node's replication in Prometheus: each replicated stream's role, epoch, commit end, local
end and, on its leader, how far each member's durable tail trails the leader's log.

Computed when Prometheus scrapes (on the metrics server's thread) from the roles' plain
values; nothing is kept current on the publish path.
"""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client.core import GaugeMetricFamily

__all__ = ["ReplicationCollector"]


class ReplicationCollector:
    def __init__(self, replication: Any):
        self.replication = replication

    def collect(self) -> Iterator[GaugeMetricFamily]:
        r = self.replication
        leader = GaugeMetricFamily("amqp_stream_replication_leader",
                                   "1 where this node leads the replicated stream, 0 where it "
                                   "is a replica", labels=["stream"])
        epoch = GaugeMetricFamily("amqp_stream_replication_epoch",
                                  "the stream's epoch as this node applies it", labels=["stream"])
        commit = GaugeMetricFamily("amqp_stream_replication_commit_offset",
                                   "the cluster's commit end as this node knows it (consumers "
                                   "see offsets below it)", labels=["stream"])
        local = GaugeMetricFamily("amqp_stream_replication_local_end",
                                  "the end of what this node holds durably", labels=["stream"])
        lag = GaugeMetricFamily("amqp_stream_replication_lag_offsets",
                                "on the leader: offsets a member's durable tail trails the "
                                "leader's log (the leader's own: 0)",
                                labels=["stream", "member"])
        roles = [(name, role, True) for name, role in list(r.leaders.items())]
        roles += [(name, link, False) for name, link in list(r.replicas.items())]
        for name, role, leads in roles:
            stream = role.stream
            leader.add_metric([name], 1 if leads else 0)
            epoch.add_metric([name], role.epoch)
            commit.add_metric([name], stream.commit_gate or 0)
            end = stream.local_end
            local.add_metric([name], end)
            if leads:
                tails = dict(role.tracker.tails)
                for member in role.tracker.members:
                    tail = tails.get(member)
                    if tail is not None:
                        lag.add_metric([name, member], max(0, end - tail[0]))
        yield from (leader, epoch, commit, local, lag)
