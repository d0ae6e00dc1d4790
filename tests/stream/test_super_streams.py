"""Super streams with the real ``rstream`` client against a real broker process: create and
delete (CreateSuperStream, DeleteSuperStream), Partitions and Route as RabbitMQ answers them,
``SuperStreamProducer`` routing by hash (rstream's murmur3 of the key) and by key (Route),
``SuperStreamConsumer`` reading every partition, RabbitMQ's codes for bad input, and the
definitions surviving a restart and a SIGKILL (also one in the middle of a creation)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from collections import Counter

import pytest

rstream = pytest.importorskip("rstream")
import mmh3  # noqa: E402  (rstream's own dependency: its hash routing)
from rstream import (AMQPMessage, ConfirmationStatus, ConsumerOffsetSpecification,  # noqa: E402
                     OffsetType, RouteType, SuperStreamConsumer, SuperStreamCreationOption,
                     SuperStreamProducer,
                     amqp_decoder, exceptions)

from amqp_stream.testing import BrokerProcess  # noqa: E402
from tests.stream import rstream_low  # noqa: E402
from tests.stream.rstream_low import admin as client  # noqa: E402

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("superstream") / "data")
    b.start()
    yield b
    b.close()


def run(coro):
    return rstream_low.run(coro, TIMEOUT)


def name() -> str:
    return f"ss-{uuid.uuid4().hex[:8]}"


def producer(broker: BrokerProcess, super_stream: str, routing: RouteType = RouteType.Hash,
             key=lambda m: m.application_properties["id"], **kw) -> SuperStreamProducer:
    async def extractor(message: AMQPMessage) -> str:
        return key(message)
    return SuperStreamProducer("127.0.0.1", broker.stream_port, username="guest",
                               password="guest", super_stream=super_stream, routing=routing,
                               routing_extractor=extractor, **kw)


async def publish(p: SuperStreamProducer, messages: list[AMQPMessage]) -> None:
    confirmed: list[ConfirmationStatus] = []
    done = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        confirmed.append(status)
        if len(confirmed) == len(messages):
            done.set()
    for m in messages:
        await p.send(m, on_publish_confirm=on_confirm)
    await done.wait()
    assert all(s.is_confirmed for s in confirmed)


async def read_all(broker: BrokerProcess, super_stream: str, count: int) -> dict[str, list]:
    """Partition -> bodies, read by a ``SuperStreamConsumer`` from the first offset."""
    got: dict[str, list] = {}
    done = asyncio.Event()

    def on_message(msg: AMQPMessage, ctx) -> None:
        got.setdefault(ctx.stream, []).append(bytes(msg.body if not isinstance(msg.body, list)
                                                    else b"".join(msg.body)))
        if sum(map(len, got.values())) >= count:
            done.set()
    c = SuperStreamConsumer("127.0.0.1", broker.stream_port, username="guest",
                            password="guest", super_stream=super_stream)
    await c.start()
    try:
        await c.subscribe(on_message, decoder=amqp_decoder,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        await done.wait()
    finally:
        await c.close()
    return got


def rstream_partition(key: str, n: int) -> int:
    """rstream's HashRoutingMurmurStrategy, computed here: murmur3 x64 128 of the key's
    UTF-16 bytes, seed 104729, little-endian, modulo the partition count."""
    digest = mmh3.hash_bytes(bytes(key, "UTF-16"), 104729)
    return int.from_bytes(digest, "little", signed=False) % n


# -- create, partitions, route, delete -----------------------------------------------------
def test_create_partitions_route_delete(broker):
    ss = name()

    async def go():
        p = producer(broker, ss)
        await p.start()
        try:
            await p.create_super_stream(ss, 3, arguments={"max-age": "1h"})
        finally:
            await p.close()
        async with client(broker) as c:
            assert await c.partitions(ss) == [f"{ss}-0", f"{ss}-1", f"{ss}-2"]
            assert await c.route("1", ss) == [f"{ss}-1"]
            assert await c.route("nope", ss) == []  # no route: OK and no stream
            for i in range(3):
                assert await c.stream_exists(f"{ss}-{i}")
            await c.delete_super_stream(ss)
            for i in range(3):
                assert not await c.stream_exists(f"{ss}-{i}")
            assert await c.partitions(ss) == []
            with pytest.raises(exceptions.StreamDoesNotExist):
                await c.delete_super_stream(ss)
    run(go())


def test_binding_keys_and_arguments(broker):
    """Given partitions and binding keys: bound in their order; the arguments reach every
    partition (with RabbitMQ's default leader locator, ``balanced``)."""
    ss = name()
    parts = [f"{ss}-eu", f"{ss}-us", f"{ss}-ap"]

    async def go():
        async with client(broker) as c:
            await c.create_super_stream(ss, parts, ["eu", "us", "ap"],
                                        {"max-length-bytes": 10_000_000})
            assert await c.partitions(ss) == parts
            assert await c.route("us", ss) == [f"{ss}-us"]
            assert await c.route("ap", ss) == [f"{ss}-ap"]
            await c.delete_super_stream(ss)
    run(go())


def test_arguments_reach_partitions(broker):
    ss = name()

    async def go():
        async with client(broker) as c:
            await c.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["0", "1"],
                                        {"max-age": "2h", "stream-max-segment-size-bytes": 1_000_000})
    run(go())
    docs = [json.loads(p.read_text()) for p in (broker.data_dir / "streams").glob("*/stream.json")]
    mine = {d["name"]: d["arguments"] for d in docs if d["name"].startswith(ss)}
    assert sorted(mine) == [f"{ss}-0", f"{ss}-1"]
    for arguments in mine.values():
        assert arguments["x-max-age"] == "2h"
        assert arguments["x-stream-max-segment-size-bytes"] == 1_000_000
        assert arguments["x-queue-leader-locator"] == "balanced"


