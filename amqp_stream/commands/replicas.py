"""A replicated stream's operations, as ``rabbitmq-streams`` names them:

- ``stream status NAME`` (``stream_status``): each member — role, epoch, its log's end
  (``offset``: the last offset it holds durably), committed offset, first offset, segments —
  and, from the leader, how far each member's durable tail trails it (offsets and bytes);
- ``add-replica NAME NODE`` / ``delete-replica NAME NODE`` (``add_replica`` /
  ``delete_replica``; the rules in ``amqp_stream.cluster.membership``);
- ``transfer-leadership NAME NODE`` (RabbitMQ's ``rabbit_stream_queue:transfer_leadership``,
  behind ``rabbitmq-streams restart_stream --preferred-leader-node``).

The layout is read from (and changed in) ZooKeeper as ``cluster status`` reads it; each
member's figures come from its node's replication port (an ADMIN request), as RabbitMQ asks
each member's node over RPC. A transfer is asked of the leader, which moves it safely. Those
requests prove the cluster's secret (``amqp_stream.cluster.auth``: ``--cluster-secret``, the
config file's or ``AMQP_STREAM_CLUSTER_SECRET``, else the one under the ZooKeeper path), as
``rabbitmqctl`` proves the Erlang cookie.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from amqp_stream import config as config_mod
from amqp_stream.commands.cluster import add_cluster_arguments, cluster_url

COLUMNS = ("node", "role", "alive", "epoch", "offset", "committed_offset", "first_offset",
           "segments", "lag", "lag_bytes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    command = parser.prog.split()[-1]
    if command == "stream":
        parser.add_argument("action", choices=("status",), help="status: each member's figures")
        parser.add_argument("name", help="the stream")
        parser.add_argument("--json", action="store_true", help="print the status as JSON")
    else:
        parser.add_argument("name", help="the stream")
        parser.add_argument("node", help="the node's name (--node-name)")
    if command == "transfer-leadership" or command == "delete-replica":
        parser.add_argument("--wait", type=float, default=10.0, metavar="S",
                            help="seconds the leader waits for the new leader to hold its "
                                 "whole log (default: 10)")
    add_cluster_arguments(parser)
    parser.add_argument("--cluster-secret", metavar="SECRET",
                        help="the cluster's secret, proven to the nodes (default: "
                             "AMQP_STREAM_CLUSTER_SECRET, the config file's, or the one "
                             "under the cluster's ZooKeeper path)")


def run(args: argparse.Namespace) -> int:
    prog = args.command
    url = cluster_url(args, prog)
    if url is None:
        return 2
    from amqp_stream.cluster.coordination import CoordinationError

    try:
        # add-replica changes only ZooKeeper; the others ask nodes
        args.secret = None if prog == "add-replica" else \
            cluster_secret(url, _given_secret(args), args.timeout)
        if prog == "stream":
            return _status(url, args)
        if prog == "add-replica":
            return _change(url, args, "add")
        if prog == "delete-replica":
            return _delete(url, args)
        return _transfer(url, args)
    except (CoordinationError, ValueError, _Failed) as exc:  # LayoutRefused: a ValueError
        print(f"amqp-stream {prog}: error: {exc}", file=sys.stderr)
        return 1


class _Failed(Exception):
    """A node refused or could not be asked (the message says which)."""


class _Refused(_Failed):
    """A node refused this command's proof of the cluster's secret."""


def _given_secret(args: argparse.Namespace) -> str | None:
    """``--cluster-secret``, else the environment's or the config file's, as serve reads it."""
    try:
        return config_mod.load({"cluster_secret": args.cluster_secret},
                               config_file=args.config).cluster_secret
    except config_mod.ConfigError:  # serve's other settings need not be complete here
        return args.cluster_secret or os.environ.get(config_mod.ENV_PREFIX + "CLUSTER_SECRET")


def cluster_secret(url: str, given: str | None, timeout: float) -> bytes:
    """The secret the requests prove: ``given``, else the cluster's in ZooKeeper."""
    from amqp_stream.cluster.auth import secret_bytes
    from amqp_stream.cluster.coordination import read_secret

    if given is not None:
        return secret_bytes(given, "--cluster-secret")
    found = read_secret(url, timeout)
    if found is None:
        raise _Failed(f"the cluster at {url} has no secret in ZooKeeper (its nodes were "
                      f"started with --cluster-secret): give the same --cluster-secret")
    return secret_bytes(found, f"{url}/secret")


def _ask(node: Any, request: dict, timeout: float, secret: bytes) -> dict:
    from amqp_stream.cluster.auth import AuthError
    from amqp_stream.cluster.leader import admin_request
    from amqp_stream.cluster.replication_wire import WireError

    where = f"node {node.name} ({node.host}:{node.replication_port})"
    try:
        return admin_request(node.host, node.replication_port, request, timeout, secret)
    except AuthError as exc:
        raise _Refused(f"{where}: {exc}") from None
    except (OSError, WireError) as exc:
        raise _Failed(f"{where}: {exc}") from None


