"""Stream arguments: what a declare may ask for, checked once for every protocol.

Strategy: arguments are kept under RabbitMQ's AMQP names (``x-max-age``, ...), the form stored
in ``stream.json`` and compared on a second declare. The stream protocol's Create uses the same
names without ``x-``; ``from_stream_protocol`` maps them, then ``validate`` decides for both.
RabbitMQ's leader-locator argument is ``x-queue-leader-locator``; ``x-leader-locator`` (which
earlier versions of this broker took) is accepted as an alias and stored under the real name.
Arguments RabbitMQ defines only for other queue types are refused, unknown ones kept as given
(RabbitMQ ignores them) when their value is a plain scalar. ``x-stream-derived-filter-keys``
(our extension, ``amqp_stream.derived_keys``) is a list of names, or one comma-separated
string; it is kept as a list of strings.
"""

from __future__ import annotations

from typing import Any

import bloom
from amqp_stream.derived_keys import ARGUMENT as DERIVED_KEYS
from amqp_stream.derived_keys import parse_keys
from amqp_stream.errors import BadRequest, PreconditionFailed
from storage import StorageError, parse_interval_ms
from storage.config import MAX_SEGMENT_BYTES_LIMIT as MAX_SEGMENT_SIZE

__all__ = ["validate", "equivalent", "from_stream_protocol", "STREAM_ARGUMENTS",
           "MAX_SEGMENT_SIZE", "LEADER_LOCATORS"]

_ALIASES = {"x-leader-locator": "x-queue-leader-locator"}
# rabbit_queue_location:queue_leader_locators() of RabbitMQ 4.2: the last three are deprecated
# there (placed as "balanced"); on one node every value places the stream here.
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders", "min-masters")

# arguments a stream understands (others that RabbitMQ defines for other queue types are refused)
STREAM_ARGUMENTS = ("x-queue-type", "x-max-length-bytes", "x-max-age",
                    "x-stream-max-segment-size-bytes", "x-stream-filter-size-bytes",
                    "x-initial-cluster-size", "x-queue-leader-locator", DERIVED_KEYS)
_NOT_FOR_STREAMS = ("x-max-length", "x-message-ttl", "x-expires", "x-dead-letter-exchange",
                    "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-overflow",
                    "x-max-priority", "x-single-active-consumer", "x-queue-mode",
                    "x-delivery-limit", "x-max-in-memory-length", "x-max-in-memory-bytes",
                    "x-queue-master-locator", "x-queue-version")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(key: str, value: Any) -> None:
    if key == "x-queue-type":
        if value != "stream":
            raise BadRequest(f"x-queue-type {value!r} is not supported: this broker has stream "
                             f"queues only")
    elif key == "x-max-length-bytes":
        if not _is_int(value) or value < 0:
            raise BadRequest(f"x-max-length-bytes must be an integer >= 0, not {value!r}")
    elif key == "x-max-age":
        try:
            ok = isinstance(value, str) and parse_interval_ms(value, rabbitmq=True) > 0
        except StorageError:
            ok = False
        if not ok:
            raise BadRequest(f"x-max-age must look like 7D, 12h or 30m (> 0), not {value!r}")
    elif key == "x-stream-max-segment-size-bytes":
        if not _is_int(value) or not 0 < value <= MAX_SEGMENT_SIZE:
            raise BadRequest(f"x-stream-max-segment-size-bytes must be an integer in "
                             f"1..{MAX_SEGMENT_SIZE}, not {value!r}")
    elif key == "x-stream-filter-size-bytes":
        if not _is_int(value) or not bloom.MIN_SIZE <= value <= bloom.MAX_SIZE:
            raise BadRequest(f"x-stream-filter-size-bytes must be an integer in "
                             f"{bloom.MIN_SIZE}..{bloom.MAX_SIZE}, not {value!r}")
    elif key == "x-initial-cluster-size":
        if not _is_int(value) or value < 1:
            raise BadRequest(f"x-initial-cluster-size must be an integer >= 1, not {value!r}")
    elif key == "x-queue-leader-locator":
        if value not in LEADER_LOCATORS:
            raise BadRequest(f"x-queue-leader-locator must be one of "
                             f"{', '.join(LEADER_LOCATORS)}, not {value!r}")
    elif not isinstance(value, (str, int, float, bool)):
        raise BadRequest(f"argument {key} has an unsupported type {type(value).__name__}")


def validate(arguments: dict) -> dict:
    """The arguments normalised (plain Python values, aliases under their real names,
    ``x-queue-type`` set); ``BadRequest`` for anything a stream cannot be."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if not isinstance(key, str):
            raise BadRequest(f"argument name {key!r} is not a string")
        key = _ALIASES.get(str(key), str(key))
        if key in _NOT_FOR_STREAMS:
            raise BadRequest(f"PRECONDITION_FAILED: argument {key} is not supported by stream "
                             f"queues")
        if key == DERIVED_KEYS:
            out[key] = parse_keys(value)
            continue
        _check(key, value)
        out[key] = _plain(value)
    out.setdefault("x-queue-type", "stream")
    return out


def from_stream_protocol(arguments: dict[str, str]) -> dict:
    """A stream-protocol Create's arguments (string values, names without ``x-``) under the
    AMQP names with typed values, ready for ``validate``."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        name = key if key.startswith("x-") else "x-" + key
        if name in ("x-max-length-bytes", "x-stream-max-segment-size-bytes",
                    "x-stream-filter-size-bytes", "x-initial-cluster-size"):
            try:
                out[name] = int(value)
            except ValueError:
                raise BadRequest(f"{key} must be an integer, not {value!r}") from None
        else:
            out[name] = value
    return out


def _plain(value: Any) -> Any:
    """Drop proton's subclasses (symbol, long, ...) so arguments persist and compare simply."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def equivalent(existing: dict, requested: dict, name: str) -> None:
    """A second declare of ``name`` must ask for what the stream has; ``PreconditionFailed``
    otherwise. Arguments stored under an alias by an older version compare by real name."""
    def norm(arguments: dict) -> dict:
        return {_ALIASES.get(k, k): list(v) if k == DERIVED_KEYS else _plain(v)
                for k, v in arguments.items()}
    have, asked = norm(existing), norm(requested)
    if have != asked:
        # which ones, as RabbitMQ's "inequivalent arg" message says
        def shown(args: dict, key: str) -> str:
            return repr(args[key]) if key in args else "none"

        differ = "; ".join(f"{key}: received {shown(asked, key)} but current is {shown(have, key)}"
                           for key in sorted(set(have) | set(asked)) if have.get(key) != asked.get(key))
        raise PreconditionFailed(f"PRECONDITION_FAILED: stream '{name}' exists with other "
                                 f"arguments: {differ}")
