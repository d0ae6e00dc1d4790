"""The management HTTP API, compatible with RabbitMQ's (``rabbitmq_management`` and the stream
plugin's extension), served on the broker's own event loop by aiohttp.

Layout: ``server`` starts and stops the aiohttp site and holds what every request goes through
(basic auth, RabbitMQ's error JSON, the body limit and timeout); ``state`` is the read-only view
of the broker the handlers use (connections of both protocols as plain records); one module per
resource group (``overview``, ``queues``, ``connections``, ``streams``, ``users``), each with its
JSON shapes as pure functions and its routes. Handlers run on the loop thread, between the
protocol adapters' turns, so they read the core's objects without locks. The one file I/O is
a stream's message count (``StreamEntry.counts``: the index records written since the last
count, to leave tracking records out), as for the AMQP management node's queue info.

docs/http-api.md lists the endpoints and how they differ from RabbitMQ's.
"""

from amqp_stream.http.server import ManagementServer

__all__ = ["ManagementServer"]
