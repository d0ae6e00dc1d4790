"""``ArrowEncoder``'s messages built with Arrow's compute kernels, for the usual batches.

Why: ``ArrowEncoder.encode`` still runs Python per value (an encoder call, a section per row,
the JSON body's fragments). For the columns most writes have (strings, 32/64-bit integers,
doubles, booleans, decimals: their text, as ``str`` of a ``Decimal``) every piece of a message
has a layout Arrow and numpy can build a whole column at a time: a constructor byte, a length
byte, big-endian numbers (the column's values byte-swapped by numpy), the values' text. The
pieces are joined row by row once, at the end, with one ``take`` (``row_concat``: a join of
joins stays a flat list of pieces, and a section's length is the sum of its pieces' lengths);
pieces with nulls go through ``binary_join_element_wise``. No Python runs per row except the
final ``to_pylist``, and over the stream protocol not even that (``encode_pieces``:
``framing.batch_frames`` joins the frame entries' fields and the messages' pieces in one go).

The bytes are ``ArrowEncoder.encode``'s, byte for byte (``tests/spark/test_arrow_kernels.py``
compares them over random batches). What would need a form this module does not write (a
string or section of 256 bytes or more, a map with 256 entries or more, a JSON string that
``json`` escapes, a float ``json`` writes with an exponent, NaN or an infinity, a property
column other than a string one, a non-JSON body other than binary) makes ``encode`` return
None for the batch, and ``ArrowEncoder`` writes it the per-value way.
"""

from __future__ import annotations

import sys
import time
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.types import (BinaryType, BooleanType, DecimalType, DoubleType, IntegerType, LongType,
                               StringType)

from amqp_stream.spark.row_concat import Rows, as_array, binary, either, join, lengths, matrix

__all__ = ["Kernels"]

_APP_TYPES = (StringType, IntegerType, LongType, DoubleType, BooleanType, DecimalType)
#: string property columns written as str8 that come before creation_time (so every row's list
#: ends at creation_time, which is never null)
_STR8_PROPERTIES = {"message_id", "to", "subject", "reply_to", "correlation_id"}
_CREATION_TIME = 9


def _decimal_text(col: Any) -> Any:
    """``str`` of each value of a decimal column as pieces (its whole part's text, the point,
    the fraction's digits), or None where Arrow's cast must write it: a null, an unscaled value
    beyond 64 bits, a scale above 6 (``str`` may then write an exponent), a negative value with a
    fraction. Why: Arrow's decimal-to-string cast costs ~70 ns a value, an int64's ~20."""
    n = len(col)
    if not n or col.null_count or not pa.types.is_decimal128(col.type) or not 0 <= col.type.scale <= 6:
        return None
    scale = col.type.scale
    words = np.frombuffer(col.buffers()[1], np.int64, 2 * n, col.offset * 16).reshape(n, 2)
    low = words[:, 0]
    if (words[:, 1] != (low >> 63)).any():  # the high word is not the low one's sign: beyond int64
        return None
    if not scale:
        return pa.array(low).cast(pa.string())
    if low.min() < 0:
        return None
    whole, fraction = np.divmod(low, 10 ** scale)
    digits = np.empty((n, scale), np.uint8)
    for j in range(scale - 1, -1, -1):
        fraction, digit = np.divmod(fraction, 10)
        digits[:, j] = digit + 48
    return join(pa.array(whole).cast(pa.string()), b".", digits)


class _Slow(Exception):
    """This batch needs a form the kernels do not write."""


def _no_failing_import() -> None:
    """Each pyarrow compute call imports ``dateutil.relativedelta`` (to recognise such
    arguments); without python-dateutil that import fails, after a walk of ``sys.path``: ~0.1 ms
    a call, several times the kernel itself on a 10,000-row column, and a batch takes ~80
    calls. Marked missing once, the import fails at once, as it would anyway."""
    import importlib.util
    if "dateutil.relativedelta" not in sys.modules and importlib.util.find_spec("dateutil") is None:
        sys.modules["dateutil.relativedelta"] = None  # type: ignore[assignment]