# -- errors ----------------------------------------------------------------------------------
def test_errors(broker):
    ss = name()

    async def go():
        async with client(broker) as c:
            with pytest.raises(exceptions.StreamDoesNotExist):  # delete a missing one
                await c.delete_super_stream(ss)
            assert await c.partitions(ss) == []  # rstream hides the code; see below
            await c.create_stream(f"{ss}-1")
            with pytest.raises(exceptions.StreamAlreadyExists):  # a partition collides
                await c.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["0", "1"])
            assert not await c.stream_exists(f"{ss}-0")  # nothing half-made
            with pytest.raises(exceptions.StreamDoesNotExist):
                await c.delete_super_stream(ss)
            await c.create_super_stream(ss, [f"{ss}-a"], ["a"])
            with pytest.raises(exceptions.StreamAlreadyExists):  # the exchange exists
                await c.create_super_stream(ss, [f"{ss}-b"], ["b"])
            assert not await c.stream_exists(f"{ss}-b")
            with pytest.raises(exceptions.PreconditionFailed):  # counts differ
                await c.create_super_stream(name(), ["x-0", "x-1"], ["0"])
            with pytest.raises(exceptions.PreconditionFailed):  # duplicates
                await c.create_super_stream(name(), ["dup", "dup"], ["0", "1"])
            with pytest.raises(exceptions.PreconditionFailed):  # reserved name
                await c.create_super_stream("amq.mine", ["amq-0"], ["0"])
            with pytest.raises(exceptions.PreconditionFailed):  # an exchange name's limit
                await c.create_super_stream("x" * 256, ["long-0"], ["0"])
            # a bad argument: INTERNAL_ERROR, as RabbitMQ (rabbit_stream_manager:create's bare
            # validation_failed falls to rabbit_stream_reader's catch-all)
            with pytest.raises(exceptions.InternalError):
                bad = name()
                await c.create_super_stream(bad, [f"{bad}-0"], ["0"], {"max-age": "soon"})
            assert not await c.stream_exists(f"{bad}-0")
            await c.delete_super_stream(ss)
            await c.delete_stream(f"{ss}-1")
    run(go())


def test_route_and_partitions_codes(broker):
    """The codes rstream's ``route``/``partitions`` hide, read from the frames: a missing super
    stream is STREAM_DOES_NOT_EXIST (2) for both; no route is OK (1) with no stream."""
    from rstream import schema
    ss = name()

    async def go():
        async with client(broker) as c:
            await c.create_super_stream(ss, [f"{ss}-0"], ["0"])
            for req, resp in ((schema.SuperStreamRoute(0, routing_key="0", super_stream=ss + "x"),
                               schema.SuperStreamRouteResponse),
                              (schema.SuperStreamPartitions(0, super_stream=ss + "x"),
                               schema.SuperStreamPartitionsResponse)):
                req.correlation_id = c._corr_id_seq.next()
                answer = await c.sync_request(req, resp_schema=resp, raise_exception=False)
                assert (answer.response_code, answer.streams) == (2, [])
            answer = await c.sync_request(
                schema.SuperStreamRoute(c._corr_id_seq.next(), routing_key="9", super_stream=ss),
                resp_schema=schema.SuperStreamRouteResponse, raise_exception=False)
            assert (answer.response_code, answer.streams) == (1, [])
            await c.delete_super_stream(ss)
    run(go())


