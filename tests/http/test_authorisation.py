"""Users and permissions changed over the management API, and what each tag may see and do,
against a real broker with real clients of both protocols (proton, rstream): a user made over
HTTP logs in on both protocols at once, its users.json entry is there for a restart; only an
administrator changes users; a management user sees only its own connections; deleting a stream
over HTTP needs configure; permissions set over HTTP count on the next stream-protocol
subscribe of an open connection."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import uuid

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess
from tests.http.api import call, quote
from tests.polling import wait_for

rstream = pytest.importorskip("rstream")
from rstream import Consumer, Producer  # noqa: E402
from rstream.exceptions import AccessRefused, AuthenticationFailure  # noqa: E402

TIMEOUT = 60
ALL = {"configure": ".*", "write": ".*", "read": ".*"}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_user(broker: BrokerProcess, tags: str, perms: dict | None = ALL) -> tuple[str, str]:
    """A user made over HTTP by guest (an administrator); (name, password)."""
    name, password = unique(tags or "none"), uuid.uuid4().hex
    assert call(broker, "PUT", f"/api/users/{name}", {"password": password, "tags": tags}).status == 201
    if perms is not None:
        assert call(broker, "PUT", f"/api/permissions/%2F/{name}", perms).status == 201
    return name, password


def amqp_login(broker: BrokerProcess, user: str, password: str) -> None:
    BlockingConnection(broker.url, timeout=10, user=user, password=password,
                       allowed_mechs="PLAIN").close()


async def stream_login(broker: BrokerProcess, user: str, password: str) -> None:
    async with Producer(broker.host, broker.stream_port, username=user, password=password):
        pass


def rabbit_hash(password: str) -> str:
    """RabbitMQ's rabbit_password_hashing_sha256 form, made here independently of the broker."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def test_a_user_made_over_http_logs_in_on_both_protocols(broker):
    name, password = unique("app"), "s3cret"
    with pytest.raises(ConnectionException):
        amqp_login(broker, name, password)
    with pytest.raises(AuthenticationFailure):
        run(stream_login(broker, name, password))

    assert call(broker, "PUT", f"/api/users/{name}", {"password": password, "tags": ""}).status == 201
    assert call(broker, "PUT", f"/api/permissions/%2F/{name}", ALL).status == 201
    amqp_login(broker, name, password)  # no wait: the broker's own store changed
    run(stream_login(broker, name, password))
    # a hash as RabbitMQ exports it, with tags as a list; a PUT again replaces (204)
    hashed = unique("hashed")
    body = {"password_hash": rabbit_hash("other"), "hashing_algorithm":
            "rabbit_password_hashing_sha256", "tags": ["monitoring"]}
    assert call(broker, "PUT", f"/api/users/{hashed}", body).status == 201
    assert call(broker, "PUT", f"/api/users/{hashed}", body).status == 204
    assert call(broker, "PUT", f"/api/permissions/%2F/{hashed}", ALL).status == 201
    amqp_login(broker, hashed, "other")
    assert call(broker, "GET", "/api/whoami", auth=(hashed, "other")).json == {
        "name": hashed, "tags": ["monitoring"]}
    # in users.json, where a restart and `amqp-stream users` read them
    stored = json.loads((broker.data_dir / "users.json").read_text())
    assert {name, hashed} <= {u["name"] for u in stored["users"]}
    assert {"user": name, "vhost": "/", **ALL} in stored["permissions"]

    assert call(broker, "DELETE", f"/api/users/{name}").status == 204
    assert call(broker, "GET", f"/api/permissions/%2F/{name}").status == 404
    with pytest.raises(ConnectionException):
        amqp_login(broker, name, password)
    assert call(broker, "DELETE", f"/api/users/{name}").status == 404
    bad = call(broker, "PUT", f"/api/users/{unique('x')}", {"password": "a", "password_hash": "b"})
    assert bad.status == 400 and bad.json["error"] == "bad_request"


def test_only_an_administrator_changes_users_and_permissions(broker):
    monitor, password = make_user(broker, "monitoring")
    auth = (monitor, password)
    answer = call(broker, "PUT", f"/api/users/{unique('evil')}", {"password": "x", "tags":
                                                                   "administrator"}, auth=auth)
    assert answer.status == 401
    assert answer.json == {"error": "not_authorised", "reason": "Not administrator user"}
    for method, path, body in (("GET", "/api/users", None),
                               ("DELETE", f"/api/users/{monitor}", None),
                               ("PUT", f"/api/permissions/%2F/{monitor}", ALL),
                               ("DELETE", f"/api/permissions/%2F/{monitor}", None),
                               ("GET", "/api/permissions", None)):
        assert call(broker, method, path, body, auth=auth).status == 401, (method, path)
    assert call(broker, "GET", "/api/nodes", auth=auth).status == 200  # a monitor's
    manager, mpassword = make_user(broker, "management")
    answer = call(broker, "GET", "/api/nodes", auth=(manager, mpassword))
    assert answer.status == 401 and answer.json["reason"] == "Not monitor user"
    assert call(broker, "GET", "/api/whoami", auth=auth).status == 200
    assert monitor in [u["name"] for u in call(broker, "GET", "/api/users").json]


