"""amqp_stream: an AMQP 1.0 stream broker with broker-side filtering.

The broker (``amqp-stream serve``) keeps append-only streams in the on-disk format of
``storage`` and filters for consumers in three stages: the per-chunk Bloom filters of ``bloom``,
the per-message SQL and property filters of ``sqlfilter``, and whatever the client checks itself.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
