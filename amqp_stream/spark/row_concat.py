"""Row-by-row concatenation of byte pieces with one Arrow ``take`` (``Pieces``), for the sink's kernels.

Why: ``pyarrow.compute.binary_join_element_wise`` costs per row and argument, and the messages
were joined in nested steps (a section's body, then the section, then the message, then the
frame entry), each step copying what the last one built: ~1.5 µs a row of the task's ~1.9.
Here the pieces stay unjoined (``Pieces`` is a flat list of them, and the length of a row's
join is the sum of its pieces' lengths, so a length byte needs no join) until ``array()``
builds the result at once:

- neighbouring fixed-width pieces (constants; ``(n, width)`` uint8 matrices such as length
  bytes and big-endian numbers) are written side by side into one matrix by numpy;
- the remaining pieces (those matrices, the variable binary columns, constants as one-value
  arrays) are put in one array, and one ``take`` with index ``i * k + j`` -> piece ``j`` of
  row ``i`` lays them out row-major: its data buffer IS every row's join back to back, and
  every ``k``-th offset is a row boundary.

Only pieces without nulls are held (a null nulls a join's row): ``join`` hands anything with a
null to ``binary_join_element_wise``, as before. The bytes are the join's
(``tests/spark/test_row_concat.py``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Union

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

__all__ = ["Pieces", "Rows", "join", "as_array", "binary", "lengths", "matrix", "either"]

Piece = Union[bytes, np.ndarray, Any]  # a constant, an (n, width) uint8 matrix, a binary/string array
#: a result larger than this goes through binary_join_element_wise (which then raises, as before):
#: the take's int32 offsets must hold it
_MAX_BYTES = (1 << 31) - 1
_BINARY, _STRING = pa.binary(), pa.string()
#: ``either`` copies runs between the rows of the rarer form when they are this few
_FEW_ODD = 64


class Rows:
    """``n`` rows of nothing: a join's first piece when all the others are constants."""

    def __init__(self, n: int):
        self.n = n


class Pieces:
    """The row-by-row join of ``parts`` (see the module doc), built by ``array()``."""

    null_count = 0

    def __init__(self, n: int, parts: list[Piece]):
        self.n, self.parts = n, parts

    def __len__(self) -> int:
        return self.n

    def lengths(self) -> np.ndarray:
        """Each row's joined length (int64), without joining."""
        total = np.zeros(self.n, np.int64)
        fixed = 0
        for p in self.parts:
            if isinstance(p, bytes):
                fixed += len(p)
            elif isinstance(p, np.ndarray):
                fixed += p.shape[1]
            else:
                total += _var_lengths(p)
        return total + fixed

    def size(self) -> int:
        """The joined bytes of all rows."""
        total = 0
        for p in self.parts:
            if isinstance(p, bytes):
                total += len(p) * self.n
            elif isinstance(p, np.ndarray):
                total += p.size
            else:
                offsets = p.buffers()[1]
                total += int.from_bytes(offsets[(p.offset + len(p)) * 4:(p.offset + len(p) + 1) * 4], "little") - \
                    int.from_bytes(offsets[p.offset * 4:p.offset * 4 + 4], "little")
        return total

    def fill_null(self, _value: Any) -> "Pieces":
        return self  # no nulls held

    def cast(self, _type: Any) -> "Pieces":
        return self  # string pieces are their UTF-8 bytes: the join is binary either way

    def array(self) -> Any:
        """The joined rows as an Arrow binary array."""
        n = self.n
        if not n:
            return pa.array([], pa.binary())
        if self.size() > _MAX_BYTES:
            return _joined(tuple(self.parts))
        leaves: list[Any] = []  # bytes (one value for every row) or a binary array of n rows
        run: list[Any] = []
        for p in self.parts + [None]:
            if isinstance(p, (bytes, np.ndarray)):
                run.append(p)
                continue
            if run:
                leaves.append(_block(run, n))
                run = []
            if p is not None:
                leaves.append(binary(p))
        if not leaves:
            return pa.array([b""] * n, pa.binary())
        if len(leaves) == 1 and not isinstance(leaves[0], bytes):
            return leaves[0]
        sources = [pa.array([x], pa.binary()) if isinstance(x, bytes) else x for x in leaves]
        k = len(leaves)
        taken = pa.concat_arrays(sources).take(_index(n, tuple(isinstance(x, bytes) for x in leaves)))
        offsets = np.frombuffer(taken.buffers()[1], np.int32, n * k + 1, taken.offset * 4)[::k]
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.ascontiguousarray(offsets)),
                                                      taken.buffers()[2]])