def test_a_management_user_sees_only_its_own_connections(broker):
    manager, password = make_user(broker, "management")
    monitor, mpassword = make_user(broker, "monitoring")
    stream = unique("own")
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201

    async def scenario() -> None:
        mine = Consumer(broker.host, broker.stream_port, username=manager, password=password)
        guests = Consumer(broker.host, broker.stream_port, username="guest", password="guest")
        await mine.start()
        await guests.start()
        await mine.subscribe(stream, callback=lambda m, c: None)
        await guests.subscribe(stream, callback=lambda m, c: None)
        try:
            await asyncio.to_thread(check)
        finally:
            await mine.close()
            await guests.close()

    def users_of(path: str, auth: tuple[str, str], key: str = "user") -> set[str]:
        answer = call(broker, "GET", path, auth=auth)
        assert answer.status == 200, (path, answer.body[:200])
        return {(item["connection_details"] if "connection_details" in item else
                 item.get("channel_details", item))[key] for item in answer.json}

    def check() -> None:
        for path in ("/api/connections", "/api/stream/connections", "/api/consumers",
                     "/api/stream/consumers"):
            assert users_of(path, (manager, password)) == {manager}, path
            assert {manager, "guest"} <= users_of(path, (monitor, mpassword)), path
        theirs = next(c["name"] for c in call(broker, "GET", "/api/connections").json
                      if c["user"] == "guest")
        path = f"/api/connections/{quote(theirs)}"
        assert call(broker, "GET", path, auth=(manager, password)).status == 401
        assert call(broker, "GET", path, auth=(monitor, mpassword)).status == 200
        assert call(broker, "DELETE", path, auth=(monitor, mpassword)).status == 401
        # the overview's totals: a management user's own connections, no consumer count
        # (RabbitMQ's rabbit_mgmt_db:overview); a monitor's count everyone's
        mine = call(broker, "GET", "/api/overview", auth=(manager, password)).json
        everyone = call(broker, "GET", "/api/overview", auth=(monitor, mpassword)).json
        own = call(broker, "GET", "/api/connections", auth=(manager, password)).json
        assert mine["object_totals"]["connections"] == len(own) >= 1
        assert everyone["object_totals"]["connections"] > len(own)
        assert "consumers" not in mine["object_totals"] and mine["object_totals"]["queues"] >= 1
        assert everyone["object_totals"]["consumers"] >= 2
        # a management user with no permission on / sees nothing of its streams or rates
        nothing = call(broker, "GET", "/api/overview", auth=stranger).json
        assert nothing["object_totals"] == {"connections": 0, "channels": 0, "exchanges": 0,
                                            "queues": 0}
        assert nothing["queue_totals"]["messages"] == 0 and nothing["message_stats"] == {}

    stranger = make_user(broker, "management", perms=None)
    run(scenario())


def test_deleting_a_stream_over_http_needs_configure(broker):
    name, password = make_user(broker, "management", {"configure": "^$", "write": ".*", "read": ".*"})
    auth = (name, password)
    stream = unique("guarded")
    answer = call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}, auth=auth)
    assert answer.status == 401 and "configure access" in answer.json["reason"]
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201
    answer = call(broker, "DELETE", f"/api/queues/%2F/{stream}", auth=auth)
    assert answer.status == 401, answer.body
    assert answer.json["error"] == "not_authorised" and "configure access" in answer.json["reason"]
    assert call(broker, "GET", f"/api/queues/%2F/{stream}").status == 200  # still there
    answer = call(broker, "PUT", f"/api/exchanges/%2F/{stream}-x", {"type": "direct"}, auth=auth)
    assert answer.status == 401
    assert call(broker, "PUT", f"/api/permissions/%2F/{name}",
                {"configure": f"^{stream}", "write": "^$", "read": ".*"}).status == 204
    assert call(broker, "PUT", f"/api/exchanges/%2F/{stream}-x", {"type": "direct"},
                auth=auth).status == 201
    # a binding writes to its destination: refused without write on the stream
    bind = f"/api/bindings/%2F/e/{stream}-x/q/{stream}"
    assert call(broker, "POST", bind, {"routing_key": "k"}, auth=auth).status == 401
    assert call(broker, "DELETE", f"/api/exchanges/%2F/{stream}-x", auth=auth).status == 204
    assert call(broker, "DELETE", f"/api/queues/%2F/{stream}", auth=auth).status == 204
    # no permission on the vhost at all: its paths are refused, listings are empty
    assert call(broker, "DELETE", f"/api/permissions/%2F/{name}").status == 204
    answer = call(broker, "GET", "/api/queues/%2F", auth=auth)
    assert answer.status == 401 and answer.json["reason"] == "User not authorised to access virtual host"
    assert call(broker, "GET", "/api/queues", auth=auth).json == []


