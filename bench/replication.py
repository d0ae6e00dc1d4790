"""Replicated publishing and consuming against one node, in one run, with the stream-protocol
load generator of ``bench.stream_protocol`` (pre-encoded frames, confirms counted from each
PublishConfirm, records counted from chunk headers: the generator is not the limit).

Each round publishes ``--messages`` 100-byte messages with confirms to a fresh stream on a
single node, then to a fresh stream with 3 members (quorum 2) on a three-node cluster on this
machine (``amqp_stream.cluster.testing``: static layouts, no coordination), interleaved so
that load on the machine hits both alike; then consumes the replicated stream from the
leader and from a replica (the median of ``--passes``, alternating between the two). Every broker runs with the same
``--fsync``. The ratios are against the single node / the leader of the same round.

    python -m bench.replication                   # 1,000,000 messages, 2 rounds
    python -m bench.replication --quick           # 100,000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

from amqp_stream.client.stream import StreamClient
from amqp_stream.cluster.layout import StreamLayout
from amqp_stream.cluster.testing import Cluster
from amqp_stream.testing import BrokerProcess
from bench import scratch_dir
from bench.stream_protocol import (HEADER, Result, _row, consume, cpu_seconds, publish,
                                   publish_frames)

__all__ = ["main"]


def _publish(port: int, stream: str, pid: int, args: argparse.Namespace,
             create: bool) -> Result:
    url = f"rabbitmq-stream://127.0.0.1:{port}"
    with StreamClient(url, timeout=120) as c:
        if create:
            c.create(stream)
        c.declare_publisher(1, stream)
        return publish(c, publish_frames(1, 0, args.messages, args.frame), pid)


def _consume(targets: list[tuple[int, int]], stream: str,
             args: argparse.Namespace) -> list[Result]:
    """The median pass of each ``(port, pid)``, passes alternating between them (a pass
    lasts ~0.1 s: what the machine does meanwhile hits each alike)."""
    passes: list[list[Result]] = [[] for _ in targets]
    for _ in range(args.passes):
        for k, (port, pid) in enumerate(targets):
            c = StreamClient(f"rabbitmq-stream://127.0.0.1:{port}", timeout=60)
            passes[k].append(consume(c, stream, args.messages, pid))
            c.sock.close()
    return [sorted(p, key=lambda r: r.rate)[len(p) // 2] for p in passes]


def _wait_members(cluster: Cluster, stream: str, timeout: float = 30) -> None:
    """Until both replicas follow ``stream``'s leader (polled from their logs)."""
    deadline = time.monotonic() + timeout
    while not all(f"replica of {stream!r}: following n1 (epoch 1) from" in cluster.log(n)
                  for n in ("n2", "n3")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"replicas of {stream} not following after {timeout}s")
        time.sleep(0.1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--frame", type=int, default=1000, help="messages per Publish frame")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--passes", type=int, default=7, help="consumes per stream (median)")
    parser.add_argument("--fsync", default="never", choices=("always", "interval", "never"))
    parser.add_argument("--quick", action="store_true", help="100,000 messages")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages = 100_000
    tmp = scratch_dir("bench-replication-")
    single = BrokerProcess(tmp / "single" / "data", ["--fsync", args.fsync],
                           log_path=tmp / "single.log")
    (tmp / "single").mkdir()
    cluster = Cluster(tmp / "cluster", fsync=args.fsync)
    streams = [f"r{k}" for k in range(args.rounds)]
    cluster.set_layouts([(StreamLayout(s, 1, "n1", ("n1", "n2", "n3")), {}) for s in streams])
    out = [f"bench.replication: {args.messages:,} messages of 100 bytes per publish, "
           f"--fsync {args.fsync}, {os.cpu_count()} cores", HEADER]
    try:
        single.start()
        cluster.start()
        spid = single.proc.pid  # type: ignore[union-attr]
        lpid = cluster.brokers["n1"].proc.pid  # type: ignore[union-attr]
        rpid = cluster.brokers["n2"].proc.pid  # type: ignore[union-attr]
        r3pid = cluster.brokers["n3"].proc.pid  # type: ignore[union-attr]
        for k, stream in enumerate(streams):
            _wait_members(cluster, stream)
            one = _publish(single.stream_port, f"single-{k}", spid, args, create=True)
            r0 = cpu_seconds(rpid) + cpu_seconds(r3pid)
            rep = _publish(cluster.brokers["n1"].stream_port, stream, lpid, args, create=False)
            replicas_us = (cpu_seconds(rpid) + cpu_seconds(r3pid) - r0) / args.messages * 1e6
            out.append(_row(f"round {k}: single node publish", one))
            out.append(_row(f"round {k}: 3 members publish (leader)", rep))
            out.append(f"    replicated / single: {rep.rate / one.rate:.2f}x; the two replicas: "
                       f"{replicas_us:.3f} CPU µs/msg together")
            # the replicas hold the stream once the commit covers it (confirms came)
            lead, repl = _consume([(cluster.brokers["n1"].stream_port, lpid),
                                   (cluster.brokers["n2"].stream_port, rpid)], stream, args)
            out.append(_row(f"round {k}: consume from the leader", lead))
            out.append(_row(f"round {k}: consume from a replica", repl))
            out.append(f"    replica / leader: {repl.rate / lead.rate:.2f}x")
            print("\n".join(out[-7:]), flush=True)
    finally:
        single.close()
        cluster.close()
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
