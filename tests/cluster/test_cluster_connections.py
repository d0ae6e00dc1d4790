"""The management API's connections, consumers and publishers are the whole cluster's, as
RabbitMQ's: any node lists every node's (each with its ``node``), shows a connection held
elsewhere (and its publishers and consumers) and closes it there; a node that does not answer
is left out of a listing, which still answers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from rstream.client import Client

from tests.cli.test_commands import cli
from tests.http.api import call, quote
from tests.stream.rstream_low import run

pytestmark = pytest.mark.timeout(120)


def named(listing: list[dict]) -> dict[str, dict]:
    """The listed connections that have a client-given name, by that name."""
    return {c["client_properties"]["connection_name"]: c for c in listing
            if c["client_properties"].get("connection_name")}


async def connect(broker, name: str) -> Client:
    """A named stream connection to ``broker``, logged in."""
    c = Client(broker.host, broker.stream_port, frame_max=1024 * 1024, heartbeat=60,
               connection_name=name)
    await c.start()
    await c.authenticate("/", "guest", "guest")
    return c


def test_any_node_lists_and_closes_every_nodes_connections(nodes):
    _, (n1, n2, n3) = nodes

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


def test_any_node_lists_every_nodes_consumers_and_publishers(nodes):
    """Consumers (both listings), stream publishers and one connection's publishers and
    consumers, asked of a node that holds none of them: each row from its node, named so,
    and the CLI's listings read the same."""
    _, (n1, n2, n3) = nodes

    async def get(broker, path: str):
        answer = await asyncio.to_thread(call, broker, "GET", path)
        assert answer.status == 200, (path, answer.status, answer.body)
        return answer.json

    async def scenario() -> None:
        on1, on2 = await connect(n1, "c-on-n1"), await connect(n2, "c-on-n2")
        try:
            await on1.create_stream("led-by-n1")  # client-local: each led by its creator
            await on2.create_stream("led-by-n2")
            await on1.declare_publisher("led-by-n1", "p1", 7)
            await on2.declare_publisher("led-by-n2", "p2", 8)
            await on1.subscribe("led-by-n1", 3)
            await on2.subscribe("led-by-n2", 4)

            mine = {"c-on-n1", "c-on-n2"}
            by_conn = {c["name"]: c["client_properties"]["connection_name"]
                       for c in await get(n3, "/api/connections")
                       if c["client_properties"].get("connection_name") in mine}
            assert len(by_conn) == 2

            def rows(listing: list[dict], details: str) -> set[tuple]:
                """(client's connection name, node, stream) of the test's rows."""
                return {(by_conn[r[details]["name"]], r[details]["node"], r["queue"]["name"])
                        for r in listing if r[details]["name"] in by_conn}

            want = {("c-on-n1", "n1", "led-by-n1"), ("c-on-n2", "n2", "led-by-n2")}
            assert rows(await get(n3, "/api/consumers"), "channel_details") == want
            assert rows(await get(n3, "/api/consumers/%2F"), "channel_details") == want
            subs = await get(n3, "/api/stream/consumers")
            assert rows(subs, "connection_details") == want
            assert {s["subscription_id"] for s in subs
                    if s["connection_details"]["name"] in by_conn} == {3, 4}
            pubs = await get(n3, "/api/stream/publishers")
            assert rows(pubs, "connection_details") == want
            assert {(p["reference"], p["publisher_id"]) for p in pubs
                    if p["connection_details"]["name"] in by_conn} == {("p1", 7), ("p2", 8)}
            one = await get(n3, "/api/stream/publishers/%2F/led-by-n2")
            assert rows(one, "connection_details") == {("c-on-n2", "n2", "led-by-n2")}
            # a node asked for itself alone lists its own only
            assert rows(await get(n1, "/api/stream/publishers?local=true"),
                        "connection_details") == {("c-on-n1", "n1", "led-by-n1")}

            # one connection's publishers and consumers, asked of a node that does not hold it
            held_by_n2 = next(k for k, v in by_conn.items() if v == "c-on-n2")
            base = f"/api/stream/connections/%2F/{quote(held_by_n2)}"
            assert [p["publisher_id"] for p in await get(n1, base + "/publishers")] == [8]
            assert [s["subscription_id"] for s in await get(n1, base + "/consumers")] == [4]
            assert await get(n1, f"/api/connections/{quote(held_by_n2)}/channels") == []

            # the CLI's listings, through n3
            for kind, columns in (("consumers", ("node", "queue_name", "connection_name")),
                                  ("publishers", ("node", "stream", "connection_name"))):
                out = await asyncio.to_thread(
                    cli, "list", kind, *columns, "--format", "json",
                    "--management-url", n3.management_url)
                assert out.returncode == 0, out.stderr
                seen = {(by_conn[r["connection_name"]], r["node"],
                         r["queue_name" if kind == "consumers" else "stream"])
                        for r in json.loads(out.stdout) if r["connection_name"] in by_conn}
                assert seen == want, kind
        finally:
            await on1.close()
            await on2.close()

    run(scenario(), 90)
