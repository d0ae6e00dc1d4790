"""Where the offline tools (``inspect``, ``read``) find a stream's log.

Why: a stream's files live in ``<data-dir>/streams/<name>/log/``; pointing a tool at the
stream's directory or at the data directory found no segments and reported ``clean`` or nothing
with exit 0, as if the stream were empty. A directory with segment or index files is used as it
is; a stream directory leads to its ``log/``; anything else is refused (exit 2) with what to
name instead.
"""

from __future__ import annotations

import json
import os
import sys

from storage.files import list_files

__all__ = ["find_log"]


def find_log(directory: str, command: str) -> str | None:
    """The log directory to read for ``directory`` (an existing directory), or None after an
    error on stderr."""
    def refuse(why: str) -> None:
        print(f"amqp-stream {command}: error: {directory}: {why}", file=sys.stderr)

    if any(list_files(directory)):
        return directory
    log = os.path.join(directory, "log")
    if any(list_files(log)):
        print(f"amqp-stream {command}: reading the stream's log {log}", file=sys.stderr)
        return log
    streams = os.path.join(directory, "streams")
    if os.path.isdir(streams):
        found = sorted(_stream_logs(streams))
        shown = "; ".join(f"{name}: {path}" for name, path in found[:10]) or "none"
        more = f" (and {len(found) - 10} more)" if len(found) > 10 else ""
        refuse(f"a data directory, not a stream's log; the streams' logs: {shown}{more}")
        return None
    refuse("no segment or index files here (nor in log/): not a stream's log directory")
    return None


def _stream_logs(streams: str):
    for entry in os.listdir(streams):
        meta = os.path.join(streams, entry, "stream.json")
        try:
            with open(meta, encoding="utf-8") as f:
                name = json.load(f)["name"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        yield str(name), os.path.join(streams, entry, "log")
