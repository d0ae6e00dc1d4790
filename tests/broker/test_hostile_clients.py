"""Clients that would make the broker hold memory without bound, or trip its cleanup: a consumer
that grants credit and never reads, a publisher that pipelines large messages faster than the
disk takes them, names that are not UTF-8. Each runs against its own broker process over
loopback; the broker's memory is read from /proc (VmHWM is its peak resident set).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest
from proton import Described, Message, symbol

from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import Client, Delivery, offset
from tests.broker.engines import EngineClient, pump, connection_count, wait_for

pytestmark = pytest.mark.timeout(300)

MiB = 1 << 20


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field}")


def _metric(b: BrokerProcess, name: str, stream: str | None = None) -> float:
    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    label = f'{{stream="{stream}"}}' if stream else ""
    m = re.search(rf"^{re.escape(name + label)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _attach_receiver(e: EngineClient, stream: str, credit: int, settled: bool = False) -> None:
    session = e.connection.session()
    session.open()
    r = session.receiver("stuck")
    r.source.address = f"/queues/{stream}"
    r.source.filter.put_object({symbol("o"): offset("first")})
    r.target.address = "stuck"
    if settled:
        r.snd_settle_mode = r.SND_SETTLED
    r.open()
    r.flow(credit)
    assert pump([e], lambda c: bool(r.state & r.REMOTE_ACTIVE), timeout=15) == []


def _wait_sent_all(b: BrokerProcess, stream: str) -> None:
    """Until the broker has sent nothing more on ``stream`` for a second: stuck links were sent
    all they will be."""
    last = {"sent": -1.0, "at": time.monotonic()}

    def quiet() -> bool:
        sent = _metric(b, "amqp_stream_delivered_messages_total", stream)
        if sent != last["sent"]:
            last.update(sent=sent, at=time.monotonic())
        return time.monotonic() - last["at"] > 1.0

    wait_for(quiet, 60, "the stuck links sent all they will be")


def _publish_small(b: BrokerProcess, stream: str, count: int) -> None:
    """``count`` 100-byte messages, pre-settled, pipelined as fast as credit allows."""
    e = EngineClient(b.host, b.port)
    assert pump([e], lambda c: c.opened, timeout=15) == []
    session = e.connection.session()
    session.open()
    s = session.sender("fast")
    s.target.address = f"/queues/{stream}"
    s.open()
    payload = Message(body=b"x" * 100).encode()
    for i in range(count):
        if s.credit <= 0:
            assert pump([e], lambda c: s.credit > 0, timeout=30) == []
        d = s.delivery(str(i).encode())
        s.send(payload)
        s.advance()
        d.settle()
    assert pump([e], lambda c: c.transport.pending() == 0, timeout=60) == []
    e.close()
    with Client(b.url) as c:
        wait_for(lambda: c.info(stream)["message_count"] >= count, 60, "the messages stored")


def test_a_consumer_that_never_reads_costs_at_most_its_buffer(tmp_path):
    """It grants credit for the whole stream and never reads its socket: the broker sends what
    the socket and the session's 1 MiB buffer hold, no more, while another consumer reads the
    whole 64 MiB stream; the stuck one's sockets go when it leaves."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]).start()
    try:
        body = b"x" * (100 * 1024)
        total = 640
        with Client(b.url) as c:
            c.declare("big")
            assert c.publish("big", [Message(body=body) for _ in range(total)]) == \
                [Delivery.ACCEPTED] * total
        b.stop()  # a fresh process: its peak RSS (VmHWM) is this test's alone
        b.start()
        base_rss = _status_kib(b.proc.pid, "VmRSS")
        stuck = [EngineClient(b.host, b.port, rcvbuf=64 * 1024) for _ in range(3)]
        for e in stuck:
            pump([e], lambda c: c.opened, timeout=15)
            _attach_receiver(e, "big", credit=100_000)
        # meanwhile the broker serves a reader through the whole stream: turns enough for the
        # stuck ones to have been sent everything, were there no bound
        with Client(b.url) as c:
            r = c.receiver("big", [(symbol("o"), offset("first"))], credit=200)
            for _ in range(total):
                assert len(r.receive(timeout=30).body) == len(body)
        reader_bytes = total * len(body)
        stuck_bytes = _metric(b, "amqp_stream_delivered_bytes_total", "big") - reader_bytes
        # each stuck link: 1 MiB in the session, the kernel's socket buffers, one turn's batch
        grown = _status_kib(b.proc.pid, "VmHWM") - base_rss
        print(f"stuck consumers were sent {stuck_bytes / MiB:.1f} MiB; peak RSS +{grown} KiB")
        assert stuck_bytes < 3 * 12 * MiB, stuck_bytes
        # each of the four readers holds its current chunk (<= 8 MiB, read and split) and the
        # session buffer; without the bound the stuck three would each copy the 64 MiB stream
        assert grown < 128 * 1024, f"peak RSS grew by {grown} KiB"
        for e in stuck:
            e.close()
        wait_for(lambda: connection_count(b.proc.pid) == 0, 15, "the stuck sockets closed")
        assert b.proc.poll() is None
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_pipelined_large_messages_are_bounded_by_bytes_not_credit(tmp_path):
    """48 messages of 4 MiB pipelined on one link (all within the credit granted at attach):
    the broker stops reading the connection at its per-link byte bound instead of holding
    them all, and still accepts every one."""
    b = BrokerProcess(tmp_path / "data", extra_args=[
        "--fsync", "always", "--max-message-size", str(8 * MiB),
        "--max-unconfirmed-bytes", str(8 * MiB)]).start()
    try:
        with Client(b.url) as c:
            c.declare("large")
        base_rss = _status_kib(b.proc.pid, "VmRSS")
        e = EngineClient(b.host, b.port)
        pump([e], lambda c: c.opened, timeout=15)
        session = e.connection.session()
        session.open()
        s = session.sender("pipelined")
        s.target.address = "/queues/large"
        s.open()
        assert pump([e], lambda c: s.credit >= 48, timeout=15) == []
        payload = Message(body=b"p" * (4 * MiB)).encode()
        deliveries = []
        for i in range(48):
            d = s.delivery(str(i).encode())
            s.send(payload)
            s.advance()
            deliveries.append(d)
        assert pump([e], lambda c: all(d.remote_state for d in deliveries), timeout=180) == []
        assert {d.remote_state for d in deliveries} == {Delivery.ACCEPTED}
        grown = _status_kib(b.proc.pid, "VmHWM") - base_rss
        # 192 MiB were sent; the bound is 8 MiB held + one message + proton's frame buffers
        assert grown < 96 * 1024, f"peak RSS grew by {grown} KiB"
        e.close()
        with Client(b.url) as c:
            assert c.info("large")["message_count"] == 48
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_names_that_are_not_utf8_are_cleaned_up_like_any_other(tmp_path):
    """A container id and link names with invalid UTF-8: the links attach or are refused, and at
    disconnect every registration goes (the publishers and consumers gauges back to 0)."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("u")
        bad = b"\xff\xfe\xc3\x28"
        for _ in range(5):
            e = EngineClient(b.host, b.port, container="CCCC")
            e.rewrite = (b"CCCC", bad)
            pump([e], lambda c: c.opened, timeout=15)
            e.rewrite = (b"LLLL", bad)
            session = e.connection.session()
            session.open()
            s = session.sender("LLLL")
            s.target.address = "/queues/u"
            s.open()
            r = session.receiver("LLLL-r")
            r.source.address = "/queues/u"
            r.open()
            r.flow(10)
            # the attach replies echo the names, which this client's proton cannot decode:
            # wait on the broker's side instead
            assert pump([e], lambda c: _metric(b, "amqp_stream_publishers") == 1
                        and _metric(b, "amqp_stream_consumers") == 1, timeout=15) == []
            e.close()
            wait_for(lambda: _metric(b, "amqp_stream_publishers") == 0, 15, "the publisher gone")
            assert _metric(b, "amqp_stream_consumers") == 0
        with Client(b.url) as c:  # everyone else is served
            assert c.publish("u", [Message(body="ok")]) == [Delivery.ACCEPTED]
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_link_churn_leaves_no_memory_behind(tmp_path):
    """Consumers and publishers attached and detached thousands of times on one connection: the
    broker's memory stays flat (link state attached to proton's wrappers once formed reference
    cycles through proton's C objects: ~6 KB per consumer attach, ~3 KB per publisher)."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("churn")
            c.publish("churn", [Message(body="m")])
        e = EngineClient(b.host, b.port)
        assert pump([e], lambda c: c.opened, timeout=15) == []
        session = e.connection.session()
        session.open()

        def churn(n: int) -> None:
            for i in range(n):
                r = session.receiver(f"r{i}")
                r.source.address = "/queues/churn"
                r.source.filter.put_object({symbol("o"): offset("first")})
                s = session.sender(f"s{i}")
                s.target.address = "/queues/churn"
                r.open()
                s.open()
                r.flow(10)
                assert pump([e], lambda c: bool(r.state & r.REMOTE_ACTIVE and s.state & s.REMOTE_ACTIVE
                                                and r.current is not None), timeout=15) == []
                r.close()
                s.close()
                assert pump([e], lambda c: bool(r.state & r.REMOTE_CLOSED and s.state & s.REMOTE_CLOSED),
                            timeout=15) == []
                r.free()
                s.free()

        churn(500)  # warm up: allocator pools, caches
        base = _status_kib(b.proc.pid, "VmRSS")
        churn(3000)
        grown = _status_kib(b.proc.pid, "VmRSS") - base
        assert grown < 4 * 1024, f"RSS grew by {grown} KiB over 3,000 consumer and publisher attaches"
        assert _metric(b, "amqp_stream_consumers") == 0 and _metric(b, "amqp_stream_publishers") == 0
        e.close()
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