@lru_cache(maxsize=8)
def _index(n: int, constant: tuple[bool, ...]) -> Any:
    """The take's index over the leaves one after the other (each of ``n`` rows, or one value
    where ``constant``): ``i * k + j`` -> row ``i`` of leaf ``j``. The last few are kept: a
    task's batches are mostly of one size, but a batch may join in more than one layout (a
    column of two forms, a frame's entries)."""
    sizes = np.array([1 if c else n for c in constant], np.int32)
    base = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int32)
    per_row = np.array([0 if c else 1 for c in constant], np.int32)
    return pa.array(np.add(np.multiply.outer(np.arange(n, dtype=np.int32), per_row), base).ravel())


def either(pick: np.ndarray, first: np.ndarray, second: np.ndarray) -> Any:
    """Row ``i`` is ``first[i]`` where ``pick[i]``, else ``second[i]`` (``(n, width)`` uint8
    matrices of two widths): a binary array written by numpy, without the two joins and
    ``if_else`` of binary arrays it took (~80 ns a row against ~10)."""
    n, a = first.shape
    b = second.shape[1]
    odd = np.flatnonzero(pick)
    if len(odd) > n // 2:
        odd = np.flatnonzero(~pick)
    if len(odd) <= _FEW_ODD:  # the usual: a few rows of the other form (Spark's shuffled ids)
        return _either_few(pick, first, second, odd)
    out = np.empty((n, max(a, b)), np.uint8)
    out[:, :b] = second
    out[pick, :a] = first[pick]
    sizes = b + (a - b) * pick.astype(np.int32)
    data = out[np.arange(out.shape[1]) < sizes[:, None]]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _either_few(pick: np.ndarray, first: np.ndarray, second: np.ndarray, odd: np.ndarray) -> Any:
    """``either`` where the rows ``odd`` are the only ones of their form: the other form's
    rows copied in runs between them (one concatenation), not masked byte by byte (the mask
    over every row's widest form cost ~10 ns a row and column)."""
    n = len(pick)
    usual, other = (first, second) if len(odd) and not pick[odd[0]] else (second, first)
    if not len(odd):
        usual = first if pick.all() else second
    sizes = np.full(n, usual.shape[1], np.int32)
    sizes[odd] = other.shape[1]
    pieces: list[np.ndarray] = []
    at = 0
    for i in odd.tolist():
        pieces.append(usual[at:i].reshape(-1))
        pieces.append(other[i])
        at = i + 1
    pieces.append(usual[at:].reshape(-1))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.concatenate(pieces))])


def matrix(values: np.ndarray) -> np.ndarray:
    """A column of numbers (already of the wanted width and byte order) as an ``(n, width)``
    uint8 piece: each row's bytes."""
    values = np.ascontiguousarray(values)
    return values.view(np.uint8).reshape(len(values), values.dtype.itemsize)


def _as_matrix(arr: Any) -> Any:
    """A binary/string column whose values are all of one width as an ``(n, width)`` matrix
    (a view of its data): a fixed piece, written beside its neighbours by numpy, not a leaf of
    the take (~10 ns a value). Spark's strings are often so (codes, ids of one width)."""
    n = len(arr)
    if not n:
        return arr
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)
    width = int(offsets[1] - offsets[0])
    if not width or int(offsets[n] - offsets[0]) != width * n or ((offsets[1:] - offsets[:-1]) != width).any():
        return arr
    return np.frombuffer(arr.buffers()[2], np.uint8, width * n, int(offsets[0])).reshape(n, width)


def _var_lengths(arr: Any) -> np.ndarray:
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    return offsets[1:] - offsets[:-1]