def test_deleting_a_partition_unbinds_it(broker):
    ss = name()

    async def go():
        async with client(broker) as c:
            await c.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["0", "1"])
            await c.delete_stream(f"{ss}-0")
            assert await c.partitions(ss) == [f"{ss}-1"]
            assert await c.route("0", ss) == []
            await c.delete_super_stream(ss)
            assert not await c.stream_exists(f"{ss}-1")
    run(go())


# -- producing and consuming -----------------------------------------------------------------
def test_hash_routing_and_consumer(broker):
    """rstream's default hash routing puts each key where its murmur3 says; a
    SuperStreamConsumer reads every message of every partition."""
    ss = name()
    keys = [f"k{i}" for i in range(60)]
    messages = [AMQPMessage(body=k.encode(), application_properties={"id": k}) for k in keys]

    async def go():
        # created by start() (rstream's metadata breaks if create_super_stream is called
        # on a started producer: it closes the locator connection the metadata uses)
        p = producer(broker, ss, super_stream_creation_option=SuperStreamCreationOption(3))
        await p.start()
        try:
            await publish(p, messages)
        finally:
            await p.close()
        return await read_all(broker, ss, len(keys))
    got = run(go())
    expected: dict[str, list] = {}
    for k in keys:
        expected.setdefault(f"{ss}-{rstream_partition(k, 3)}", []).append(k.encode())
    assert got == expected
    assert len(got) == 3  # 60 keys over 3 partitions: every partition used


def test_key_routing(broker):
    """RouteType.Key asks the broker (Route) for the key's partition. (rstream keeps the
    first answer for every later key, so each producer here sends one key.)"""
    ss = name()
    counts = {"eu": 3, "us": 5, "ap": 2}

    async def go():
        async with client(broker) as c:
            await c.create_super_stream(ss, [f"{ss}-{k}" for k in counts], list(counts))
        for key, n in counts.items():
            p = producer(broker, ss, RouteType.Key, key=lambda m: m.application_properties["region"])
            await p.start()
            try:
                await publish(p, [AMQPMessage(body=f"{key}{i}".encode(),
                                              application_properties={"region": key})
                                  for i in range(n)])
            finally:
                await p.close()
        return await read_all(broker, ss, sum(counts.values()))
    got = run(go())
    assert {s: len(b) for s, b in got.items()} == {f"{ss}-{k}": n for k, n in counts.items()}
    assert all(b.startswith(s.rsplit("-", 1)[1].encode()) for s, bs in got.items() for b in bs)


# -- restarts ----------------------------------------------------------------------------------
def test_restart_and_sigkill_keep_super_streams(tmp_path):
    ss = name()
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        async def create():
            async with client(b) as c:
                await c.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["a", "b"])

        async def check():
            async with client(b) as c:
                return await c.partitions(ss), await c.route("b", ss)
        run(create())
        b.stop()
        b.start()
        assert run(check()) == ([f"{ss}-0", f"{ss}-1"], [f"{ss}-1"])
        b.kill()
        b.proc.wait()
        b.start()
        assert run(check()) == ([f"{ss}-0", f"{ss}-1"], [f"{ss}-1"])
    finally:
        b.close()


@pytest.mark.parametrize("op", ["create", "delete"])
def test_sigkill_mid_operation_leaves_all_or_nothing(tmp_path, op):
    """A broker SIGKILLed while it makes (or deletes) a super stream of many partitions: after
    the restart the super stream is there with every partition, or nothing of it is."""
    ss = name()
    n = 40
    b = BrokerProcess(tmp_path / "data")
    b.start()
    streams_dir = b.data_dir / "streams"
    try:
        async def send(request: str):
            async with client(b) as c:
                if request == "create":
                    await c.create_super_stream(ss, [f"{ss}-{i}" for i in range(n)],
                                                [str(i) for i in range(n)])
                else:
                    await c.delete_super_stream(ss)

        if op == "delete":
            run(send("create"))

        def made() -> int:  # partitions whose declare is complete
            return len(list(streams_dir.glob(f"{ss}-*/stream.json")))
        before = made()

        async def kill_mid_way():
            """SIGKILL once 5 partitions are made (or deleted)."""
            task = asyncio.ensure_future(send(op))
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while abs(made() - before) < 5:
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError("the operation never started")
                await asyncio.sleep(0.001)
            os.kill(b.proc.pid, signal.SIGKILL)
            try:
                await task
            except Exception:
                pass
        run(kill_mid_way())
        b.proc.wait()
        at_kill = made()
        # the kill came mid-way: some partitions made (or deleted), not all
        assert 5 <= abs(at_kill - before) < n, (before, at_kill)
        b.start()

        async def state():
            async with client(b) as c:
                try:
                    parts = await c.partitions(ss)
                except Exception:
                    parts = []
                exist = [await c.stream_exists(f"{ss}-{i}") for i in range(n)]
                return parts, exist
        parts, exist = run(state())
        if parts:
            assert parts == [f"{ss}-{i}" for i in range(n)] and all(exist)
        else:
            assert not any(exist), f"{sum(exist)} of {n} partitions left without a super stream"
    finally:
        b.close()


