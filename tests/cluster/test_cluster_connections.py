"""The management API's connections are the whole cluster's, as RabbitMQ's: any node lists
every node's connections (each with its ``node``), shows one held elsewhere and closes it
there; a node that does not answer is left out of a listing, which still answers."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from rstream.client import Client

from tests.http.api import call, quote
from tests.stream.rstream_low import run

pytestmark = pytest.mark.timeout(120)


def named(listing: list[dict]) -> dict[str, dict]:
    """The listed connections that have a client-given name, by that name."""
    return {c["client_properties"]["connection_name"]: c for c in listing
            if c["client_properties"].get("connection_name")}


def test_any_node_lists_and_closes_every_nodes_connections(nodes):
    _, (n1, n2, n3) = nodes

    async def connect(broker, name: str) -> Client:
        c = Client(broker.host, broker.stream_port, frame_max=1024 * 1024, heartbeat=60,
                   connection_name=name)
        await c.start()
        await c.authenticate("/", "guest", "guest")
        return c

    async def get(broker, path: str):
        return await asyncio.to_thread(call, broker, "GET", path)

    async def scenario() -> None:
        on1, on2 = await connect(n1, "on-n1"), await connect(n2, "on-n2")
        try:
            for path in ("/api/connections", "/api/vhosts/%2F/connections",
                         "/api/stream/connections"):
                answer = await get(n1, path)
                assert answer.status == 200, (path, answer.body)
                seen = named(answer.json)
                assert {k: seen[k]["node"] for k in ("on-n1", "on-n2")} == {
                    "on-n1": "n1", "on-n2": "n2"}, path
            # every node's listing is the same cluster-wide one
            assert named((await get(n3, "/api/connections")).json).keys() >= {"on-n1", "on-n2"}
            # a peer's own answer, asked for itself only, has its connections alone
            local = named((await get(n2, "/api/connections?local=true")).json)
            assert "on-n2" in local and "on-n1" not in local

            remote = named((await get(n1, "/api/connections")).json)["on-n2"]["name"]
            one = await get(n1, f"/api/connections/{quote(remote)}")
            assert (one.status, one.json["node"]) == (200, "n2")
            one = await get(n1, f"/api/stream/connections/%2F/{quote(remote)}")
            assert (one.status, one.json["node"]) == (200, "n2")
            assert (await get(n1, "/api/connections/no%20such")).status == 404

            deleted = await asyncio.to_thread(call, n1, "DELETE",
                                              f"/api/connections/{quote(remote)}")
            assert deleted.status == 204, deleted.body
            gone = False
            deadline = time.monotonic() + 20
            while not gone and time.monotonic() < deadline:
                listing = named((await get(n2, "/api/connections?local=true")).json)
                gone = "on-n2" not in listing
            assert gone, "n2 still holds the connection n1's DELETE closed"
            assert "on-n1" in named((await get(n1, "/api/connections")).json)  # only that one
            assert (await asyncio.to_thread(call, n1, "DELETE",
                                            f"/api/connections/{quote(remote)}")).status == 404

            # a node that does not answer is left out; the listing still answers in time
            os.kill(n3.proc.pid, signal.SIGSTOP)
            try:
                began = time.monotonic()
                answer = await get(n1, "/api/connections")
                assert answer.status == 200
                assert "on-n1" in named(answer.json)
                assert time.monotonic() - began < 10
            finally:
                os.kill(n3.proc.pid, signal.SIGCONT)
        finally:
            await on1.close()
            await on2.close()

    run(scenario(), 90)
