"""Lazy access to the sections of an AMQP 1.0 message, and the byte edits the broker needs.

(Shell: the interface is fixed here; decoding from bytes and from proton.Message is filled in
by the codec work.)

A ``MessageView`` exposes each section as a dict, decoded on first access and cached:
- ``header``: keys durable, priority, ttl, first_acquirer, delivery_count (present fields only);
- ``properties``: keys message_id, user_id, to, subject, reply_to, correlation_id, content_type,
  content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence,
  reply_to_group_id (present, non-null fields only);
- ``application_properties``, ``message_annotations``, ``footer``: the section's map.
An absent section is an empty dict. Values use the representation of ``sqlfilter.codec``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MessageView", "as_view"]


class MessageView:
    __slots__ = ("header", "properties", "application_properties", "message_annotations", "footer")

    def __init__(self) -> None:
        pass

    @classmethod
    def from_sections(cls, header: dict | None = None, properties: dict | None = None,
                      application_properties: dict | None = None,
                      message_annotations: dict | None = None, footer: dict | None = None) -> "MessageView":
        """A view over already-decoded sections (tests, benchmarks, tools)."""
        view = cls()
        view.header = header or {}
        view.properties = properties or {}
        view.application_properties = application_properties or {}
        view.message_annotations = message_annotations or {}
        view.footer = footer or {}
        return view


def as_view(message: Any) -> MessageView:
    """A view of bytes, a ``proton.Message`` or a view (returned as is)."""
    if isinstance(message, MessageView):
        return message
    raise TypeError(f"cannot view {type(message).__name__} as an AMQP message yet")
