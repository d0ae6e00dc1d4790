"""Deduplication and stored offsets across broker crashes: a named publisher
(``x-publisher-reference``, ``x-publishing-id``) streams messages in a window; the broker is
SIGKILLed at a random moment; after the restart the publisher retries everything from its first
id on and goes further. The stream then holds every id exactly once, in order: nothing accepted
is lost, nothing that was stored but not confirmed before the crash is stored twice. Named
consumers (``x-consumer-name``) storing offsets meanwhile resume at or after their last stored
offset after each restart, never before it."""

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


# argv = url, address, consumer name, file of received offsets (each written before its accept)
CONSUMER = r'''
import os, sys
from proton import Described, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption

url, address, name, path = sys.argv[1:5]
out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
SPEC = symbol("rabbitmq:stream-offset-spec")

class Named(LinkOption):
    def apply(self, link):
        link.properties = {symbol("x-consumer-name"): name}
        link.source.filter.put_dict({SPEC: Described(SPEC, "first")})

class Consume(MessagingHandler):  # accepts each message when on_message returns
    def __init__(self):
        super().__init__(prefetch=20)
    def on_start(self, event):
        conn = event.container.connect(url, reconnect=False)
        event.container.create_receiver(conn, address, options=Named())
    def on_message(self, event):
        os.write(out, f"{event.message.annotations['x-stream-offset']}\n".encode())
    def on_transport_error(self, event):
        event.container.stop()
    def on_transport_closed(self, event):
        event.container.stop()
    def on_connection_remote_close(self, event):
        event.container.stop()

Container(Consume()).run()
'''


def _records(broker: BrokerProcess, name: str) -> list[tuple[int, object]]:
    """(offset, body) of every record of the stream, from its files alone."""
    from storage import OffsetSpec, open_reader
    for d in (broker.data_dir / "streams").iterdir():
        meta = d / "stream.json"
        if meta.is_file() and f'"name": "{name}"' in meta.read_text():
            out = []
            with open_reader(str(d / "log"), OffsetSpec.first()) as reader:
                while (chunk := reader.read_chunk()) is not None:
                    for offset, data in chunk.records:
                        m = Message()
                        m.decode(bytes(data))
                        out.append((offset, m.body))
            return out
    raise AssertionError(f"no directory for {name}")


def _stop(proc: subprocess.Popen) -> None:
    try:
        proc.wait(30)  # they stop when their connection goes
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def test_named_consumers_resume_at_or_after_their_stored_offset_across_crashes(tmp_path):
    """Named consumers store offsets (often: every 5 acceptances, 20 ms after one) while a
    named publisher streams and the broker is SIGKILLed at random moments, three times. After
    each restart every consumer's stored offset is at or after the last one known durable
    before the crash (never before it) and at most the last it received (nothing stored that
    it did not accept), and its next attach starts at the first record after it (nothing
    skipped); the publisher's retry then stores every id exactly once."""
    rng = random.Random(20261125)
    rounds, names, per_round = 3, ["c0", "c1"], 1500
    broker = BrokerProcess(tmp_path / "data", log_path=tmp_path / "broker.log",
                           extra_args=["--offset-store-every", "5", "--offset-store-interval-ms", "20"])
    broker.start()
    received: dict[str, list[int]] = {n: [] for n in names}  # every round's, in order
    resumes: list[tuple[str, int | None, int]] = []  # (name, stored after restart, first received next)
    stored_after: dict[str, int | None] = {n: None for n in names}
    accepted_ids: list[int] = []
    try:
        with Client(broker.url) as c:
            c.declare("s")
        for rnd in range(rounds + 1):
            files = {n: tmp_path / f"{n}-{rnd}" for n in names}
            consumers = [subprocess.Popen([sys.executable, "-c", CONSUMER, broker.url, "/queues/s", n,
                                           str(files[n])]) for n in names]
            publisher = None
            if rnd < rounds:
                accepted = tmp_path / f"accepted-{rnd}"
                publisher = subprocess.Popen([sys.executable, "-c", PUBLISHER, broker.url, "/queues/s",
                                              "pub", "50", str(per_round * (rnd + 1)), str(accepted)])
            else:  # something after every stored offset for the last attach to start at
                with Client(broker.url) as c:
                    c.publish("s", [Message(body="marker")])
            deadline = time.monotonic() + 60
            while not all(_accepted(files[n]) for n in names):
                assert time.monotonic() < deadline, f"round {rnd}: a consumer received nothing"
                time.sleep(0.02)
            for n in names:
                resumes.append((n, stored_after[n], _accepted(files[n])[0]))
            if rnd == rounds:
                for p in consumers:
                    p.kill()
                    p.wait(30)
                break
            # offsets known durable: one read, then an accepted publish after it (the writer
            # writes in order, so the store read before is on disk too)
            durable: dict[str, int] = {}
            with Client(broker.url) as c:
                for _ in range(rng.randint(1, 4)):
                    seen = {n: c.request("GET", f"/queues/s/offsets/{n}") for n in names}
                    c.publish("s", [Message(body="marker")])
                    for n, (status, body, _) in seen.items():
                        if status == 200:
                            durable[n] = max(durable.get(n, -1), body["offset"])
            time.sleep(rng.uniform(0.0, 0.2))
            broker.kill()
            for p in [*consumers, publisher]:
                _stop(p)
            accepted_ids += _accepted(accepted)
            for n in names:
                received[n] += _accepted(files[n])
            broker.start()
            with Client(broker.url) as c:
                for n in names:
                    status, body, _ = c.request("GET", f"/queues/s/offsets/{n}")
                    after = body["offset"] if status == 200 else None
                    if n in durable:  # never before what was stored
                        assert after is not None and after >= durable[n], (n, after, durable[n])
                    if after is not None:  # nothing it did not receive
                        assert after <= max(received[n]), (n, after)
                    stored_after[n] = after
        # every consumer's attach after a restart started at the first record after its stored offset
        assert any(after is not None for _, after, _ in resumes), "no offset survived a crash"
        offsets = [o for o, _ in _records(broker, "s")]
        for n, after, first in resumes:
            assert first == min(o for o in offsets if after is None or o > after), (n, after, first)
        # the publisher's retry (from id 1 to past anything stored): every id once, the
        # accepted ones included
        stored_ids = [b for _, b in _records(broker, "s") if b != "marker"]
        top = max(accepted_ids + stored_ids) + 10
        with Client(broker.url) as c:
            sender = c.sender("s", options=Named("pub"))
            for k in range(1, top + 1):
                data = Message(body=k, annotations={symbol("x-publishing-id"): ulong(k)}).encode()
                assert c.send_bytes(sender, data) == Delivery.ACCEPTED
            sender.close()
        assert [b for _, b in _records(broker, "s") if b != "marker"] == list(range(1, top + 1))
    finally:
        broker.close()