@pytest.mark.parametrize("detach_first", [False, True], ids=["closed-with-connection", "detached-first"])
def test_connection_churn_with_consumer_links_leaves_no_memory_behind(tmp_path, detach_first):
    """3,000 connections, each attaching a filtered consumer that holds ten unsettled
    deliveries, then closing (with the link still attached, or after detaching it): the
    broker's memory stays flat (issue 25 item 10 reported 1.3-1.9 KB left per closed link and
    353 B per detached one; on this code both measure under 100 B a cycle, tracemalloc in the
    broker 0 B: this test keeps it so)."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("churn")
            c.publish("churn", [Message(body="m", properties={"k": "v"}) for _ in range(20)])

        def cycle(i: int) -> None:
            e = EngineClient(b.host, b.port)
            session = e.connection.session()
            session.open()
            r = session.receiver(f"r{i}")
            r.source.address = "/queues/churn"
            r.source.filter.put_object({
                symbol("o"): offset("first"),
                symbol("p"): Described(symbol("amqp:application-properties-filter"), {"k": "v"})})
            r.target.address = "churn"
            r.open()
            r.flow(10)
            assert pump([e], lambda c: c.opened and r.queued >= 10, timeout=15) == []
            if detach_first:
                r.close()
                assert pump([e], lambda c: bool(r.state & r.REMOTE_CLOSED), timeout=15) == []
            e.connection.close()
            assert pump([e], lambda c: c.closed_by_peer, timeout=15) == []
            e.close()

        def churn(start: int, n: int) -> None:
            for i in range(start, start + n):
                cycle(i)
            wait_for(lambda: connection_count(b.proc.pid) == 0, 30, "the sockets closed")
            wait_for(lambda: _metric(b, "amqp_stream_consumers") == 0, 15, "the consumers gone")

        churn(0, 500)  # warm up: allocator pools, caches
        base = _settled_rss(b)
        churn(500, 3000)
        grown = _settled_rss(b) - base
        print(f"RSS +{grown} KiB over 3,000 connections ({grown * 1024 / 3000:.0f} B each)")
        assert grown * 1024 < 3000 * 512, f"RSS grew by {grown} KiB over 3,000 consumer links"
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def _settled_rss(b: BrokerProcess) -> int:
    """The broker's RSS once its pending ``malloc_trim`` (a second after the last close) ran:
    the value after it stopped falling for 1.5 s."""
    last = {"rss": _status_kib(b.proc.pid, "VmRSS"), "at": time.monotonic()}

    def settled() -> bool:
        rss = _status_kib(b.proc.pid, "VmRSS")
        if rss < last["rss"]:
            last.update(rss=rss, at=time.monotonic())
        return time.monotonic() - last["at"] > 1.5

    wait_for(settled, 30, "RSS settled")
    return last["rss"]


def test_a_costly_filter_does_not_hold_other_clients(tmp_path):
    """A consumer whose SQL filter is a hostile LIKE over 100 KB properties (once seconds per
    message on the event loop, with every other client waiting): another client's management
    request is answered long before that consumer has scanned the stream (LIKE's step budget
    and the turn's evaluation-time budget)."""
    hostile = "%" + "a_" * 2000 + "b%"  # 4,003 characters, within the expression limits
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("costly")
            big = [Message(body="x", properties={"p": "a" * 100_000}) for _ in range(40)]
            assert c.publish("costly", big + [Message(body="END", properties={"end": True})]) == \
                [Delivery.ACCEPTED] * 41
        e = EngineClient(b.host, b.port)
        assert pump([e], lambda c: c.opened, timeout=15) == []
        session = e.connection.session()
        session.open()
        other = Client(b.url)  # connected, and its management link open, before the scan starts
        try:
            assert other.info("costly")["message_count"] == 41
            r = session.receiver("costly")
            r.source.address = "/queues/costly"
            r.source.filter.put_object({
                symbol("o"): offset("first"),
                symbol("sql"): Described(symbol("amqp:sql-filter"), f"end = TRUE OR p LIKE '{hostile}'")})
            r.open()
            r.flow(100)
            e.write()  # the attach and its credit are on their way: the scan starts
            assert other.info("costly")["message_count"] == 41  # and asks again meanwhile
            # answered while the scan goes on: END (the one match) not sent yet
            assert _metric(b, "amqp_stream_delivered_messages_total", "costly") == 0
        finally:
            other.close()
        # and the scan finishes: END arrives
        wait_for(lambda: _metric(b, "amqp_stream_delivered_messages_total", "costly") == 1, 60,
                 "the scan to reach END")
        assert _metric(b, "amqp_stream_stage2_dropped_messages_total", "costly") == 40
        e.close()
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_a_long_property_filter_key_does_not_hold_other_clients(tmp_path):
    """A property filter whose application-property key is 30,000 characters: re's parser took
    the key's number encodings' shared prefix out of the alternation a byte at a time
    (quadratic: 4-12 s at attach, every other connection waiting). A canary publisher on another
    connection, publishing one message at a time before, during and after the attach, gets
    every outcome at once."""
    key = "k" * 30_000
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("long-key")
            assert c.publish("long-key", [Message(body="hit", properties={key: 7}),
                                          Message(body="miss", properties={"k": 7})]) == \
                [Delivery.ACCEPTED] * 2
        e = EngineClient(b.host, b.port)
        assert pump([e], lambda c: c.opened, timeout=15) == []
        session = e.connection.session()
        session.open()
        latencies: list[float] = []
        stop = threading.Event()

        def canary() -> None:
            with Client(b.url) as c:
                sender = c.sender("long-key")
                while not stop.is_set():
                    started = time.monotonic()
                    assert c.send_bytes(sender, Message(body="canary").encode()) == Delivery.ACCEPTED
                    latencies.append(time.monotonic() - started)

        worker = threading.Thread(target=canary, daemon=True)
        worker.start()
        wait_for(lambda: len(latencies) >= 5, 15, "the canary publishing")
        r = session.receiver("long")
        r.source.address = "/queues/long-key"
        r.source.filter.put_object({
            symbol("o"): offset("first"),
            symbol("ap"): Described(symbol("amqp:application-properties-filter"), {key: 7})})
        r.open()
        r.flow(10)
        during = len(latencies)
        assert pump([e], lambda c: r.current is not None, timeout=60) == []
        wait_for(lambda: len(latencies) >= during + 5, 15, "the canary publishing after the attach")
        stop.set()
        worker.join(timeout=15)
        assert not worker.is_alive()
        assert r.current.readable  # the one match arrives
        assert max(latencies) < 1.0, f"the canary waited up to {max(latencies):.2f} s"
        e.close()
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_stuck_consumers_give_their_memory_back_when_they_go(tmp_path):
    """Ten consumers that grant 1,000,000 credit, ask for unsettled deliveries and never read:
    proton holds each delivery sent until it is settled. When they go, that memory goes back
    to the system (glibc kept the freed heap: +228 MiB stayed of +238 MiB, before a link
    stopped at ``max_held`` deliveries while its socket is backed up)."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]).start()
    try:
        with Client(b.url) as c:
            c.declare("small")
        _publish_small(b, "small", 60_000)  # past what the kernel buffers ten links
        base = _status_kib(b.proc.pid, "VmRSS")
        stuck = [EngineClient(b.host, b.port) for _ in range(10)]
        for e in stuck:
            pump([e], lambda c: c.opened, timeout=15)
            _attach_receiver(e, "small", credit=1_000_000)
        _wait_sent_all(b, "small")
        grown = _status_kib(b.proc.pid, "VmRSS") - base
        print(f"ten stuck consumers held +{grown} KiB")
        assert grown > 8 * 1024, f"the stuck consumers held only {grown} KiB: nothing to give back"
        for e in stuck:
            e.close()
        wait_for(lambda: connection_count(b.proc.pid) == 0, 15, "the stuck sockets closed")
        wait_for(lambda: _status_kib(b.proc.pid, "VmRSS") - base < min(grown // 4, 16 * 1024), 20,
                 f"RSS back near its baseline (grew {grown} KiB while they were stuck)")
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


@pytest.mark.parametrize("settled", [False, True], ids=["unsettled", "presettled"])
def test_ten_stuck_consumers_of_small_messages_cost_a_bounded_amount_each(tmp_path, settled):
    """Ten consumers of 100-byte messages that grant 1,000,000 credit and never read. Proton
    keeps each delivery (~800 B) until it is written (pre-settled) or settled (unsettled), and
    the kernel's autotuned socket buffers took ~30,000 small deliveries a link before the
    socket backed up: +250 MiB for ten unsettled, +62 MiB for ten pre-settled. A link stops at
    ``max_held`` deliveries while its socket is backed up, and a connection that leaves that
    many unsettled gets a small send buffer; a consumer on another connection reads the whole
    stream meanwhile."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]).start()
    try:
        total = 60_000  # past what the kernel buffers a link (~30,000): the bound is what stops them
        with Client(b.url) as c:
            c.declare("small")
        _publish_small(b, "small", total)
        base = _status_kib(b.proc.pid, "VmRSS")
        stuck = [EngineClient(b.host, b.port) for _ in range(10)]
        for e in stuck:
            pump([e], lambda c: c.opened, timeout=15)
            _attach_receiver(e, "small", credit=1_000_000, settled=settled)
        with Client(b.url) as c:  # served meanwhile, through the whole stream
            r = c.receiver("small", [(symbol("o"), offset("first"))], credit=1000)
            for _ in range(total):
                r.receive(timeout=30)
                r.accept()
        _wait_sent_all(b, "small")
        sent = _metric(b, "amqp_stream_delivered_messages_total", "small") - total
        grown = _status_kib(b.proc.pid, "VmHWM") - base
        print(f"ten stuck consumers were sent {sent:.0f} deliveries; peak RSS +{grown} KiB")
        assert grown < 10 * 4 * 1024, f"ten stuck consumers grew the broker by {grown} KiB"
        for e in stuck:
            e.close()
    finally:
        b.close()
    assert "Traceback" not in b.log_text()


def test_a_client_that_reads_and_settles_in_large_batches_is_not_stalled(tmp_path):
    """A receiver with 10,000 credit that reads its socket but settles only every 5,000
    deliveries (and then grants 5,000 more) gets the whole stream: the bound in deliveries
    holds a link only while its socket is backed up, never on its unsettled count alone (a
    cap of 1,024 unsettled deliveries stalled this client for good)."""
    b = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]).start()
    try:
        total, batch = 100_000, 5_000
        with Client(b.url) as c:
            c.declare("small")
        _publish_small(b, "small", total)
        e = EngineClient(b.host, b.port)
        assert pump([e], lambda c: c.opened, timeout=15) == []
        session = e.connection.session()
        session.open()
        r = session.receiver("batched")
        r.source.address = "/queues/small"
        r.source.filter.put_object({symbol("o"): offset("first")})
        r.target.address = "batched"
        r.open()
        r.flow(2 * batch)
        unsettled: list = []
        got = [0]

        def settle_in_batches(c: EngineClient) -> bool:
            while r.current is not None and not r.current.partial:
                d = r.current
                r.recv(d.pending)
                r.advance()
                unsettled.append(d)
                got[0] += 1
                if len(unsettled) == batch:
                    for d in unsettled:
                        d.update(Delivery.ACCEPTED)
                        d.settle()
                    unsettled.clear()
                    r.flow(batch)
            return got[0] >= total

        assert pump([e], settle_in_batches, timeout=120) == [], f"stalled after {got[0]} deliveries"
        assert got[0] == total
        e.close()
    finally:
        b.close()
    assert "Traceback" not in b.log_text()