def stream_status(url: str, name: str, timeout: float, secret: bytes | None = None) -> dict:
    """The layout and each member's figures (members down: alive false, no figures).
    ``secret``: the cluster's (default: read from ZooKeeper)."""
    from amqp_stream.cluster.coordination import LayoutRefused, read_view

    if secret is None:
        secret = cluster_secret(url, None, timeout)

    view = read_view(url, timeout)
    layout = view.layouts.get(name)
    if layout is None:
        raise LayoutRefused(f"stream {name!r} does not exist")
    answers: dict[str, dict] = {}
    # replicas first, the leader last (as RabbitMQ): a replica's figures never lead the
    # leader's in the same answer
    for member in sorted(layout.members, key=lambda m: (m == layout.leader, m)):
        node = view.nodes.get(member)
        if node is None:
            answers[member] = {}
            continue
        try:
            answers[member] = _ask(node, {"op": "status", "stream": name}, timeout, secret)
        except _Refused:
            raise  # the secret is wrong: every member would say so
        except _Failed as exc:
            answers[member] = {"error": str(exc)}
    lead = answers.get(layout.leader, {})
    tails = lead.get("members", {})
    leader_end = lead.get("local_end")
    members = []
    for member in layout.members:
        a = answers[member]
        row: dict = {"node": member, "role": "leader" if member == layout.leader else "replica",
                     "alive": member in view.nodes, "catching_up": member in layout.catching_up,
                     "epoch": a.get("epoch"), "first_offset": a.get("first_offset"),
                     "segments": a.get("segments"), "error": a.get("error")}
        end = a.get("local_end")
        committed = a.get("committed_end")
        row["durable_end"] = end
        row["committed_end"] = committed
        row["offset"] = None if end is None else end - 1
        row["committed_offset"] = None if committed is None else committed - 1
        tail = tails.get(member)
        if tail is not None:
            row["lag"], row["lag_bytes"] = tail["lag"], tail["lag_bytes"]
        elif end is not None and leader_end is not None:
            row["lag"], row["lag_bytes"] = max(0, leader_end - end), None
        else:
            row["lag"], row["lag_bytes"] = None, None
        members.append(row)
    return {"stream": name, "leader": layout.leader, "epoch": layout.epoch,
            "leader_alive": layout.leader in view.nodes, "quorum": layout.quorum,
            "catching_up": list(layout.catching_up), "members": members}


def _status(url: str, args: argparse.Namespace) -> int:
    status = stream_status(url, args.name, args.timeout, args.secret)
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    print(f"stream {status['stream']}: leader {status['leader']}"
          f"{'' if status['leader_alive'] else ' (down)'}, epoch {status['epoch']}, quorum "
          f"{status['quorum']}" + (f", catching up: {', '.join(status['catching_up'])}"
                                   if status["catching_up"] else ""))
    print("\t".join(COLUMNS))
    for row in status["members"]:
        cells = []
        for col in COLUMNS:
            value = row.get(col)
            if col == "alive":
                value = "true" if value else "false"
            cells.append("-" if value is None else str(value))
        print("\t".join(cells))
    return 0


def _change(url: str, args: argparse.Namespace, kind: str) -> int:
    from amqp_stream.cluster import membership
    from amqp_stream.cluster.coordination import change_layout

    if kind == "add":
        old, new = change_layout(url, args.timeout, args.name,
                                 lambda lay, view: membership.add_replica(lay, args.node,
                                                                          view.nodes))
        done = "added (catching up; it counts toward the quorum once it holds the commit)"
    else:
        old, new = change_layout(url, args.timeout, args.name,
                                 lambda lay, view: membership.delete_replica(lay, args.node))
        done = "deleted"
    if old == new:
        print(f"{args.node} {'is already' if kind == 'add' else 'is not'} a member of "
              f"{args.name!r}: nothing to do")
    else:
        print(f"replica of {args.name!r} on {args.node} {done}; members: {', '.join(new.members)}")
    return 0


def _delete(url: str, args: argparse.Namespace) -> int:
    """As RabbitMQ, the leader's node may be named: its leadership moves first, to the
    running voter whose durable tail is highest."""
    from amqp_stream.cluster.coordination import read_view

    layout = read_view(url, args.timeout).layouts.get(args.name)
    if layout is not None and layout.leader == args.node and len(layout.members) > 1:
        status = stream_status(url, args.name, args.timeout, args.secret)
        candidates = [r for r in status["members"] if r["node"] != args.node and r["alive"]
                      and not r["catching_up"] and r["durable_end"] is not None]
        if not candidates:
            raise _Failed(f"{args.node} leads {args.name!r} and no other running member can "
                          f"take over")
        target = max(candidates, key=lambda r: (r["durable_end"], r["node"]))["node"]
        print(f"{args.node} leads {args.name!r}: moving the leadership to {target} first")
        _move(url, args, target)
    return _change(url, args, "delete")


def _move(url: str, args: argparse.Namespace, target: str) -> dict:
    """Ask the leader to hand over; asked again (up to ``--timeout``) while the node the
    layout names has not taken the role up yet (just after an election or a transfer)."""
    import time

    from amqp_stream.cluster.coordination import LayoutRefused, read_view

    deadline = time.monotonic() + args.timeout
    while True:
        view = read_view(url, args.timeout)
        layout = view.layouts.get(args.name)
        if layout is None:
            raise LayoutRefused(f"stream {args.name!r} does not exist")
        leader = view.nodes.get(layout.leader)
        if leader is None:
            raise _Failed(f"the leader of {args.name!r}, {layout.leader}, is down: an election "
                          f"will choose the next one")
        answer = _ask(leader, {"op": "transfer", "stream": args.name, "node": target,
                               "timeout": args.wait}, args.timeout + args.wait, args.secret)
        if not answer.get("retry") or time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # a back-off while the role is taken up, not a synchronisation
    if "error" in answer:
        raise _Failed(answer["error"])
    return answer


def _transfer(url: str, args: argparse.Namespace) -> int:
    answer = _move(url, args, args.node)
    print(f"{args.name!r}: {answer['leader']} leads (epoch {answer['epoch']})")
    return 0
