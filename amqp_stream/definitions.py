"""Exchanges and bindings: the broker's routing definitions, and the one file that keeps them.

Strategy: RabbitMQ routes through exchanges and bindings; a super stream is a direct exchange
marked ``x-super-stream`` with one binding per partition stream. This module owns the model
(``Exchange``, ``Binding``), its rules (RabbitMQ's names, types and equivalence, routing for
``direct``, ``fanout``, ``topic`` and ``headers``) and its persistence. Every change is
written before it is visible: the whole document goes through a ``Store`` (today
``FileStore``: ``storage.files.replace_file``, i.e. temp file, fsync, rename, fsync of the
directory), so a restart or a SIGKILL finds the last change complete or not at all. A
cluster can put the same document in ZooKeeper behind the same two-method ``Store``.

Layout of ``<data-dir>/definitions.json`` (field names as RabbitMQ's definitions export)::

    {"format": 1,
     "exchanges": [{"name": "orders", "type": "direct", "durable": true,
                    "auto_delete": false, "internal": false,
                    "arguments": {"x-super-stream": true}}],
     "bindings":  [{"source": "orders", "destination": "orders-0",
                    "destination_type": "queue", "routing_key": "0",
                    "arguments": {"x-stream-partition-order": 0}}],
     "pending":   [{"op": "create-super-stream", "name": "orders",
                    "delete_streams": ["orders-0", "orders-1"]}]}

The default exchange (``""``) and the ``amq.*`` ones RabbitMQ declares in every virtual host
are not stored: they always exist and cannot be declared or deleted. ``pending`` records an
operation over several streams in flight (``amqp_stream.super_streams``): what its recovery
must do is delete ``delete_streams`` (a creation rolled back, a deletion finished); the
broker does that at start (``Core.open_all``) before any client connects. Bindings whose
destination stream is gone are dropped at load (a stream deleted just before a crash), unless
some stream directory could not be opened (its bindings are kept for when it is repaired).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from amqp_stream.errors import BadRequest, Forbidden, NotFound, PreconditionFailed
from storage.files import replace_file

__all__ = ["Exchange", "Binding", "Definitions", "Store", "FileStore", "FILE", "TYPES",
           "PREDECLARED", "QUEUE", "EXCHANGE", "topic_matches", "headers_match", "check_name"]

log = logging.getLogger(__name__)

FILE = "definitions.json"
FORMAT = 1
TYPES = ("direct", "fanout", "topic", "headers", "x-local-random")
"""RabbitMQ 4.2's built-in exchange types (``x-local-random`` binds classic queues only: it can
be declared here, but no stream can be bound to it, as RabbitMQ refuses a stream)."""
QUEUE, EXCHANGE = "queue", "exchange"  # a binding's destination_type (a stream is a queue)
MAX_NAME_BYTES = 255  # AMQP 0-9-1's shortstr, which RabbitMQ keeps for every name
ROUTE_CACHE = 10_000  # routes kept between two changes (then the cache starts again)


@dataclass(frozen=True)
class Exchange:
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "durable": self.durable,
                "auto_delete": self.auto_delete, "internal": self.internal,
                "arguments": dict(self.arguments)}

    @property
    def super_stream(self) -> bool:
        return self.arguments.get("x-super-stream") is True


@dataclass(frozen=True)
class Binding:
    source: str
    destination: str
    routing_key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    destination_type: str = QUEUE

    def key(self) -> tuple:
        """Identity as RabbitMQ's: the same source, destination, key and arguments."""
        return (self.source, self.destination_type, self.destination, self.routing_key,
                json.dumps(self.arguments, sort_keys=True))

    def to_json(self) -> dict:
        return {"source": self.source, "destination": self.destination,
                "destination_type": self.destination_type, "routing_key": self.routing_key,
                "arguments": dict(self.arguments)}


