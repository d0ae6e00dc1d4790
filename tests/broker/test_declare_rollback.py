"""Declare is all or nothing: a declare whose ``stream.json`` cannot be written (the file may not
grow: a soft RLIMIT_FSIZE, writes fail for real with EFBIG as on a full disk) leaves no stream
and no directory; once there is room a retry creates the stream for real (201, not 200 for a
phantom), and what is published there survives a restart."""

from __future__ import annotations

import pytest
from proton import Message, symbol
from proton.utils import ConnectionClosed

from tests.broker.amqp import Client, Delivery, offset
from tests.broker.test_write_recovery import _GrowableDiskBroker

# stream.json holds the arguments: this one makes it larger than the ~200 KB files may grow
BIG_ARGUMENTS = {"x-queue-type": "stream", "x-note": "n" * 300_000}


def test_a_declare_that_fails_to_write_leaves_no_phantom(tmp_path):
    data = tmp_path / "data"
    b = _GrowableDiskBroker(data).start()
    try:
        with Client(b.url) as c:
            with pytest.raises(ConnectionClosed, match="internal-error.*File too large"):
                c.request("PUT", "/queues/big", {"durable": True, "arguments": BIG_ARGUMENTS})
        with Client(b.url) as c:
            status, _, _ = c.request("GET", "/queues/big")
            assert status == 404
            assert [p.name for p in (data / "streams").iterdir()] == []

            b.make_room()
            assert c.declare("big", BIG_ARGUMENTS) == 201
            assert c.publish("big", [Message(body="kept")]) == [Delivery.ACCEPTED]
        b.stop()
        b.start()
        with Client(b.url) as c:
            r = c.receiver("big", [(symbol("o"), offset("first"))], credit=1)
            assert r.receive(timeout=15).body == "kept"
        assert [p.name for p in (data / "streams").iterdir()] == ["big"]
    finally:
        b.close()
