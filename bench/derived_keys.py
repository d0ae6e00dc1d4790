"""Broker-derived filter keys (issue 15): what a consumer whose SQL filter requires a value of
an indexed key saves, and what indexing costs the publisher.

All through a real broker over AMQP (``bench.broker``'s raw proton publisher; consumers in
``CLIENTS``), in one run: ``--messages`` messages of 100 bytes with no publisher filter value,
application properties ``customer`` (10,000 values, random order), ``region`` (100 values in
runs of 1,000: each value in ``messages / 100,000`` runs), ``zone`` (100 values, random) and
``seq`` (the message's number: a number that grows with the log, as a time or a sequence).
The same messages go to five streams: ``plain`` (no derived key) and one stream per key with
``x-stream-derived-filter-keys`` = that key. For each case the consumer reads from the start
with ``key = value`` (``customer = 'c00042'``: ~0.01 %, ``region = 'r42'`` and
``zone = 'z42'``: 1 %) or a range (``seq >= 99 %`` of the messages: the last 1 %, answered by
the skip table's least and greatest number per block) on ``plain`` and on the key's stream,
alternating, best of
``--repeat``: time, messages, bytes the broker read from disk (``amqp_stream_read_bytes_total``)
and the stream's bytes on disk, and the broker's CPU time during each consume; once with a
load generator that is not the limit, once with a Python proton reactor client (~25-50 µs per
delivery: with 10,000 matches it, not the broker, bounds how much sooner the derived read can
finish). Then ``customer``, ``region`` and ``seq`` again (load generator)
after dropping the page cache (``echo 3 > /proc/sys/vm/drop_caches``) when the machine allows
it (it says which; the broker's memory keeps the skip tables it verified, ``storage.skiptable``).
Rows are the best of ``--repeat``; a key's first consume, which also loads the stream's skip
table, is shown apart as ``(1st)`` when it was not the best.

In-process, without AMQP: a ``Reader`` and stage 2 over the same records written once without
and once with the key (the broker's scan cost alone). Append cost: broker CPU per published
message (``/proc/<pid>/stat``) for ``plain`` and each key's stream, and, in this process,
``Stream.append_batch`` per record with no key, one key and all three (``--storage-records``),
with the sidecar's size.

    python -m bench.derived_keys            # 1,000,000 messages (~5 minutes on 2 cores)
    python -m bench.derived_keys --quick    # 100,000 messages
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Sequence

import proton

from amqp_stream.client import connect
from amqp_stream.derived_keys import ARGUMENT, bounds, storage_settings
from amqp_stream.testing import BrokerProcess
from bench import proton_floor
from bench.amqp_load import count
from bench.broker import _measure_consume, _measure_publish, stream_filters
from storage import Stream, StreamConfig

KEYS = ("customer", "region", "zone", "seq")
#: (label, key, SQL; ``{last}``: the first message of the last 1 %)
CASES = (("customer (10,000 values, random)", "customer", "customer = 'c00042'"),
         ("region (100 values, runs of 1,000)", "region", "region = 'r42'"),
         ("zone (100 values, random)", "zone", "zone = 'z42'"),
         ("seq (growing), a range: the last 1 %", "seq", "seq >= {last}"))
#: the consumers, each over every case: the load generator (``bench.amqp_load``: proton's
#: engine counts pre-settled deliveries, no Python per message, so the broker is the limit), then
#: a real Python client (``bench.broker.consume``: a proton reactor, ~25-50 µs a delivery)
CLIENTS = (("load generator (bench.amqp_load)", count),
           ("proton reactor client", None))
_TEMPLATE_VALUES = {"customer": "cXXXXX", "region": "rYY", "zone": "zZZ",
                    "seq": proton.uint(0xF1F2F3F4)}  # a uint (0x70 and 4 bytes) of any value


def _template() -> bytes:
    """A 100-byte message with placeholders of the values' widths."""
    for pad in range(200):
        data = proton.Message(body="x" * pad, properties=dict(_TEMPLATE_VALUES)).encode()
        if len(data) >= 100:
            return data
    raise AssertionError("no 100-byte template")


