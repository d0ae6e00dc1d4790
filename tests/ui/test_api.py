"""What the web UI needs of the HTTP API, over plain HTTP: its files without a login (and only
its files), no browser password dialog for its own requests, the stored-offsets endpoint and
its refusals, the consumers' filter and savings fields on both protocols."""

from __future__ import annotations

import asyncio
import base64
import urllib.request
import uuid

import pytest
from proton import Described, symbol
from proton.reactor import Filter
from proton.utils import BlockingConnection

from amqp_stream.testing import BrokerProcess
from tests.http.api import call, quote
from tests.polling import wait_for

rstream = pytest.importorskip("rstream")
from rstream import AMQPMessage, Producer  # noqa: E402

TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("ui-api") / "data", extra_args=["--fsync", "never"])
    b.start()
    yield b
    b.close()


def publish(broker: BrokerProcess, stream: str, count: int) -> None:
    async def go() -> None:
        async with Producer(broker.host, broker.stream_port, username="guest",
                            password="guest") as p:
            await p.create_stream(stream, exists_ok=True)
            for i in range(count):
                await p.send_wait(stream, AMQPMessage(body=b"m%d" % i,
                                                      application_properties={"n": i}))
    asyncio.run(asyncio.wait_for(go(), TIMEOUT))


def test_the_pages_files_need_no_login_and_nothing_else_is_served(broker):
    for path, kind in (("/", "text/html"), ("/ui/ui.js", "text/javascript"),
                       ("/ui/ui.css", "text/css")):
        answer = call(broker, "GET", path, auth=None)
        assert answer.status == 200 and answer.headers["Content-Type"].startswith(kind), path
    assert b'src="/ui/ui.js"' in call(broker, "GET", "/", auth=None).body
    for auth in (None, ("guest", "guest")):
        answer = call(broker, "GET", "/ui/ui.py", auth=auth)
        assert answer.status == 404 and answer.json["error"] == "Object Not Found"
    assert call(broker, "GET", "/api/overview", auth=None).status == 401


def test_the_pages_own_401_asks_no_browser_dialog(broker):
    def get(xhr: bool):
        request = urllib.request.Request(broker.management_url + "/api/whoami")
        request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:wrong").decode())
        if xhr:
            request.add_header("X-Requested-With", "XMLHttpRequest")
        try:
            urllib.request.urlopen(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers
        raise AssertionError("a wrong password was let in")
    status, headers = get(xhr=True)
    assert status == 401 and "WWW-Authenticate" not in headers
    status, headers = get(xhr=False)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")


def test_stored_offsets_listed_and_reset(broker):
    stream = f"ui-{uuid.uuid4().hex[:8]}"
    publish(broker, stream, 10)
    path = f"/api/stream/offsets/%2F/{quote(stream)}"
    assert call(broker, "GET", path).json == []
    assert call(broker, "PUT", f"{path}/app", {"offset": 6}).json == {"consumer": "app",
                                                                        "offset": 6}
    everyone = call(broker, "GET", "/api/stream/offsets").json
    assert [(o["stream"], o["consumer"], o["offset"]) for o in everyone
            if o["stream"] == stream] == [(stream, "app", 6)]
    assert [{**o, "lag": 0} for o in call(broker, "GET", "/api/stream/offsets/%2F").json] == [
        {**o, "lag": 0} for o in everyone]  # (a lag moves as tracking records commit)

    def committed() -> int:
        return call(broker, "GET", f"/api/queues/%2F/{quote(stream)}").json["committed_offset"]
    # the lag counts from the committed end, which the tracking record moves once it commits
    wait_for(lambda: call(broker, "GET", path).json == [
        {"stream": stream, "consumer": "app", "offset": 6, "lag": committed() - 6}], TIMEOUT,
        "the lag listed")
    end = committed()
    assert call(broker, "PUT", f"{path}/app", {"spec": "first"}).json["offset"] == 0
    # "next": the offset before the end; the tracking record "first" wrote may have moved it
    last = call(broker, "PUT", f"{path}/app", {"spec": "next"}).json["offset"]
    assert end <= last <= committed() and call(broker, "GET", path).json[0]["offset"] == last
    for body in (None, {}, {"offset": -1}, {"offset": "3"}, {"offset": 1, "spec": "first"},
                 {"spec": "sometime"}, [1]):
        answer = call(broker, "PUT", f"{path}/app", body)
        assert answer.status == 400 and answer.json["error"] == "bad_request", body
    assert call(broker, "PUT", f"{path}/{'x' * 300}", {"offset": 1}).status == 400
    assert call(broker, "GET", "/api/stream/offsets/%2F/no-such-stream").status == 404
    assert call(broker, "GET", f"/api/stream/offsets/other/{quote(stream)}").status == 404
    assert call(broker, "GET", path, auth=None).status == 401


def test_an_amqp_consumer_lists_its_sql_filter_lag_and_savings(broker):
    stream = f"ui-{uuid.uuid4().hex[:8]}"
    publish(broker, stream, 20)
    conn = BlockingConnection(broker.url, timeout=TIMEOUT, user="guest", password="guest")
    try:
        sql = Described(symbol("amqp:sql-filter"), "n >= 15")
        start = Described(symbol("rabbitmq:stream-offset-spec"), "first")
        receiver = conn.create_receiver(
            f"/queues/{stream}", credit=3,
            options=Filter({symbol("sql"): sql, symbol("rabbitmq:stream-offset-spec"): start}))
        for _ in range(3):
            receiver.receive(timeout=TIMEOUT)
            receiver.accept()

        def mine():
            return next((c for c in call(broker, "GET", "/api/consumers").json
                         if c["queue"]["name"] == stream), None)
        wait_for(lambda: (mine() or {}).get("filtering", {}).get("messages_sent") == 3,
                 TIMEOUT, "3 messages counted as sent")
        c = mine()
        assert c["filter"] == {"values": [], "match_unfiltered": False, "sql": "n >= 15",
                               "properties": {}}
        saved = c["filtering"]
        assert saved["chunks_read"] >= 18 and 0 < saved["bytes_sent"] < saved["bytes_read"]
        assert c["offset"] == 18 and c["offset_lag"] == 20 - 18
    finally:
        conn.close()
