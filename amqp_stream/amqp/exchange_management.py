"""The ``/management`` node's exchange and binding requests, as RabbitMQ 4.2 answers them.

Strategy: ``rabbit_amqp_management`` read line by line: ``PUT /exchanges/<x>`` (204, 409 on a
redeclare RabbitMQ's equivalence refuses), ``DELETE /exchanges/<x>`` (204, also when there was
none; 403 for the default and ``amq.*`` exchanges), ``POST /bindings`` (204; a missing source or
destination is 400 "no queue ..." as its ``binding_action`` answers), ``DELETE
/bindings/src=..;dstq=..;key=..;args=..`` (204, also when there was none) and ``GET
/bindings?src=..&dstq=..&key=..`` (200, the list). The model and its rules are
``amqp_stream.definitions``'; this module only decodes bodies and paths and encodes answers.

Our extensions, where RabbitMQ has no request: ``GET /exchanges/<x>`` (200 with the exchange,
404) and ``GET /exchanges`` (all of them: the default exchange is ``""``; a super stream is the
one whose ``arguments`` carry ``x-super-stream``), and ``GET /bindings`` with any subset of
``src``, ``dstq``/``dste`` and ``key`` (RabbitMQ answers only when ``src`` and ``key`` are
both given, and then needs a destination: so do we). The ``args`` hash of a binding's location
is ours (RabbitMQ's is Erlang's ``phash2``): it is empty without arguments, as RabbitMQ's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Callable

from proton import Described

from amqp_stream.amqp import addresses
from amqp_stream.amqp.addresses import encode_segment
from amqp_stream.definitions import EXCHANGE, QUEUE, Binding, Definitions, Exchange, check_cr_lf
from amqp_stream.errors import BadRequest, BrokerError, Forbidden, NotAllowed, NotFound

__all__ = ["exchanges", "bindings", "args_hash", "location"]

_EXCHANGE_FIELDS = {"durable": bool, "auto_delete": bool, "internal": bool, "type": str}


def _plain(value: Any, where: str) -> Any:
    """An argument value as JSON can keep it (proton's symbol/ulong/... are str/int
    subclasses); ``BadRequest`` for what a definitions file cannot hold."""
    if value is None:
        return None
    for kind in (bool, int, float, str):  # bool before int: True is an int too
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        return _arguments(value, where)
    if isinstance(value, Described):
        raise BadRequest(f"unsupported argument {where}: a described value")
    raise BadRequest(f"unsupported argument {where}: {type(value).__name__}")


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"arguments of {where} must be a map")
    out = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise BadRequest(f"unsupported argument {key!r} of {where}: keys are strings")
        out[str(key)] = _plain(item, f"{key!r} of {where}")
    return out


def _exchange_body(name: str, body: Any) -> Exchange:
    """``decode_exchange``: defaults durable, direct, not auto-delete, not internal."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequest(f"exchange declare body must be a map, not {type(body).__name__}")
    fields: dict[str, Any] = {"type": "direct", "durable": True, "auto_delete": False,
                              "internal": False, "arguments": {}}
    for key, value in body.items():
        kind = _EXCHANGE_FIELDS.get(key) if isinstance(key, str) else None
        if key == "arguments":
            fields["arguments"] = _arguments(value, f"exchange '{name}'")
        elif kind is None or not isinstance(value, kind):
            raise BadRequest(f"bad exchange property {key!r}: {value!r}")
        else:
            fields[str(key)] = kind(value)
    return Exchange(name, fields["type"], fields["durable"], fields["auto_delete"],
                    fields["internal"], fields["arguments"])


def exchange_json(x: Exchange) -> dict:
    return {"name": x.name, "type": x.type, "durable": x.durable, "auto_delete": x.auto_delete,
            "internal": x.internal, "arguments": dict(x.arguments)}


def exchanges(method: str, address: addresses.Address, body: Any,
              definitions: Definitions) -> tuple[int, Any]:
    """``/exchanges/<x>`` (and our ``GET /exchanges``): (status, body)."""
    name = address.name
    if address.key is not None:
        raise BadRequest("bad exchange path: /exchanges/<exchange> takes one segment")
    if method == "PUT":
        definitions.declare_exchange(_exchange_body(name, body))
        return 204, None
    if method == "DELETE":
        definitions.delete_exchange(name)
        return 204, None
    if method == "GET":
        x = definitions.exchange(name)
        if x is None:
            raise NotFound(f"exchange '{name}' in vhost '/' not found")
        return 200, exchange_json(x)
    raise NotAllowed(f"{method} is not allowed on an exchange")


def list_exchanges(method: str, definitions: Definitions) -> tuple[int, Any]:
    if method != "GET":
        raise NotAllowed(f"{method} is not allowed on /exchanges")
    return 200, [exchange_json(x) for x in definitions.all_exchanges()]


