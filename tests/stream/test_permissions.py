"""Permissions on the stream protocol, with rstream's low-level ``Client`` against a real broker
process: each command refused (ACCESS_REFUSED, 0x10) to a user without the permission
``rabbit_stream_reader`` checks and granted to the one that has it; a user without any
permission on the vhost refused at Open (VHOST_ACCESS_FAILURE); a change made with
``amqp-stream users`` while the broker runs takes effect without a restart."""

from __future__ import annotations

import asyncio

import pytest
from rstream import exceptions, schema
from rstream.client import Client

from amqp_stream.testing import BrokerProcess
from tests.stream.rstream_low import admin, run
from tests.users_cli import PASSWORD, make_users, users_cli

TIMEOUT = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("stream-permissions") / "data"
    b = BrokerProcess(data, extra_args=["--auth-failure-delay", "0"])
    b.start()
    make_users(data)
    run(_until_logged_in(b, "reader"), TIMEOUT)  # the broker took up the command's file
    yield b
    b.close()


class login:
    """A low-level rstream ``Client`` logged in as ``user``."""

    def __init__(self, broker: BrokerProcess, user: str, password: str = PASSWORD):
        self.c = Client("127.0.0.1", broker.stream_port, frame_max=1024 * 1024, heartbeat=60)
        self.user, self.password = user, password

    async def __aenter__(self) -> Client:
        await self.c.start()
        await self.c.authenticate("/", self.user, self.password)
        return self.c

    async def __aexit__(self, *_: object) -> None:
        await self.c.close()


async def _logged_in(broker: BrokerProcess, user: str) -> bool:
    try:
        async with login(broker, user):
            return True
    except exceptions.ServerError:
        return False


async def _until_logged_in(broker: BrokerProcess, user: str) -> None:
    """Poll (with the caller's deadline) until ``user`` can log in."""
    while not await _logged_in(broker, user):
        await asyncio.sleep(0.05)


def test_the_users_made_by_the_command_log_in(broker):
    async def go():
        for user in ("maker", "writer", "reader"):
            assert await _logged_in(broker, user)
        with pytest.raises(exceptions.AuthenticationFailure):
            async with login(broker, "reader", "wrong"):
                pass
    run(go(), TIMEOUT)


def test_no_permission_on_the_vhost_is_refused_at_open(broker):
    async def go():
        with pytest.raises(exceptions.VirtualHostAccessFailure):
            async with login(broker, "stranger"):
                pass
    run(go(), TIMEOUT)


def test_create_and_delete_need_configure(broker):
    async def go():
        for user in ("writer", "reader"):
            async with login(broker, user) as c:
                with pytest.raises(exceptions.AccessRefused):
                    await c.create_stream("p-made")
        async with login(broker, "maker") as c:
            with pytest.raises(exceptions.AccessRefused):
                await c.create_stream("other")  # configure is ^p- only
            await c.create_stream("p-made")
        async with login(broker, "reader") as c:
            with pytest.raises(exceptions.AccessRefused):
                await c.delete_stream("p-made")
        async with login(broker, "maker") as c:
            await c.delete_stream("p-made")
    run(go(), TIMEOUT)


async def _query_sequence(c: Client, stream: str, reference: str) -> int:
    """QueryPublisherSequence with its response code read (rstream's own call ignores it)."""
    resp = await c.sync_request(schema.QueryPublisherSequence(c._corr_id_seq.next(),
                                                              publisher_ref=reference,
                                                              stream=stream),
                                resp_schema=schema.QueryPublisherSequenceResponse)
    return resp.sequence


def test_publish_needs_write_consume_and_query_need_read(broker):
    async def go():
        async with admin(broker) as c:
            await c.create_stream("p-data")
        async with login(broker, "reader") as c:
            with pytest.raises(exceptions.AccessRefused):
                await c.declare_publisher("p-data", None, 1)
        async with login(broker, "writer") as c:
            await c.declare_publisher("p-data", None, 1)
            with pytest.raises(exceptions.AccessRefused):
                await c.subscribe("p-data", 1)
            with pytest.raises(exceptions.AccessRefused):
                await c.query_offset("p-data", "app")
            with pytest.raises(exceptions.AccessRefused):
                await _query_sequence(c, "p-data", "app")
        async with login(broker, "reader") as c:
            await c.subscribe("p-data", 1)
            with pytest.raises(exceptions.OffsetNotFound):  # allowed: there is none yet
                await c.query_offset("p-data", "app")
            assert await _query_sequence(c, "p-data", "app") == 0
    run(go(), TIMEOUT)


