"""Deduplication across a broker crash: a named publisher (``x-publisher-reference``,
``x-publishing-id``) streams messages in a window; the broker is SIGKILLed at a random moment;
after the restart the publisher retries everything from its first id on and goes further.
The stream then holds every id exactly once, in order: nothing accepted is lost, nothing that
was stored but not confirmed before the crash is stored twice."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proton import Message, symbol, ulong

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, Delivery
from tests.broker.test_dedup import Named, bodies

pytestmark = pytest.mark.timeout(180)

# argv = url, address, reference, window, count, file of accepted ids
PUBLISHER = r'''
import os, sys
from proton import Delivery, Handler, Message, symbol, ulong
from proton.reactor import Container, LinkOption

url, address, ref, window, count, path = sys.argv[1:7]
window, count = int(window), int(count)
out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

class Named(LinkOption):
    def apply(self, link):
        link.properties = {symbol("x-publisher-reference"): ref}

class Publish(Handler):
    def __init__(self):
        super().__init__()
        self.sent = self.settled = 0
    def on_reactor_init(self, event):
        conn = event.container.connect(url, handler=self, reconnect=False)
        event.container.create_sender(conn, address, handler=self, options=Named())
    def on_link_flow(self, event):
        self.pump(event.link)
    def pump(self, link):
        while link.credit > 0 and self.sent - self.settled < window and self.sent < count:
            self.sent += 1
            link.delivery(str(self.sent))
            link.send(Message(body=self.sent,
                              annotations={symbol("x-publishing-id"): ulong(self.sent)}).encode())
            link.advance()
    def on_delivery(self, event):
        d = event.delivery
        if d.remote_state == Delivery.ACCEPTED:
            os.write(out, f"{d.tag}\n".encode())
        d.settle()
        self.settled += 1
        self.pump(d.link)
    def on_transport_error(self, event):
        event.container.stop()
    def on_transport_closed(self, event):
        event.container.stop()
    def on_connection_remote_close(self, event):
        event.container.stop()

Container(Publish()).run()
'''


def _accepted(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().splitlines() if line]


@pytest.mark.parametrize("seed", [20261125, 3])
def test_a_retry_after_a_broker_crash_stores_every_message_once(tmp_path, seed):
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data", log_path=tmp_path / "broker.log")
    broker.start()
    count = 3000
    try:
        with Client(broker.url) as c:
            c.declare("s")
        accepted = tmp_path / "accepted"
        proc = subprocess.Popen([sys.executable, "-c", PUBLISHER, broker.url, "/queues/s", "pub",
                                 str(rng.choice([16, 200])), str(count), str(accepted)])
        deadline = time.monotonic() + 60
        while not _accepted(accepted):
            assert time.monotonic() < deadline, "no accepts"
            assert proc.poll() is None, "publisher died before an accept"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))
        broker.kill()
        proc.wait(30)
        before = _accepted(accepted)
        broker.start()
        # the retry: everything from the first id, then further, as a restarted publisher would
        top = max(before) + 50
        with Client(broker.url) as c:
            sender = c.sender("s", options=Named("pub"))
            for k in range(1, top + 1):
                data = Message(body=k, annotations={symbol("x-publishing-id"): ulong(k)}).encode()
                assert c.send_bytes(sender, data) == Delivery.ACCEPTED
            sender.close()
            status, body, _ = c.request("GET", "/queues/s/sequences/pub")
            assert (status, body) == (200, {"sequence": top})
        assert bodies(broker, "s") == list(range(1, top + 1))
    finally:
        broker.close()
