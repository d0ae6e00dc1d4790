"""RabbitMQ's stream protocol on the broker: the listener's adapter (parallel to
``amqp_stream.amqp``), its connections, publishers and subscriptions.

``amqp_stream.streamproto`` is the sans-I/O codec; this package drives it from the event loop
(``amqp_stream.loop``) and serves it from the core (``amqp_stream.core``).
"""

from amqp_stream.stream_listener.adapter import SERVER_PROPERTIES, StreamAdapter
from amqp_stream.stream_listener.connection import StreamConnection
from amqp_stream.stream_listener.subscription_filters import SubscriptionFilters, parse as parse_subscription_filters

__all__ = ["StreamAdapter", "StreamConnection", "SERVER_PROPERTIES", "SubscriptionFilters",
           "parse_subscription_filters"]