def args_hash(arguments: dict[str, Any]) -> str:
    """The ``args=`` of a binding's location: empty without arguments (as RabbitMQ's)."""
    if not arguments:
        return ""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest[:4]).rstrip(b"=").decode("ascii")


def location(b: Binding) -> str:
    """``compose_binding_uri``."""
    kind = "e" if b.destination_type == EXCHANGE else "q"
    return (f"/bindings/src={encode_segment(b.source)};dst{kind}={encode_segment(b.destination)};"
            f"key={encode_segment(b.routing_key)};args={args_hash(b.arguments)}")


def binding_json(b: Binding) -> dict:
    return {"source": b.source, f"destination_{b.destination_type}": b.destination,
            "binding_key": b.routing_key, "arguments": dict(b.arguments), "location": location(b)}


def _checks(source: str, destination: str, destination_type: str) -> None:
    """``binding_checks``: neither end the default exchange, no CR/LF in either name."""
    for name, is_exchange in ((source, True), (destination, destination_type == EXCHANGE)):
        if is_exchange and name == "":
            raise Forbidden("operation not permitted on the default exchange")
        check_cr_lf(name)


def _as_binding_action(exc: BrokerError) -> BrokerError:
    """``binding_action`` answers every refusal of the binding itself with 400."""
    if isinstance(exc, Forbidden):
        return exc
    return BadRequest(exc.description)


def bindings(method: str, address: addresses.Address, body: Any, definitions: Definitions,
             may_bind: Callable[[str, str], None] = lambda source, destination: None,
             ) -> tuple[int, Any]:
    """``/bindings`` requests: (status, body). ``may_bind(source, destination)`` raises
    ``Forbidden`` unless the user may add or remove that binding (RabbitMQ: read on the source,
    write on the destination)."""
    if method == "POST" and not address.name and not address.query:
        return _bind(body, definitions, may_bind)
    if method == "DELETE" and address.name:
        source, kind, destination, key, digest = addresses.binding_segment(address.name)
        _checks(source, destination, kind)
        may_bind(source, destination)
        for b in definitions.find_bindings(source, destination, kind, key):
            if args_hash(b.arguments) == digest:
                definitions.unbind(b)
                break
        return 204, None
    if method == "GET" and not address.name:
        return 200, [binding_json(b) for b in _listing(dict(address.query), definitions)]
    raise NotAllowed(f"{method} is not allowed on /bindings{'/' if address.name else ''}"
                     f"{address.name}")


def _bind(body: Any, definitions: Definitions,
          may_bind: Callable[[str, str], None]) -> tuple[int, Any]:
    """``decode_binding`` and ``binding_action(add, ...)``."""
    if not isinstance(body, dict):
        raise BadRequest("a binding body must be a map with source, destination_queue or "
                         "destination_exchange, binding_key and arguments")
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key == "arguments":
            fields["arguments"] = _arguments(value, "a binding")
        elif key in ("source", "destination_queue", "destination_exchange", "binding_key") \
                and isinstance(value, str):
            fields[str(key)] = str(value)
        else:
            raise BadRequest(f"bad binding field {key!r}: {value!r}")
    if "source" not in fields:
        raise BadRequest("a binding needs a source")
    if "destination_queue" in fields:
        destination, kind = fields["destination_queue"], QUEUE
    elif "destination_exchange" in fields:
        destination, kind = fields["destination_exchange"], EXCHANGE
    else:
        raise BadRequest("a binding needs destination_queue or destination_exchange")
    _checks(fields["source"], destination, kind)
    may_bind(fields["source"], destination)
    binding = Binding(fields["source"], destination, fields.get("binding_key", ""),
                      fields.get("arguments", {}), kind)
    try:
        definitions.bind(binding)
    except BrokerError as exc:
        raise _as_binding_action(exc) from None
    return 204, None


def _listing(query: dict[str, str], definitions: Definitions) -> list[Binding]:
    unknown = set(query) - {"src", "dstq", "dste", "key"}
    if unknown:
        raise BadRequest(f"unknown query parameter(s) {sorted(unknown)}: use src, dstq or "
                         f"dste, and key")
    if "dstq" in query and "dste" in query:
        raise BadRequest("give dstq or dste, not both")
    destination, kind = (query["dste"], EXCHANGE) if "dste" in query else (
        (query["dstq"], QUEUE) if "dstq" in query else (None, None))
    if "src" in query and "key" in query and destination is None:
        raise BadRequest(f"missing 'dste' or 'dstq' in query: {query}")
    if "src" in query and destination is not None and kind is not None:
        _checks(query["src"], destination, kind)
    return definitions.find_bindings(query.get("src"), destination, kind, query.get("key"))
