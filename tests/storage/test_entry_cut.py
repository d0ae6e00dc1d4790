"""``EntrySpans.entries`` (a chunk's data section cut out of a client's frame: each entry less
its first ``skip`` bytes, or its own ``skips[k]``) gives the bytes of a plain join whichever
way it cuts: as rows
(``_rows``, entries of about one size, the last ones copied one by one when their row would
run past the frame) or by a mask (sizes spread), from a frame of ``bytes`` or ``bytearray``,
with or without the decoder's array of places, for any part of the frame."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import format as fmt
from storage.format import EntrySpans


@st.composite
def _frame(draw):
    skip = draw(st.sampled_from((8, 10, 13, 21)))
    count = draw(st.integers(1, 700))
    several = draw(st.booleans())  # each entry's own skip (filter values of several lengths)
    spread = draw(st.sampled_from(("one size", "near", "wide")))
    base = draw(st.integers(0, 300))
    seed = draw(st.integers(0, 1 << 30))
    rnd = np.random.default_rng(seed)
    if spread == "one size":
        sizes = [base] * count
    elif spread == "near":
        sizes = (base + rnd.integers(0, 40, count)).tolist()
    else:
        sizes = rnd.integers(0, 2000, count).tolist()
        sizes[rnd.integers(0, count)] = draw(st.sampled_from((0, 5000)))
    bodies = [rnd.bytes(n) for n in sizes]
    skips = rnd.choice(np.array([10, 11, 13, 21, 30], np.intp), count) if several else None
    heads = [rnd.bytes(skip if skips is None else int(skips[k])) for k in range(count)]
    entries = [h + len(b).to_bytes(4, "big") + b for h, b in zip(heads, bodies, strict=True)]
    before, after = draw(st.integers(0, 9)), draw(st.integers(0, 3))
    raw = rnd.bytes(before) + b"".join(entries) + rnd.bytes(after)
    if draw(st.booleans()):
        raw = bytearray(raw)
    starts = list(itertools.accumulate(map(len, entries), initial=before))
    first = draw(st.integers(0, count - 1))
    n = draw(st.integers(1, count - first))
    cut = [e[len(h):] for e, h in zip(entries, heads, strict=True)]
    return raw, starts, (skip if skips is None else 0), first, n, cut, draw(st.booleans()), skips


@settings(max_examples=300, deadline=None)
@given(_frame(), st.sampled_from((1, 40, fmt._MASKED_FROM)))
def test_a_cut_gives_the_bytes_of_a_join(frame, masked_from):
    raw, starts, skip, first, n, expected, with_places, skips = frame
    places = np.array(starts, np.intp) if with_places else None
    spans = EntrySpans(raw, starts, skip, None, places, skips)
    rows: list[int] = []
    default, fmt._MASKED_FROM = fmt._MASKED_FROM, masked_from
    plain_rows = fmt._rows

    def counted(*args):
        rows.append(1)
        return plain_rows(*args)

    fmt._rows = counted
    try:
        data = spans.entries(first, n)
    finally:
        fmt._MASKED_FROM, fmt._rows = default, plain_rows
    assert bytes(data) == b"".join(expected[first:first + n])
    longest = max(map(len, expected[first:first + n]))
    total = sum(map(len, expected[first:first + n]))
    assert bool(rows) == (n >= masked_from and longest * n <= fmt._ROWS_SPREAD * total)
    assert spans.sizes(first, n) == list(map(len, expected[first:first + n]))
    assert spans.bodies(first, n) == [e[4:] for e in expected[first:first + n]]
    assert spans.records_bytes() == sum(map(len, expected)) - 4 * len(expected)
    assert spans.largest() == max(map(len, expected)) - 4


def test_rows_are_assigned_in_order_on_this_numpy():
    """What ``_rows`` relies on holds here (else every cut masks: correct, slower)."""
    assert fmt._ROWS_IN_ORDER


def test_without_rows_in_order_a_cut_masks(monkeypatch):
    rnd = np.random.default_rng(5)
    bodies = [rnd.bytes(int(n)) for n in rnd.integers(100, 120, 600)]
    entries = [b"h" * 13 + len(b).to_bytes(4, "big") + b for b in bodies]
    starts = list(itertools.accumulate(map(len, entries), initial=0))
    monkeypatch.setattr(fmt, "_ROWS_IN_ORDER", False)
    monkeypatch.setattr(fmt, "_rows", None)  # (called: a TypeError)
    data = EntrySpans(b"".join(entries), starts, 13).entries(0, 600)
    assert bytes(data) == b"".join(e[13:] for e in entries)
