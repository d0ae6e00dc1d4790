"""Jepsen-style fault runs on a real cluster: a seeded nemesis kills, restarts and pauses nodes
at random moments while named producers of both protocols publish with confirms and a
consumer reads throughout; afterwards ``tests.cluster.checker`` and ``Reader.check`` compare
what every member holds and what the consumer saw with what was confirmed.

Used by ``tests/cluster/test_faults.py`` (short runs in ``make test``) and
``scripts/cluster_soak.py`` (long ones). The seed is printed; ``CLUSTER_FAULTS_SEED`` replays
a schedule (the same faults, kinds, victims' roles and pauses; the moments they hit the
workload depend on the machine's timing).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from rstream import schema
from rstream.client import Client
from rstream.constants import OffsetType

from amqp_stream.client import Client as AmqpClient
from amqp_stream.client.errors import ClientError
from amqp_stream.client.publisher import Publisher as AmqpPublisherLink
from amqp_stream.testing import BrokerProcess
from tests.cluster.checker import body_of, check, local_end, log_dir, records
from tests.cluster.nodes import holds_log
from tests.cluster.publisher import Publisher, alive, body, login
from tests.polling import wait_for
from tests.stream.rstream_low import admin, run, until

__all__ = ["seed_from_env", "ZkLayout", "Nemesis", "AmqpPublisher", "Reader", "heal", "Outcome",
           "run_faults"]


def seed_from_env(var: str = "CLUSTER_FAULTS_SEED") -> int:
    """The seed of this run: ``$CLUSTER_FAULTS_SEED`` when set, otherwise a fresh one; printed
    so that a failing run can be replayed."""
    seed = int(os.environ[var]) if os.environ.get(var) else random.SystemRandom().randrange(1 << 32)
    print(f"fault schedule seed: {seed} (replay with {var}={seed})", flush=True)
    return seed


class ZkLayout:
    """A stream's layout and the live nodes read straight from ZooKeeper (the test's own kazoo
    session: the nemesis and the AMQP publisher ask it who leads)."""

    def __init__(self, hosts: str, root: str, stream: str):
        self.root, self.stream = root, stream
        self.zk = KazooClient(hosts=hosts, timeout=10.0)
        self.zk.start(timeout=15)

    def leader(self) -> tuple[str | None, int]:
        """(the leader's name when its node is live, else None; the layout's epoch)."""
        try:
            data, _ = self.zk.get(f"{self.root}/streams/{self.stream}")
            live = set(self.zk.get_children(f"{self.root}/nodes"))
        except NoNodeError:
            return None, 0
        doc = json.loads(data)
        return (doc["leader"] if doc["leader"] in live else None), int(doc["epoch"])

    def live(self) -> set[str]:
        """The names of the nodes holding a session."""
        try:
            return set(self.zk.get_children(f"{self.root}/nodes"))
        except NoNodeError:
            return set()

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


@dataclass
class Fault:
    at: float  # seconds since the run began
    kind: str
    node: str
    held: float  # how long the node was down or paused


@dataclass
class Nemesis:
    """One fault at a time, every ``gap`` seconds (random within it), each undone before the
    next, so a majority is back between faults:

    - ``kill-leader``: SIGKILL the leader, restart it after a random time (up to twice the
      session timeout: sometimes before the session ends, sometimes after an election);
    - ``pause-leader``: SIGSTOP the leader past the session timeout (it is deposed while it
      holds publishes), then SIGCONT;
    - ``pause``: SIGSTOP any node for less than the session timeout (no election);
    - ``kill-replica``: SIGKILL a replica, restart it after a random time.

    The first fault always deposes the leader (a pause past the session timeout, or a kill
    held longer than it), so every run has at least one election: a schedule whose only
    leader fault was a kill restarted within the session kept its leader and tested no
    failover (a fresh-clone run failed "the leader never moved" on such a seed).
    """

    brokers: Mapping[str, BrokerProcess]
    layout: ZkLayout
    rng: random.Random
    session_timeout: float
    gap: tuple[float, float] = (0.5, 2.5)
    faults: list[Fault] = field(default_factory=list)
    error: BaseException | None = None
    KINDS = (("kill-leader", 4), ("pause-leader", 2), ("pause", 2), ("kill-replica", 2))

    def run(self, stop: threading.Event) -> None:
        t0 = time.monotonic()
        try:
            first = True
            while not stop.wait(self.rng.uniform(*self.gap)):
                kinds = [(k, w) for k, w in self.KINDS if not first or k.endswith("-leader")]
                kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
                pick, held = self.rng.random(), self._held(kind, deposes=first)
                first = False
                leader = self._leader(stop)
                if leader is None:
                    break
                names = sorted(self.brokers)
                others = [n for n in names if n != leader]
                victim = {"kill-leader": leader, "pause-leader": leader,
                          "pause": names[int(pick * len(names))],
                          "kill-replica": others[int(pick * len(others))]}[kind]
                self.faults.append(Fault(round(time.monotonic() - t0, 2), kind, victim, held))
                b = self.brokers[victim]
                if kind.startswith("kill"):
                    b.kill()
                    stop.wait(held)
                    b.start(timeout=60)
                else:
                    assert b.proc is not None
                    b.proc.send_signal(signal.SIGSTOP)
                    time.sleep(held)  # the fault itself: the node stays stopped this long
                    b.proc.send_signal(signal.SIGCONT)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _held(self, kind: str, deposes: bool = False) -> float:
        """How long the fault lasts; ``deposes``: long enough for the others to elect."""
        t = self.session_timeout
        return {"kill-leader": self.rng.uniform(1.5 * t if deposes else 0, 2 * t),
                "kill-replica": self.rng.uniform(0, 2 * t),
                "pause-leader": t + self.rng.uniform(0.5, 2.0),
                "pause": self.rng.uniform(0.1, 0.8 * t)}[kind]

    def _leader(self, stop: threading.Event, timeout: float = 60) -> str | None:
        """The live leader, waiting for an election if there is none right now."""
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            leader, _ = self.layout.leader()
            if leader is not None:
                return leader
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader elected within {timeout} s")
            stop.wait(0.1)
        return None


def heal(brokers: Mapping[str, BrokerProcess]) -> None:
    """Every node running again: paused ones resumed, dead ones restarted."""
    for b in brokers.values():
        if alive(b):
            assert b.proc is not None
            b.proc.send_signal(signal.SIGCONT)
        else:
            b.start(timeout=60)


class AmqpPublisher:
    """An AMQP 1.0 named publisher (the project's proton-based client: ``x-publishing-id`` per
    message, a publisher reference on the link) that publishes to whichever node leads and,
    on a lost connection, a rejection or a stall, reconnects to the leader and sends again
    what was not accepted under the same ids, as the stream ``Publisher`` does."""

    def __init__(self, stream: str, brokers: Mapping[str, BrokerProcess], layout: ZkLayout,
                 reference: str = "amqp-p1", prefix: bytes = b"a", batch: int = 50,
                 timeout: float = 2.0):
        self.stream, self.brokers, self.layout = stream, brokers, layout
        self.reference, self.prefix, self.batch, self.timeout = reference, prefix, batch, timeout
        self.pending: dict[int, bytes] = {}
        self.confirmed: dict[int, bytes] = {}
        self.reconnects = 0
        self.error: BaseException | None = None
        self._client: AmqpClient | None = None
        self._link: AmqpPublisherLink | None = None

    def run(self, stop: threading.Event, settle_timeout: float = 90) -> None:
        """Publish batches until ``stop``, then settle what is pending."""
        try:
            next_id = 1
            while not stop.is_set():
                self.pending.update({i: body(i, self.prefix) for i in range(next_id, next_id + self.batch)})
                next_id += self.batch
                self.settle(settle_timeout)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self._drop()

    def settle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.pending:
            assert time.monotonic() < deadline, f"{len(self.pending)} AMQP publishes never accepted"
            if self._link is None and not self._connect():
                time.sleep(0.1)  # no live leader yet: ask ZooKeeper again
                continue
            assert self._link is not None
            ids = sorted(self.pending)
            try:
                for i in ids:
                    self._link.publish(self.pending[i], publishing_id=i)
                outcomes = self._link.flush(check=False)
            except ClientError as exc:  # lost, stalled (a paused node) or detached
                outcomes = getattr(exc, "outcomes", [])
                self._drop()
            for o in outcomes:  # seq numbers count from 0 on each link, in publish order
                if o.accepted and o.seq < len(ids):
                    self.confirmed[ids[o.seq]] = self.pending.pop(ids[o.seq])
            if self.pending:  # rejected (a replica, a deposed leader): find the leader again
                self._drop()

    def _connect(self) -> bool:
        leader, _ = self.layout.leader()
        b = self.brokers.get(leader) if leader else None
        if b is None or not alive(b):
            return False
        try:
            self._client = AmqpClient(b.url, timeout=self.timeout)
            self._link = self._client.publisher(self.stream, window=self.batch + 1,
                                                reference=self.reference)
        except ClientError:
            self._drop()
            return False
        self.reconnects += 1
        return True

    def _drop(self) -> None:
        client, self._client, self._link = self._client, None, None
        if client is not None:
            try:
                client.abort()
            except Exception:  # noqa: BLE001 - the peer is gone
                pass


class Reader:
    """A stream-protocol consumer that reads the stream throughout the faults, from any live
    member (a replica or the leader, picked at random), resuming after the last offset it saw
    whenever its node goes quiet, dies or stops (``stall`` seconds without a chunk while the
    producers still publish, or a MetadataUpdate)."""

    def __init__(self, stream: str, brokers: Mapping[str, BrokerProcess], rng: random.Random,
                 stall: float = 2.0):
        self.stream, self.brokers, self.rng, self.stall = stream, brokers, rng, stall
        self.seen: list[tuple[int, bytes]] = []
        self.next = 0
        self.connections = 0
        self._last = 0.0
        self._moved = False
        self.last_error: BaseException | None = None

    async def _on_deliver(self, frame: schema.Deliver) -> None:
        offset = frame.chunk_first_offset
        for m in frame.get_messages():
            if offset >= self.next:
                self.seen.append((offset, body_of(bytes(m))))
                self.next = offset + 1
            offset += 1
        self._last = asyncio.get_running_loop().time()

    async def _on_update(self, frame: schema.MetadataUpdate) -> None:
        self._moved = True

    async def run(self, done: Callable[[], bool]) -> None:
        """Read until ``done()`` holds (checked while connected and between connections)."""
        loop = asyncio.get_running_loop()
        while not done():
            live = [b for _, b in sorted(self.brokers.items()) if alive(b)]
            if not live:
                await asyncio.sleep(0.1)
                continue
            b = self.rng.choice(live)
            c = Client(b.host, b.stream_port, frame_max=1024 * 1024, heartbeat=60)
            try:
                await asyncio.wait_for(c.start(), 3)
                await asyncio.wait_for(c.authenticate("/", *login(b)), 3)
                # rstream queues Deliver frames per subscription id (the handler's name) and
                # runs the handler from that queue's task
                handler = self._on_deliver_credit(c)
                c.add_handler(schema.Deliver, handler, name="1")
                await c.run_queue_listener_task(1, handler)
                c.add_handler(schema.MetadataUpdate, self._on_update)
                self._moved = False
                await asyncio.wait_for(c.subscribe(
                    self.stream, 1, schema.OffsetSpec.from_params(OffsetType.OFFSET, self.next),
                    initial_credit=20), 3)
                self.connections += 1
                self._last = loop.time()
                while not done() and not self._moved and loop.time() - self._last < self.stall:
                    await asyncio.sleep(0.05)
            except Exception as exc:  # noqa: BLE001 - the node died, stopped or is not serving yet
                self.last_error = exc
                await asyncio.sleep(0.1)
            finally:
                try:
                    await asyncio.wait_for(c.close(), 1)
                except Exception:  # noqa: BLE001 - already gone
                    pass

    def _on_deliver_credit(self, c: Client) -> Callable[[schema.Deliver], object]:
        async def handler(frame: schema.Deliver) -> None:
            await self._on_deliver(frame)
            await c.credit(1, 1)
        return handler

    def check(self, log: str, end: int, confirmed: set[bytes]) -> int:
        """What the consumer saw is the log itself, in order, from offset 0 without a gap
        (``log``: a member's log directory, identical on all by ``checker.check``), every
        confirmed message among it; the number of messages it saw."""
        held = records(log, end)
        user = [(o, body_of(s)) for o, s in held]
        assert self.seen == user[:len(self.seen)], _first_difference(self.seen, user)
        assert len(self.seen) == len(user), (
            f"the consumer saw {len(self.seen)} records, the log holds {len(user)} below {end}")
        missing = confirmed - {b for _, b in self.seen}
        assert not missing, f"{len(missing)} confirmed messages never reached the consumer, " \
                            f"e.g. {sorted(missing)[:3]}"
        return len(self.seen)


def _first_difference(seen: list[tuple[int, bytes]], log: list[tuple[int, bytes]]) -> str:
    for k, (a, b) in enumerate(zip(seen, log, strict=False)):
        if a != b:
            return f"record #{k}: the consumer saw {a}, the log holds {b}"
    return f"the consumer saw {len(seen)} records, the log {len(log)}"


@dataclass
class Outcome:
    """What a run did and what the checks found."""

    seed: int
    faults: list[Fault]
    confirmed_stream: int
    confirmed_amqp: int
    consumed: int
    consumer_connections: int
    amqp_connections: int
    epoch: int
    commit_end: int

    def line(self) -> str:
        kinds: dict[str, int] = {}
        for f in self.faults:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        return (f"seed {self.seed}: {len(self.faults)} faults {kinds}, final epoch {self.epoch}; "
                f"confirmed {self.confirmed_stream} (stream protocol) + {self.confirmed_amqp} "
                f"(AMQP) checked on every member up to offset {self.commit_end}; the consumer "
                f"read {self.consumed} in order over {self.consumer_connections} connections")


def run_faults(zk_hosts: str, zk_root: str, brokers: Mapping[str, BrokerProcess], stream: str,
               seed: int, duration: float, session_timeout: float) -> Outcome:
    """Declare ``stream`` on the (started) ``brokers``, run the workload and the nemesis for
    ``duration`` seconds, heal, and check: every member's log identical up to the commit end,
    every confirmed message of both producers there exactly once, the consumer's reading the
    log itself in order with every confirmed message. Raises AssertionError naming the seed."""
    rng = random.Random(seed)
    first = sorted(brokers)[0]
    layout = ZkLayout(zk_hosts, zk_root, stream)
    stop = threading.Event()
    nemesis = Nemesis(brokers, layout, random.Random(rng.random()), session_timeout)
    amqp = AmqpPublisher(stream, brokers, layout)
    reader = Reader(stream, brokers, random.Random(rng.random()))
    expected: list[int] = []  # the user records below the commit end, once known

    async def workload() -> Publisher:
        async with admin(brokers[first]) as c:
            await c.create_stream(stream)
        for b in brokers.values():
            await until(lambda b=b: holds_log(b, stream), "every member's log", 30)
        producer = Publisher(stream, brokers.values())
        await producer.connect()
        loop = asyncio.get_running_loop()
        reading = asyncio.create_task(reader.run(lambda: bool(expected) and len(reader.seen) >= expected[0]))
        threads = [threading.Thread(target=nemesis.run, args=(stop,), name="nemesis"),
                   threading.Thread(target=amqp.run, args=(stop,), name="amqp-publisher")]
        for t in threads:
            t.start()
        try:
            k, until_t = 1, loop.time() + duration
            while loop.time() < until_t:
                await producer.publish(range(k, k + 100), stall=1.0)
                k += 100
        finally:
            stop.set()
            await loop.run_in_executor(None, threads[0].join)
            await loop.run_in_executor(None, heal, brokers)
        await producer.settle(stall=1.0, timeout=120)
        await loop.run_in_executor(None, threads[1].join)
        await producer.drop()
        assert nemesis.error is None, f"seed {seed}: the nemesis failed: {nemesis.error!r}"
        assert amqp.error is None, f"seed {seed}: the AMQP publisher failed: {amqp.error!r}"
        # every member at one end, under a live leader
        wait_for(lambda: layout.leader()[0] is not None, 60, "a live leader")
        wait_for(lambda: len({local_end(b, stream) for b in brokers.values()}) == 1, 60,
                 "every member at the leader's end")
        end = local_end(brokers[first], stream)
        expected.append(len(records(log_dir(brokers[first].data_dir, stream), end)))
        try:
            await asyncio.wait_for(reading, 60)
        except asyncio.TimeoutError:
            raise AssertionError(
                f"seed {seed}: the consumer read {len(reader.seen)} of {expected[0]} records "
                f"(next offset {reader.next}, {reader.connections} connections, last error "
                f"{reader.last_error!r})") from None
        return producer

    try:
        producer = run(workload(), duration + 600)
        end = local_end(brokers[first], stream)
        confirmed = set(producer.confirmed.values()) | set(amqp.confirmed.values())
        try:
            check({n: b.data_dir for n, b in brokers.items()}, stream, confirmed, at_least=end)
            consumed = reader.check(str(log_dir(brokers[first].data_dir, stream)), end, confirmed)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, faults {nemesis.faults}: {exc}") from None
        return Outcome(seed, nemesis.faults, len(producer.confirmed), len(amqp.confirmed),
                       consumed, reader.connections, amqp.reconnects, layout.leader()[1], end)
    finally:
        stop.set()
        layout.close()
