"""Evaluation semantics of SQL filters: value normalisation and the operators' slow paths.

Strategy: generated evaluators (``sqlfilter.codegen``) inline the common case (a plain ``str``,
``int`` or ``float`` value) and call these functions for everything else; constant folding
(``sqlfilter.fold``) calls the same functions, so a folded constant and an evaluated one can never
disagree. Unknown is ``None``; every function returns True/False/None or a value, and never
raises for any input.

The semantics are RabbitMQ 4.2's (``rabbit_amqp_filter_sql.erl``, ``mc_amqp.erl``), which sees a
message through Erlang terms; ``norm`` maps our value representation onto what RabbitMQ sees:

===================================  =========================  ===============================
AMQP type (our representation)       RabbitMQ sees              ``norm`` gives
===================================  =========================  ===============================
string ``str``, symbol               a binary                   ``str``
binary ``bytes``                     a binary                   ``bytes`` (equal to a ``str``
                                                                with the same UTF-8 bytes)
uuid ``uuid.UUID``                   its 16 bytes (binary)      ``bytes``
char (the reader's char)             its code point (integer)   ``int``
timestamp, every integer width       an integer                 ``int``
float, double                        a float; NaN and ±inf are  ``float``; ``None`` for NaN
                                     kept "as is": dropped      and ±inf
boolean                              true / false               ``bool``
decimal32/64/128, list, map, array,  not a simple value: the    ``None`` (null)
described                            key is dropped
===================================  =========================  ===============================
"""

from __future__ import annotations

import datetime
import time
import uuid
from decimal import Decimal
from typing import Any, Callable

from sqlfilter.view import AMQP_KINDS

__all__ = [
    "norm", "cond", "eq", "ne", "lt", "gt", "le", "ge", "add", "sub", "mul", "div", "mod", "neg",
    "pos", "in_", "between", "and3", "or3", "not3", "utc", "lower", "upper", "left", "right", "substring",
    "date", "element", "has_element", "COMPARE", "jms_cond", "jms_like", "JMS_CALLS",
]

_SIMPLE = frozenset((str, int, float, bool, bytes))
_DROPPED = (Decimal, list, dict, tuple)
#: the AMQP types a reader keeps in types of its own (``sqlfilter.view.Reader.amqp_types``)
#: that are not simple values here; a char is its code point
_NOT_SIMPLE = frozenset(("decimal32", "decimal64", "decimal128", "described", "array"))


def norm(value: Any) -> Any:
    """The value as RabbitMQ's evaluator sees it (table above); ``None`` for null/dropped."""
    t = type(value)
    if t is float:
        return value if value - value == 0 else None  # NaN and ±inf are dropped
    if t in _SIMPLE:
        return value
    if value is None:
        return None
    kind = AMQP_KINDS.get(t)
    if kind is not None:
        if kind in _NOT_SIMPLE:
            return None
        if kind == "char":
            return ord(value) if len(value) == 1 else None
    if isinstance(value, _DROPPED):
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if value - value == 0 else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return None


def _is_num(x: Any) -> bool:
    t = type(x)
    return t is int or t is float


def cond(x: Any) -> bool | None:
    """A value used as a condition: only a boolean is true or false; anything else is unknown."""
    if x is True:
        return True
    if x is False:
        return False
    return None


def _as_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def eq(a: Any, b: Any) -> bool | None:
    """Erlang ``==``: numbers by value, binaries by bytes, booleans only equal booleans."""
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if (ta is int or ta is float) and (tb is int or tb is float):
        return a == b
    if ta is tb:
        return a == b
    if ta is str and tb is bytes:
        return _as_bytes(a) == b
    if ta is bytes and tb is str:
        return a == _as_bytes(b)
    return False


def ne(a: Any, b: Any) -> bool | None:
    r = eq(a, b)
    return None if r is None else not r


def _order_pair(a: Any, b: Any) -> tuple[Any, Any] | None:
    """The two operands made comparable, or None when the pair has no order (then false)."""
    ta, tb = type(a), type(b)
    if (ta is int or ta is float) and (tb is int or tb is float):
        return a, b
    if ta is str and tb is str or ta is bytes and tb is bytes:
        return a, b
    if ta is str and tb is bytes:
        return _as_bytes(a), b
    if ta is bytes and tb is str:
        return a, _as_bytes(b)
    return None