PREDECLARED: dict[str, Exchange] = {x.name: x for x in (
    Exchange("", "direct"),
    Exchange("amq.direct", "direct"),
    Exchange("amq.topic", "topic"),
    Exchange("amq.match", "headers"),
    Exchange("amq.headers", "headers"),
    Exchange("amq.fanout", "fanout"),
    Exchange("amq.rabbitmq.trace", "topic", internal=True),
)}
"""What ``rabbit_vhost:declare_default_exchanges`` makes in every virtual host."""


class Store(Protocol):
    """Where the document lives: ``load`` None when there is none yet; ``save`` durable when
    it returns (all of it or, after a crash, the previous one)."""

    def load(self) -> dict | None: ...

    def save(self, document: dict) -> None: ...


class FileStore:
    def __init__(self, path: str):
        self.path = path

    def __str__(self) -> str:
        return self.path

    def load(self) -> dict | None:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict):
            raise ValueError(f"{self.path}: not a JSON object")
        return document

    def save(self, document: dict) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        replace_file(self.path, json.dumps(document, sort_keys=True, indent=1).encode("utf-8"))


def check_name(name: str, what: str = "exchange") -> None:
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise BadRequest(f"{what} name is longer than {MAX_NAME_BYTES} bytes")


def check_cr_lf(name: str) -> None:
    """``rabbit_amqp_management:prohibit_cr_lf``."""
    if "\n" in name or "\r" in name:
        raise BadRequest(f"Bad name '{name}': line feed and carriage return characters not "
                         f"allowed")


def resource(kind: str, name: str) -> str:
    """``rabbit_misc:rs``: how RabbitMQ names a resource in its error texts."""
    return f"{kind} '{name}' in vhost '/'"


DEFAULT_EXCHANGE_REFUSED = "operation not permitted on the default exchange"
ALTERNATE_EXCHANGE = "alternate-exchange"  # the only argument RabbitMQ's equivalence compares


