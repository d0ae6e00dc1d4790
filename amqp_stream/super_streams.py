"""Super streams: partition streams behind a direct exchange, made and unmade all or nothing.

Strategy: as ``rabbit_stream_manager`` of RabbitMQ 4.2, a super stream ``orders`` is a
durable direct exchange ``orders`` with the argument ``x-super-stream: true``, and one binding
per partition stream, its routing key the partition's binding key and its argument
``x-stream-partition-order`` the partition's position (0, 1, ...); ``partitions`` lists the
streams bound to the exchange in that order, ``route`` asks the exchange. Any protocol's
front end calls these.

All or nothing, across a SIGKILL too: creation first records its partitions as ``pending``
in the definitions (saved), creates the streams, then writes the exchange and its bindings
and clears ``pending`` in one save; deletion removes the exchange and bindings and records the
partitions as ``pending`` in one save, deletes the streams, then clears ``pending``. A broker
killed in between finds ``pending`` at start and deletes those streams (``Core.open_all``):
an unfinished creation is rolled back, an unfinished deletion finished. A failure inside
creation (a stream that cannot be made) rolls back at once the same way.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from amqp_stream.arguments import from_stream_protocol, validate
from amqp_stream.definitions import PREDECLARED, Binding, Exchange, check_name
from amqp_stream.errors import AlreadyExists, BadRequest, Forbidden, InternalError, NotFound

__all__ = ["create", "delete", "partitions", "route", "MAX_PARTITIONS", "PARTITION_ORDER",
           "SUPER_STREAM"]

log = logging.getLogger(__name__)

MAX_PARTITIONS = 1000  # rabbit_stream_utils' ?MAX_SUPER_STREAM_PARTITIONS
PARTITION_ORDER = "x-stream-partition-order"
SUPER_STREAM = "x-super-stream"


def correct_name(name: str) -> str:
    """``rabbit_stream_utils:enforce_correct_name``: CR and LF dropped; empty and ``amq.``
    names refused; so are names over 255 bytes (an exchange name's limit)."""
    stripped = name.replace("\r", "").replace("\n", "")
    if not stripped or stripped.startswith("amq."):
        raise BadRequest(f"'{name}' is not a correct name for a super stream")
    check_name(stripped, "super stream")
    return stripped


def create(core: Any, name: str, partitions: Sequence[str], binding_keys: Sequence[str],
           arguments: dict[str, str]) -> None:
    """Make super stream ``name`` (``core``: an ``amqp_stream.core.Core``). ``arguments``
    are a stream-protocol Create's, given to every partition. Refusals: ``BadRequest``
    (RabbitMQ's validation_failed: counts differ, duplicate or bad partition names, too many
    partitions), ``InternalError`` (bad arguments, as RabbitMQ answers them), ``AlreadyExists``
    (an exchange of that name, a partition that exists)."""
    name = correct_name(name)
    if len(partitions) != len(binding_keys):
        raise BadRequest("There must be the same number of partitions and binding keys")
    if len(set(partitions)) != len(partitions):
        raise BadRequest(f"Duplicate partition names found {list(partitions)}")
    bad = [p for p in partitions if not p or p.startswith("amq.")]
    if bad:
        raise BadRequest(f"{bad} is not a correct partition names")
    if len(partitions) > MAX_PARTITIONS:
        raise BadRequest(f"The partition number must not exceed {MAX_PARTITIONS}")
    definitions = core.definitions
    if definitions.exchange(name) is not None:
        raise AlreadyExists(f"there is already an exchange named {name}")
    for p in partitions:
        if core.exists(p):
            raise AlreadyExists(f"there is already a queue named {p}")
    given = dict(arguments)
    given.setdefault("queue-leader-locator", "balanced")  # default_super_stream_arguments
    try:
        stream_arguments = validate(from_stream_protocol(given))
    except BadRequest as exc:
        # RabbitMQ checks them per partition (rabbit_stream_manager:create), whose bare
        # validation_failed reaches rabbit_stream_reader's catch-all: INTERNAL_ERROR
        raise InternalError(exc.description) from None

    with definitions.edit():
        definitions.pending.append({"op": "create-super-stream", "name": name,
                                    "delete_streams": list(partitions)})
    made: list[str] = []
    try:
        for p in partitions:
            core.declare(p, stream_arguments)
            made.append(p)
        with definitions.edit():
            definitions.exchanges[name] = Exchange(name, "direct",
                                                   arguments={SUPER_STREAM: True})
            definitions.bindings.extend(
                Binding(name, p, key, {PARTITION_ORDER: order})
                for order, (p, key) in enumerate(zip(partitions, binding_keys, strict=True)))
            definitions.pending = [x for x in definitions.pending if x.get("name") != name
                                   or x.get("op") != "create-super-stream"]
    except BaseException:
        log.warning("super stream %r not created: rolling back %d partition(s)", name, len(made))
        for p in made:
            core.delete(p)
        with definitions.edit():
            definitions.pending = [x for x in definitions.pending if x.get("name") != name]
        raise
    log.info("super stream %r created: partitions %s, binding keys %s, arguments %s", name,
             list(partitions), list(binding_keys), stream_arguments)


def delete(core: Any, name: str) -> list[str]:
    """Delete super stream ``name``: its exchange, then every stream bound to it (as
    RabbitMQ, whatever else binds them). ``NotFound`` when there is no such exchange;
    ``Forbidden`` for the predeclared ones. Returns the partitions deleted."""
    if name in PREDECLARED:
        raise Forbidden(f"ACCESS_REFUSED: operation not permitted on exchange '{name}'")
    streams = partitions(core, name)
    definitions = core.definitions
    with definitions.edit():
        definitions.delete_exchange(name)
        definitions.pending.append({"op": "delete-super-stream", "name": name,
                                    "delete_streams": streams})
    for stream in streams:
        if core.delete(stream) is None:
            log.warning("partition %r of super stream %r was already gone", stream, name)
    with definitions.edit():
        definitions.pending = [x for x in definitions.pending if x.get("name") != name]
    log.info("super stream %r deleted with its partitions %s", name, streams)
    return streams


def _current(core: Any) -> None:
    """In a cluster, the definitions as ZooKeeper holds them before a super stream is
    answered for: a client that created it through one node and asks another at once (as
    through a load balancer) gets it, as RabbitMQ answers from its cluster-wide metadata
    store; without it the other node answered from the copy its watch had not yet renewed
    (no partitions, or some). Unreachable ZooKeeper: the copy held."""
    definitions = core.definitions
    stale = getattr(definitions.store, "stale", None)
    if stale is None:
        return
    try:
        if stale():
            definitions.load(prune=False)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: answer from the copy
        log.debug("super streams answered from the definitions held: %s", exc)


def partitions(core: Any, name: str) -> list[str]:
    """The streams bound to exchange ``name``, by ``x-stream-partition-order`` (bindings
    without it last, in binding order), each once; ``NotFound`` when there is no exchange."""
    _current(core)
    definitions = core.definitions
    if definitions.exchange(name) is None:
        raise NotFound(f"no super stream '{name}'")
    bound = [b for b in definitions.bindings_from(name) if b.destination_type == "queue"]

    def order(b: Binding) -> tuple[int, int]:
        value = b.arguments.get(PARTITION_ORDER)
        try:
            return (0, int(value)) if value is not None else (1, 0)
        except (TypeError, ValueError):
            return (1, 0)

    return list(dict.fromkeys(b.destination for b in sorted(bound, key=order)))


def route(core: Any, name: str, routing_key: str) -> list[str]:
    """The streams exchange ``name`` routes ``routing_key`` to (empty: no route);
    ``NotFound`` when there is no such exchange."""
    _current(core)
    return core.definitions.route(name, routing_key)
