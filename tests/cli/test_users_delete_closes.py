"""``amqp-stream users delete`` (another process, editing users.json) closes the deleted user's
open connections on both protocols once the broker reloads the file, as the HTTP API's DELETE
of a user does (RabbitMQ's ``rabbit_connection_tracking`` on ``user_deleted``)."""

from __future__ import annotations

import asyncio

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess
from tests.http.api import call
from tests.polling import wait_for
from tests.users_cli import users_cli

rstream = pytest.importorskip("rstream")
from rstream import Consumer  # noqa: E402

USER, PASSWORD = "leaver", "leaver-pw"


def amqp_login(broker: BrokerProcess) -> BlockingConnection | None:
    try:
        return BlockingConnection(broker.url, timeout=10, user=USER, password=PASSWORD,
                                  allowed_mechs="PLAIN")
    except ConnectionException:
        return None


@pytest.mark.parametrize("management", ["on", "off"])
def test_cli_delete_closes_the_users_connections_on_both_protocols(tmp_path, management):
    """With the management API off too: the broker's reload closes them all the same."""
    data = tmp_path / "data"
    off = ["--management-port", "0"] if management == "off" else []
    broker = BrokerProcess(data, extra_args=["--fsync", "never", *off])
    broker.start()
    amqp: BlockingConnection | None = None
    try:
        users_cli(data, "add", USER, PASSWORD)
        users_cli(data, "set-permissions", USER, ".*", ".*", ".*")
        opened: list[BlockingConnection] = []
        wait_for(lambda: opened.append(c) or True if (c := amqp_login(broker)) else False, 10,
                 "the broker to take up the new user")
        amqp = opened[0]
        closed: list[object] = []

        async def note(info: object) -> None:
            closed.append(info)

        async def scenario() -> None:
            consumer = Consumer(broker.host, broker.stream_port, username=USER,
                                password=PASSWORD, on_close_handler=note)
            await consumer.start()
            await consumer.create_stream("leaving", exists_ok=True)
            await consumer.subscribe("leaving", callback=lambda m, c: None)
            try:
                await asyncio.to_thread(users_cli, data, "delete", USER)
                await asyncio.to_thread(wait_for, lambda: closed, 10,
                                        "the stream connection closed")
            finally:
                try:
                    await consumer.close()
                except Exception:
                    pass  # closed by the broker: what was asked

        asyncio.run(asyncio.wait_for(scenario(), 60))
        with pytest.raises(ConnectionException):  # proton.Timeout if it stayed open
            amqp.wait(lambda: False, timeout=10, msg="the AMQP connection closed")
        if not off:
            wait_for(lambda: call(broker, "GET", "/api/connections").json == [], 10,
                     "no connection left")
    finally:
        if amqp is not None:
            try:
                amqp.close()
            except Exception:
                pass
        broker.close()
