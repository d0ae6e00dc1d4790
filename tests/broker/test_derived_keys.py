"""Broker-derived filter keys over AMQP: the argument, and consumers whose SQL filter, property
filter or JMS selector requires a value of an indexed key skip what cannot match, delivering
exactly what the same consumer gets from a stream without the key."""

from __future__ import annotations

import random
import urllib.request

from proton import Described, Message, symbol, ulong
from proton.reactor import AtMostOnce

from amqp_stream.amqp.source_filters import SELECTOR_FILTER_CODE
from amqp_stream.testing import BrokerProcess
from tests.broker.amqp import APP_PROPS, OFFSET, SQL, Client, offset

KEYS = "x-stream-derived-filter-keys"


def _metric(b: BrokerProcess, name: str, stream: str) -> float:
    text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f'amqp_stream_{name}{{stream="{stream}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in metrics")


def _fill(c: Client, name: str, messages: list[Message]) -> None:
    sender = c.sender(name, options=AtMostOnce())  # pre-settled: chunks of many records
    for m in messages:
        sender.send(m)
    sender.close()
    r = c.receiver(name, [(OFFSET, offset("first"))], credit=len(messages))
    c.receive_all(r, len(messages))  # all stored
    r.close()


def _consume(c: Client, name: str, entry: tuple, expected: int) -> list[str]:
    # credit for exactly these: the turn that sends the last one has counted its reads
    r = c.receiver(name, [(OFFSET, offset("first")), entry], credit=expected)
    got = [m.body for m in c.receive_all(r, expected)]
    r.close()
    return got


def test_declare_takes_and_checks_the_argument(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("ok", {"x-queue-type": "stream", KEYS: ["customer", "p.subject"]})
            assert c.info("ok")["arguments"][KEYS] == ["customer", "p.subject"]
            c.declare("ok", {"x-queue-type": "stream", KEYS: ["customer", "p.subject"]})
            for bad in (["p.nosuchfield"], [], [""], 42):
                status, body, _ = c.request("PUT", "/queues/bad", {
                    "durable": True, "arguments": {"x-queue-type": "stream", KEYS: bad}})
                assert status == 400, (bad, status, body)
    finally:
        b.close()


def test_consumers_requiring_an_indexed_value_skip_and_deliver_as_a_full_scan(tmp_path):
    rnd = random.Random(7)
    messages = []
    for i in range(3000):
        cust = f"c{rnd.randrange(1000)}"
        messages.append(Message(body=f"{i}:{cust}", properties={"customer": cust, "n": i},
                                subject=f"s{i % 3}"))
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("plain")
            c.declare("derived", {"x-queue-type": "stream", KEYS: "customer,p.subject"})
            for name in ("plain", "derived"):
                _fill(c, name, messages)
            # values that occur, last near the end: a full scan reads nearly everything
            v = [m.properties["customer"] for m in messages[-5:]]
            cases = [
                ((symbol("q"), Described(SQL, f"customer = '{v[0]}' AND n >= 0")), v[0]),
                ((symbol("q"), Described(SQL, f"customer IN ('{v[1]}', '{v[2]}')")), (v[1], v[2])),
                ((symbol("a"), Described(APP_PROPS, {"customer": v[3]})), v[3]),
                ((symbol("jms-selector"), Described(ulong(SELECTOR_FILTER_CODE),
                                                    f"customer = '{v[4]}'")), v[4]),
            ]
            for entry, want in cases:
                wanted = (want,) if isinstance(want, str) else want
                expected = [m.body for m in messages if m.properties["customer"] in wanted]
                before = {n: _metric(b, "read_bytes_total", n) for n in ("plain", "derived")}
                got = {n: _consume(c, n, entry, len(expected)) for n in ("plain", "derived")}
                assert got["plain"] == expected
                assert got["derived"] == expected
                read = {n: _metric(b, "read_bytes_total", n) - before[n]
                        for n in ("plain", "derived")}
                assert read["derived"] < read["plain"] / 2, (entry, read)
            skipped = (_metric(b, "derived_chunks_skipped_total", "derived")
                       + _metric(b, "derived_blocks_skipped_total", "derived"))
            assert skipped > 0
            assert _metric(b, "derived_chunks_skipped_total", "plain") == 0
            assert _metric(b, "derived_blocks_skipped_total", "plain") == 0
    finally:
        b.close()