def test_store_offset_needs_read_and_a_refusal_is_silent(broker):
    async def go():
        async with admin(broker) as c:
            await c.create_stream("p-offsets")
        async with login(broker, "writer") as c:
            await c.store_offset("p-offsets", "by-writer", 5)  # dropped: no answer, no store
            await c.store_offset("p-offsets", "by-writer", 6)
        async with login(broker, "reader") as c:
            await c.store_offset("p-offsets", "by-reader", 7)
            got: list[int] = []

            async def stored() -> None:
                got.append(await c.query_offset("p-offsets", "by-reader"))
            while not got:  # the store is queued like a publish: poll with the test's deadline
                try:
                    await stored()
                except exceptions.OffsetNotFound:
                    await asyncio.sleep(0.05)
            assert got == [7]
            with pytest.raises(exceptions.OffsetNotFound):
                await c.query_offset("p-offsets", "by-writer")
    run(go(), TIMEOUT)


def test_metadata_tells_refused_streams_apart(broker):
    async def go():
        async with admin(broker) as c:
            await c.create_stream("p-meta")
            await c.create_stream("q-meta")
        async with login(broker, "reader") as c:
            assert await c.stream_exists("p-meta")
            with pytest.raises(exceptions.AccessRefused):
                await c.stream_exists("q-meta")
    run(go(), TIMEOUT)


def test_a_permission_changed_by_the_command_applies_without_restart(broker):
    async def go():
        async with admin(broker) as c:
            await c.create_stream("p-live")
        users_cli(broker.data_dir, "add", "changing", PASSWORD)
        users_cli(broker.data_dir, "set-permissions", "changing", "", "", "^p-live$")

        async def subscribes(sub_id: int) -> bool:
            try:
                async with login(broker, "changing") as c:
                    await c.subscribe("p-live", sub_id)
                return True
            except exceptions.ServerError:
                return False
        for _ in range(200):
            if await subscribes(1):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the new user never could subscribe")
        users_cli(broker.data_dir, "set-permissions", "changing", "", "", "^nothing$")
        for _ in range(200):
            if not await subscribes(2):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the narrowed permission never applied")
        users_cli(broker.data_dir, "delete", "changing")
        for _ in range(200):
            if not await _logged_in(broker, "changing"):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the deleted user still logs in")
    run(go(), TIMEOUT)


def test_super_streams_need_what_rabbitmq_checks(broker):
    """Creating or deleting a super stream: configure and read on its exchange, configure and
    write on each partition (``check_super_stream_management_permitted``); Route: write,
    Partitions: read or write on the exchange (refused: rstream reads no streams)."""
    users_cli(broker.data_dir, "add", "manager", PASSWORD)
    users_cli(broker.data_dir, "set-permissions", "manager", "^p-", "^p-", "^p-")

    async def go():
        await _until_logged_in(broker, "manager")
        partitions, keys = ["p-ss-0", "p-ss-1"], ["0", "1"]
        async with login(broker, "maker") as c:  # configure only: no read, no write
            with pytest.raises(exceptions.AccessRefused):
                await c.create_super_stream("p-ss", partitions, keys)
        async with login(broker, "manager") as c:
            with pytest.raises(exceptions.AccessRefused):
                await c.create_super_stream("p-ss", ["p-ss-0", "q-ss-1"], keys)
            await c.create_super_stream("p-ss", partitions, keys)
        async with login(broker, "reader") as c:
            assert await c.partitions("p-ss") == partitions
            assert await c.route("1", "p-ss") == []  # refused: write is needed
        async with login(broker, "writer") as c:
            assert await c.route("1", "p-ss") == ["p-ss-1"]
            with pytest.raises(exceptions.AccessRefused):
                await c.delete_super_stream("p-ss")
        async with login(broker, "manager") as c:
            await c.delete_super_stream("p-ss")
    run(go(), TIMEOUT)
