"""Numbers of RabbitMQ's stream protocol: command keys, versions, response codes, defaults.

Strategy: every number the protocol gives a meaning to lives here once, named as RabbitMQ names
it (``rabbit_stream.hrl`` of rabbitmq-server, ``deps/rabbitmq_stream_common``), so the codec,
the state machine and the broker's adapter speak of ``ResponseCode.STREAM_DOES_NOT_EXIST``
rather than ``2``. ``COMMAND_VERSIONS`` is the list RabbitMQ 4.2 answers an
ExchangeCommandVersions request with, in its order: clients index into it (rstream reads entry
1, ``publish``, to learn whether filter values may be sent), so the order is part of the
protocol.
"""

from __future__ import annotations

import enum

RESPONSE_FLAG = 0x8000
"""The top bit of a frame's key: set on responses (``0x8007`` answers Subscribe ``0x0007``)."""


class Key(enum.IntEnum):
    """Command keys (the low 15 bits of a frame's key)."""

    DECLARE_PUBLISHER = 0x01
    PUBLISH = 0x02
    PUBLISH_CONFIRM = 0x03
    PUBLISH_ERROR = 0x04
    QUERY_PUBLISHER_SEQUENCE = 0x05
    DELETE_PUBLISHER = 0x06
    SUBSCRIBE = 0x07
    DELIVER = 0x08
    CREDIT = 0x09
    STORE_OFFSET = 0x0A
    QUERY_OFFSET = 0x0B
    UNSUBSCRIBE = 0x0C
    CREATE_STREAM = 0x0D
    DELETE_STREAM = 0x0E
    METADATA = 0x0F
    METADATA_UPDATE = 0x10
    PEER_PROPERTIES = 0x11
    SASL_HANDSHAKE = 0x12
    SASL_AUTHENTICATE = 0x13
    TUNE = 0x14
    OPEN = 0x15
    CLOSE = 0x16
    HEARTBEAT = 0x17
    ROUTE = 0x18
    PARTITIONS = 0x19
    CONSUMER_UPDATE = 0x1A
    EXCHANGE_COMMAND_VERSIONS = 0x1B
    STREAM_STATS = 0x1C
    CREATE_SUPER_STREAM = 0x1D
    DELETE_SUPER_STREAM = 0x1E
    RESOLVE_OFFSET_SPEC = 0x1F


VERSION_1 = 1
VERSION_2 = 2


class ResponseCode(enum.IntEnum):
    """Response codes (``RESPONSE_CODE_*`` / ``RESPONSE_*`` in rabbit_stream.hrl)."""

    OK = 0x01
    STREAM_DOES_NOT_EXIST = 0x02
    SUBSCRIPTION_ID_ALREADY_EXISTS = 0x03
    SUBSCRIPTION_ID_DOES_NOT_EXIST = 0x04
    STREAM_ALREADY_EXISTS = 0x05
    STREAM_NOT_AVAILABLE = 0x06
    SASL_MECHANISM_NOT_SUPPORTED = 0x07
    AUTHENTICATION_FAILURE = 0x08
    SASL_ERROR = 0x09
    SASL_CHALLENGE = 0x0A
    SASL_AUTHENTICATION_FAILURE_LOOPBACK = 0x0B
    VHOST_ACCESS_FAILURE = 0x0C
    UNKNOWN_FRAME = 0x0D
    FRAME_TOO_LARGE = 0x0E
    INTERNAL_ERROR = 0x0F
    ACCESS_REFUSED = 0x10
    PRECONDITION_FAILED = 0x11
    PUBLISHER_DOES_NOT_EXIST = 0x12
    NO_OFFSET = 0x13
    SASL_CANNOT_CHANGE_MECHANISM = 0x14
    SASL_CANNOT_CHANGE_USERNAME = 0x15


class OffsetType(enum.IntEnum):
    """Offset specification types of Subscribe (and ConsumerUpdate's answer, where NONE exists)."""

    NONE = 0
    FIRST = 1
    LAST = 2
    NEXT = 3
    OFFSET = 4
    TIMESTAMP = 5


