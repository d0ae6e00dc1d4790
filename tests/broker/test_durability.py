"""Crash durability: a broker with ``--fsync always`` is SIGKILLed while publishers run; after a
restart every message whose publish was accepted is there, once, in order per publisher.

Each publisher is a separate process with a raw proton client that keeps a window of unsettled
messages and appends the sequence number of every accepted message to its own file the moment
the accept arrives (the publishers are not killed, so those files are complete). The kill comes
at a random moment (seeded; the seed is in the test id) once every publisher has had accepts.
Rounds reuse one data directory, so later rounds also recover what earlier crashes left behind.

What must hold after each restart, per publisher: the stored sequence numbers are 0, 1, ..., m
with no gap and no duplicate (a publisher's messages are appended in the order sent; a crash may
only cut the tail), and m + 1 >= the number of accepts it saw (nothing accepted is lost). Messages
stored but not yet accepted at the crash may be there: that is at-least-once, not a loss.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amqp_stream.client import connect
from amqp_stream.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

PUBLISHERS = 3
ROUNDS = 4

# A publisher process: argv = url, address, name, window, file of accepted sequence numbers.
PUBLISHER = r'''
import os, sys
from proton import Delivery, Message
from proton.reactor import Container
from proton import Handler

url, address, name, window, path = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

class Publish(Handler):
    def __init__(self):
        super().__init__()
        self.sent = self.settled = 0
    def on_reactor_init(self, event):
        conn = event.container.connect(url, handler=self, reconnect=False)
        event.container.create_sender(conn, address, handler=self)
    def on_link_flow(self, event):
        self.pump(event.link)
    def pump(self, link):
        while link.credit > 0 and self.sent - self.settled < window:
            link.delivery(str(self.sent))
            link.send(Message(body=f"{name}:{self.sent}").encode())
            link.advance()
            self.sent += 1
    def on_delivery(self, event):
        d = event.delivery
        if d.remote_state == Delivery.ACCEPTED:
            os.write(out, f"{d.tag}\n".encode())
        else:
            os.write(out, f"# {d.tag} outcome {d.remote_state}\n".encode())
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
    return [int(line) for line in path.read_text().splitlines() if line and not line.startswith("#")]


def _stored(url: str, stream: str) -> list[str]:
    client = connect(url, timeout=30)
    try:
        info = client.info(stream)
        end = info["next_offset"]
        bodies = []
        if end > info["first_offset"]:
            with client.consumer(stream, offset="first", credit=1000) as consumer:
                for message in consumer.read_available(timeout=30):
                    bodies.append(message.body)
                    if message.offset == end - 1:
                        break
        assert len(bodies) == end - info["first_offset"], "could not read the whole stream back"
        return bodies
    finally:
        client.close()


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.parametrize("seed", [20261122, 7])
def test_accepted_messages_survive_sigkill(tmp_path, seed):
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "always"], log_path=tmp_path / "broker.log")
    broker.start()
    stream = "crash"
    client = connect(broker.url)
    client.declare(stream)
    client.close()
    files: dict[str, Path] = {}
    try:
        for round_ in range(ROUNDS):
            procs = []
            for p in range(PUBLISHERS):
                name = f"r{round_}p{p}"
                files[name] = tmp_path / f"{name}.accepted"
                window = rng.choice([1, 16, 200])
                procs.append(subprocess.Popen([sys.executable, "-c", PUBLISHER, broker.url, f"/queues/{stream}",
                                               name, str(window), str(files[name])]))
            round_files = [files[f"r{round_}p{p}"] for p in range(PUBLISHERS)]
            _wait_for(lambda: all(_accepted(f) for f in round_files), 60, "every publisher to get accepts")
            time.sleep(rng.uniform(0.05, 1.0))
            broker.kill()
            for proc in procs:
                proc.wait(30)
            broker.start()

            stored = _stored(broker.url, stream)
            per_publisher: dict[str, list[int]] = {}
            for body in stored:
                name, seq = body.split(":")
                per_publisher.setdefault(name, []).append(int(seq))
            for name, path in files.items():
                accepted = _accepted(path)
                seqs = per_publisher.get(name, [])
                assert seqs == list(range(len(seqs))), f"{name}: gaps, duplicates or disorder after round {round_}"
                lost = set(accepted) - set(seqs)
                assert not lost, f"{name}: {len(lost)} accepted message(s) lost after round {round_}, " \
                                 f"e.g. {sorted(lost)[:5]} ({len(seqs)} stored)"
                assert len(set(accepted)) == len(accepted), f"{name}: a message was accepted twice"
            assert set(per_publisher) <= set(files)
            print(f"round {round_}: {len(stored)} stored, accepted per publisher: "
                  f"{ {n: len(_accepted(f)) for n, f in files.items() if n.startswith(f'r{round_}')} }")
    finally:
        broker.close()