class Dataset:
    """Message ``i``'s bytes, made on demand from the template (no proton per message)."""

    def __init__(self, n: int, seed: int = 15) -> None:
        rng = random.Random(seed)
        self.n = n
        self.customer = array("I", (rng.randrange(10_000) for _ in range(n)))
        self.zone = array("B", (rng.randrange(100) for _ in range(n)))
        self.template = _template()
        t = self.template
        self.cut = (t.index(b"cXXXXX"), t.index(b"rYY"), t.index(b"zZZ"),
                    t.index(b"\x70\xf1\xf2\xf3\xf4") + 1)
        assert sorted(self.cut) == list(self.cut)

    def __call__(self, i: int) -> bytes:
        t = self.template
        c, r, z, q = self.cut
        region = (i // 1000 * 37) % 100  # runs of 1,000; every value in n / 100,000 runs
        return b"".join((t[:c], b"c%05d" % self.customer[i], t[c + 6:r], b"r%02d" % region,
                         t[r + 3:z], b"z%02d" % self.zone[i], t[z + 3:q], i.to_bytes(4, "big"),
                         t[q + 4:]))

    def sql(self, text: str) -> str:
        """A case's SQL for this many messages."""
        return text.format(last=self.n - self.n // 100)


def _dir_bytes(path: Path) -> tuple[int, int]:
    """(segment and index bytes, sidecar bytes) under ``path``."""
    log = derived = 0
    for root, _, files in os.walk(path):
        for name in files:
            size = os.path.getsize(os.path.join(root, name))
            if name.endswith((".derived", ".skip")):  # the sidecar and its skip table
                derived += size
            elif name.endswith((".segment", ".index")):
                log += size
    return log, derived


def drop_caches() -> str | None:
    """Drop the page cache; None when done, else why not."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def storage_append(records: int, data: Dataset) -> list[dict]:
    """``Stream.append_batch`` per record (batches of 500, fsync never) by keys indexed."""
    bodies = [data(i) for i in range(records)]
    out = []
    for keys in ((), ("customer",), KEYS):
        d = tempfile.mkdtemp(prefix="bench-derived-")
        cfg = StreamConfig(fsync="never", **storage_settings(keys))
        s = Stream.open(d, cfg)
        t = time.perf_counter()
        for k in range(0, records, 500):
            s.append_batch(bodies[k:k + 500])
        s.flush()
        seconds = time.perf_counter() - t
        s.close()
        log, side = _dir_bytes(Path(d))
        shutil.rmtree(d, ignore_errors=True)
        out.append({"keys": ",".join(keys) or "(none)", "us": 1e6 * seconds / records,
                    "log": log, "sidecar": side})
    return out


def storage_scan(records: int, data: Dataset, repeat: int) -> list[tuple]:
    """In this process, without AMQP: a ``Reader`` and stage 2 over ``records`` records, the
    stream written once without and once with the key, read three ways: without the key and
    without the filter's needles (every chunk split into records), without the key with the
    needles (chunks holding none of the value's bytes dropped whole, as the broker reads a
    stream without derived keys) and with both; (case, s, s, s, bytes read without the key,
    bytes read with it), best of ``repeat``."""
    from amqp_stream.derived_keys import wanted
    from amqp_stream.filtering import install
    from sqlfilter import compile_sql

    install()
    from sqlfilter.required import needles_of
    from storage import OffsetSpec

    bodies = [data(i) for i in range(records)]
    out = []
    for label, key, sql in CASES:
        f = compile_sql(data.sql(sql))
        match = f.bytes_matcher()
        timing = []
        for keys, needles in (((), ()), ((), needles_of(f)), ((key,), needles_of(f))):
            d = tempfile.mkdtemp(prefix="bench-derived-")
            cfg = StreamConfig(fsync="never", max_chunk_entries=3000, **storage_settings(keys))
            with Stream.open(d, cfg) as s:
                for k in range(0, records, 3000):
                    s.append_batch(bodies[k:k + 3000])
                s.flush()
                best, read = float("inf"), 0
                for _ in range(repeat):
                    t = time.perf_counter()
                    r = s.reader(OffsetSpec.first(), derived=wanted(keys, f) if keys else None,
                                 needles=needles, bounds=bounds(keys, f) if keys else None)
                    n = sum(1 for c in r for _, b in c.records if match(b))
                    best = min(best, time.perf_counter() - t)
                    read = r.stats.bytes_read
            shutil.rmtree(d, ignore_errors=True)
            timing.append((best, read, n))
        assert len({n for _, _, n in timing}) == 1, (label, timing)
        out.append((label, timing[0][0], timing[1][0], timing[2][0], timing[0][1], timing[2][1]))
    return out


def run(args: argparse.Namespace) -> dict:
    results: dict = {"messages": args.messages}
    data = Dataset(args.messages)
    results["storage"] = storage_append(args.storage_records, data)
    results["scan"] = storage_scan(args.messages, data, args.repeat)
    if args.no_broker:
        return results
    root = Path(tempfile.mkdtemp(prefix="bench-derived-"))
    broker = BrokerProcess(root / "data", extra_args=["--fsync", args.fsync],
                           log_path=root / "broker.log")
    broker.start()
    try:
        client = connect(broker.url)
        try:
            client.declare("plain")
            for key in KEYS:
                client.declare(f"d-{key}", {ARGUMENT: [key]})
        finally:
            client.close()
        pid = broker.proc.pid
        results["publish"] = [
            _measure_publish(name, broker.url, pid, f"/queues/{name}", data, args.messages,
                             args.window)
            for name in ["plain"] + [f"d-{k}" for k in KEYS]]
        streams = root / "data" / "streams"
        results["disk"] = {p.name: _dir_bytes(p) for p in streams.iterdir() if p.is_dir()}
        for title, client in CLIENTS:
            rows = []
            for label, key, sql in CASES:
                sql = data.sql(sql)
                best: dict[str, dict] = {}
                first: dict[str, dict] = {}
                for i in range(args.repeat):
                    order = ["plain", f"d-{key}"]
                    for name in (order if i % 2 == 0 else order[::-1]):
                        row = _measure_consume(f"{name}: {sql}", broker.url, pid, f"/queues/{name}",
                                               stream_filters("first", sql=sql), args.batch,
                                               broker.metrics_url, name, client)
                        first.setdefault(name, dict(row, label=f"{row['label']} (1st)"))
                        if name not in best or row["seconds"] < best[name]["seconds"]:
                            best[name] = row
                # the first reader of a stream also loads its skip tables (later ones find
                # them in the broker's memory): shown apart when it is not the best
                extra = [first[f"d-{key}"]] if first[f"d-{key}"]["seconds"] != best[f"d-{key}"]["seconds"] else []
                rows.append((label, best["plain"], best[f"d-{key}"], *extra))
            results.setdefault("warm", []).append((title, rows))
        why = drop_caches()
        results["drop_caches"] = why or "allowed"
        cold = []
        if why is None:
            for label, key, sql in (CASES[0], CASES[1], CASES[3]):
                sql = data.sql(sql)
                pair = []
                for name in ("plain", f"d-{key}"):
                    tries = []
                    for _ in range(args.cold_repeat):
                        drop_caches()
                        tries.append(_measure_consume(f"{name} (cold): {sql}", broker.url, pid,
                                                      f"/queues/{name}", stream_filters("first", sql=sql),
                                                      args.batch, broker.metrics_url, name, count))
                    pair.append(min(tries, key=lambda row: row["seconds"]))
                cold.append((label, *pair))
        results["cold"] = cold
        results["floor_us"] = min(proton_floor.measure(10_000, data(0))["send_us"] for _ in range(3))
    finally:
        broker.stop()
        shutil.rmtree(root / "data", ignore_errors=True)
    return results


def _cpu(row: dict) -> float:
    """The broker's CPU seconds for a consume (``_measure_consume`` gives µs per message)."""
    return row["cpu_us"] * max(row["msgs"], 1) / 1e6


def _less_cpu(plain: dict, row: dict) -> str:
    """The CPU ratio, or how far it is known: the kernel counts CPU in 10 ms ticks."""
    if _cpu(row) < 0.01:
        return f">{_cpu(plain) / 0.01:.0f}x"
    return f"{_cpu(plain) / _cpu(row):.1f}x"


def report(r: dict) -> None:
    print()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{r['messages']} messages of 100 bytes, no publisher filter value")
    print("append in-process (Stream.append_batch, 500 a batch, fsync never):")
    base = r["storage"][0]["us"]
    for row in r["storage"]:
        print(f"  keys {row['keys']:<24} {row['us']:6.2f} µs/record  {row['us'] / base:5.2f}x   "
              f"sidecar {row['sidecar']:>10} bytes = {row['sidecar'] / max(row['log'], 1):6.2%} of the log")
    print("scan in-process (Reader + stage 2, chunks of 3,000, no AMQP; 'needles': chunks without "
          "the value's bytes dropped whole):")
    for label, plain, needles, derived_s, read_plain, read_derived in r["scan"]:
        print(f"  {label:<36} plain {plain:7.3f} s, needles {needles:7.3f} s ({plain / needles:5.1f}x "
              f"sooner), derived {derived_s:7.3f} s ({plain / derived_s:5.1f}x sooner than plain, "
              f"{needles / derived_s:5.1f}x than needles), {read_derived / max(read_plain, 1):6.2%} of the bytes")
    if "publish" not in r:
        return
    print("publish through the broker:")
    pbase = r["publish"][0]
    for row in r["publish"]:
        print(f"  {row['label']:<12} {row['rate']:>9.0f} msg/s  {row['cpu_us']:6.1f} µs CPU/msg  "
              f"{row['cpu_us'] / pbase['cpu_us']:5.2f}x CPU  {pbase['rate'] / row['rate']:5.2f}x time")
    for name, (log, side) in sorted(r["disk"].items()):
        print(f"  on disk {name:<12} log {log:>11} bytes, sidecar {side:>9} ({side / max(log, 1):.2%})")
    tables = [(f"warm page cache, {client}", rows) for client, rows in r["warm"]]
    tables.append((f"after dropping the page cache, {CLIENTS[0][0]}", r["cold"]))
    for title, rows in tables:
        if not rows:
            continue
        print(f"consumers, {title}: {'msgs':>8} {'s':>8} {'broker CPU s':>13} {'read from disk':>15} "
              f"{'read/plain':>11} {'sooner':>7} {'less CPU':>9}")
        for label, plain, *derived_rows in rows:
            derived = derived_rows[0]
            for row in (plain, *derived_rows):
                print(f"  {row['label']:<44}{row['msgs']:>8} {row['seconds']:>8.3f} {_cpu(row):>13.3f} "
                      f"{row['read_bytes']:>15.0f} {row['read_bytes'] / max(plain['read_bytes'], 1):>10.2%} "
                      f"{plain['seconds'] / row['seconds']:>6.1f}x {_less_cpu(plain, row):>9}")
            floor = r["floor_us"] * derived["msgs"] / 1e6
            print(f"  {'':<44}(proton's engine alone sends {derived['msgs']} deliveries in >= "
                  f"{floor * 1000:.1f} ms: at most {plain['seconds'] / max(floor, 1e-9):.1f}x sooner)")
            if plain["msgs"] != derived["msgs"]:
                print(f"  !! {label}: {plain['msgs']} messages without the key, {derived['msgs']} with")
    print(f"drop_caches: {r['drop_caches']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.derived_keys",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--storage-records", type=int, default=200_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5, help="consumes per case and stream (best)")
    parser.add_argument("--cold-repeat", type=int, default=3,
                        help="consumes after dropping the page cache, per case and stream (best)")
    parser.add_argument("--fsync", default="interval", choices=("always", "interval", "never"))
    parser.add_argument("--quick", action="store_true", help="100,000 messages, 50,000 in-process")
    parser.add_argument("--no-broker", action="store_true", help="the in-process parts only")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.storage_records = 100_000, 50_000
    report(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