class Kernels:
    """The messages of an ``ArrowEncoder``'s plan, column at a time; ``for_encoder`` gives None
    when the schema has a column the kernels do not write."""

    def __init__(self, encoder: Any):
        _no_failing_import()
        self.encoder = encoder
        self.byte = pa.array([bytes((i,)) for i in range(256)], pa.binary())  # n -> its byte

    @classmethod
    def for_encoder(cls, encoder: Any) -> "Kernels | None":
        plan, schema = encoder.plan, encoder.schema
        if not encoder._fast:
            return None
        for i, name in plan.properties:
            if name not in _STR8_PROPERTIES or not isinstance(schema.fields[i].dataType, StringType):
                return None
        for i, _, _ in plan.application:
            if not isinstance(schema.fields[i].dataType, _APP_TYPES):
                return None
        if plan.body_is_json:
            if not all(isinstance(f.dataType, _APP_TYPES) for f in schema.fields):
                return None
        elif not isinstance(schema.fields[plan.body_index].dataType, BinaryType):
            return None
        if plan.filter_index is not None and not isinstance(schema.fields[plan.filter_index].dataType, StringType):
            return None
        return cls(encoder)

    # -- pieces ----------------------------------------------------------------------------
    @staticmethod
    def _join(*parts: Any) -> Any:
        """Row by row concatenation, left as ``row_concat.Pieces`` (joined once, at the end)
        where no piece has a null."""
        return join(*parts)

    @staticmethod
    def _valid(col: Any, out: Any) -> Any:
        """``out`` with nulls where ``col`` has them."""
        if not col.null_count:
            return out
        out = as_array(out)
        return pc.if_else(col.is_valid(), out, pa.scalar(None, out.type))

    def _len8(self, sizes: Any) -> Any:
        """Each length (< 256) as its byte: a one-byte matrix piece, or (nulls among them) an
        Arrow column with those nulls."""
        if not isinstance(sizes, np.ndarray):
            if sizes.null_count:
                if (pc.max(sizes).as_py() or 0) >= 256:
                    raise _Slow
                return self.byte.take(sizes)
            sizes = sizes.to_numpy()
        if len(sizes) and sizes.max() >= 256:
            raise _Slow
        return sizes.astype(np.uint8).reshape(len(sizes), 1)

    @staticmethod
    def _be(col: Any, code: str) -> Any:
        """A number column's values (nulls as 0) big-endian (``code``: the numpy type code of
        its width), as a matrix piece."""
        return matrix(col.fill_null(0).to_numpy().astype(">" + code))

    def _sized(self, code8: int, raw: Any) -> Any:
        """str8/vbin8 (``code8``) of each value (< 256 bytes); nulls stay null."""
        return self._join(*self._sized_parts(code8, raw))

    def _sized_parts(self, code8: int, raw: Any) -> list[Any]:
        """``_sized``'s pieces, for a caller's own join (a null value nulls the join)."""
        return [bytes((code8,)), self._len8(lengths(raw)), raw]

    def _small_parts(self, col: Any, small_code: bytes, big_code: bytes, code: str) -> list[Any]:
        """An integer as ``small_code`` + one byte when -128..127, else ``big_code`` + big-endian
        (``code``: the numpy type code of its width), as pieces for a caller's join (null where
        ``col`` is). A column of both forms is one binary array (``row_concat.either``)."""
        values = (col.fill_null(0) if col.null_count else col).to_numpy()
        small = (values >= -128) & (values <= 127)
        if not small.any():  # the usual column: all of one form
            parts = self._big(col, big_code, code)
        elif small.all():
            parts = [small_code, matrix(values.astype(np.int8))]
        else:
            n = len(values)
            first = np.empty((n, 2), np.uint8)
            first[:, 0] = small_code[0]
            first[:, 1:] = matrix(values.astype(np.int8))
            second = np.empty((n, 1 + np.dtype(code).itemsize), np.uint8)
            second[:, 0] = big_code[0]
            second[:, 1:] = matrix(values.astype(">" + code))
            parts = [either(small, first, second)]
        return [self._valid(col, self._join(*parts))] if col.null_count else parts

    def _big(self, col: Any, big_code: bytes, code: str) -> list[Any]:
        return [pa.scalar(big_code), self._be(col, code)]

    def _value_parts(self, col: Any, dtype: Any) -> list[Any]:
        """``_value``'s pieces, for a caller's own join (fewer joins: each costs per row and
        argument)."""
        if isinstance(dtype, StringType):
            return self._sized_parts(0xA1, binary(col))
        if isinstance(dtype, DecimalType):
            return self._sized_parts(0xA1, binary(self._text(col)))
        if isinstance(dtype, IntegerType):
            return self._small_parts(col, b"\x54", b"\x71", "i")
        if isinstance(dtype, LongType):
            return self._small_parts(col, b"\x55", b"\x81", "q")
        if not col.null_count and isinstance(dtype, DoubleType):
            return self._big(col, b"\x82", "d")
        return [self._value(col, dtype)]

    def _value(self, col: Any, dtype: Any) -> Any:
        """An application property value's encoding per row (null where the column is)."""
        if isinstance(dtype, StringType):
            return self._sized(0xA1, binary(col))
        if isinstance(dtype, DecimalType):  # its text, as str() of the Decimal (mapping's converter)
            return self._sized(0xA1, binary(self._text(col)))
        if isinstance(dtype, (IntegerType, LongType)):
            return self._join(*self._value_parts(col, dtype))
        if isinstance(dtype, DoubleType):
            return self._valid(col, self._join(pa.scalar(b"\x82"), self._be(col, "d")))
        assert isinstance(dtype, BooleanType)
        return pc.if_else(col, pa.scalar(b"\x41"), pa.scalar(b"\x42"))

    def _map(self, code: bytes, entries: list[Any], n: int) -> Any:
        """A map section per row of its (nullable) entries: absent where no entry is."""
        if not entries:
            return Rows(n)
        if not any(e.null_count for e in entries):  # every row has every entry
            body = self._join(*entries)
            size = lengths(body) + 1
            return self._join(b"\x00\x53" + code + b"\xc1", self._len8(size), bytes((2 * len(entries),)), body)
        entries = [as_array(e) for e in entries]
        body = self._join(*[e.fill_null(b"") for e in entries])
        count = entries[0].is_valid().cast(pa.int32())
        for e in entries[1:]:
            count = pc.add(count, e.is_valid().cast(pa.int32()))
        count = pc.multiply(count, 2)
        size = lengths(body) + 1
        section = as_array(self._join(b"\x00\x53" + code + b"\xc1", self._len8(size), self.byte.take(count), body))
        return pc.if_else(pc.equal(count, 0), pa.scalar(b""), section)

    def _json_parts(self, col: Any, dtype: Any) -> list[Any]:
        """``_json_text``'s pieces, for the body's own join."""
        if not col.null_count and isinstance(dtype, (StringType, DecimalType)):
            if isinstance(dtype, StringType):
                self._plain_json_string(col)
            return [pa.scalar('"'), col if isinstance(dtype, StringType) else self._text(col), pa.scalar('"')]
        return [self._json_text(col, dtype)]

    def _json_text(self, col: Any, dtype: Any) -> Any:
        """A column's values as ``json`` writes them ("null" for nulls)."""
        null = pa.scalar("null")
        if isinstance(dtype, StringType):
            self._plain_json_string(col)
            return self._or_null(col, self._join(pa.scalar('"'), col, pa.scalar('"')))
        if isinstance(dtype, (IntegerType, LongType)):
            return self._or_null(col, pc.cast(col, pa.string()))
        if isinstance(dtype, BooleanType):
            return pc.if_else(col.is_valid(), pc.if_else(col, pa.scalar("true"), pa.scalar("false")), null)
        if isinstance(dtype, DecimalType):  # a JSON string of str() of the Decimal (``mapping._json_default``)
            return self._or_null(col, self._join(pa.scalar('"'), self._text(col), pa.scalar('"')))
        assert isinstance(dtype, DoubleType)
        text = pc.cast(col, pa.string())
        magnitude = pc.abs(col)
        plain = pc.or_(pc.equal(magnitude, 0.0), pc.and_(pc.greater_equal(magnitude, 1e-4), pc.less(magnitude, 1e16)))
        if pc.any(pc.invert(plain.fill_null(True))).as_py() or pc.any(pc.match_substring(text, "e")).as_py():
            raise _Slow  # NaN, an infinity, or a number json writes with an exponent
        text = pc.if_else(pc.match_substring(text, "."), text, pc.binary_join_element_wise(text, ".0", ""))
        return self._or_null(col, text)

    def _text(self, col: Any) -> Any:
        """A decimal column's text (``str`` of each value), cast once a batch (the application
        property and the JSON body both take it; the cast is ~0.06 µs a row)."""
        values = col.buffers()[1]
        key = (values.address if values is not None else 0, col.offset, len(col), str(col.type))
        if key not in self._texts:
            text = _decimal_text(col)
            self._texts[key] = col.cast(pa.string()) if text is None else text
        return self._texts[key]

    @staticmethod
    def _plain_json_string(col: Any) -> None:
        """_Slow when ``json`` would escape a character of a value: a byte of the values'
        data outside printable ASCII, or a quote or a backslash (one table look-up a byte)."""
        if not len(col):
            return
        kind = np.int64 if col.type == pa.large_string() else np.int32  # Spark may give 64-bit offsets
        offsets = col.buffers()[1]
        width = np.dtype(kind).itemsize
        start = int(np.frombuffer(offsets, kind, 1, col.offset * width)[0])
        end = int(np.frombuffer(offsets, kind, 1, (col.offset + len(col)) * width)[0])
        data = col.buffers()[2]
        if data is not None and end > start:
            raw = np.frombuffer(data, np.uint8, end - start, start)
            # outside 0x20-0x7E (the subtraction wraps below 0x20), or a quote, or a backslash:
            # whole-array comparisons (~0.1 ns a byte), not a table look-up a byte (~1 ns)
            if ((raw - np.uint8(0x20)) > np.uint8(0x5E)).any() or (raw == 0x22).any() or (raw == 0x5C).any():
                raise _Slow

    @staticmethod
    def _or_null(col: Any, text: Any) -> Any:
        """``text`` with "null" where ``col`` is null."""
        if not col.null_count:
            return text
        return pc.if_else(col.is_valid(), binary(as_array(text)), pa.scalar(b"null"))

    # -- the messages ----------------------------------------------------------------------
    def encode(self, batch: Any, first_id: int | None = None) -> list[bytes] | None:
        """``ArrowEncoder.encode(batch, first_id)``, or None when the batch needs the per-value way."""
        out = self.encode_array(batch, first_id)
        return None if out is None else out.to_pylist()

    def encode_array(self, batch: Any, first_id: int | None = None) -> Any:
        """``encode``'s messages as an Arrow binary array (one row a message), or None."""
        out = self.encode_pieces(batch, first_id)
        return None if out is None else as_array(out)

    def encode_pieces(self, batch: Any, first_id: int | None = None) -> Any:
        """``encode_array``'s messages not yet joined (``row_concat.Pieces``, or an Arrow array
        where a piece had nulls), for a caller that joins more around them; or None."""
        try:
            return self._encode(batch, first_id)
        except _Slow:
            return None

    def _encode(self, batch: Any, first_id: int | None) -> Any:
        self._texts: dict[tuple, Any] = {}
        try:
            return self._encode_batch(batch, first_id)
        finally:
            self._texts = {}

    def _encode_batch(self, batch: Any, first_id: int | None) -> Any:
        enc, n = self.encoder, batch.num_rows
        plan, fields = enc.plan, enc.schema.fields
        if not n:
            return pa.array([], pa.binary())
        empty = Rows(n)  # makes a join of constants a column
        # message annotations
        entries = []
        if plan.filter_index is not None:
            fv = self._sized(0xA1, binary(batch.column(plan.filter_index)))
            entries.append(self._join(pa.scalar(enc._fv_key), fv))
        if first_id is not None:
            ids = pa.array(range(first_id, first_id + n), pa.uint64())
            entries.append(self._small_ulong(ids))
        annotations = self._map(b"\x72", entries, n)
        # properties: up to creation_time (the publish time where no column gives one)
        props: list[Any] = [pa.scalar(b"\x40")] * (_CREATION_TIME + 1)
        for i, pos, _ in enc._props:
            props[pos] = self._sized(0xA1, binary(batch.column(i))).fill_null(b"\x40")
        if plan.body_is_json:
            props[6] = pa.scalar(b"\xa3\x10application/json")
        props[_CREATION_TIME] = pa.scalar(b"\x83" + int(time.time() * 1000).to_bytes(8, "big", signed=True))
        fields_bytes = self._join(empty, *props)
        size = lengths(fields_bytes) + 1
        properties = self._join(pa.scalar(b"\x00\x53\x73\xc0"), self._len8(size),
                                pa.scalar(bytes((_CREATION_TIME + 1,))), fields_bytes)
        # application properties
        app = [self._join(pa.scalar(key), *self._value_parts(batch.column(i), fields[i].dataType))
               for i, key, _ in enc._app]
        application = self._map(b"\x74", app, n)
        # the body: a data section
        if plan.body_is_json:
            frags = [empty, pa.scalar("{")]
            for k, (name, f) in enumerate(zip(plan.names, fields, strict=True)):
                frags.append(pa.scalar(("," if k else "") + _json_string(name) + ":"))
                frags.extend(self._json_parts(batch.column(k), f.dataType))
            frags.append(pa.scalar("}"))
            raw = binary(self._join(*frags))
        else:
            raw = binary(batch.column(plan.body_index))
        sizes = lengths(raw)
        if not raw.null_count and (not len(sizes) or sizes.max() < 256):  # the usual: vbin8, one join
            return self._join(annotations, properties, application, b"\x00\x53\x75\xa0", self._len8(sizes), raw)
        if isinstance(sizes, np.ndarray):
            sizes = pa.array(sizes)
        long_ = pc.greater_equal(sizes, 256).fill_null(False)
        vbin = pc.if_else(long_, as_array(self._join(b"\xb0", self._be(sizes.cast(pa.uint32()), "I"))),
                          as_array(self._join(b"\xa0", self.byte.take(pc.if_else(long_, 0, sizes)))))
        body = self._join(b"\x00\x53\x75", vbin, raw).fill_null(b"")  # a null body: no section
        return self._join(annotations, properties, application, body)

    def _small_ulong(self, ids: Any) -> Any:
        small = pc.less(ids, 256)
        low = self.byte.take(pc.if_else(small, ids, 0))
        return self._join(self.encoder._pid_key, pc.if_else(small, as_array(self._join(b"\x53", low)),
                                                            as_array(self._join(b"\x80", self._be(ids, "Q")))))