def _block(run: list[Any], n: int) -> Any:
    """Neighbouring fixed-width pieces side by side: a constant, or a binary array of n rows
    (the constants written by repeating one row's bytes, each matrix by one strided copy of its
    rows as opaque values: numpy's broadcast into a narrow column costs ~10x more)."""
    if all(isinstance(p, bytes) for p in run):
        return b"".join(run)
    row = b"".join(p if isinstance(p, bytes) else bytes(p.shape[1]) for p in run)
    width = len(row)
    out = bytearray(row) * n
    at = 0
    for p in run:
        if isinstance(p, bytes):
            at += len(p)
            continue
        w = p.shape[1]
        rows = np.ascontiguousarray(p).view(f"V{w}").reshape(n)
        np.copyto(np.ndarray((n,), f"V{w}", out, at, (width,)), rows)
        at += w
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32)),
                                                  pa.py_buffer(out)])


def lengths(x: Any) -> Any:
    """Each row's length: a numpy int32 array where no row is null (``Pieces``, or a binary or
    string array read from its offsets: ``pc.binary_length`` costs ~5 µs a call and a batch
    makes a dozen), else ``pc.binary_length``'s Arrow int32 array (null where ``x`` is)."""
    if isinstance(x, Pieces):
        return x.lengths().astype(np.int32)
    if x.null_count or (x.type != _BINARY and x.type != _STRING):
        return pc.binary_length(x)
    return _var_lengths(x)


def binary(x: Any) -> Any:
    """``x.cast(pa.binary())``: a string array as a zero-copy view of its buffers (the same
    layout; ~0.7 µs a call against the cast's ~7, and a batch makes a dozen), ``Pieces`` as
    they are (their join is binary either way)."""
    if isinstance(x, Pieces):
        return x
    t = x.type
    if t == _BINARY:
        return x
    return x.view(_BINARY) if t == _STRING else x.cast(_BINARY)


def as_array(x: Any) -> Any:
    """An Arrow array of a piece or of ``Pieces`` (for the compute functions)."""
    if isinstance(x, Pieces):
        return x.array()
    if isinstance(x, np.ndarray):
        return _block([x], len(x))
    return x


def join(*parts: Any) -> Any:
    """The row-by-row join of ``parts`` (Arrow arrays, ``Pieces``, matrices, scalars/bytes
    constants, ``Rows``): ``Pieces`` when no piece has a null, else the Arrow array
    ``binary_join_element_wise`` gives (null where a piece is)."""
    flat: list[Any] = []
    n = None
    for p in parts:
        if isinstance(p, pa.Scalar):
            if not p.is_valid:
                return _joined(parts)
            p = p.as_py()
            p = p.encode() if isinstance(p, str) else p
        if isinstance(p, Pieces):
            n = p.n
            if flat and p.parts and isinstance(flat[-1], bytes) and isinstance(p.parts[0], bytes):
                flat[-1] += p.parts[0]
                flat.extend(p.parts[1:])
            else:
                flat.extend(p.parts)
            continue
        if isinstance(p, Rows):
            n = p.n
            continue
        if isinstance(p, np.ndarray):
            n = len(p)
        elif not isinstance(p, bytes):
            if p.null_count:
                return _joined(parts)
            if p.type != pa.binary() and p.type != pa.string():  # large_binary/large_string: 64-bit offsets
                p = p.cast(pa.binary())
            n = len(p)
            p = _as_matrix(p)
        if isinstance(p, bytes) and flat and isinstance(flat[-1], bytes):
            flat[-1] += p
        else:
            flat.append(p)
    if n is None:
        raise ValueError("a join of constants only needs Rows(n) among its parts")
    return Pieces(n, flat)


def _joined(parts: tuple[Any, ...]) -> Any:
    """``binary_join_element_wise`` of ``parts`` (the way for pieces with nulls)."""
    args = []
    for p in parts:
        if isinstance(p, Rows):
            p = pa.nulls(p.n, pa.binary()).fill_null(b"")
        elif isinstance(p, (Pieces, np.ndarray)):
            p = as_array(p)
        elif isinstance(p, pa.Scalar):
            p = p.cast(pa.binary()) if p.is_valid else pa.scalar(None, pa.binary())
        elif isinstance(p, bytes):
            p = pa.scalar(p)
        elif p.type != pa.binary():
            p = p.cast(pa.binary())
        args.append(p)
    return pc.binary_join_element_wise(*args, b"")
