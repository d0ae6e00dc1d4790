"""``amqp-stream cluster status``: the cluster as ZooKeeper holds it — each node, whether it
is alive, how many stream leaderships it holds, and each stream's members, leader and epoch.

It reads ZooKeeper directly (``--cluster``, or ``AMQP_STREAM_CLUSTER`` / the config file's
``cluster`` as ``serve`` reads them), as an observer: it does not join the cluster.
"""

from __future__ import annotations

import argparse
import json
import sys

from amqp_stream import config as config_mod

ACTIONS = ("status",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="status: nodes, alive, leaders held")
    add_cluster_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the status as JSON")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--config`` and ``--timeout``: how every cluster command finds
    ZooKeeper."""
    parser.add_argument("--cluster", help="zk://HOST:PORT[,HOST:PORT...]/PATH (default: "
                                          "AMQP_STREAM_CLUSTER or the config file's)")
    parser.add_argument("--config", metavar="FILE", help="settings file, as serve's")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for ZooKeeper (default: 10)")


def cluster_url(args: argparse.Namespace, prog: str) -> str | None:
    """The cluster's checked URL from ``--cluster``, the environment or the config file;
    None (the reason printed) when there is none or it is malformed: exit 2."""
    try:
        url = config_mod.load({"cluster": args.cluster}, config_file=args.config).cluster
    except config_mod.ConfigError as exc:
        if args.cluster is None:  # serve's other settings need not be complete here
            print(f"amqp-stream {prog}: error: {exc}", file=sys.stderr)
            return None
        url = args.cluster
    if not url:
        print(f"amqp-stream {prog}: error: which cluster? give --cluster zk://HOSTS/PATH",
              file=sys.stderr)
        return None
    from amqp_stream.cluster.address import parse_url

    try:
        parse_url(url)
    except ValueError as exc:
        print(f"amqp-stream {prog}: error: {exc}", file=sys.stderr)
        return None
    return url


def run(args: argparse.Namespace) -> int:
    url = cluster_url(args, "cluster")
    if url is None:
        return 2
    from amqp_stream.cluster.coordination import CoordinationError, read_view

    try:
        status = read_view(url, args.timeout).status()
    except CoordinationError as exc:  # unreachable: a failure at run time, as the others'
        print(f"amqp-stream cluster: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    print(f"{'node':<20} {'alive':<6} {'leaders':>7}  address")
    for node in status["nodes"]:
        print(f"{node['name']:<20} {'yes' if node['alive'] else 'NO':<6} {node['leaders']:>7}  "
              f"{node['address'] or '-'}")
    if status["streams"]:
        print()
        print(f"{'stream':<30} {'epoch':>5}  leader / members")
        for s in status["streams"]:
            leader = s["leader"] + ("" if s["leader_alive"] else " (down)")
            print(f"{s['stream']:<30} {s['epoch']:>5}  {leader} / {', '.join(s['members'])}")
    return 0
