"""``row_concat.join`` gives the row-by-row join of its pieces, as Python would write it and as
``binary_join_element_wise`` does: random pieces (constants as bytes and as Arrow scalars,
fixed-width matrices, binary and string columns, sliced, with nulls now and then, nested
joins), their lengths without joining, and the fall-back for pieces with nulls."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream.spark.row_concat import Pieces, Rows, as_array, join, lengths, matrix

VALUE = st.binary(max_size=6) | st.text(alphabet="ab\u00e9", max_size=3).map(str.encode)


@st.composite
def piece(draw, n: int, depth: int = 0):
    """A piece of ``n`` rows and its rows' bytes (None for a null)."""
    kind = draw(st.sampled_from(["bytes", "scalar", "matrix", "binary", "string", "large", "nested"][:7 if depth < 2 else 6]))
    if kind == "bytes":
        b = draw(VALUE)
        return b, [b] * n
    if kind == "scalar":
        b = draw(VALUE)
        if draw(st.booleans()):
            return pa.scalar(b), [b] * n
        text = b.decode("latin-1")
        return pa.scalar(text), [text.encode()] * n
    if kind == "matrix":
        width = draw(st.integers(1, 9))
        rows = [draw(st.binary(min_size=width, max_size=width)) for _ in range(n)]
        return np.frombuffer(b"".join(rows), np.uint8).reshape(n, width), rows
    if kind == "nested":
        parts = draw(st.lists(piece(n, depth + 1), min_size=1, max_size=4))
        return join(Rows(n), *(p for p, _ in parts)), _joined_rows(n, [r for _, r in parts])
    pad = draw(st.integers(0, 2))
    nulls = draw(st.booleans()) and draw(st.integers(0, 5)) == 0
    rows = [None if nulls and draw(st.booleans()) else draw(VALUE) for _ in range(n)]
    full = [b"x"] * pad + rows
    if kind in ("string", "large"):  # Spark may give large_string columns (64-bit offsets)
        text = [None if r is None else r.decode("latin-1") for r in full]
        kind_type = pa.string() if kind == "string" else pa.large_string()
        return pa.array(text, kind_type).slice(pad), [None if t is None else t.encode() for t in text[pad:]]
    return pa.array(full, pa.binary()).slice(pad), rows


def _joined_rows(n: int, columns: list[list]) -> list:
    out = []
    for i in range(n):
        row = [c[i] for c in columns]
        out.append(None if any(r is None for r in row) else b"".join(row))
    return out


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.tuples(st.just(n), st.lists(piece(n), min_size=1, max_size=8))))
def test_join_is_the_rows_joined(case):
    n, parts = case
    pieces = [p for p, _ in parts]
    expected = _joined_rows(n, [r for _, r in parts])
    out = join(Rows(n), *pieces)
    got = as_array(out)
    assert got.type == pa.binary() and got.to_pylist() == expected
    if isinstance(out, Pieces):  # no nulls: the one-take way, lengths without joining
        assert None not in expected
        assert list(out.lengths()) == [len(e) for e in expected]
        assert list(lengths(out)) == [len(e) for e in expected]
        assert list(lengths(got)) == [len(e) for e in expected]  # read from the offsets
        assert out.size() == sum(len(e) for e in expected)
    else:
        assert None in expected


def test_the_usual_join_is_one_take_of_row_major_pieces():
    """A message's shape (constants, length bytes, numbers, strings): ``Pieces`` until the end,
    and the joined rows are the same as ``binary_join_element_wise``'s."""
    n = 1000
    region = pa.array([f"r{i % 100:02d}" for i in range(n)])
    number = matrix(np.arange(n, dtype=">i4"))
    size = np.asarray(pc.binary_length(region)).astype(np.uint8).reshape(n, 1)
    inner = join(b"\xa1", size, region)
    out = join(Rows(n), b"\x00\x53\x74\xc1", inner, b"\x71", number, pa.scalar('{"n":'), region.slice(0), "}".encode())
    assert isinstance(inner, Pieces) and isinstance(out, Pieces)
    reference = pc.binary_join_element_wise(
        pa.scalar(b"\x00\x53\x74\xc1\xa1"), pa.array([bytes((3,))] * n), region.cast(pa.binary()), pa.scalar(b"\x71"),
        pa.array([i.to_bytes(4, "big") for i in range(n)]), pa.scalar(b'{"n":'), region.cast(pa.binary()),
        pa.scalar(b"}"), b"")
    assert out.array().equals(reference)


def test_no_rows():
    assert as_array(join(Rows(0), b"ab", pa.array([], pa.binary()))).to_pylist() == []


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(
    st.lists(st.booleans(), min_size=n, max_size=n) | st.sets(st.integers(0, n - 1), max_size=5).map(
        lambda odd: [i in odd for i in range(n)]) | st.sets(st.integers(0, n - 1), max_size=5).map(
        lambda odd: [i not in odd for i in range(n)]),
    st.integers(1, 4), st.integers(1, 9), st.binary(min_size=n * 13, max_size=n * 13))),
    st.sampled_from([0, 64]))
def test_either_picks_each_rows_form(case, few):
    """Either way of writing it: masked, and copied in runs between a few rows of the rarer form."""
    from amqp_stream.spark import row_concat
    pick, a, b, raw = case
    n = len(pick)
    first = np.frombuffer(raw[:n * a], np.uint8).reshape(n, a)
    second = np.frombuffer(raw[n * 4:n * 4 + n * b], np.uint8).reshape(n, b)
    saved = row_concat._FEW_ODD
    row_concat._FEW_ODD = few
    try:
        got = row_concat.either(np.array(pick), first, second)
    finally:
        row_concat._FEW_ODD = saved
    assert got.to_pylist() == [bytes(first[i]) if pick[i] else bytes(second[i]) for i in range(n)]


def test_a_column_of_one_width_is_a_fixed_piece():
    """Values all of one width join as a matrix (a view of the column's data, sliced or not),
    not as a leaf of the take; of two widths, as a column."""
    column = pa.array(["xx", "r01", "r02", "r03", "yyyy"])
    for part, fixed in ((column.slice(1, 3), True), (column.slice(0, 3), False), (column.slice(1), False)):
        out = join(Rows(len(part)), b"<", part, b">")
        assert isinstance(out, Pieces)
        assert any(isinstance(p, np.ndarray) for p in out.parts) == fixed
        assert as_array(out).to_pylist() == [b"<" + v.encode() + b">" for v in part.to_pylist()]
