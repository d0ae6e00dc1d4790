"""Cluster nodes in network namespaces of their own, so a test can cut links for real.

Topology (all of it made and removed by ``Network``): a "switch" namespace holding a bridge;
one namespace per node, its ``eth0`` (a veth pair's end, the other end on the bridge) with its
own address ``10.X.Y.11``, ``.12``, ...; and one veth pair from the root namespace to the
bridge, ``10.X.Y.1`` on the root side, where ZooKeeper listens and whence the test's clients
connect. A node advertises its namespace address, so the nodes replicate over the bridge.

A cut is a set of iptables DROP rules inside a node's namespace (``cut_peers``: to and from
the other nodes; ``cut_zookeeper``: to and from ZooKeeper's port), ``heal`` flushes them. Only
the namespaces made here are touched. Needs root and Debian's ``iproute2`` and ``iptables``
(``scripts/bootstrap`` installs them): ``unavailable()`` says why not, when not.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from amqp_stream.testing import BrokerProcess, free_port
from tests.cluster.nodes import SESSION_TIMEOUT

__all__ = ["unavailable", "Network", "NetnsBroker", "LOGIN"]

LOGIN = ("partitions", "cut-links-pw")  # the user the namespaced nodes are given


def unavailable() -> str | None:
    """Why namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root (the partition tests run as root only)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool!r} is not installed (Debian: iproute2, iptables; scripts/bootstrap)"
    return None


def _sh(*args: str) -> str:
    out = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A /24 under 10.0.0.0/8 that no route of the root namespace overlaps."""
    used = []
    for line in _sh("ip", "-4", "route", "show", "table", "all").splitlines():
        word = line.split()[0] if line.split() else ""
        if word[:1].isdigit():
            try:
                used.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                continue
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{rng.randrange(200, 250)}.{rng.randrange(256)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the test network")


class Network:
    """The namespaces, the bridge and the root side's address (``host``); ``close()`` removes
    them all (deleting a namespace deletes its veth ends)."""

    def __init__(self, nodes: int = 3):
        rng = random.Random()
        self.tag = f"{os.getpid() % 10000:04d}{rng.randrange(100):02d}"  # names <= 15 chars
        self.net = _free_subnet(rng)
        hosts = list(self.net.hosts())
        self.host = str(hosts[0])  # the root namespace's end: ZooKeeper, the test's clients
        self.switch = f"asw{self.tag}"
        self.namespaces: dict[str, str] = {}
        self.addresses: dict[str, str] = {}
        self._made: list[str] = []
        self._root_if = f"asr{self.tag}"
        try:
            self._add_ns(self.switch)
            _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            self._wire(None, self._root_if, self.host)
            for k in range(nodes):
                name = f"n{k + 1}"
                ns = f"asn{self.tag}{k + 1}"
                self._add_ns(ns)
                self.namespaces[name] = ns
                self.addresses[name] = str(hosts[10 + k])
                self._wire(ns, "eth0", self.addresses[name])
        except BaseException:
            self.close()
            raise

    def _add_ns(self, ns: str) -> None:
        _sh("ip", "netns", "add", ns)
        self._made.append(ns)
        _sh("ip", "-n", ns, "link", "set", "lo", "up")

    def _wire(self, ns: str | None, ifname: str, address: str) -> None:
        """A veth pair: ``ifname`` with ``address`` in ``ns`` (None: the root namespace), its
        peer on the switch's bridge."""
        peer = f"asp{self.tag}{len(self._made)}{ifname[-1]}"
        _sh("ip", "link", "add", peer, "type", "veth", "peer", "name", f"{peer}x")
        _sh("ip", "link", "set", peer, "netns", self.switch)
        _sh("ip", "-n", self.switch, "link", "set", peer, "master", "br0", "up")
        if ns is None:
            _sh("ip", "link", "set", f"{peer}x", "name", ifname)
            self._root_ifs = [ifname]
            prefix: list[str] = []
        else:
            _sh("ip", "link", "set", f"{peer}x", "netns", ns)
            _sh("ip", "-n", ns, "link", "set", f"{peer}x", "name", ifname)
            prefix = ["-n", ns]
        _sh("ip", *prefix, "addr", "add", f"{address}/{self.net.prefixlen}", "dev", ifname)
        _sh("ip", *prefix, "link", "set", ifname, "up")

    def iptables(self, node: str, *rule: str) -> None:
        _sh("ip", "netns", "exec", self.namespaces[node], "iptables", *rule)

    def cut_peers(self, node: str) -> None:
        """``node`` reaches neither of the other nodes, nor they it (ZooKeeper and the test's
        clients still do)."""
        for other, address in self.addresses.items():
            if other != node:
                self.iptables(node, "-A", "INPUT", "-s", address, "-j", "DROP")
                self.iptables(node, "-A", "OUTPUT", "-d", address, "-j", "DROP")

    def cut_zookeeper(self, node: str, zk_port: int) -> None:
        """``node`` reaches ZooKeeper no more (the other nodes and the test's clients still
        do): its session ends after the timeout, as for a node lost, yet it keeps serving."""
        self.iptables(node, "-A", "OUTPUT", "-d", self.host, "-p", "tcp", "--dport", str(zk_port),
                      "-j", "DROP")
        self.iptables(node, "-A", "INPUT", "-s", self.host, "-p", "tcp", "--sport", str(zk_port),
                      "-j", "DROP")

    def heal(self, node: str) -> None:
        self.iptables(node, "-F", "INPUT")
        self.iptables(node, "-F", "OUTPUT")

    def close(self) -> None:
        if hasattr(self, "_root_ifs"):
            subprocess.run(["ip", "link", "del", self._root_if], capture_output=True, timeout=30)
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._made.clear()


class NetnsBroker(BrokerProcess):
    """A cluster node run in ``ns`` (``ip netns exec``: the process is the broker itself, so
    signals reach it), listening on and advertising ``address``."""

    def __init__(self, ns: str, address: str, tmp: Path, url: str, name: str, *extra: str):
        (tmp / name).mkdir(parents=True, exist_ok=True)
        super().__init__(tmp / name / "data", extra_args=[
            "--cluster", url, "--node-name", name, "--stream-advertised-host", address,
            "--replication-port", str(free_port()),
            "--cluster-session-timeout", str(SESSION_TIMEOUT), *extra])
        self.ns = ns
        self.host = address
        # off loopback, guest may not log in (RabbitMQ's rule): a user of the node's own
        self.login = LOGIN
        for args in (("add", *LOGIN), ("set-permissions", "-p", "/", LOGIN[0], ".*", ".*", ".*")):
            subprocess.run([sys.executable, "-m", "amqp_stream", "users", "--data-dir",
                            str(self.data_dir), *args], check=True, capture_output=True,
                           timeout=60)

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *super().command()]
