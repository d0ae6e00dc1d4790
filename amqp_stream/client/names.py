"""Names on the wire that the client's parts share: filter keys and descriptors, message
annotations, and the AMQP properties by their SQL (snake) name.

Strategy: one place for the strings ``amqp-interface.md`` fixes, so the publisher, the consumer
and the tools built on them (CLI, Spark) cannot drift apart.
"""

from __future__ import annotations

# Filter keys and descriptors (amqp-interface.md "Consuming"); keys are the conventional ones.
OFFSET_SPEC = "rabbitmq:stream-offset-spec"
STREAM_FILTER = "rabbitmq:stream-filter"
MATCH_UNFILTERED = "rabbitmq:stream-match-unfiltered"
SQL_FILTER = "amqp:sql-filter"
PROPERTIES_FILTER = "amqp:properties-filter"
APPLICATION_PROPERTIES_FILTER = "amqp:application-properties-filter"
_SQL_FILTER_KEY = "sql-filter"
# Message annotations.
FILTER_VALUE = "x-stream-filter-value"
STREAM_OFFSET = "x-stream-offset"
CHUNK_TIMESTAMP = "x-stream-chunk-timestamp"
# The broker's tracking extension (docs/broker.md, "Offset tracking and deduplication";
# amqp_stream.amqp.tracking): attach properties and the publishing id annotation.
CONSUMER_NAME = "x-consumer-name"  # consumer link attach property
PUBLISHER_REFERENCE = "x-publisher-reference"  # publisher link attach property
PUBLISHING_ID = "x-publishing-id"  # message annotation (ulong) of a named publisher's message

# AMQP properties by their SQL/snake name -> proton.Message attribute.
PROPERTY_NAMES: dict[str, str] = {
    "message_id": "id", "user_id": "user_id", "to": "address", "subject": "subject",
    "reply_to": "reply_to", "correlation_id": "correlation_id", "content_type": "content_type",
    "content_encoding": "content_encoding", "absolute_expiry_time": "expiry_time",
    "creation_time": "creation_time", "group_id": "group_id", "group_sequence": "group_sequence",
    "reply_to_group_id": "reply_to_group_id",
}
_TIME_PROPERTIES = {"absolute_expiry_time", "creation_time"}
_ZERO_IS_ABSENT = {"absolute_expiry_time", "creation_time", "group_sequence"}
