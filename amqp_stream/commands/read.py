"""``amqp-stream read DIR``: print the records of a stream directory, stage-1 filtering only.

Why: replay or check a stream directory (ours or RabbitMQ's) without a broker. It reads the files
alone (nothing is recovered or written), so it can follow a directory a broker is writing: the
index says which chunks are complete. Filtering is by whole chunk (the Bloom filter), so records
of a matching chunk that carry other values are printed too, exactly what a broker's stage 1
would hand to stage 2.

Each record is an encoded AMQP 1.0 message; the command decodes it (the same view the broker's
filters use, ``amqp_stream.wire``) and prints its body as ``consume`` does; ``--json`` also gives
its properties, application properties and annotations, and the stored bytes themselves as
``message_b64``. A record that is not an AMQP message (a stream-protocol client may store any
bytes) prints as its bytes, with ``decode_error`` saying why.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

from amqp_stream import wire
from amqp_stream.wire._sections import AMQP_SEQUENCE, AMQP_VALUE, DATA
from amqp_stream.commands.values import jsonable

from amqp_stream.commands.logdir import find_log
from storage.errors import StorageError
from storage.offsets import TIMESTAMP_FROM_MS, OffsetSpec
from storage.reader import ReadChunk, open_reader

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
                        help="one JSON object per record: offset, chunk_id, timestamp, size, "
                             "filter_value, properties, application_properties, annotations, body "
                             "(decoded), message_b64 (the stored bytes)")
    parser.add_argument("--no-follow", action="store_true",
                        help="stop at the end instead of waiting for new chunks")


def parse_from(text: str) -> OffsetSpec:
    """``--from``: storage's offset spec text, a bare integer >= ``TIMESTAMP_FROM_MS`` a timestamp."""
    return OffsetSpec.parse(text, timestamp_from=TIMESTAMP_FROM_MS)


def decode_message(data: bytes) -> dict[str, Any]:
    """The record's sections for printing (``body`` as text or JSON values, as ``consume``
    prints them); for bytes that are not an AMQP message, ``body`` holds them as they are and
    ``decode_error`` the reason."""
    try:
        view = wire.MessageView.from_bytes(data)
        bodies = [(code, wire.decode(data, start)[0]) for code, _, start, _ in wire.split_sections(data)
                  if code in (DATA, AMQP_SEQUENCE, AMQP_VALUE)]
        annotations = {str(k): v for k, v in view.message_annotations.items()}
        message = {
            "filter_value": jsonable(annotations.pop(wire.FILTER_VALUE_NAME, None)),
            "properties": jsonable(view.properties),
            "application_properties": jsonable(view.application_properties),
            "annotations": jsonable(annotations),
        }
    except wire.WireError as exc:
        return {"body": jsonable(data), "decode_error": str(exc)}
    if bodies and all(code == DATA for code, _ in bodies):
        body: Any = b"".join(bytes(b) for _, b in bodies)  # data sections: one binary body
    elif len(bodies) == 1:
        body = bodies[0][1]
    else:  # amqp-sequence sections: the list of their lists
        body = [b for _, b in bodies]
    message["body"] = jsonable(body) if not isinstance(body, str) else body
    return message


def _one_line(body: Any) -> str:
    """A body on one line of the table: the text (or JSON) with \\, tab and line ends escaped."""
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def run(args: argparse.Namespace) -> int:
    try:
        spec = parse_from(args.start)
    except StorageError as exc:
        print(f"amqp-stream read: {exc}", file=sys.stderr)
        return 2
    if not os.path.isdir(args.directory):
        print(f"amqp-stream read: error: {args.directory}: not a directory", file=sys.stderr)
        return 2  # bad usage, as for a directory that is not a stream's log (find_log)
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
                assert isinstance(chunk, ReadChunk)  # (SCAN_PAUSED comes only with max_skips)
                for offset, data in chunk.records:
                    message = decode_message(data)
                    if args.json:
                        out.write(json.dumps({
                            "offset": offset, "chunk_id": chunk.chunk_id,
                            "timestamp": chunk.timestamp, "size": len(data), **message,
                            "message_b64": base64.b64encode(data).decode("ascii")},
                            ensure_ascii=False) + "\n")
                    else:
                        out.write(f"{offset}\t{len(data)}\t{_one_line(message['body'])}\n")
    except BrokenPipeError:
        raise
    except (StorageError, OSError) as exc:
        out.flush()
        print(f"amqp-stream read: {exc}", file=sys.stderr)
        return 1