def test_permissions_set_over_http_count_on_the_next_stream_subscribe(broker):
    name, password = make_user(broker, "management", {"configure": "", "write": "", "read": "^$"})
    stream = unique("readable")
    assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201

    async def scenario() -> None:
        consumer = Consumer(broker.host, broker.stream_port, username=name, password=password)
        await consumer.start()
        try:
            with pytest.raises(AccessRefused):
                await consumer.subscribe(stream, callback=lambda m, c: None)
            answer = await asyncio.to_thread(call, broker, "PUT", f"/api/permissions/%2F/{name}",
                                             {"configure": "", "write": "", "read": f"^{stream}$"})
            assert answer.status == 204
            await consumer.subscribe(stream, callback=lambda m, c: None)  # same connection, no wait
        finally:
            await consumer.close()

    run(scenario())


def test_deleting_a_user_closes_its_connections(broker):
    """As RabbitMQ's connection tracking does on user_deleted, on both protocols."""
    name, password = make_user(broker, "")
    amqp = BlockingConnection(broker.url, timeout=10, user=name, password=password,
                              allowed_mechs="PLAIN")

    def theirs() -> list[str]:
        return sorted(c["protocol"] for c in call(broker, "GET", "/api/connections").json
                      if c["user"] == name)

    async def scenario() -> None:
        async with Producer(broker.host, broker.stream_port, username=name, password=password):
            await asyncio.to_thread(wait_for, lambda: theirs() == ["AMQP 1-0", "stream"], 10,
                                    "both connections listed")
            assert (await asyncio.to_thread(call, broker, "DELETE", f"/api/users/{name}")).status == 204
            await asyncio.to_thread(wait_for, lambda: theirs() == [], 10, "both closed")

    try:
        run(scenario())
        with pytest.raises(ConnectionException):
            amqp.create_receiver("anything")  # the broker closed it
    finally:
        try:
            amqp.close()
        except ConnectionException:
            pass


def test_users_and_permissions_made_over_http_survive_a_crash(tmp_path):
    """SIGKILL right after the answers: the store wrote users.json before answering."""
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]) as broker:
        name, password = make_user(broker, "monitoring", {"configure": "", "write": "",
                                                           "read": "^kept$"})
        broker.kill()
        broker.start()
        wait_for(lambda: call(broker, "GET", "/api/whoami", auth=(name, password)).status == 200,
                 30, "the management API after the restart")
        assert call(broker, "GET", f"/api/permissions/%2F/{name}").json["read"] == "^kept$"
        amqp_login(broker, name, password)
        run(stream_login(broker, name, password))


def test_stored_offsets_need_read_on_their_stream(broker):
    """The offsets extension (what the web UI lists and resets) checks read on the stream, as
    the stream protocol's QueryOffset and StoreOffset do."""
    readable, hidden = unique("readable"), unique("hidden")
    for stream in (readable, hidden):
        assert call(broker, "PUT", f"/api/queues/%2F/{stream}", {"durable": True}).status == 201
        assert call(broker, "PUT", f"/api/stream/offsets/%2F/{stream}/app",
                    {"offset": 3}).status == 200
    name, password = make_user(broker, "management",
                               {"configure": "", "write": "", "read": f"^{readable}$"})
    auth = (name, password)
    assert call(broker, "PUT", f"/api/stream/offsets/%2F/{readable}/app", {"offset": 5},
                auth=auth).status == 200
    answer = call(broker, "PUT", f"/api/stream/offsets/%2F/{hidden}/app", {"offset": 5}, auth=auth)
    assert answer.status == 401 and "read access" in answer.json["reason"]
    assert call(broker, "GET", f"/api/stream/offsets/%2F/{hidden}", auth=auth).status == 401
    listed = {(o["stream"], o["offset"]) for o in call(broker, "GET", "/api/stream/offsets",
                                                        auth=auth).json}
    assert (readable, 5) in listed and not any(s == hidden for s, _ in listed)
    assert {o["offset"] for o in call(broker, "GET", f"/api/stream/offsets/%2F/{hidden}").json} == {3}
