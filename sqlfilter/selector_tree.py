"""The selector dialect's tree building: JMS literals and names → the shared ``sqlfilter.ast``.

Strategy: ``SelectorTransformer`` is ``TreeToFilter`` with the few rules the dialect reads
differently, so everything after parsing (checks, folding, code generation) is shared:
- literals: ``5.``, ``.5``, ``1e3`` (floats), ``10L``, ``0x1F`` and ``017`` (integers), each
  within Java's ``long`` as ActiveMQ requires;
- names: the JMS headers (``JMS_HEADERS``) are AMQP fields as Qpid JMS maps them (the
  JMS-over-AMQP mapping); ``amqp.<field>`` names a header or properties field as stored,
  ``m.<key>`` (or ``m.[any key]``) a message annotation; any other identifier, dots included,
  is an application property.
"""

from __future__ import annotations

from typing import Callable

from sqlfilter import ast
from sqlfilter.errors import FilterError
from sqlfilter.tree_to_filter import TreeToFilter, _first, resolve_section

__all__ = ["SelectorTransformer", "JMS_HEADERS"]

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def _field(section: str, name: str) -> Callable[[int], ast.Node]:
    return lambda pos: ast.Field(section, name, pos)


def _call(call: str, section: str, name: str) -> Callable[[int], ast.Node]:
    return lambda pos: ast.Call(call, (ast.Field(section, name, pos),), pos)


#: JMS header / JMSX names → the AMQP field as Qpid JMS reads it (AmqpJmsMessageFacade)
JMS_HEADERS: dict[str, Callable[[int], ast.Node]] = {
    "JMSMessageID": _call("JMS_MESSAGE_ID", "properties", "message_id"),
    "JMSCorrelationID": _call("JMS_CORRELATION_ID", "properties", "correlation_id"),
    "JMSPriority": _field("header", "priority"),  # 4 when absent
    "JMSTimestamp": _call("JMS_LONG", "properties", "creation_time"),
    "JMSExpiration": lambda pos: ast.Call("JMS_EXPIRATION", (
        ast.Field("properties", "absolute_expiry_time", pos), ast.Field("header", "ttl", pos)), pos),
    "JMSType": _field("properties", "subject"),
    "JMSDeliveryMode": _call("JMS_DELIVERY_MODE", "header", "durable"),
    "JMSRedelivered": _call("JMS_REDELIVERED", "header", "delivery_count"),
    "JMSDestination": _field("properties", "to"),
    "JMSReplyTo": _field("properties", "reply_to"),
    "JMSXUserID": _call("JMS_USER_ID", "properties", "user_id"),
    "JMSXGroupID": _field("properties", "group_id"),
    "JMSXGroupSeq": _call("JMS_LONG", "properties", "group_sequence"),
    "JMSXDeliveryCount": _call("JMS_DELIVERY_COUNT", "header", "delivery_count"),
}


class SelectorTransformer(TreeToFilter):
    """``TreeToFilter`` with the selector dialect's literals and names."""

    def int_lit(self, c):
        text = str(c[0]).rstrip("lL")
        if text[:2] in ("0x", "0X"):
            value = int(text[2:], 16)
        elif len(text) > 1 and text[0] == "0":
            value = int(text[1:], 8)
        else:
            value = int(text)
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise FilterError(f"integer literal {str(c[0])!r} does not fit a long", _first(c))
        return ast.Literal(value, _first(c))

    def plain_ref(self, c):
        name, pos = str(c[0]), _first(c)
        header = JMS_HEADERS.get(name)
        if header is not None:
            return header(pos)
        prefix, dot, rest = name.partition(".")
        if dot and rest and prefix == "amqp":
            section = "h" if rest in ("priority", "durable", "ttl", "first_acquirer",
                                      "delivery_count") else "p"
            return resolve_section(section, rest, pos)
        if dot and rest and prefix == "m":
            return ast.Field("message_annotations", rest, pos)
        return ast.Field("application_properties", name, pos)

    def section_delimited_ref(self, c):
        prefix = str(c[0]).split(".", 1)[0]
        if prefix != "m":
            raise FilterError(f"only m.[key] (a message annotation) is bracketed, not {prefix}.",
                              _first(c))
        return super().section_delimited_ref(c)
