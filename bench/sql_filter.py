"""SQL filter benchmark: evaluations/s, messages/s from bytes, compile time, pathological LIKE.

Every figure is printed beside a baseline measured in the same run:
- decoded views: the compiled filter's ``evaluate_view`` vs a hand-written Python lambda doing
  the same test (goal: >= 1,000,000 evals/s and within 2x of the lambda);
- encoded bytes: ``MessageView.from_bytes`` + ``evaluate_view`` vs ``proton.Message.decode`` +
  the same test on the decoded message (goal: >= 200,000 msg/s and 5x the proton path);
- compile time per expression (goal: < 1 ms);
- LIKE with 100 ``%`` against 500-character subjects vs a backtracking regex (``.*?``, as in
  RabbitMQ) on a much smaller case, since the regex does not finish on the large one;
- the JMS selector dialect vs the SQL filter on the same test (JMS names for the AMQP fields),
  both through ``bytes_matcher`` as the broker calls them (goal: the dialect as fast).

Run: ``.venv/bin/python -m bench.sql_filter`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from typing import Any, Callable

import proton
from proton import Data, Described, symbol, ulong

from amqp_stream.filtering import install
from amqp_stream.wire import MessageView
from sqlfilter import compile_property_filter, compile_selector, compile_sql
from sqlfilter.sql import compile_uncached

install()  # filters read messages through the wire, as in the broker

CASES: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("sql: region = 'EMEA' AND price > 100",
     "region = 'EMEA' AND price > 100",
     lambda v: v.application_properties.get("region") == "EMEA"
     and v.application_properties.get("price", 0) > 100),
    ("sql: p.subject LIKE 'order.%' AND amount BETWEEN 10 AND 99",
     "p.subject LIKE 'order.%' AND amount BETWEEN 10 AND 99",
     lambda v: (v.properties.get("subject") or "").startswith("order.")
     and 10 <= v.application_properties.get("amount", -1) <= 99),
    ("sql: region IN (20 strings)",
     "region IN (" + ", ".join(f"'R{i}'" for i in range(19)) + ", 'EMEA')",
     lambda v, s=frozenset([f"R{i}" for i in range(19)] + ["EMEA"]):
     v.application_properties.get("region") in s),
]

# the same test in both languages: (SQL filter, JMS selector)
SELECTOR_CASES = [
    ("region = 'EMEA' AND price > 100", "region = 'EMEA' AND price > 100"),
    ("p.subject LIKE 'order.%' AND amount BETWEEN 10 AND 99",
     "JMSType LIKE 'order.%' AND amount BETWEEN 10 AND 99"),
    ("h.priority > 4 AND region IN ('EMEA', 'APAC')",
     "JMSPriority > 4 AND region IN ('EMEA', 'APAC')"),
]

_REGIONS = ["EMEA", "APAC", "AMER", "R3", "R7", "LATAM"]


def make_sections(rng: random.Random) -> dict[str, dict]:
    return {
        "header": {"priority": rng.randint(0, 9)},
        "properties": {"subject": rng.choice(["order.created", "order.paid", "invoice.sent"]),
                       "message_id": f"m-{rng.randint(0, 10**6)}"},
        "application_properties": {"region": rng.choice(_REGIONS),
                                   "price": rng.randint(0, 200),
                                   "amount": rng.randint(0, 120),
                                   "customer": f"c{rng.randint(0, 999)}"},
    }


def encode(sections: dict[str, dict]) -> bytes:
    data = Data()
    data.put_object(Described(ulong(0x70), [True, proton.ubyte(sections["header"]["priority"])]))
    p = sections["properties"]
    data.put_object(Described(ulong(0x73), [p["message_id"], None, None, p["subject"]]))
    data.put_object(Described(ulong(0x74), sections["application_properties"]))
    data.put_object(Described(ulong(0x75), b"x" * 64))
    return bytes(data.encode())


class _MessageAdapter:
    """Gives a decoded proton.Message the same attribute names the lambdas use."""

    __slots__ = ("properties", "application_properties")

    def __init__(self, m: proton.Message):
        self.properties = {"subject": m.subject}
        self.application_properties = m.properties or {}


def rate(fn: Callable[[Any], Any], items: list, seconds: float) -> float:
    """Calls per second of fn over items (cycled), measured for about ``seconds``."""
    n = len(items)
    done, start = 0, time.perf_counter()
    while True:
        for item in items:
            fn(item)
        done += n
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short measurements")
    args = parser.parse_args(argv)
    seconds = 0.3 if args.quick else 1.5
    rng = random.Random(7)
    sections = [make_sections(rng) for _ in range(1000)]
    views = [MessageView.from_sections(**s) for s in sections]
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average, 2 cores shared)")

    print("\n== decoded views: evaluations/s (filter vs hand-written lambda) ==")
    for label, text, lam in CASES:
        f = compile_sql(text)
        # the two must agree before their speed means anything
        assert all((f.evaluate_view(v) is True) == bool(lam(v)) for v in views), label
        sql_rate = rate(f.evaluate_view, views, seconds)
        lam_rate = rate(lam, views, seconds)
        print(f"{label:58s} {sql_rate:12,.0f}/s  lambda {lam_rate:12,.0f}/s  "
              f"ratio {sql_rate / lam_rate:5.2f}")
    pf = compile_property_filter(properties={symbol("subject"): "order.created"},
                                 application_properties={"region": "EMEA"})
    def pf_lam(v):  # the hand-written equivalent
        return (v.properties.get("subject") == "order.created"
                and v.application_properties.get("region") == "EMEA")
    assert all(pf.matches(v) == bool(pf_lam(v)) for v in views)
    pf_rate = rate(pf.matches, views, seconds)
    lam_rate = rate(pf_lam, views, seconds)
    print(f"{'property filter: subject + region (matches)':58s} {pf_rate:12,.0f}/s  "
          f"lambda {lam_rate:12,.0f}/s  ratio {pf_rate / lam_rate:5.2f}")

    print("\n== encoded bytes: messages/s (from_bytes + filter vs proton decode + lambda) ==")
    encoded = [encode(s) for s in sections]
    for label, text, lam in CASES[:2]:
        f = compile_sql(text)
        ev = f.evaluate_view
        from_bytes = MessageView.from_bytes

        def ours(data: bytes, ev=ev, from_bytes=from_bytes) -> Any:
            return ev(from_bytes(data))

        def theirs(data: bytes, lam=lam) -> Any:
            m = proton.Message()
            m.decode(data)
            return lam(_MessageAdapter(m))

        assert all((ours(d) is True) == bool(theirs(d)) for d in encoded), label
        our_rate = rate(ours, encoded, seconds)
        proton_rate = rate(theirs, encoded, seconds)
        print(f"{label:58s} {our_rate:12,.0f}/s  proton {proton_rate:12,.0f}/s  "
              f"ratio {our_rate / proton_rate:5.2f}")

    print("\n== JMS selector dialect vs SQL filter: messages/s from bytes (bytes_matcher) ==")
    for sql, selector in SELECTOR_CASES:
        ours, theirs = compile_selector(selector).bytes_matcher(), compile_sql(sql).bytes_matcher()
        assert [ours(d) for d in encoded] == [theirs(d) for d in encoded], selector
        sel_rate, sql_rate = rate(ours, encoded, seconds), rate(theirs, encoded, seconds)
        print(f"{selector[:58]:58s} {sel_rate:12,.0f}/s  sql {sql_rate:12,.0f}/s  "
              f"ratio {sel_rate / sql_rate:5.2f}")

    print("\n== compile time per expression (cold: no cache) ==")
    texts = [c[1] for c in CASES] + [
        "a = 1", "NOT (x IS NULL) AND p.subject LIKE '%.created' ESCAPE '!'",
        "h.priority > 4 OR (UTC() - p.creation_time < 60000 AND LOWER(region) IN ('emea', 'apac'))",
    ]
    n = 50 if args.quick else 300
    print("    wall    CPU  (CPU time is what the process itself used: less skewed by load)")
    for text in texts:
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            compile_uncached(text)
        per = (time.perf_counter() - start) / n
        per_cpu = (time.process_time() - cpu) / n
        print(f"{per * 1e6:5.0f} us {per_cpu * 1e6:4.0f} us  {text[:80]}")
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        for text in texts:
            compile(f"lambda v: v.application_properties.get({text[:20]!r}) == 1", "<b>", "eval")
    per_compile = (time.perf_counter() - start) / (len(texts) * n)
    per_cpu = (time.process_time() - cpu) / (len(texts) * n)
    print(f"{per_compile * 1e6:5.0f} us {per_cpu * 1e6:4.0f} us  "
          "(baseline: Python compile() of a one-line lambda)")
    start = time.perf_counter()
    for _ in range(n):
        for text in texts:
            compile_sql(text)
    print(f"{(time.perf_counter() - start) / (len(texts) * n) * 1e6:8.1f} us  "
          "(compile_sql again on the same text: cached)")

    print("\n== pathological LIKE ==")
    subject_500 = "".join(rng.choice("ab") for _ in range(500))
    for pattern_label, pattern in [("100 x '%a'", "%a" * 100 + "%"),
                                   ("100 x '%a' then 'c' (no match)", "%a" * 100 + "%c"),
                                   ("100 x '%_a'", "%_a" * 100 + "%"),
                                   ("100 x '%ab' (no match in 'a'*500)", "%ab" * 100 + "%")]:
        subject = "a" * 500 if "'a'*500" in pattern_label else subject_500
        f = compile_sql(f"s LIKE '{pattern}'")
        view = MessageView.from_sections(application_properties={"s": subject})
        n = 200 if args.quick else 2000
        start = time.perf_counter()
        for _ in range(n):
            result = f.evaluate_view(view)
        per = (time.perf_counter() - start) / n
        print(f"{per * 1e6:8.1f} us  {pattern_label} against 500 chars -> {result}")
    rx = re.compile("^" + ".*?a" * 4 + ".*?b$")
    start = time.perf_counter()
    rx.match("a" * 80)
    rx_time = time.perf_counter() - start
    f = compile_sql("s LIKE '" + "%a" * 4 + "%b'")
    view = MessageView.from_sections(application_properties={"s": "a" * 80})
    start = time.perf_counter()
    for _ in range(1000):
        f.evaluate_view(view)
    ours = (time.perf_counter() - start) / 1000
    print(f"baseline: backtracking regex '^(.*?a){{4}}.*?b$' on 'a'*80: {rx_time * 1e3:8.1f} ms; "
          f"ours {ours * 1e6:.1f} us (ratio {rx_time / ours:,.0f}x)")
    print(f"\nload: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
