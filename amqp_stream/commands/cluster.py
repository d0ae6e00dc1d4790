"""``amqp-stream cluster status``: the cluster as ZooKeeper holds it — each node, whether it
is alive, how many stream leaderships it holds, whether it is drained, and each stream's
members, leader and epoch.

``cluster drain NODE`` / ``cluster revive NODE``, as ``rabbitmq-upgrade drain`` / ``revive``:
mark a node drained for maintenance in ZooKeeper (it survives restarts) or clear the mark. A
drained node hands every leadership it holds to another in-sync member (a leadership
transfer, made by the node itself) and is not chosen to lead (placement, elections,
transfers) until revived; ``drain`` waits (``--wait``) until it leads nothing.

It reads ZooKeeper directly (``--cluster``, or ``AMQP_STREAM_CLUSTER`` / the config file's
``cluster`` as ``serve`` reads them), as an observer: it does not join the cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from amqp_stream import config as config_mod

ACTIONS = ("status", "drain", "revive")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS,
                        help="status: nodes, alive, leaders held, drained; drain NODE: move "
                             "its leaderships away and keep it from leading; revive NODE: "
                             "let it lead again")
    parser.add_argument("node", nargs="?", help="the node to drain or revive (--node-name)")
    add_cluster_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument("--wait", type=float, default=60.0, metavar="S",
                        help="drain: seconds to wait for the node to lead no stream "
                             "(default: 60)")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--config`` and ``--timeout``: how every cluster command finds
    ZooKeeper."""
    parser.add_argument("--cluster", help="zk://HOST:PORT[,HOST:PORT...]/PATH (default: "
                                          "AMQP_STREAM_CLUSTER or the config file's)")
    parser.add_argument("--config", metavar="FILE", help="settings file, as serve's")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
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

    if args.action != "status" and not args.node:
        print(f"amqp-stream cluster: error: {args.action} needs the node's name",
              file=sys.stderr)
        return 2
    try:
        if args.action != "status":
            return _drain(url, args)
        status = read_view(url, args.timeout).status()
    except CoordinationError as exc:  # unreachable: a failure at run time, as the others'
        print(f"amqp-stream cluster: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    print(f"{'node':<20} {'alive':<6} {'leaders':>7}  {'drained':<7}  address")
    for node in status["nodes"]:
        print(f"{node['name']:<20} {'yes' if node['alive'] else 'NO':<6} {node['leaders']:>7}  "
              f"{'yes' if node['drained'] else 'no':<7}  {node['address'] or '-'}")
    if status["streams"]:
        print()
        print(f"{'stream':<30} {'epoch':>5}  leader / members")
        for s in status["streams"]:
            leader = (s["leader"] + ("" if s["leader_alive"] else " (down)") if s["leader"]
                      else "none (electing)")
            print(f"{s['stream']:<30} {s['epoch']:>5}  {leader} / {', '.join(s['members'])}")
    return 0


def _drain(url: str, args: argparse.Namespace) -> int:
    """``drain NODE`` (mark it, then wait until it leads no stream) or ``revive NODE``."""
    from amqp_stream.cluster.coordination import read_view, set_drained

    node = args.node
    view = read_view(url, args.timeout)
    if node not in view.known():
        print(f"amqp-stream cluster: error: no node {node!r} in the cluster (known: "
              f"{', '.join(sorted(view.known())) or 'none'})", file=sys.stderr)
        return 1
    if args.action == "revive":
        changed = set_drained(url, args.timeout, node, False)
        print(f"{node} revived: it may lead streams again" if changed
              else f"{node} was not drained: nothing to do")
        return 0
    changed = set_drained(url, args.timeout, node, True)
    print(f"{node} {'drained' if changed else 'was drained already'}: it takes no leadership; "
          f"moving the ones it holds")
    deadline = time.monotonic() + args.wait
    while True:
        led = sorted(n for n, x in read_view(url, args.timeout).layouts.items()
                     if x.leader == node)
        if not led:
            print(f"{node} leads no stream")
            return 0
        if time.monotonic() >= deadline:
            print(f"amqp-stream cluster: error: {node} still leads {len(led)} stream(s) after "
                  f"{args.wait:g} s: {', '.join(led)} (no in-sync, running, undrained member "
                  f"to take over? its log says why); it stays drained", file=sys.stderr)
            return 1
        time.sleep(0.5)  # polling ZooKeeper for the transfers' layouts
