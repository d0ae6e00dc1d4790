"""Stage-2 filters: SQL filter expressions and AMQP property filters, compiled once per link.

See ``../shared/design/filter-language.md`` and ``docs/sql-filters.md``. Filters read messages
through ``amqp_stream.wire`` (``MessageView``, ``MessageFormatError``: re-exported here, as the
filters' API takes and raises them).
"""

from amqp_stream.wire import MessageFormatError, MessageView
from sqlfilter.errors import FilterError
from sqlfilter.base import Filter
from sqlfilter.parser import prepare
from sqlfilter.sql import compile_selector, compile_sql
from sqlfilter.property_filter import compile_property_filter

__all__ = ["Filter", "FilterError", "MessageFormatError", "MessageView", "compile_property_filter", "compile_selector",
           "compile_sql", "prepare"]
