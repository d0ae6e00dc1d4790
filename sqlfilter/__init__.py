"""Stage-2 filters: SQL filter expressions and AMQP property filters, compiled once per link.

See ``../shared/design/filter-language.md`` and ``docs/sql-filters.md``.
"""

from sqlfilter.errors import FilterError, MessageFormatError
from sqlfilter.base import Filter
from sqlfilter.message import MessageView
from sqlfilter.sql import compile_sql
from sqlfilter.property_filter import compile_property_filter

__all__ = ["Filter", "FilterError", "MessageFormatError", "MessageView", "compile_property_filter", "compile_sql"]
