"""AMQP 1.0 message bytes: the one home of the type codec, the section walk, the lazy message
view, key picks and the broker's byte edits.

Why: the broker stores the bytes a publisher sent and sends them back, and filters them on the
way; building a ``proton.Message`` costs ~75 µs, so every hot path works on the encoded bytes
with what is here. A leaf package: it imports nothing else of ours (the broker imports it, and
hands ``READER`` to ``sqlfilter``, which imports nothing of ours).

The order rule: what the broker stores (``stored_form``) has its sections in the order AMQP 1.0
§3.2 gives them (header, message-annotations, properties, application-properties, the body
sections as sent, footer; delivery annotations are cut out). A message sent in another order
is rewritten in that order once, at publish; one with a non-body section twice, or anything
after the footer, is refused with a ``MessageFormatError`` that names the section. Every later
reader of stored bytes (the filter value, ``MessageView`` and its key picks,
``with_stream_offset``) relies on it and reads the first section of each kind.

Public face:

- values: ``decode``, ``decode_all``, ``skip``, ``encode``, ``encode_into``, ``encode_compound``
  (a list or map of items the caller encoded) and ``from_proton``
  (proton's decimal wrappers in the codec's representation); ``split_sections``;
- reading: ``MessageView`` (``as_view`` of bytes, a ``proton.Message`` or a view) and
  ``KeyPicker`` (the keys a filter reads, for ``MessageView.pick``); ``READER`` puts them
  behind ``sqlfilter``'s message-view protocol (``sqlfilter.view.Reader``, structural: the
  broker installs it with ``sqlfilter.use``), ``AMQP_TYPES`` names proton's types;
- the broker's edits: ``stored_form`` (publish), ``filter_value``, ``with_stream_offset``
  (delivery), ``FILTER_VALUE_NAME``, ``FilterValues`` (one string, or a tuple of them: a list
  of strings is our extension), ``MAX_FILTER_VALUES``;
- errors: ``WireError(ValueError)`` the root, ``MessageFormatError`` (bad bytes),
  ``BadFilterValue`` (a filter value that is not a string or a list of strings).

Modules (private): ``_codec`` (values), ``_sections`` (section codes, the walk, the order
rule), ``_view`` (MessageView), ``_pick`` (KeyPicker and the one-pass pick), ``_stored`` (the
byte edits), ``_reader`` (``READER``), ``_errors``.
"""

from amqp_stream.wire._errors import BadFilterValue, MessageFormatError, WireError
from amqp_stream.wire._codec import decode, decode_all, encode, encode_compound, encode_into, from_proton, skip
from amqp_stream.wire._sections import split_sections
from amqp_stream.wire._pick import KeyPicker
from amqp_stream.wire._view import MessageView, as_view
from amqp_stream.wire._reader import AMQP_TYPES, READER
from amqp_stream.wire._stored import (FILTER_VALUE_NAME, MAX_FILTER_VALUES, FilterValues,
                                      filter_value, stored_form, with_stream_offset)

__all__ = [
    "WireError", "MessageFormatError", "BadFilterValue",
    "decode", "decode_all", "skip", "encode", "encode_into", "encode_compound", "from_proton",
    "split_sections", "MessageView", "as_view", "KeyPicker", "READER", "AMQP_TYPES",
    "stored_form", "filter_value", "with_stream_offset", "FILTER_VALUE_NAME", "FilterValues",
    "MAX_FILTER_VALUES",
]