class ChunkType(enum.IntEnum):
    """Byte 1 of an osiris chunk header."""

    USER = 0
    TRACKING_DELTA = 1
    TRACKING_SNAPSHOT = 2


class Compression(enum.IntEnum):
    """Compression of a sub-entry batch (3 bits of the entry header)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4
    USER = 7


COMMAND_VERSIONS: tuple[tuple[int, int, int], ...] = (
    (Key.DECLARE_PUBLISHER, VERSION_1, VERSION_1),
    (Key.PUBLISH, VERSION_1, VERSION_2),
    (Key.QUERY_PUBLISHER_SEQUENCE, VERSION_1, VERSION_1),
    (Key.DELETE_PUBLISHER, VERSION_1, VERSION_1),
    (Key.SUBSCRIBE, VERSION_1, VERSION_1),
    (Key.CREDIT, VERSION_1, VERSION_1),
    (Key.STORE_OFFSET, VERSION_1, VERSION_1),
    (Key.QUERY_OFFSET, VERSION_1, VERSION_1),
    (Key.UNSUBSCRIBE, VERSION_1, VERSION_1),
    (Key.CREATE_STREAM, VERSION_1, VERSION_1),
    (Key.DELETE_STREAM, VERSION_1, VERSION_1),
    (Key.METADATA, VERSION_1, VERSION_1),
    (Key.CLOSE, VERSION_1, VERSION_1),
    (Key.HEARTBEAT, VERSION_1, VERSION_1),
    (Key.ROUTE, VERSION_1, VERSION_1),
    (Key.PARTITIONS, VERSION_1, VERSION_1),
    (Key.STREAM_STATS, VERSION_1, VERSION_1),
    (Key.CREATE_SUPER_STREAM, VERSION_1, VERSION_1),
    (Key.DELETE_SUPER_STREAM, VERSION_1, VERSION_1),
)
"""(key, min version, max version) as rabbit_stream_utils:command_versions/0 of RabbitMQ 4.2."""

DEFAULT_FRAME_MAX = 1_048_576
"""Tune's frame max RabbitMQ proposes (1 MiB); 0 in Tune means no limit."""
DEFAULT_HEARTBEAT = 60
"""Tune's heartbeat RabbitMQ proposes, in seconds; 0 means none."""
DEFAULT_INITIAL_FRAME_MAX = 8192
"""Frame size ceiling until Open succeeds (``stream.initial_frame_max`` of RabbitMQ 4.3)."""
DEFAULT_FRAME_HARD_MAX = 16 << 20
"""Once open, the largest frame taken whatever the negotiated frame max (16 MiB). RabbitMQ up
to 4.2.6 never checked frame_max (rstream's ``send_batch`` of 100,000 messages is one 1.5 MB
frame against 1 MiB, stored and confirmed); 4.2.7 closes with FRAME_TOO_LARGE above it. We take
what 3.10 takes up to this limit, and answer above it as 4.2.7 does."""
DEFAULT_INITIAL_CREDITS = 50_000
DEFAULT_CREDITS_REQUIRED_FOR_UNBLOCKING = 12_500

FILTER_PROPERTY_PREFIX = "filter."
"""Subscribe property prefix of the stage-1 filter values: ``filter.0``, ``filter.1``, ..."""
MATCH_UNFILTERED_PROPERTY = "match-unfiltered"
"""Subscribe property: ``true`` also delivers chunks holding messages without a filter value."""
END_OFFSET_PROPERTY = "end-offset"
"""Subscribe property (this broker's extension): the subscription ends at this offset, said with
an empty chunk (stream_listener.subscription_filters)."""

CREATE_ARGUMENTS = (
    "max-length-bytes",
    "max-age",
    "stream-max-segment-size-bytes",
    "stream-filter-size-bytes",
    "initial-cluster-size",
    "queue-leader-locator",
)
"""Create's argument names RabbitMQ accepts (its ``x-`` queue arguments without the prefix)."""
