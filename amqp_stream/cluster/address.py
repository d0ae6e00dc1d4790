"""The cluster's address: ``zk://HOST:PORT[,HOST:PORT...]/PATH`` (a ZooKeeper ensemble and the
path under which this cluster keeps its state, so several clusters can share an ensemble).
Apart from coordination so the config can check it without importing kazoo."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["parse_url", "check_node_name"]


def parse_url(url: str) -> tuple[str, str]:
    """``zk://HOST:PORT[,HOST:PORT...]/PATH`` -> (kazoo's hosts string, the path);
    ``ValueError`` saying what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != "zk" or not parts.netloc:
        raise ValueError(f"a cluster is zk://HOST:PORT[,HOST:PORT...]/PATH, not {url!r}")
    for host in parts.netloc.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{url!r}: {host!r} is not HOST:PORT")
    path = parts.path.rstrip("/")
    if not path:
        raise ValueError(f"{url!r}: the cluster needs a path (zk://HOSTS/PATH) of its own")
    return parts.netloc, path


def check_node_name(name: str) -> None:
    """A node name is one ZooKeeper path element: 1..64 characters, no ``/``."""
    if not name or len(name) > 64 or "/" in name or name in (".", "..") or not name.isprintable():
        raise ValueError(f"a node name is 1..64 printable characters without '/', not {name!r}")