def lt(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    p = _order_pair(a, b)
    return False if p is None else p[0] < p[1]


def gt(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    p = _order_pair(a, b)
    return False if p is None else p[0] > p[1]


def le(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    p = _order_pair(a, b)
    return False if p is None else p[0] <= p[1]


def ge(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    p = _order_pair(a, b)
    return False if p is None else p[0] >= p[1]


COMPARE = {"=": eq, "<>": ne, "<": lt, ">": gt, "<=": le, ">=": ge}


def add(a: Any, b: Any) -> Any:
    if _is_num(a) and _is_num(b):
        try:
            return a + b
        except OverflowError:
            return None
    return None


def sub(a: Any, b: Any) -> Any:
    if _is_num(a) and _is_num(b):
        try:
            return a - b
        except OverflowError:
            return None
    return None


def mul(a: Any, b: Any) -> Any:
    if _is_num(a) and _is_num(b):
        try:
            return a * b
        except OverflowError:
            return None
    return None


def div(a: Any, b: Any) -> Any:
    """Erlang ``/``: always a float; division by zero (0 or 0.0) is unknown."""
    if _is_num(a) and _is_num(b) and b != 0:
        try:
            return a / b
        except OverflowError:
            return None
    return None


def mod(a: Any, b: Any) -> Any:
    """Erlang ``rem``: integers only, the remainder has the sign of the dividend."""
    if type(a) is int and type(b) is int and b != 0:
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return None


def neg(a: Any) -> Any:
    return -a if _is_num(a) else None


def pos(a: Any) -> Any:
    return a if _is_num(a) else None


def in_(x: Any, items: tuple) -> bool | None:
    """Unknown only when the subject is null; a null item simply does not equal it."""
    if x is None:
        return None
    for item in items:
        if eq(x, item) is True:
            return True
    return False


def between(x: Any, low: Any, high: Any) -> bool | None:
    """``x BETWEEN low AND high`` is ``x >= low AND x <= high`` (three-valued)."""
    return and3(ge(x, low), le(x, high))


def and3(a: Any, b: Any) -> bool | None:
    a, b = cond(a), cond(b)
    if a is False or b is False:
        return False
    if a is True and b is True:
        return True
    return None


def or3(a: Any, b: Any) -> bool | None:
    a, b = cond(a), cond(b)
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    return None


def not3(a: Any) -> bool | None:
    a = cond(a)
    return None if a is None else not a


def utc() -> int:
    """``UTC()``: milliseconds since the epoch, like ``os:system_time(millisecond)``."""
    return time.time_ns() // 1_000_000


# ---- extension functions: strings in, unknown for anything else ----

def lower(s: Any) -> Any:
    return s.lower() if type(s) is str else None


def upper(s: Any) -> Any:
    return s.upper() if type(s) is str else None


def left(s: Any, n: Any) -> Any:
    if type(s) is str and type(n) is int and n >= 0:
        return s[:n]
    return None


def right(s: Any, n: Any) -> Any:
    if type(s) is str and type(n) is int and n >= 0:
        return s[len(s) - n:] if n < len(s) else s
    return None


def substring(s: Any, start: Any, length: Any = -1) -> Any:
    """SQL SUBSTRING: ``start`` is 1-based; positions before 1 count against ``length``."""
    if type(s) is not str or type(start) is not int or type(length) is not int:
        return None
    begin = start - 1
    if length == -1:
        return s[max(begin, 0):]
    if length < 0:
        return None
    end = begin + length
    return s[max(begin, 0):max(end, 0)]


def date(s: Any) -> Any:
    """DATE('2024-05-01T12:00:00Z') → timestamp in ms (naive times are UTC); else unknown."""
    if type(s) is not str:
        return None
    try:
        text = s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s
        d = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    delta = d - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000)


# ---- element references (extension) ----

_MISSING = object()


def element(container: Any, key: int | str) -> Any:
    """The raw element ``key`` of a list/array/map, or None when absent or not a container."""
    if type(key) is int:
        if AMQP_KINDS.get(type(container)) == "array":
            container = tuple(container)
        if isinstance(container, (list, tuple)) and 0 <= key < len(container):
            return container[key]
        return None
    if isinstance(container, dict):
        return container.get(key)
    return None


def has_element(container: Any, key: int | str) -> bool:
    """EXISTS on an element: the index is in range / the key is in the map."""
    if type(key) is int:
        if AMQP_KINDS.get(type(container)) == "array":
            container = tuple(container)
        return isinstance(container, (list, tuple)) and 0 <= key < len(container)
    return isinstance(container, dict) and key in container


# ---- the selector dialect: JMS semantics and the JMS-over-AMQP header mapping ----
# Each JMS header is a function of the raw AMQP field, as Qpid JMS computes it on receive
# (AmqpJmsMessageFacade, AmqpMessageIdHelper).

def jms_cond(x: Any) -> bool | None:
    """A property used as a condition (ActiveMQ's boolean cast): missing is unknown, a
    boolean is itself, any other value is false."""
    x = norm(x)
    if x is None:
        return None
    return x if type(x) is bool else False


_ID_ENCODINGS = ("AMQP_BINARY:", "AMQP_UUID:", "AMQP_ULONG:", "AMQP_STRING:", "AMQP_NO_PREFIX:")


def _jms_id(value: Any, message_id: bool) -> str | None:
    if isinstance(value, str):
        text = str(value)
        if not text.startswith("ID:"):
            return "ID:AMQP_NO_PREFIX:" + text if message_id else text
        if text.startswith(_ID_ENCODINGS, 3):
            return "ID:AMQP_STRING:" + text
        return text
    if isinstance(value, uuid.UUID):
        return f"ID:AMQP_UUID:{value}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"ID:AMQP_ULONG:{int(value)}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "ID:AMQP_BINARY:" + bytes(value).hex().upper()
    return None


def jms_message_id(value: Any) -> str | None:
    """JMSMessageID from the AMQP message-id (``toMessageIdString``)."""
    return _jms_id(value, True)


def jms_correlation_id(value: Any) -> str | None:
    """JMSCorrelationID from the AMQP correlation-id (``toCorrelationIdString``)."""
    return _jms_id(value, False)


def jms_delivery_mode(durable: Any) -> str:
    """JMSDeliveryMode: header durable (false when absent) as JMS's names."""
    return "PERSISTENT" if durable is True else "NON_PERSISTENT"


def jms_long(value: Any) -> Any:
    """JMSTimestamp / JMSXGroupSeq: the number, 0 when absent."""
    value = norm(value)
    return 0 if value is None else value


def jms_expiration(absolute_expiry_time: Any, ttl: Any) -> Any:
    """JMSExpiration: the absolute-expiry-time when set; else, with a header ttl above 0, the
    time of reading + ttl (Qpid JMS's ``syntheticExpiration``, computed as the message is
    received; ActiveMQ's ``InboundTransformer`` does the same as it arrives); else 0."""
    expiry = norm(absolute_expiry_time)
    if expiry is not None:
        return expiry
    ttl = norm(ttl)
    if type(ttl) is int and ttl > 0:
        return utc() + ttl
    return 0


def jms_redelivered(count: Any) -> bool:
    """JMSRedelivered: the AMQP delivery-count is above 0."""
    return isinstance(count, int) and not isinstance(count, bool) and count > 0


def jms_delivery_count(count: Any) -> int:
    """JMSXDeliveryCount: the AMQP delivery-count + 1."""
    return (int(count) if isinstance(count, int) and not isinstance(count, bool) else 0) + 1


def jms_user_id(value: Any) -> str | None:
    """JMSXUserID: the AMQP user-id bytes as UTF-8 (unknown when empty or not UTF-8)."""
    if isinstance(value, (bytes, bytearray, memoryview)) and len(value):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def jms_like(match_value: Any) -> Any:
    """A LIKE matcher's ``match_value`` with ActiveMQ's rule for a value that is not a string:
    false (so NOT LIKE is true), where the SQL filter says unknown; null stays unknown."""
    def match(x: Any) -> bool | None:
        if x is None or type(x) is str or type(x) is bytes:
            return match_value(x)
        return False
    return match


#: call name -> function; these take the raw field (not ``norm``'s view of it)
JMS_CALLS: dict[str, Callable[..., Any]] = {
    "JMS_MESSAGE_ID": jms_message_id, "JMS_CORRELATION_ID": jms_correlation_id,
    "JMS_DELIVERY_MODE": jms_delivery_mode, "JMS_LONG": jms_long, "JMS_EXPIRATION": jms_expiration,
    "JMS_REDELIVERED": jms_redelivered, "JMS_DELIVERY_COUNT": jms_delivery_count,
    "JMS_USER_ID": jms_user_id,
}
