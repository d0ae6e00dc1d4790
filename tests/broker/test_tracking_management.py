"""The management node's tracking paths (an extension): a consumer name's stored offset and a
publisher reference's last publishing id, on the broker's real core (no sockets)."""

from __future__ import annotations

import asyncio
import time

import pytest
from proton import timestamp, ulong

from amqp_stream.amqp import management
from amqp_stream.config import BrokerConfig


@pytest.fixture
def core(tmp_path):
    from amqp_stream.core import Core
    from amqp_stream.loop import Mailbox
    loop = asyncio.new_event_loop()
    c = Core(BrokerConfig(data_dir=tmp_path), Mailbox(loop))
    c.open_all()
    yield c
    c.close_all()
    loop.close()


def test_offsets_are_stored_and_answered_and_sequences_answered(core):
    h = management.handle
    assert h("PUT", "/queues/s", None, core).status == 201
    assert h("GET", "/queues/s/offsets/reader-1", None, core).status == 404  # none stored
    assert h("PUT", "/queues/s/offsets/reader-1", {"offset": ulong(41)}, core) == \
        management.Response(200, {"offset": 41})
    assert h("GET", "/queues/s/offsets/reader-1", None, core) == \
        management.Response(200, {"offset": 41})
    assert core.stream("s").stream.query_offset("reader-1") == 41  # in the stream itself
    assert h("GET", "/queues/s/sequences/pub", None, core) == management.Response(200, {"sequence": 0})
    core.stream("s").stream.append_batch([b"m"], writer=("pub", 9))
    assert h("GET", "/queues/s/sequences/pub", None, core) == management.Response(200, {"sequence": 9})
    # percent-encoded names
    assert h("PUT", "/queues/s/offsets/a%2Fb", {"offset": 1}, core).status == 200
    assert core.stream("s").stream.query_offset("a/b") == 1


@pytest.mark.parametrize("method, path, body, status", [
    ("PUT", "/queues/s/offsets/r", {"offset": -1}, 400),
    ("PUT", "/queues/s/offsets/r", {"offset": True}, 400),
    ("PUT", "/queues/s/offsets/r", 5, 400),
    ("PUT", "/queues/s/offsets/" + "x" * 256, {"offset": 1}, 400),
    ("DELETE", "/queues/s/offsets/r", None, 405),
    ("PUT", "/queues/s/sequences/p", {"sequence": 1}, 405),
    ("GET", "/queues/nope/offsets/r", None, 404),
    ("GET", "/queues/s/offsets/", None, 400),
])
def test_bad_tracking_requests(core, method, path, body, status):
    assert management.handle("PUT", "/queues/s", None, core).status in (200, 201)
    assert management.handle(method, path, body, core).status == status


def test_a_streams_tracking_is_listed(core):
    h = management.handle
    assert h("PUT", "/queues/s", None, core).status == 201
    assert h("GET", "/queues/s/tracking", None, core) == \
        management.Response(200, {"offsets": {}, "sequences": {}})
    core.stream("s").stream.append_batch([b"m"], writer=("pub", 9))
    assert h("PUT", "/queues/s/offsets/b", {"offset": 0}, core).status == 200
    assert h("PUT", "/queues/s/offsets/a", {"offset": 1}, core).status == 200
    assert h("GET", "/queues/s/tracking", None, core) == \
        management.Response(200, {"offsets": {"a": 1, "b": 0}, "sequences": {"pub": 9}})
    assert h("DELETE", "/queues/s/tracking", None, core).status == 405
    assert h("GET", "/queues/nope/tracking", None, core).status == 404


def test_an_offset_is_moved_to_where_a_spec_starts(core):
    """``{"spec": ...}``: the broker resolves the spec as a link's start and stores the offset
    before it (0 at least, as RabbitMQ's reset_offset stores 0)."""
    h = management.handle
    assert h("PUT", "/queues/s", None, core).status == 201
    stream = core.stream("s").stream
    for _ in range(3):  # three chunks
        stream.append_batch([b"a", b"b"])
        stream.flush()
    # 0..5 in chunks at 0, 2, 4
    assert h("PUT", "/queues/s/offsets/r", {"spec": "next"}, core) == \
        management.Response(200, {"offset": 5, "resumes_at": 6})
    assert stream.query_offset("r") == 5
    assert h("PUT", "/queues/s/offsets/r", {"spec": "last"}, core).body == {"offset": 3, "resumes_at": 4}
    assert h("PUT", "/queues/s/offsets/r", {"spec": ulong(3)}, core).body == {"offset": 2, "resumes_at": 3}
    stream.flush()  # the stores' tracking chunks committed: the end does not move under the PUT
    end = stream.next_offset
    assert h("PUT", "/queues/s/offsets/r", {"spec": 99}, core).body["resumes_at"] == end
    assert h("PUT", "/queues/s/offsets/r", {"spec": "first"}, core).body == {"offset": 0, "resumes_at": 1}
    ts = timestamp(int(time.time() * 1000) + 3_600_000)  # after everything: the end
    stream.flush()
    end = stream.next_offset
    assert h("PUT", "/queues/s/offsets/r", {"spec": ts}, core).body["resumes_at"] == end
    assert h("PUT", "/queues/s/offsets/r", {"spec": timestamp(0)}, core).body == {"offset": 0, "resumes_at": 1}
    assert h("PUT", "/queues/s/offsets/r", {"spec": "sometime"}, core).status == 400
    assert h("PUT", "/queues/s/offsets/r", {"spec": True}, core).status == 400
