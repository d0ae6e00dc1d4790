"""Link and management addresses (RabbitMQ's AMQP 1.0 address format v2), as pure functions.

``/queues/<name>`` is a stream; ``/queues/<name>/messages`` the purge path;
``/queues/<name>/offsets/<consumer>`` and ``/queues/<name>/sequences/<reference>`` a consumer
name's stored offset and a publisher reference's last publishing id (management only; our
extension, see ``management``); ``/queues/<name>/tracking`` all of a stream's (management);
``/queues/<name>/consumers/<consumer>`` and ``/queues/<name>/publishers/<reference>`` a link
address that names its consumer or publisher (our extension, see ``tracking``); ``/exchanges/<name>``
(publish with the empty routing key) and ``/exchanges/<name>/<key>`` RabbitMQ's exchange targets
(``publish_target``), ``/exchanges/<name>`` also the management path of an exchange;
``/bindings`` (with a query) and ``/bindings/<segment>`` the management paths of bindings
(``binding_segment``); ``/management`` the management node. Segments are percent-encoded UTF-8:
``[A-Za-z0-9-._~]`` stay as they are, everything else is ``%HH``. A malformed address is an
``AddressError`` with the reason, turned into ``amqp:invalid-field``/400 by the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import parse_qsl, quote

from amqp_stream.errors import BadRequest, PreconditionFailed

__all__ = ["Address", "AddressError", "Target", "parse", "publish_stream", "publish_target",
           "queue_address", "binding_segment", "MANAGEMENT", "MAX_NAME_BYTES"]

MANAGEMENT = "/management"
MAX_NAME_BYTES = 255


class AddressError(BadRequest):
    """An address that is not one of the forms above."""


@dataclass(frozen=True)
class Address:
    kind: str  # "queue", "queue_messages", "queue_offset", "queue_sequence", "queue_tracking",
    # "queue_consumer", "queue_publisher", "exchange", "management", "bindings"
    name: str = ""
    key: str | None = None
    query: tuple[tuple[str, str], ...] = ()  # /bindings?src=..&dstq=..&key=.. (decoded)


_HEX = "0123456789abcdefABCDEF"
# /queues/<q>/offsets/<consumer name>, /queues/<q>/sequences/<publisher reference>
# /queues/<q>/consumers/<consumer name>, /queues/<q>/publishers/<publisher reference>
_TRACKING = {"offsets": "queue_offset", "sequences": "queue_sequence",
             "consumers": "queue_consumer", "publishers": "queue_publisher"}


def decode_segment(segment: str) -> str:
    """Percent-decode one path segment as UTF-8; strict about malformed escapes."""
    if "%" not in segment:
        return segment
    out = bytearray()
    i = 0
    n = len(segment)
    while i < n:
        ch = segment[i]
        if ch == "%":
            if i + 2 >= n:
                raise AddressError(f"truncated percent escape in {segment!r}")
            pair = segment[i + 1:i + 3]
            if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                raise AddressError(f"bad percent escape {segment[i:i + 3]!r}")
            out.append(int(pair, 16))
            i += 3
        else:
            out += ch.encode("utf-8")
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(f"percent escapes in {segment!r} are not UTF-8") from None


def encode_segment(text: str) -> str:
    return quote(text, safe="-._~")


def queue_address(name: str) -> str:
    return "/queues/" + encode_segment(name)


def check_name(name: str) -> str:
    if not name:
        raise AddressError("empty queue name")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise AddressError(f"queue name longer than {MAX_NAME_BYTES} bytes")
    return name


def parse(address: str | None) -> Address:
    """Parse a target/source/management ``to`` address."""
    if address is None:
        raise AddressError("no address")
    if address == MANAGEMENT:
        return Address("management")
    if not address.startswith("/"):
        raise AddressError(f"address {address!r} does not start with /queues/ or /exchanges/ "
                           f"(v1 addresses are not supported)")
    parts = address.split("/")[1:]
    head = parts[0]
    rest = parts[1:]
    if head == "queues":
        if len(rest) == 1:
            return Address("queue", check_name(decode_segment(rest[0])))
        if len(rest) == 2 and rest[1] == "messages":
            return Address("queue_messages", check_name(decode_segment(rest[0])))
        if len(rest) == 2 and rest[1] == "tracking":  # our extension (management)
            return Address("queue_tracking", check_name(decode_segment(rest[0])))
        if len(rest) == 3 and rest[1] in _TRACKING and rest[2]:  # our extension
            return Address(_TRACKING[rest[1]], check_name(decode_segment(rest[0])),
                           decode_segment(rest[2]))
        raise AddressError(f"bad queue address {address!r}")
    if head == "exchanges" and len(rest) in (1, 2):
        return Address("exchange", decode_segment(rest[0]),
                       decode_segment(rest[1]) if len(rest) == 2 else None)
    if head.startswith("bindings?"):  # GET /bindings?src=..&dstq=..&key=..
        try:
            query = parse_qsl(address.partition("?")[2], keep_blank_values=True,
                              strict_parsing=True, errors="strict")
        except (ValueError, UnicodeDecodeError) as exc:
            raise AddressError(f"failed to dissect query in {address!r}: {exc}") from None
        return Address("bindings", query=tuple(query))
    if head == "bindings" and len(rest) <= 1:
        return Address("bindings", rest[0] if rest else "")
    raise AddressError(f"unknown address {address!r}")


class Target(NamedTuple):
    """Where a published message goes: ``exchange`` with ``routing_key``; ``stream`` is the
    stream a ``/queues/<stream>`` address names (the default exchange's route), else None."""
    exchange: str
    routing_key: str
    stream: str | None


def publish_target(address: str | None) -> Target:
    """``rabbit_amqp_session:parse_target_v2_string``: a publisher link's target or a message's
    ``to`` on the anonymous terminus (one rule for both). ``/queues/<q>`` is the default
    exchange with key ``q``; ``/exchanges/<x>/<key>``; ``/exchanges/<x>`` the empty key (as
    RabbitMQ 4.2's v2 addresses: the subject is not read); the default exchange cannot be
    named as ``/exchanges/`` or ``/exchanges/amq.default``. ``BadRequest`` otherwise. Whether
    the exchange or stream exists is the caller's check."""
    try:
        parsed = parse(address)
    except AddressError as exc:
        raise BadRequest(exc.description) from None
    if parsed.kind == "queue":
        return Target("", parsed.name, parsed.name)
    if parsed.kind == "exchange" and parsed.name not in ("", "amq.default"):
        return Target(parsed.name, parsed.key or "", None)
    raise BadRequest(f"cannot publish to {address!r}: use /queues/<stream>, /exchanges/<exchange>"
                     f" or /exchanges/<exchange>/<routing key>")


def publish_stream(address: str | None) -> str:
    """The stream a ``/queues/<stream>`` publish address names (``BadRequest`` for others)."""
    target = publish_target(address)
    if target.stream is None:
        raise BadRequest(f"{address!r} is not a stream address: use /queues/<stream>")
    return target.stream


def anonymous_target(to: object) -> Target:
    """A message's ``to`` on the anonymous terminus, refused as RabbitMQ refuses it
    (``amqp:precondition-failed``)."""
    if to is None:
        raise PreconditionFailed("anonymous terminus requires 'to' address to be set")
    if not isinstance(to, str):
        raise PreconditionFailed(f"bad 'to' address: {to!r}")
    try:
        return publish_target(to)
    except BadRequest:
        raise PreconditionFailed(f"bad 'to' address string: {to}") from None


_BINDING_SEGMENT = re.compile(r"src=([0-9A-Za-z\-._~%]+);dst([eq])=([0-9A-Za-z\-._~%]+);"
                              r"key=([0-9A-Za-z\-._~%]*);args=([0-9A-Za-z\-_]*)")


def binding_segment(segment: str) -> tuple[str, str, str, str, str]:
    """``rabbit_amqp_management:decode_binding_path_segment``: ``src=<x>;dstq=<q>;key=<k>;
    args=<hash>`` (or ``dste=`` for an exchange) as (source, "queue"|"exchange", destination,
    key, args hash); ``AddressError`` with RabbitMQ's text for anything else."""
    match = _BINDING_SEGMENT.fullmatch(segment)
    if match is None:
        raise AddressError(f"bad binding path segment '{segment}'")
    src, kind, dst, key, args = match.groups()
    return (decode_segment(src), "exchange" if kind == "e" else "queue", decode_segment(dst),
            decode_segment(key), args)