def test_definitions_file_layout(broker):
    """The exchange and bindings are in <data-dir>/definitions.json as the module says."""
    ss = name()

    async def go():
        async with client(broker) as c:
            await c.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["0", "1"])
    run(go())
    doc = json.loads((broker.data_dir / "definitions.json").read_text())
    assert {"name": ss, "type": "direct", "durable": True, "auto_delete": False,
            "internal": False, "arguments": {"x-super-stream": True}} in doc["exchanges"]
    mine = [b for b in doc["bindings"] if b["source"] == ss]
    assert [(b["destination"], b["routing_key"], b["arguments"]) for b in mine] == [
        (f"{ss}-0", "0", {"x-stream-partition-order": 0}),
        (f"{ss}-1", "1", {"x-stream-partition-order": 1})]
    assert doc["pending"] == []
    assert Counter(b["destination_type"] for b in mine) == {"queue": 2}


def test_damaged_definitions_stop_the_start(tmp_path):
    """A definitions file that cannot be read (damaged from outside: the broker only replaces
    it atomically) stops the start with a message naming it, rather than a start that would
    overwrite every exchange and binding; the file is left as it was."""
    b = BrokerProcess(tmp_path / "data")
    b.data_dir.mkdir(parents=True)
    damaged = b.data_dir / "definitions.json"
    damaged.write_bytes(b'{"format": 1, "exchanges": [{"name": "x"')
    done = subprocess.run(b.command(), capture_output=True, timeout=60, cwd=os.getcwd())
    assert done.returncode == 1, done.stderr
    assert b"definitions.json cannot be read" in done.stderr + done.stdout
    assert b"Traceback" not in done.stderr + done.stdout  # a clear error, not a crash
    assert damaged.read_bytes() == b'{"format": 1, "exchanges": [{"name": "x"'


def test_a_partition_that_cannot_be_opened_keeps_its_binding(tmp_path):
    """A partition whose directory cannot be opened at start (here its stream.json damaged)
    keeps its binding, so that once repaired the super stream is whole again; the bindings of
    streams that are really gone are still dropped then."""
    ss = name()
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        async def create():
            async with client(b) as c:
                await c.create_super_stream(ss, [f"{ss}-0", f"{ss}-1"], ["0", "1"])

        async def partitions():
            async with client(b) as c:
                return await c.partitions(ss)
        run(create())
        b.stop()
        meta = b.data_dir / "streams" / f"{ss}-1" / "stream.json"
        good = meta.read_bytes()
        meta.write_bytes(b'{"name": 1}')
        b.start()
        assert run(partitions()) == [f"{ss}-0", f"{ss}-1"]
        b.stop()
        meta.write_bytes(good)
        b.start()
        assert run(partitions()) == [f"{ss}-0", f"{ss}-1"]
    finally:
        b.close()


def test_command_versions_advertise_super_streams(broker):
    """ExchangeCommandVersions names Route (0x18), Partitions (0x19), CreateSuperStream (0x1d)
    and DeleteSuperStream (0x1e), version 1, as rabbit_stream_utils:command_versions/0: the
    Java and .NET clients look for them before they use super streams."""
    from rstream import schema

    async def go():
        async with client(broker) as c:
            answer = await c.sync_request(
                schema.ExchangeCommandVersionRequest(
                    c._corr_id_seq.next(), [schema.FrameHandlerInfo(0x08, 1, 2)]),
                resp_schema=schema.ExchangeCommandVersionResponse, raise_exception=False)
            return answer.response_code, {(v.key_command, v.min_version, v.max_version)
                                          for v in answer.command_versions}
    code, versions = run(go())
    assert code == 1
    assert {(0x18, 1, 1), (0x19, 1, 1), (0x1D, 1, 1), (0x1E, 1, 1)} <= versions
