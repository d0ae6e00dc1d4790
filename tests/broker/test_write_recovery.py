"""A stream recovers from a full disk without a restart: publishes that fail are rejected with
``amqp:resource-limit-exceeded``, nothing accepted is lost, and once there is room again new
publishes are accepted; every accepted message is then readable exactly once, in order."""

from __future__ import annotations

import os
import resource
import time

from proton import Message, symbol

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, Delivery, offset


class _GrowableDiskBroker(BrokerProcess):
    """A broker whose files may not grow beyond ~200 KB (a soft RLIMIT_FSIZE: writes fail for
    real with EFBIG, as with ENOSPC on a full disk). ``make_room()`` lifts the limit on the
    running process, as freeing disk space would."""

    def command(self):
        return ["sh", "-c", 'ulimit -S -f 400 && exec "$@"', "sh", *super().command()]

    def make_room(self) -> None:
        _, hard = resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))


def test_after_a_full_disk_publishing_works_again_without_a_restart(tmp_path):
    b = _GrowableDiskBroker(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("full")
            sender = c.sender("full")
            accepted: list[str] = []
            for i in range(40):  # fill the segment up to the limit
                body = f"before-{i}-" + os.urandom(5_000).hex()
                if c.send_bytes(sender, Message(body=body).encode()) != Delivery.ACCEPTED:
                    break
                accepted.append(body)
            assert c.last_delivery.remote.condition.name == "amqp:resource-limit-exceeded"
            assert accepted
            # still full: rejected again (refused during the backoff, or a real failed write)
            assert c.send_bytes(sender, Message(body="still full").encode()) == Delivery.REJECTED
            assert c.last_delivery.remote.condition.name == "amqp:resource-limit-exceeded"

            # a retry while still full fails for real (a second write error), rejected too
            for attempt in range(200):
                if b.log_text().count("writer failed") >= 2:
                    break
                assert c.send_bytes(sender, Message(body=f"full-{attempt}-" + "x" * 20_000)
                                    .encode()) == Delivery.REJECTED
                assert c.last_delivery.remote.condition.name == "amqp:resource-limit-exceeded"
                time.sleep(0.05)
            else:
                raise AssertionError("no retry while the disk was full")

            b.make_room()
            for attempt in range(200):  # until the broker's backoff lets a write be tried
                body = f"after-{attempt}"
                if c.send_bytes(sender, Message(body=body).encode()) == Delivery.ACCEPTED:
                    accepted.append(body)
                    break
                assert c.last_delivery.remote.condition.name == "amqp:resource-limit-exceeded"
                time.sleep(0.05)
            else:
                raise AssertionError("publishing never worked again")
            for i in range(5):  # and it keeps working, growing the file past the old limit
                body = f"more-{i}-" + os.urandom(5_000).hex()
                assert c.send_bytes(sender, Message(body=body).encode()) == Delivery.ACCEPTED
                accepted.append(body)

            assert c.info("full")["message_count"] == len(accepted)
            r = c.receiver("full", [(symbol("o"), offset("first"))], credit=200)
            got = [r.receive(timeout=15).body for _ in range(len(accepted))]
            assert got == accepted  # each accepted message exactly once, in order
        assert "Traceback" not in b.log_text()
    finally:
        b.close()
