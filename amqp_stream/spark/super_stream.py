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
"""

from __future__ import annotations

from typing import Callable, Sequence

import mmh3

from amqp_stream import client as amqp
from amqp_stream.client.stream import StreamClient
from amqp_stream.streamproto import Partitions, ResponseCode

__all__ = ["partitions", "hash_index", "route_indices", "ROUTING_HASHES", "SEED", "MAX_PUBLISHERS"]

SEED = 104729  # every stream client's seed (the 10,000th prime)
MAX_PUBLISHERS = 255  # publisher ids of one stream-protocol connection are a byte (0 unused here)


def _murmur3(key: str, count: int) -> int:
    return mmh3.hash(key.encode("utf-8"), SEED, signed=False) % count


def _rstream(key: str, count: int) -> int:
    return int.from_bytes(mmh3.hash_bytes(key.encode("utf-16"), SEED), "little", signed=False) % count


ROUTING_HASHES: dict[str, Callable[[str, int], int]] = {"murmur3": _murmur3, "rstream": _rstream}


def hash_index(key: str, count: int, scheme: str = "murmur3") -> int:
    """The position in the partition list that ``key`` routes to under ``scheme``."""
    return ROUTING_HASHES[scheme](key, count)


def route_indices(keys: Sequence[object], count: int, scheme: str, column: str) -> list[int]:
    """Each key's partition position. Keys are strings or integers (an integer routes as its
    decimal text, as a client's key extractor would give it); a null fails: no client routes
    a message without a key, and a default partition would hide the missing value."""
    index = ROUTING_HASHES[scheme]
    out = []
    for i, key in enumerate(keys):
        if key is None:
            raise amqp.PublishError(f"routingKeyColumn {column!r} is null in row {i} of a batch: every row "
                                    "written to a super stream needs a routing key", (), 0, None)
        out.append(index(key if isinstance(key, str) else str(key), count))
    return out


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
