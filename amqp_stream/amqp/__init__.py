"""The AMQP 1.0 adapter: proton's engine over the broker's event loop, links on the core.

``Adapter`` is all the server needs; the modules hold the AMQP-specific rules (addresses,
attach filters, the ``/management`` node, credit) and the link objects (``Publisher``,
``Consumer``).
"""

from amqp_stream.amqp.adapter import Adapter, SERVER_PROPERTIES

__all__ = ["Adapter", "SERVER_PROPERTIES"]
