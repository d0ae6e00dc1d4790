"""A small blocking AMQP 1.0 client for our own tools (CLI, Spark data source, tests, benchmarks).

- ``connection``: ``connect``/``Client`` (one blocking connection, management requests) and
  ``TlsOptions``;
- ``publisher``: ``Publisher`` with a bounded window of unsettled deliveries, ``build_message``;
- ``consumer``: ``Consumer`` with explicit credit, ``StreamMessage``, ``build_filters``;
- ``errors``: ``ClientError`` and its subclasses; ``names``: filter keys and annotations;
  ``links``: link plumbing shared by the others.
"""

from amqp_stream.client.connection import Client, TlsOptions, check_url, connect, safe_url
from amqp_stream.client.consumer import Consumer, StreamMessage, build_filters, offset_value
from amqp_stream.client.errors import (ClientError, ConsumerError, ManagementError, PublishError,
                                       StreamNotFound)
from amqp_stream.client.links import queue_address
from amqp_stream.client.names import (APPLICATION_PROPERTIES_FILTER, CHUNK_TIMESTAMP, FILTER_VALUE,
                                      MATCH_UNFILTERED, OFFSET_SPEC, PROPERTIES_FILTER,
                                      PROPERTY_NAMES, PUBLISHER_REFERENCE, PUBLISHING_ID, SQL_FILTER,
                                      STREAM_FILTER, STREAM_OFFSET)
from amqp_stream.client.publisher import Outcome, Publisher, build_message

__all__ = [
    "ClientError", "ManagementError", "StreamNotFound", "PublishError", "ConsumerError",
    "TlsOptions", "Client", "connect", "check_url", "safe_url", "Publisher", "Outcome", "Consumer",
    "StreamMessage", "queue_address", "build_message", "build_filters", "offset_value", "PROPERTY_NAMES",
    "OFFSET_SPEC", "STREAM_FILTER", "MATCH_UNFILTERED", "SQL_FILTER", "PROPERTIES_FILTER",
    "APPLICATION_PROPERTIES_FILTER", "FILTER_VALUE", "STREAM_OFFSET", "CHUNK_TIMESTAMP",
    "PUBLISHER_REFERENCE", "PUBLISHING_ID",
]
