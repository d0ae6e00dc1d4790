"""``storage.kept.KeptBuffers``: a buffer is handed out again only once nothing holds it (not a
``memoryview`` of it either), and ``EntrySpans.entries``' results, which live in such buffers,
keep their bytes while they are held."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from storage import format as fmt
from storage.format import EntrySpans
from storage.kept import KeptBuffers


def test_a_buffer_is_taken_again_only_once_nothing_holds_it():
    kept = KeptBuffers(4, 1 << 20)
    first = kept.take(1000)
    first_id = id(first)  # (an id: a reference would hold it; ``kept`` keeps it alive)
    view = memoryview(first)
    del first
    second = kept.take(1000)
    assert id(second) != first_id                    # the view holds the first
    del view, second
    third = kept.take(990)                           # resized in place
    assert len(third) == 990 and kept.holds(third)
    assert id(third) == first_id                    # the first free one that fits
    del third
    assert len(kept.take(5000)) == 5000              # too large for those kept: a new one
    assert len(kept) <= 4


def _spans(seed: int, count: int, skip: int) -> tuple[EntrySpans, list[bytes]]:
    rnd = random.Random(seed)
    bodies = [rnd.randbytes(rnd.randrange(0, 300)) for _ in range(count)]
    entries = [rnd.randbytes(skip) + len(b).to_bytes(4, "big") + b for b in bodies]
    raw = bytearray(b"\x07" + b"".join(entries))
    starts = list(itertools.accumulate(map(len, entries), initial=1))
    return EntrySpans(raw, starts, skip), [len(b).to_bytes(4, "big") + b for b in bodies]


def test_held_data_sections_keep_their_bytes_while_others_are_cut(monkeypatch):
    monkeypatch.setattr(fmt, "_DATA", KeptBuffers(2, 1 << 22))
    held = []
    for seed in range(6):
        spans, entries = _spans(seed, 700, 13)
        data = spans.entries(0, 700)
        assert data == b"".join(entries)
        held.append((data, b"".join(entries[100:400])))
        part = spans.entries(100, 300)
        assert part == held[-1][1]
        held[-1] = (part, held[-1][1])
        del data
    for data, expected in held:  # none overwritten by a later cut
        assert data == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1 << 12, 1 << 16),
       st.lists(st.tuples(st.integers(0, 20_000), st.sampled_from(("drop", "hold", "view",
                                                                    "release"))),
                min_size=1, max_size=40))
def test_a_buffer_taken_is_never_one_still_held(count, total, steps):
    """Takes of random sizes, each buffer filled with its own byte and then dropped, held, held
    through a view only, or held and later let go: no buffer is handed out while anything
    holds it (every held one keeps its byte), each has the size asked, and the kept ones stay
    within ``count`` buffers and ``total`` bytes."""
    kept = KeptBuffers(count, total)
    held: list[tuple[int, object]] = []
    for k, (size, what) in enumerate(steps):
        buf = kept.take(size)
        assert len(buf) == size
        assert all(buf is not h for _, h in held if type(h) is bytearray)
        mark = k % 251
        buf[:] = bytes([mark]) * size
        if what in ("hold", "release"):
            held.append((mark, buf))
        elif what == "view":
            held.append((mark, memoryview(buf)[size // 2:]))
        del buf
        if what == "release" and len(held) > 1:
            held.pop(0)
        for mark, h in held:
            assert bytes(h) == bytes([mark]) * len(h)
        assert len(kept) <= count
        assert sum(b.__alloc__() for b in kept._bufs) <= total
