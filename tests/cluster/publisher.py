"""A stream-protocol named producer (rstream's low-level ``Client``) that follows a cluster
stream's leader through Metadata and resends what was not confirmed under the same publishing
ids, so the leader's deduplication keeps each message once: the workload of the fault tests."""

from __future__ import annotations

import asyncio
from typing import Iterable

from rstream import AMQPMessage, schema
from rstream.client import Client
from rstream.exceptions import LeaderNotAvailable, ServerError

from amqp_stream.testing import BrokerProcess
from tests.stream.rstream_low import until

__all__ = ["PUBLISHER", "alive", "body", "login", "leader_port", "Publisher"]

PUBLISHER = "p1"  # the named producer: its ids are deduplicated across leaders


def alive(b: BrokerProcess) -> bool:
    return b.proc is not None and b.proc.poll() is None


def body(i: int, prefix: bytes = b"m") -> bytes:
    """Message ``i``'s body: unique, so the checker finds each in the logs."""
    return b"<%s-%06d>" % (prefix, i)


def login(broker: BrokerProcess) -> tuple[str, str]:
    """The user and password to log in to ``broker`` with: guest on loopback, the user a node
    off loopback was given (``tests/cluster/netns.py``)."""
    return getattr(broker, "login", ("guest", "guest"))


async def leader_port(broker: BrokerProcess, stream: str, timeout: float = 3) -> int | None:
    """The stream port of ``stream``'s leader as ``broker``'s Metadata names it; None when it
    names none or does not answer within ``timeout`` (a paused node accepts the connection
    and then says nothing)."""
    c = Client(broker.host, broker.stream_port, frame_max=1024 * 1024, heartbeat=60)
    try:
        await asyncio.wait_for(c.start(), timeout)
        await asyncio.wait_for(c.authenticate("/", *login(broker)), timeout)
        leader, _ = await asyncio.wait_for(c.query_leader_and_replicas(stream), timeout)
        return int(leader.port)
    except (ServerError, LeaderNotAvailable, OSError, asyncio.TimeoutError):
        return None
    finally:
        try:
            await asyncio.wait_for(c.close(), 1)
        except Exception:  # already gone, or never connected
            pass


class Publisher:
    """A named producer that follows the leader: on a stall or a lost connection it asks a
    live node's Metadata for the leader, connects there, and sends again what was not
    confirmed under the same ids (the new leader drops those it holds)."""

    def __init__(self, stream: str, brokers: Iterable[BrokerProcess], name: str = PUBLISHER,
                 prefix: bytes = b"m"):
        self.stream, self.name, self.prefix = stream, name, prefix
        self.brokers = list(brokers)
        self.by_port = {b.stream_port: b for b in self.brokers}
        self.client: Client | None = None
        self.leader: BrokerProcess | None = None
        self.pending: dict[int, bytes] = {}
        self.confirmed: dict[int, bytes] = {}
        self.errors: list[int] = []

    async def _on_confirm(self, frame: schema.PublishConfirm) -> None:
        for i in frame.publishing_ids:
            if i in self.pending:
                self.confirmed[i] = self.pending.pop(i)

    async def _on_error(self, frame: schema.PublishError) -> None:
        self.errors += [e.publishing_id for e in frame.errors]

    async def connect(self, avoid: BrokerProcess | None = None, timeout: float = 30) -> None:
        """Connect to the leader Metadata names (not ``avoid``), asking each live node."""
        await self.drop()
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for b in self.brokers:
                if b is avoid or not alive(b):
                    continue
                port = await leader_port(b, self.stream)
                if port is None:
                    continue
                target = self.by_port.get(port)
                if target is None or target is avoid or not alive(target):
                    continue
                try:
                    await self._attach(target)
                    return
                except (ServerError, OSError, asyncio.TimeoutError):
                    await self.drop()
            assert asyncio.get_running_loop().time() < deadline, "no leader to publish to"
            await asyncio.sleep(0.1)  # polling Metadata for the next answer

    async def _attach(self, broker: BrokerProcess, create: bool = False) -> None:
        c = Client(broker.host, broker.stream_port, frame_max=1024 * 1024, heartbeat=60)
        self.client = c
        await asyncio.wait_for(c.start(), 5)
        await asyncio.wait_for(c.authenticate("/", *login(broker)), 5)
        c.add_handler(schema.PublishConfirm, self._on_confirm)
        c.add_handler(schema.PublishError, self._on_error)
        if create:  # on this connection, so the first publish follows the Create at once
            await asyncio.wait_for(c.create_stream(self.stream), 5)
        await asyncio.wait_for(c.declare_publisher(self.stream, self.name, 1), 5)
        self.leader = broker
        if self.pending:  # again, under the same ids: the leader drops what it holds
            await self._send(sorted(self.pending))

    async def drop(self) -> None:
        c, self.client, self.leader = self.client, None, None
        if c is not None:
            try:
                await asyncio.wait_for(c.close(), 2)
            except Exception:  # the peer is gone: nothing to close cleanly
                pass

    async def _send(self, ids: list[int]) -> None:
        assert self.client is not None
        for k in range(0, len(ids), 100):
            await self.client.publish([
                schema.Message(publishing_id=i, filter_value=None,
                               data=bytes(AMQPMessage(body=self.pending[i])))
                for i in ids[k:k + 100]], 1)

    async def publish(self, ids: range, stall: float = 3.0) -> None:
        """Send ``ids`` and wait until each is confirmed, following the leader."""
        for i in ids:
            self.pending[i] = body(i, self.prefix)
        try:
            await self._send(list(ids))
        except Exception:  # the leader went mid-send: what is pending goes again
            pass
        await self.settle(stall)

    async def settle(self, stall: float = 3.0, timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.pending:
            assert asyncio.get_running_loop().time() < deadline, \
                f"{len(self.pending)} publishes never confirmed"
            before = len(self.pending)
            try:
                await until(lambda: len(self.pending) < before, "confirms", stall)
            except AssertionError:  # no progress: the leader may be gone; ask Metadata
                await self.connect()


