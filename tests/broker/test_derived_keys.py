"""Broker-derived filter keys over AMQP: the argument, and consumers whose SQL filter, property
filter or JMS selector requires a value of an indexed key skip what cannot match, delivering
exactly what the same consumer gets from a stream without the key."""

from __future__ import annotations

import contextlib
import random
import urllib.request
from typing import Iterator

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


@contextlib.contextmanager
def _streams(tmp_path, keys: str, messages: list[Message]) -> Iterator[tuple[BrokerProcess, Client]]:
    """A broker with ``messages`` in ``plain`` and in ``derived`` (derived keys ``keys``)."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(b.url) as c:
            c.declare("plain")
            c.declare("derived", {"x-queue-type": "stream", KEYS: keys})
            for name in ("plain", "derived"):
                _fill(c, name, messages)
            yield b, c
    finally:
        b.close()


def _both(b: BrokerProcess, c: Client, entry: tuple, expected: list) -> dict[str, float]:
    """Consume with ``entry`` from ``plain`` and ``derived``: both deliver ``expected``; the
    bytes each read from disk meanwhile."""
    before = {n: _metric(b, "read_bytes_total", n) for n in ("plain", "derived")}
    got = {n: _consume(c, n, entry, len(expected)) for n in ("plain", "derived")}
    assert got["plain"] == expected and got["derived"] == expected, entry
    return {n: _metric(b, "read_bytes_total", n) - before[n] for n in ("plain", "derived")}


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
    with _streams(tmp_path, "customer,p.subject", messages) as (b, c):
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
            read = _both(b, c, entry, [m.body for m in messages if m.properties["customer"] in wanted])
            assert read["derived"] < read["plain"] / 2, (entry, read)
        skipped = (_metric(b, "derived_chunks_skipped_total", "derived")
                   + _metric(b, "derived_blocks_skipped_total", "derived"))
        assert skipped > 0
        assert _metric(b, "derived_chunks_skipped_total", "plain") == 0
        assert _metric(b, "derived_blocks_skipped_total", "plain") == 0


def test_consumers_bounding_an_indexed_number_skip_and_deliver_as_a_full_scan(tmp_path):
    """A range over a number that grows with the log (a sequence, a creation time): the skip
    table's least and greatest number per block rule out the rest, whichever filter asks."""
    messages = [Message(body=f"{i}", properties={"n": i}, creation_time=1_000_000 + i)  # s: ms on the wire
                for i in range(3000)]
    with _streams(tmp_path, "n,p.creation_time", messages) as (b, c):
        cases = [
            ((symbol("q"), Described(SQL, "n >= 2950")), range(2950, 3000)),
            ((symbol("q"), Described(SQL, "p.creation_time BETWEEN 1002900000 AND 1002919000")),
             range(2900, 2920)),
            ((symbol("jms-selector"), Described(ulong(SELECTOR_FILTER_CODE), "n < 2990 AND n > 2969")),
             range(2970, 2990)),
        ]  # (matches near the end: a full scan reads nearly everything)
        for entry, want in cases:
            read = _both(b, c, entry, [f"{i}" for i in want])
            assert read["derived"] < read["plain"] / 4, (entry, read)
        assert _metric(b, "derived_chunks_skipped_total", "derived") > 0


