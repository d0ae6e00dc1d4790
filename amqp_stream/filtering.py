"""Where the broker joins its two floors: ``sqlfilter`` reads messages through ``wire``.

Why: ``sqlfilter`` imports nothing of ours; it reads messages through a reader installed once
per process (``sqlfilter.use``, the protocol of ``sqlfilter.view``), which ``wire.READER``
implements. ``install`` puts it in place; every part of the broker that compiles filters,
evaluates them or indexes values as they see them (``derived_keys``) calls it first, so no
path depends on another having run.
"""

from __future__ import annotations

import sqlfilter
from amqp_stream import wire

__all__ = ["install"]


def install() -> None:
    """Install ``wire.READER`` as the filters' reader (idempotent and cheap)."""
    sqlfilter.use(wire.READER)
