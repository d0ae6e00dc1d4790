"""Two nodes on this machine serving a super stream of 2 partitions, one leader each, against
one node serving both: total publish throughput with confirms, and the cores the brokers use.

Each round, in one run (the machine is shared and noisy: the two setups alternate):

- **one node**: a cluster of one node (ZooKeeper, ``--cluster``), a super stream of 2
  partitions created on it (both partitions on it);
- **two nodes**: a cluster of two nodes, the super stream created with
  ``x-initial-cluster-size 2`` (super streams place leaders ``balanced``: partition 0 led by
  n1, partition 1 by n2), then each partition's other member removed with
  ``amqp-stream delete-replica``: **replication off**, one member per partition, so each node
  writes only its own partition.

Then one load-generator process per partition (``bench.stream_protocol``'s: Publish frames of
``--frame`` pre-encoded 100-byte messages, confirms counted from each PublishConfirm, a window
of unconfirmed messages) connects to the partition's leader (Metadata), all start together, and
each publishes ``--messages`` / 2 messages and waits for every confirm. Throughput = all
messages / (last confirm - first send). Cores = the brokers' CPU (utime + stime from /proc)
over that time; the load generators' CPU is printed beside, and how busy the machine's cores
were meanwhile, whoever used them (/proc/stat: on a shared machine, what others left us). Every broker runs with the same
``--fsync`` (default ``always``, the broker's default).

    python -m bench.cluster_super_stream                  # 1,000,000 messages, 3 rounds
    python -m bench.cluster_super_stream --quick          # 200,000, 2 rounds
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from amqp_stream.client.stream import StreamClient
from amqp_stream.testing import BrokerProcess, free_port
from bench.stream_protocol import cpu_seconds, publish, publish_frames
from tests.cluster.zookeeper import ZooKeeperServer

__all__ = ["main"]

SUPER = "bench-super"


def _node(tmp: Path, url: str, name: str, fsync: str) -> BrokerProcess:
    (tmp / name).mkdir(parents=True, exist_ok=True)
    return BrokerProcess(tmp / name / "data", extra_args=[
        "--cluster", url, "--node-name", name, "--stream-advertised-host", "127.0.0.1",
        "--replication-port", str(free_port()), "--fsync", fsync])


def _cli(*args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "amqp_stream", *args], capture_output=True,
                       text=True, timeout=120)
    if r.returncode:
        raise SystemExit(f"amqp-stream {' '.join(args)} failed: {r.stderr[-500:]}")


def _publisher(port: int, stream: str, count: int, frame: int, start: Any,
               out: Any) -> None:
    """A child process: connect, pre-encode, wait for the start, publish, report
    (monotonic start, monotonic end, messages, own CPU s). CLOCK_MONOTONIC is one clock for
    every process of the machine."""
    frames = publish_frames(1, 0, count, frame)
    with StreamClient(f"rabbitmq-stream://127.0.0.1:{port}", timeout=300) as c:
        c.declare_publisher(1, stream)
        start.wait()
        t0 = time.monotonic()
        r = publish(c, frames, os.getpid())
        out.put((t0, time.monotonic(), r.messages, r.cpu))


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat: all but idle and
    iowait): how busy its cores were, whoever used them."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    tck = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - fields[3] - fields[4]) / tck, sum(fields) / tck


def _run(brokers: dict[str, BrokerProcess], placement: dict[str, str], args: argparse.Namespace
         ) -> tuple[float, float, float, float, float]:
    """One timed publish: (msg/s, seconds, brokers' cores, load generators' cores, the
    machine's busy cores)."""
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    per = args.messages // len(placement)
    procs = [ctx.Process(target=_publisher, args=(brokers[node].stream_port, partition, per,
                                                  args.frame, start, out))
             for partition, node in placement.items()]
    for p in procs:
        p.start()
    time.sleep(1.0)  # the children connect and pre-encode; not part of any figure
    pids = [b.proc.pid for b in brokers.values() if b.proc is not None]
    cpu0 = sum(cpu_seconds(pid) for pid in pids)
    busy0, _ = _machine_busy()
    t_start = time.monotonic()
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    cpu1 = sum(cpu_seconds(pid) for pid in pids)
    busy1, _ = _machine_busy()
    machine = (busy1 - busy0) / (time.monotonic() - t_start)
    for p in procs:
        p.join(30)
    t0 = min(r[0] for r in results)
    t1 = max(r[1] for r in results)
    seconds = t1 - t0
    total = sum(r[2] for r in results)
    return (total / seconds, seconds, (cpu1 - cpu0) / seconds,
            sum(r[3] for r in results) / seconds, machine)


def _setup(zk: ZooKeeperServer, tmp: Path, names: list[str], tag: str,
           fsync: str) -> tuple[dict[str, BrokerProcess], dict[str, str]]:
    url = f"zk://{zk.hosts}/bench-{tag}"
    brokers = {n: _node(tmp / tag, url, n, fsync) for n in names}
    for b in brokers.values():
        b.start()
    partitions = [f"{SUPER}-0", f"{SUPER}-1"]
    first = brokers[names[0]]
    with StreamClient(first.stream_url, timeout=60) as c:
        c.create_super_stream(SUPER, partitions, ["0", "1"],
                              {"x-initial-cluster-size": str(len(names))})
    if len(names) == 1:
        return brokers, {p: names[0] for p in partitions}
    from amqp_stream.cluster.coordination import read_view

    layouts = read_view(url, 10).layouts
    placement = {p: layouts[p].leader for p in partitions}
    if len(set(placement.values())) != len(names):
        raise SystemExit(f"the partitions' leaders are not spread: {placement}")
    for p, leader in placement.items():  # replication off: the leader alone
        for member in layouts[p].members:
            if member != leader:
                _cli("delete-replica", p, member, "--cluster", url)
    layouts = read_view(url, 10).layouts
    assert all(layouts[p].members == (placement[p],) for p in partitions), layouts
    return brokers, placement


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--frame", type=int, default=1000, help="messages per Publish frame")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    parser.add_argument("--quick", action="store_true", help="200,000 messages, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = 200_000, 2
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # ZooKeeper starting: retries
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} "
          f"cores; {args.messages} messages of 100 bytes, {args.frame} per Publish frame, "
          f"fsync {args.fsync}, 2 partitions, one load-generator process each", flush=True)
    rates: dict[str, list[float]] = {"one node": [], "two nodes": []}
    zk = ZooKeeperServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="ss-bench-") as tmp:
            for i in range(args.rounds):
                for label, names in (("one node", ["n1"]), ("two nodes", ["n1", "n2"])):
                    brokers, placement = _setup(zk, Path(tmp), names, f"{i}-{len(names)}",
                                                args.fsync)
                    try:
                        rate, seconds, cores, lg, machine = _run(brokers, placement, args)
                    finally:
                        for b in brokers.values():
                            b.close()
                    rates[label].append(rate)
                    where = ", ".join(f"{p[-1]}@{n}" for p, n in placement.items())
                    print(f"round {i + 1} {label:<9} ({where}): {rate:>11,.0f} msg/s in "
                          f"{seconds:5.2f} s; brokers {cores:.2f} cores, load generators "
                          f"{lg:.2f}; machine {machine:.2f} of {os.cpu_count()} busy; load "
                          f"{os.getloadavg()[0]:.2f}", flush=True)
    finally:
        zk.close()
    one, two = statistics.median(rates["one node"]), statistics.median(rates["two nodes"])
    print(f"median: one node {one:,.0f} msg/s, two nodes {two:,.0f} msg/s; ratio {two / one:.2f}x "
          f"(goal 1.6x); load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
