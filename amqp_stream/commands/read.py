"""``amqp-stream read DIR``: print the records of a stream directory, stage-1 filtering only.

Why: replay or check a stream directory (ours or RabbitMQ's) without a broker. It reads the files
alone (nothing is recovered or written), so it can follow a directory a broker is writing: the
index says which chunks are complete. Filtering is by whole chunk (the Bloom filter), so records
of a matching chunk that carry other values are printed too, exactly what a broker's stage 1
would hand to stage 2.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys

from amqp_stream.commands.logdir import find_log
from storage.errors import StorageError
from storage.offsets import TIMESTAMP_FROM_MS, OffsetSpec
from storage.reader import open_reader

__all__ = ["add_arguments", "parse_from", "run", "TIMESTAMP_FROM_MS"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", help="a stream directory")
    parser.add_argument("--from", dest="start", default="first", metavar="SPEC",
                        help="first | last | next | N (offset) | TIMESTAMP_MS (an integer >= 1e12, "
                             "or @MS) | an interval such as 10m, 2h, 7D (default: first)")
    parser.add_argument("--filter", action="append", default=[], metavar="V",
                        help="stage-1 filter value (repeatable): only chunks that may hold it")
    parser.add_argument("--match-unfiltered", action="store_true",
                        help="with --filter, also chunks holding records without a filter value")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per record: offset, chunk_id, timestamp, size, body_b64")
    parser.add_argument("--no-follow", action="store_true",
                        help="stop at the end instead of waiting for new chunks")


def parse_from(text: str) -> OffsetSpec:
    """``--from``: storage's offset spec text, a bare integer >= ``TIMESTAMP_FROM_MS`` a timestamp."""
    return OffsetSpec.parse(text, timestamp_from=TIMESTAMP_FROM_MS)


def run(args: argparse.Namespace) -> int:
    try:
        spec = parse_from(args.start)
    except StorageError as exc:
        print(f"amqp-stream read: {exc}", file=sys.stderr)
        return 2
    if not os.path.isdir(args.directory):
        print(f"amqp-stream read: {args.directory}: not a directory", file=sys.stderr)
        return 1
    directory = find_log(args.directory, "read")
    if directory is None:
        return 2
    out = sys.stdout
    try:
        with open_reader(directory, spec, args.filter, args.match_unfiltered) as reader:
            while True:
                chunk = reader.read_chunk()
                if chunk is None:
                    out.flush()
                    if args.no_follow:
                        return 0
                    reader.wait(1.0)
                    continue
                if args.json:
                    for offset, body in chunk.records:
                        out.write(json.dumps({
                            "offset": offset, "chunk_id": chunk.chunk_id,
                            "timestamp": chunk.timestamp, "size": len(body),
                            "body_b64": base64.b64encode(body).decode("ascii")}) + "\n")
                else:
                    for offset, body in chunk.records:
                        out.write(f"{offset}\t{len(body)}\t{repr(bytes(body))[2:-1]}\n")
    except BrokenPipeError:
        raise
    except (StorageError, OSError) as exc:
        out.flush()
        print(f"amqp-stream read: {exc}", file=sys.stderr)
        return 1
