"""Super streams for the data source: their partitions, and which partition a routing key picks.

Partitions: the driver asks the broker with the stream protocol's Partitions command at
``streamUrl`` (the answer is in partition order, ``x-stream-partition-order``, as RabbitMQ
gives it); reads and writes then work on the partition streams, each an ordinary stream.

Routing by hash, as the stream clients route (the key picks ``partitions[hash % count]``):

- ``murmur3`` (the default): MurmurHash3 x86 32-bit, seed 104729, of the key's UTF-8 bytes,
  taken unsigned: RabbitMQ's Java client, the Node client (``hash/murmur32.ts``), Go and .NET,
  and Stream PerfTest;
- ``rstream``: what rstream 1.x's ``HashRoutingMurmurStrategy`` computes: MurmurHash3 x64
  128-bit, seed 104729, of ``bytes(key, "UTF-16")`` (a byte-order mark, then UTF-16 in the
  machine's order), the 16 bytes read as a little-endian unsigned integer.

The two disagree on most keys: a writer must use the scheme of the clients that share the
super stream with it (``routingHash``).

Routing by key (``routingType=key``), as rstream's ``RouteType.Key`` and the Java client's
``routing(...).key()``: the broker's Route command names the partitions bound with the key
(every one of them gets the row); a key bound to none fails the task, as those clients fail
the send.
"""

from __future__ import annotations

from typing import Callable, Sequence

import mmh3

from amqp_stream import client as amqp
from amqp_stream.client.stream import StreamClient
from amqp_stream.streamproto import Partitions, ResponseCode

__all__ = ["partitions", "hash_index", "route_indices", "KeyRouter", "ROUTING_HASHES", "ROUTING_TYPES",
           "SEED", "MAX_PUBLISHERS"]

SEED = 104729  # every stream client's seed (the 10,000th prime)
MAX_PUBLISHERS = 255  # publisher ids of one stream-protocol connection are a byte (0 unused here)


def _murmur3(key: str, count: int) -> int:
    return mmh3.hash(key.encode("utf-8"), SEED, signed=False) % count


def _rstream(key: str, count: int) -> int:
    return int.from_bytes(mmh3.hash_bytes(key.encode("utf-16"), SEED), "little", signed=False) % count


ROUTING_HASHES: dict[str, Callable[[str, int], int]] = {"murmur3": _murmur3, "rstream": _rstream}
ROUTING_TYPES = ("hash", "key")


def hash_index(key: str, count: int, scheme: str = "murmur3") -> int:
    """The position in the partition list that ``key`` routes to under ``scheme``."""
    return ROUTING_HASHES[scheme](key, count)


def _key_text(key: object, i: int, column: str) -> str:
    """A key as routed: strings as they are, integers as their decimal text (as a client's key
    extractor would give it); a null fails: no client routes a message without a key, and a
    default partition would hide the missing value."""
    if key is None:
        raise amqp.PublishError(f"routingKeyColumn {column!r} is null in row {i} of a batch: every row "
                                "written to a super stream needs a routing key", (), 0, None)
    return key if isinstance(key, str) else str(key)


def route_indices(keys: Sequence[object], count: int, scheme: str, column: str) -> list[int]:
    """Each key's partition position under hash routing."""
    index = ROUTING_HASHES[scheme]
    return [index(_key_text(key, i, column), count) for i, key in enumerate(keys)]


class KeyRouter:
    """``routingType=key`` for one task: each distinct key's partition positions, asked once
    with the Route command over the task's stream connection and kept (keys that route are
    binding keys, so the cache is as small as the super stream's bindings)."""

    def __init__(self, client: StreamClient, super_stream: str, partitions: Sequence[str], column: str):
        self.client, self.super_stream, self.column = client, super_stream, column
        self.positions = {stream: i for i, stream in enumerate(partitions)}
        self.routes: dict[str, list[int]] = {}

    def indices(self, keys: Sequence[object]) -> list[list[int]]:
        """For each key, the positions of the partitions it goes to (at least one)."""
        return [self._route(_key_text(key, i, self.column)) for i, key in enumerate(keys)]

    def _route(self, key: str) -> list[int]:
        found = self.routes.get(key)
        if found is None:
            streams = self.client.route(key, self.super_stream)
            if not streams:
                raise amqp.PublishError(f"routing key {key!r} (routingKeyColumn {self.column!r}) routes to no "
                                        f"partition of super stream {self.super_stream!r}: no partition is "
                                        "bound with that key (routingType=key)", (), 0, None)
            unknown = [s for s in streams if s not in self.positions]
            if unknown:
                raise amqp.PublishError(f"routing key {key!r} routes to {unknown} of super stream "
                                        f"{self.super_stream!r}, which were not its partitions when the "
                                        "write started", (), 0, None)
            found = self.routes[key] = [self.positions[s] for s in streams]
        return found


def partitions(stream_url: str, super_stream: str, *, user: str | None = None, password: str | None = None,
               timeout: float = 30.0) -> list[str]:
    """The partition streams of ``super_stream``, in partition order. ``StreamNotFound`` when
    there is no such super stream; ``ClientError`` when it has no partition (a super stream
    made over the management node without bindings) or the broker cannot be reached."""
    try:
        client = StreamClient(stream_url, user=user, password=password, timeout=timeout)
    except amqp.ClientError as exc:
        raise amqp.ClientError(f"cannot ask {stream_url} for the partitions of super stream "
                               f"{super_stream!r}: {exc}") from exc
    with client:
        corr = client._next_corr()
        answer = client._request(Partitions(corr, super_stream), corr)
    code = getattr(answer, "code", ResponseCode.OK)
    if code == ResponseCode.STREAM_DOES_NOT_EXIST:
        raise amqp.StreamNotFound(f"super stream {super_stream!r} does not exist at {stream_url} "
                                  "(create it with the CLI or a stream client first)", 404)
    client._check(answer, f"partitions of super stream {super_stream!r}")
    streams = list(getattr(answer, "streams", ()))
    if not streams:
        raise amqp.ClientError(f"super stream {super_stream!r} has no partition stream: nothing to read "
                               "or write (bind streams to it, or create it with partitions)")
    return streams
