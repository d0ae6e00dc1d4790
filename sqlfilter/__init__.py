"""Stage-2 filters: SQL filter expressions and AMQP property filters, compiled once per link.

See ``../shared/design/filter-language.md`` and ``docs/sql-filters.md``. Filters read messages
through the message-view protocol of ``sqlfilter.view`` (``MessageView``; a ``Reader``,
installed with ``use``, hands them views of encoded messages): this package imports nothing
but the standard library, lark and ``grammar``.
"""

from sqlfilter.errors import FilterError
from sqlfilter.view import MessageView, Reader, use
from sqlfilter.base import Filter
from sqlfilter.parser import prepare
from sqlfilter.sql import compile_selector, compile_sql
from sqlfilter.property_filter import compile_property_filter

__all__ = ["Filter", "FilterError", "MessageView", "Reader", "compile_property_filter",
           "compile_selector", "compile_sql", "prepare", "use"]
