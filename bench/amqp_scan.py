"""An AMQP 1.0 consumer's stage-2 scan in process, without sockets: its ``pump`` CPU a scanned
record with spans of stored chunks (``Reader.read_span``) and chunk by chunk, in turns.

Why: ``bench.amqp_filtered`` measures the broker whole against proton's floor, and its figures
move with the machine's load and with the chunk sizes the writer made from the publisher's
timing; this one stores chunks of a given size and times only the consumer's ``pump`` (read,
CRC, columns, the deliveries into proton's engine; the receiving engine's work not counted),
CPU time, for ``bench.amqp_filtered``'s plain SQL cases (``k = i % 100``).

    python -m bench.amqp_scan [--chunk 1000] [--records 400000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from proton import Message

from amqp_stream.amqp.consuming import Consumer
from amqp_stream.amqp.source_filters import SourceFilters
from bench import proton_floor
from bench.in_process import StreamEntry
from sqlfilter import compile_sql
from storage import OffsetSpec, Stream, StreamConfig
from storage.reader import Reader

CASES = ("k = 7", "k < 10")


def consume(stream: Stream, sql: str) -> tuple[float, int]:
    """(CPU seconds in the consumer's ``pump``, deliveries) for one filtered read to the end."""
    server_t, client_t, sender, receiver = proton_floor._pair()
    filters = SourceFilters(start=OffsetSpec.first(), stage2=compile_sql(sql), stage2_kind="sql")
    consumer = Consumer(sender, StreamEntry(stream, stage2_reads=True), filters,
                        lambda c, soon: None)
    cpu, n = 0.0, 0
    while True:
        c = time.process_time()
        consumer.pump()
        cpu += time.process_time() - c
        proton_floor._pump(server_t, client_t)
        while (d := receiver.current) is not None and not d.partial:
            receiver.recv(d.pending)
            receiver.advance()
            n += 1
        proton_floor._pump(client_t, server_t)
        if consumer.waiting:
            return cpu, n


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.amqp_scan", description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=1000, help="records a stored chunk")
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d, \
            Stream.open(d, StreamConfig(fsync="never", max_chunk_entries=args.chunk)) as stream:
        bodies = [Message(properties={"region": f"r{i // 1000 % 100:02d}", "k": i % 100},
                          body="x" * 60).encode() for i in range(10_000)]
        for c in range(0, args.records, args.chunk):
            stream.append_batch([bodies[(c + j) % len(bodies)] for j in range(args.chunk)])
            stream.flush()
        real = Reader.read_span
        print(f"{args.records:,} records in chunks of {args.chunk:,}; the consumer's pump, CPU ns a "
              f"scanned record, best / median of {args.rounds} (turns alternate)")
        for sql in CASES:
            figures: dict[str, list[float]] = {"spans": [], "chunk by chunk": []}
            for _ in range(args.rounds):
                for name, figure in figures.items():
                    Reader.read_span = real if name == "spans" else (lambda self, *a: None)  # type: ignore[method-assign]
                    try:
                        cpu, delivered = consume(stream, sql)
                    finally:
                        Reader.read_span = real  # type: ignore[method-assign]
                    figure.append(cpu / args.records * 1e9)
            line = ", ".join(f"{name} {min(v):.1f} / {statistics.median(v):.1f}"
                             for name, v in figures.items())
            ratio = statistics.median(figures["spans"]) / statistics.median(figures["chunk by chunk"])
            print(f"  {sql:8} {delivered:7,} deliveries   {line}   spans / chunk by chunk {ratio:.2f}x")


if __name__ == "__main__":
    main()