def test_the_deriver_finds_every_encoding_of_an_indexed_key():
    """The tokens a record gives include the token of the value stage 2 reads, whatever the
    key's and value's encodings (a superset is fine: it only costs false positives)."""
    import math
    import struct

    from amqp_stream.derived_keys import deriver
    from amqp_stream.wire import KeyPicker, MessageView
    from sqlfilter.required import index_token
    from storage.format import encode_entries

    long = "v" * 300  # str32
    cases = [
        {"customer": "c1"}, {"customer": long}, {"customer": 7}, {"customer": 2.5},
        {"customer": b"bin"}, {"customer": True}, {"other": "customer"}, {"customer": None},
        {"xcustomer": "c3", "customer": "c4"},
    ]
    derive = deriver(["customer"])
    picker = KeyPicker(["customer"])
    messages = [bytes(Message(body=body, properties=props).encode())
                for props in cases for body in ("customer", "\xa1\x08customer\xa1\x02zz", "x")]

    def app_section(key: bytes, value: bytes) -> bytes:
        items = key + value
        return b"\x00St\xc1" + bytes((len(items) + 1, 2)) + items + b"\x00Sw\xa1\x01x"

    # numbers in every fixed-width constructor (read straight from the bytes by the deriver)
    numbers = [b"\x43", b"\x44", b"\x50\xff", b"\x51\xff", b"\x52\x07", b"\x53\x07", b"\x54\xfb",
               b"\x55\x07", b"\x60\xff\xff", b"\x61\x80\x00", b"\x70\xf1\xf2\xf3\xf4",
               b"\x71\xff\xff\xff\xfe", b"\x80" + b"\xff" * 8, b"\x81\x80" + bytes(7),
               b"\x83" + (1_700_000_000_000).to_bytes(8, "big"), b"\x72" + struct.pack(">f", 2.5),
               b"\x72" + struct.pack(">f", 3.0), b"\x72" + struct.pack(">f", math.nan),
               b"\x82" + struct.pack(">d", -0.0), b"\x82" + struct.pack(">d", 1e300),
               b"\x82" + struct.pack(">d", math.inf), b"\x82" + struct.pack(">d", 0.1)]
    for key in (b"\xa3\x08customer", b"\xb1\x00\x00\x00\x08customer", b"\xb3\x00\x00\x00\x08customer"):
        for value in (b"\xa1\x02c5", b"\xb1\x00\x00\x00\x02c6", b"\x54\x05", b"\xa0\x02c7", *numbers):
            messages.append(app_section(key, value))
    for one in messages:
        data = encode_entries([one])
        runs = derive(data, [(4, len(data))])
        assert all(len(p) == len(t) and p == sorted(p) for p, t in runs)
        tokens = [t for _, ts in runs for t in ts]
        ap = MessageView.from_bytes(data[4:]).pick(None, picker)[1]
        want = index_token("application_properties", "customer", ap.get("customer"))
        assert want is None or want in tokens, (one, tokens)
        if b"customer" in one and one.startswith(b"\x00St"):
            value = ap.get("customer")  # the crafted sections all hold a value (NaN and the
            assert want is not None or value != value or value in (math.inf, -math.inf)  # infinities equal nothing)
    # a key with a value that does not decode: unknown, never a silent miss
    bad = b"\x00St\xc1\x0e\x02\xa1\x08customer\xff\x00"
    data = encode_entries([bad])
    assert None in [t for _, ts in derive(data, [(4, len(data))]) for t in ts]


def test_the_numberer_reads_the_number_of_each_key_token():
    """``numberer`` (the skip table's bounds) reads from each value's index token the number
    ``canonical`` makes of it, and finds none in a token of another key, of a string, of a
    boolean, or of a key whose name holds NUL."""
    import proton

    from amqp_stream.derived_keys import field_of, numberer
    from sqlfilter.required import canonical, index_token

    keys = ["n", "p.creation_time", "odd\x00key"]
    number = numberer(keys)
    values = [0, -7, 2 ** 70, 2.5, 1.0, -0.0, 1e-05, 1e300, proton.timestamp(5), proton.ubyte(3),
              proton.char("a"), "5", b"5", True, "a\x00n\x005"]
    for i, key in enumerate(keys):
        for v in values:
            token = index_token(*field_of(key), v)
            c = canonical(v)
            want = (i, c[1]) if c is not None and c[0] == "n" and "\x00" not in key else None
            got = number(token) if token is not None else None
            assert got == want and (got is None or type(got[1]) is type(want[1])), (key, v, got, want)
    assert number(index_token("application_properties", "other", 5)) is None
