"""A node's replication in Prometheus: each replicated stream's role, epoch, commit end, local
end and, on its leader, how far each member's durable tail trails the leader's log (offsets
and bytes) and how long a chunk waits from being durable on the leader to its quorum commit.

Computed when Prometheus scrapes (on the metrics server's thread) from the roles' plain
values; on the publish path the leader only notes when each local end was reached.
"""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from amqp_stream.cluster.leader import LATENCY_BUCKETS

__all__ = ["ReplicationCollector"]


class ReplicationCollector:
    def __init__(self, replication: Any):
        self.replication = replication

    def collect(self) -> Iterator[GaugeMetricFamily | HistogramMetricFamily]:
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
        lag_bytes = GaugeMetricFamily("amqp_stream_replication_lag_bytes",
                                      "on the leader: bytes of its log a connected member "
                                      "does not hold yet (sent and unacknowledged, or not "
                                      "sent)", labels=["stream", "member"])
        role_info = GaugeMetricFamily("amqp_stream_replication_role",
                                      "1 for the role this node plays for the stream "
                                      "(osiris's writer: leader; replica)",
                                      labels=["stream", "role"])
        latency = HistogramMetricFamily("amqp_stream_replication_commit_latency_seconds",
                                        "on the leader: from a chunk durable here to its "
                                        "quorum commit", labels=["stream"])
        roles = [(name, role, True) for name, role in list(r.leaders.items())]
        roles += [(name, link, False) for name, link in list(r.replicas.items())]
        for name, role, leads in roles:
            stream = role.stream
            leader.add_metric([name], 1 if leads else 0)
            role_info.add_metric([name, "leader" if leads else "replica"], 1)
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
                for member, nbytes in role.lag_bytes().items():
                    lag_bytes.add_metric([name, member], nbytes)
                counts, total = list(role.latency_counts), role.latency_sum
                buckets, running = [], 0
                for bound, n in zip(LATENCY_BUCKETS, counts, strict=True):
                    running += n
                    buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
                latency.add_metric([name], buckets, total)
        yield from (leader, role_info, epoch, commit, local, lag, lag_bytes, latency)
