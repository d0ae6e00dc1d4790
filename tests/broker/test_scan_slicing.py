"""A long stage-1 scan is sliced: while a filtered consumer passes over tens of thousands of
chunks that its values rule out, another link is served between the slices, and the match still
arrives, once.

Deterministic, by the order of the broker's events rather than by speed: both links and their
credit reach the broker in one write from the client, so one read hands the broker the scanning
link's attach (whose first pump starts the scan) and, queued behind it, the other link's attach.
A scan in one piece would send the match before the other link is even attached; a sliced one
ends its first slice with ``SCAN_PAUSED`` and schedules the rest after the events already
waiting, so the other link's messages go out first. A drain of the scanning link then shows that
nothing follows the match (the drain's answer comes after anything the scan would still send).
"""

from __future__ import annotations

from proton import Described, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, Filter

from amqp_stream.streams import dir_name
from amqp_stream.testing import BrokerProcess
from storage import Stream, StreamConfig
from tests.broker.amqp import VALUES, Client, offset, queue_address

CHUNKS = 30_000  # one record each, none matching: ~30 slices of the broker's scan budget
SIDE = 5  # messages the other link takes (in one turn, between two slices of the scan)


def _fill_offline(broker: BrokerProcess, name: str) -> None:
    """CHUNKS one-record chunks with the value "miss", then one "hit", written straight into
    the stream's directory while the broker is stopped (far faster than publishing them)."""
    log_dir = broker.data_dir / "streams" / dir_name(name) / "log"
    assert log_dir.is_dir()
    encoded = [Message(body=f"miss{i}", annotations={"x-stream-filter-value": "miss"}).encode()
               for i in range(CHUNKS)]
    with Stream.open(log_dir, StreamConfig(fsync="never", max_chunk_entries=1)) as s:
        s.append_batch(encoded, ["miss"] * CHUNKS)
        s.append(Message(body="hit", annotations={"x-stream-filter-value": "hit"}).encode(), "hit")
        s.flush()


class _Race(MessagingHandler):
    """One connection, two links created in one callback (so their frames leave in one write):
    ``scan`` (stage 1 on "hit", credit 10) and ``side`` (the other stream, credit SIDE).
    ``events`` records arrivals in the order seen."""

    def __init__(self, url: str, scan: str, side: str):
        super().__init__(prefetch=0, auto_accept=True)
        self.url, self.scan, self.side = url, scan, side
        self.events: list[str] = []
        self.scan_link = None
        self.draining = False
        self.drained = False

    def on_start(self, event):
        c = event.container
        conn = c.connect(self.url)
        self.scan_link = c.create_receiver(conn, queue_address(self.scan), name="scan", options=[Filter({
            symbol("o"): offset("first"), symbol("v"): Described(VALUES, "hit")})])
        self.scan_link.flow(10)
        side_link = c.create_receiver(conn, queue_address(self.side), name="side",
                                      options=[Filter({symbol("o"): offset("first")})])
        side_link.flow(SIDE)

    def on_message(self, event):
        self.events.append(f"{event.receiver.name}:{event.message.body}")
        side = sum(e.startswith("side:") for e in self.events)
        if side == SIDE and "scan:hit" in self.events and not self.draining:
            self.draining = True
            self.scan_link.drain(0)  # answered once the scan has reached the end

    def on_link_flow(self, event):
        link = event.link
        if link.name == "scan" and self.draining and link.credit == 0 and not link.draining():
            self.drained = True
            link.connection.close()


def test_other_connections_are_served_during_a_long_stage1_scan(tmp_path):
    b = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]).start()
    try:
        with Client(b.url) as c:
            c.declare("scan")
            c.declare("side")
            c.publish("side", [Message(body=i) for i in range(SIDE)])
        b.stop()
        _fill_offline(b, "scan")
        b.start()
        race = _Race(b.url, "scan", "side")
        container = Container(race)
        container.timeout = 60  # a bound for a broken broker, not part of what is checked
        container.run()
        assert race.drained, race.events
        # the other link was served while the scan was going on; the match came once, last
        assert race.events == [f"side:{i}" for i in range(SIDE)] + ["scan:hit"], race.events
        with Client(b.url) as c:
            assert c.info("scan")["message_count"] == CHUNKS + 1
    finally:
        b.close()