def _shown(value: Any) -> str:
    """``rabbit_misc:val`` for the values a declare carries."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    return f"'{value}'"


class Definitions:
    """The exchanges and bindings of the broker (one virtual host, ``/``).

    ``stream_exists(name)`` answers whether a binding's destination stream exists.
    Every change goes to the store before it is kept here; changes made inside ``edit()``
    are written once, together, when the outermost ``edit`` ends (or all dropped on error).
    """

    def __init__(self, store: Store, stream_exists: Callable[[str], bool]):
        self.store = store
        self.stream_exists = stream_exists
        self.exchanges: dict[str, Exchange] = {}
        self.bindings: list[Binding] = []
        self.pending: list[dict] = []
        self._depth = 0
        # (exchange, routing key) -> streams, for routes that depend on nothing else (no
        # headers exchange, no x-local-random, no default exchange on the way); emptied by
        # every change (``edit``, ``load``)
        self._routes: dict[tuple[str, str], tuple[str, ...]] = {}

    # -- persistence -----------------------------------------------------------------------
    def load(self, prune: bool = True) -> None:
        """Read the store; with ``prune``, drop bindings whose destination is gone (saved back
        if any): the caller says False when a stream may exist that could not be opened, whose
        bindings must outlive its repair. Raises ``ValueError`` for a document this version
        cannot read."""
        document = self.store.load()
        if document is None:
            return
        if document.get("format") != FORMAT:
            raise ValueError(f"definitions format {document.get('format')!r} is not {FORMAT}")
        exchanges = {}
        for x in document.get("exchanges", []):
            exchange = Exchange(x["name"], x["type"], bool(x.get("durable", True)),
                                bool(x.get("auto_delete", False)), bool(x.get("internal", False)),
                                dict(x.get("arguments") or {}))
            if exchange.type not in TYPES or exchange.name in PREDECLARED:
                raise ValueError(f"exchange {exchange.name!r} of type {exchange.type!r}")
            exchanges[exchange.name] = exchange
        bindings = [Binding(b["source"], b["destination"], b.get("routing_key", ""),
                            dict(b.get("arguments") or {}), b.get("destination_type", QUEUE))
                    for b in document.get("bindings", [])]
        self.exchanges, self.bindings = exchanges, bindings
        self._routes = {}
        self.pending = [dict(p) for p in document.get("pending", [])]
        dangling = [b for b in bindings if not self._destination_exists(b)]
        if dangling and not prune:
            log.warning("keeping %d binding(s) to streams that are not open (some stream "
                        "directories could not be opened): %s", len(dangling),
                        [(b.source, b.destination) for b in dangling])
        elif dangling:
            log.warning("dropping %d binding(s) to streams or exchanges that no longer exist: %s",
                        len(dangling), [(b.source, b.destination) for b in dangling])
            with self.edit():
                self.bindings = [b for b in self.bindings if self._destination_exists(b)]

    def document(self) -> dict:
        return {"format": FORMAT,
                "exchanges": [x.to_json() for x in self.exchanges.values()],
                "bindings": [b.to_json() for b in self.bindings],
                "pending": copy.deepcopy(self.pending)}

    @contextlib.contextmanager
    def edit(self) -> Iterator[None]:
        """Changes inside are saved as one write at the end, or all undone on an error."""
        saved = (dict(self.exchanges), list(self.bindings), copy.deepcopy(self.pending))
        self._depth += 1
        try:
            yield
            if self._depth == 1:
                self.store.save(self.document())
        except BaseException:
            self.exchanges, self.bindings, self.pending = saved
            raise
        finally:
            self._depth -= 1
            self._routes = {}

    # -- exchanges -------------------------------------------------------------------------
    def exchange(self, name: str) -> Exchange | None:
        return PREDECLARED.get(name) or self.exchanges.get(name)

    def all_exchanges(self) -> list[Exchange]:
        return [*PREDECLARED.values(), *self.exchanges.values()]

    def declare_exchange(self, exchange: Exchange) -> bool:
        """True when made, False when it exists as asked (RabbitMQ's equivalence: type,
        durable, auto_delete, internal and the ``alternate-exchange`` argument; other
        arguments are not compared). Refusals as ``rabbit_amqp_management``'s:
        ``BadRequest`` (unknown type, CR/LF in a new name), ``Forbidden`` (the default
        exchange, a new ``amq.`` name), ``PreconditionFailed`` (exists otherwise)."""
        check_name(exchange.name)
        if exchange.type not in TYPES:
            raise BadRequest(f"unknown exchange type '{exchange.type}'")
        if exchange.name == "":
            raise Forbidden(DEFAULT_EXCHANGE_REFUSED)
        existing = self.exchange(exchange.name)
        if existing is None:
            check_cr_lf(exchange.name)
            if exchange.name.startswith("amq."):
                raise Forbidden(f"{resource('exchange', exchange.name)} starts with reserved "
                                f"prefix 'amq.'")
            with self.edit():
                self.exchanges[exchange.name] = exchange
            return True
        for key, current, asked in (
                ("type", existing.type, exchange.type),
                ("durable", existing.durable, exchange.durable),
                ("auto_delete", existing.auto_delete, exchange.auto_delete),
                ("internal", existing.internal, exchange.internal),
                (ALTERNATE_EXCHANGE, existing.arguments.get(ALTERNATE_EXCHANGE),
                 exchange.arguments.get(ALTERNATE_EXCHANGE))):
            if current != asked or type(current) is not type(asked):
                raise PreconditionFailed(
                    f"inequivalent arg '{key}' for {resource('exchange', exchange.name)}: "
                    f"received {_shown(asked)} but current is {_shown(current)}")
        return False

    def delete_exchange(self, name: str) -> bool:
        """False when there was none (RabbitMQ answers that as a success too); its bindings
        (both ways) go with it, used or not (``ensure_deleted`` without if-unused)."""
        check_cr_lf(name)
        if name == "":
            raise Forbidden(DEFAULT_EXCHANGE_REFUSED)
        if name.startswith("amq."):
            raise Forbidden(f"{resource('exchange', name)} starts with reserved prefix 'amq.'")
        if name not in self.exchanges:
            return False
        with self.edit():
            del self.exchanges[name]
            sources = {b.source for b in self.bindings
                       if b.destination_type == EXCHANGE and b.destination == name}
            self.bindings = [b for b in self.bindings if b.source != name and not (
                b.destination_type == EXCHANGE and b.destination == name)]
            self._auto_delete(sources)
        return True

    # -- bindings --------------------------------------------------------------------------
    def _destination_exists(self, binding: Binding) -> bool:
        if binding.destination_type == EXCHANGE:
            return self.exchange(binding.destination) is not None
        return self.stream_exists(binding.destination)

    def bind(self, binding: Binding) -> bool:
        """False when the same binding exists. Refusals with RabbitMQ's texts: ``Forbidden``
        on the default exchange (it binds every stream itself), ``BadRequest`` for CR/LF in
        a name or a stream bound to ``x-local-random``, ``NotFound`` for a missing source or
        destination."""
        if binding.source == "" or (binding.destination_type == EXCHANGE
                                    and binding.destination == ""):
            raise Forbidden(DEFAULT_EXCHANGE_REFUSED)
        check_cr_lf(binding.source)
        check_cr_lf(binding.destination)
        source = self.exchange(binding.source)
        if source is None:
            raise NotFound(f"no {resource('exchange', binding.source)}")
        if not self._destination_exists(binding):
            kind = "exchange" if binding.destination_type == EXCHANGE else "queue"
            raise NotFound(f"no {resource(kind, binding.destination)}")
        if source.type == "x-local-random":
            # rabbit_exchange_type_local_random:validate_binding: classic queues only
            raise BadRequest("Queue type rabbit_stream_queue not valid for this exchange type")
        if any(b.key() == binding.key() for b in self.bindings):
            return False
        with self.edit():
            self.bindings.append(binding)
        return True

    def unbind(self, binding: Binding) -> bool:
        kept = [b for b in self.bindings if b.key() != binding.key()]
        if len(kept) == len(self.bindings):
            return False
        with self.edit():
            self.bindings = kept
            self._auto_delete({binding.source})
        return True

    def _auto_delete(self, sources: set[str]) -> None:
        """``rabbit_db_exchange:maybe_auto_delete``: an ``auto_delete`` exchange goes when the
        last binding from it goes (and with it its bindings to other exchanges' ..., in turn).
        Inside an ``edit``."""
        while sources:
            name = sources.pop()
            x = self.exchanges.get(name)
            if x is None or not x.auto_delete or any(b.source == name for b in self.bindings):
                continue
            del self.exchanges[name]
            gone = [b for b in self.bindings if b.destination_type == EXCHANGE
                    and b.destination == name]
            self.bindings = [b for b in self.bindings if b not in gone]
            sources.update(b.source for b in gone)
            log.info("auto-delete exchange %r deleted: its last binding went", name)

    def bindings_from(self, source: str) -> list[Binding]:
        return [b for b in self.bindings if b.source == source]

    def find_bindings(self, source: str | None = None, destination: str | None = None,
                      destination_type: str | None = None,
                      routing_key: str | None = None) -> list[Binding]:
        """The bindings that match every criterion given (None: any), in binding order."""
        return [b for b in self.bindings
                if (source is None or b.source == source)
                and (destination is None or b.destination == destination)
                and (destination_type is None or b.destination_type == destination_type)
                and (routing_key is None or b.routing_key == routing_key)]

    def forget_stream(self, name: str) -> None:
        """Stream ``name`` was deleted: its bindings go (as RabbitMQ's do with the queue)."""
        kept = [b for b in self.bindings if b.destination_type == EXCHANGE or b.destination != name]
        if len(kept) != len(self.bindings):
            sources = {b.source for b in self.bindings if b not in kept}
            with self.edit():
                self.bindings = kept
                self._auto_delete(sources)

    # -- routing ---------------------------------------------------------------------------
    def route(self, exchange: str, routing_key: str,
              headers: dict[str, Any] | Callable[[], dict[str, Any]] | None = None) -> list[str]:
        """The streams a message published to ``exchange`` with ``routing_key`` (and
        ``headers``, for headers exchanges: a dict, or a function that gives it, called only
        when a headers exchange is reached) goes to, each once, in binding order; following
        exchange-to-exchange bindings, and the ``alternate-exchange`` of an exchange that
        matches no binding. ``NotFound`` when ``exchange`` does not exist.
        Routes that depend on the exchange and key only are kept until the next change (at
        most ``ROUTE_CACHE``): a publisher's path is one dict lookup."""
        cached = self._routes.get((exchange, routing_key))
        if cached is not None:
            return list(cached)
        if self.exchange(exchange) is None:
            raise NotFound(f"no {resource('exchange', exchange)}")
        keep = True
        out: dict[str, None] = {}
        seen: set[str] = set()
        todo = [exchange]
        while todo:
            name = todo.pop(0)
            if name in seen:
                continue
            seen.add(name)
            x = self.exchange(name)
            if x is None:
                continue
            if name == "":
                keep = False  # depends on the streams that exist
                if self.stream_exists(routing_key):
                    out[routing_key] = None
                continue
            if x.type in ("headers", "x-local-random"):
                keep = False  # depends on the message, or on chance
            if x.type == "headers" and callable(headers):
                headers = headers()
            matched = [b for b in self.bindings if b.source == name
                       and _matches(x.type, b, routing_key, headers)]
            if x.type == "x-local-random" and matched:
                matched = [random.choice(matched)]
            for b in matched:
                if b.destination_type == EXCHANGE:
                    todo.append(b.destination)
                else:
                    out[b.destination] = None
            alternate = x.arguments.get(ALTERNATE_EXCHANGE)
            if not matched and isinstance(alternate, str):
                # rabbit_exchange:process_alternate: an exchange that routes nowhere hands the
                # message to its alternate exchange (and that one to its own); ``seen`` ends
                # a cycle, a missing one is skipped
                todo.append(alternate)
        if keep:
            if len(self._routes) >= ROUTE_CACHE:
                self._routes.clear()
            self._routes[(exchange, routing_key)] = tuple(out)
        return list(out)


def _matches(kind: str, binding: Binding, routing_key: str, headers: Any) -> bool:
    if kind == "direct":
        return binding.routing_key == routing_key
    if kind == "fanout":
        return True
    if kind == "topic":
        return topic_matches(binding.routing_key, routing_key)
    if kind == "x-local-random":
        return binding.routing_key == ""
    return headers_match(binding.arguments, headers if isinstance(headers, dict) else {})


def topic_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic matching: words split at ``.``; ``*`` is one word, ``#`` zero or more."""
    words, keys = pattern.split("."), routing_key.split(".")
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(words):
            result = j == len(keys)
        elif words[i] == "#":
            result = match(i + 1, j) or (j < len(keys) and match(i, j + 1))
        else:
            result = j < len(keys) and words[i] in ("*", keys[j]) and match(i + 1, j + 1)
        memo[(i, j)] = result
        return result

    return match(0, 0)


def headers_match(arguments: dict[str, Any], headers: dict[str, Any]) -> bool:
    """``rabbit_exchange_type_headers``: ``x-match`` ``all`` (default) or ``any``; arguments
    starting with ``x-`` are not matched unless ``x-match`` is ``all-with-x``/``any-with-x``;
    an argument whose value is None asks only that the header be present."""
    mode = arguments.get("x-match", "all")
    with_x = mode in ("all-with-x", "any-with-x")
    wanted = {k: v for k, v in arguments.items()
              if k != "x-match" and (with_x or not k.startswith("x-"))}
    hits = (k in headers and (v is None or headers[k] == v) for k, v in wanted.items())
    if mode in ("any", "any-with-x"):
        return any(hits)
    return all(hits)
