"""A long stage-1 scan is sliced: while a filtered consumer passes over tens of thousands of
chunks that its values rule out, another connection is served (its messages arrive before the
scanning consumer's match: an order, never a time), and the match still arrives, once."""

from __future__ import annotations

from proton import Described, Message, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, Filter

from amqp_stream.streams import dir_name
from amqp_stream.testing import BrokerProcess
from storage import Stream, StreamConfig
from tests.broker.amqp import VALUES, Client, offset, queue_address

CHUNKS = 30_000  # one record each, none matching: ~30 slices of the broker's scan budget
SIDE = 5  # messages the other connection takes one at a time during the scan


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
    """One event loop, two connections (proton hands out new wrappers: links are told apart
    by name). Once the scanning link is attached, the other connection takes SIDE messages
    from another stream with credit 1 at a time (each one a round trip through the broker). ``events`` records arrivals in the order seen."""

    def __init__(self, url: str, scan: str, side: str):
        super().__init__(prefetch=0, auto_accept=True)
        self.url, self.scan, self.side = url, scan, side
        self.events: list[str] = []
        self.side_link = None
        self.scan_link = None

    def on_start(self, event):
        c = event.container
        conn = c.connect(self.url)
        self.scan_link = c.create_receiver(conn, queue_address(self.scan), name="scan", options=[Filter({
            symbol("o"): offset("first"), symbol("v"): Described(VALUES, "hit")})])
        self.scan_link.flow(10)
        self.side_conn = c.connect(self.url)

    def on_link_opened(self, event):
        if event.receiver is not None and event.receiver.name == "scan" and self.side_link is None:
            self.side_link = event.container.create_receiver(
                self.side_conn, queue_address(self.side), name="side",
                options=[Filter({symbol("o"): offset("first")})])
            self.side_link.flow(1)

    def on_message(self, event):
        if event.receiver.name == "scan":
            self.events.append(f"scan:{event.message.body}")
            self._done(event)
        else:
            self.events.append(f"side:{event.message.body}")
            if sum(e.startswith("side:") for e in self.events) < SIDE:
                self.side_link.flow(1)
            else:
                self._done(event)

    def _done(self, event):
        side = sum(e.startswith("side:") for e in self.events)
        if side >= SIDE and any(e.startswith("scan:") for e in self.events):
            event.container.schedule(0.3, self)  # a second match would arrive meanwhile

    def on_timer_task(self, event):
        self.scan_link.connection.close()
        self.side_conn.close()


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
        container.timeout = 60
        container.run()
        assert race.events.count("scan:hit") == 1  # exactly the match, once
        assert [e for e in race.events if e.startswith("scan:")] == ["scan:hit"]
        # every side message arrived while the scan was still going
        assert race.events == [f"side:{i}" for i in range(SIDE)] + ["scan:hit"], race.events
        with Client(b.url) as c:
            assert c.info("scan")["message_count"] == CHUNKS + 1
    finally:
        b.close()
