"""A Publish v2 frame of many messages of varying sizes is decoded frame-at-once
(``SpannedEntries``): ids and filter fields of up to 8 bytes read as words of the frame
(``_coded_values``), longer ones as rows, fields of several lengths a length at a time
(``_varied``). For random frames (values of 0 to 12 bytes, some not UTF-8, none, lengths
mixed, some entries without one, empty messages last, values seen before or not)
the messages are those of the per-message walk, or the frame is refused as the walk refuses
it; so for runs of frames (fields of 0 to 300 bytes, few messages or many, the tables of
values decoded before carried over, emptied or not), with the entries storage cuts from them."""

from __future__ import annotations

import random
import struct

from hypothesis import event, given, settings
from hypothesis import strategies as st

from amqp_stream.streamproto import SpannedEntries, entries
from amqp_stream.streamproto.entries import walk_messages
from amqp_stream.streamproto.traffic import Publish


@st.composite
def _frame(draw):
    count = draw(st.integers(entries.NUMPY_FROM, 700))
    width = draw(st.integers(0, 12))
    pool = draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=6))
    kind = draw(st.sampled_from(("one length", "one length", "none", "mixed", "not utf-8")))
    if kind == "not utf-8" and width:
        pool.append(b"\xff" * width)
    elif kind != "not utf-8":
        pool = [p.decode("utf-8", "replace").encode()[:width].ljust(width, b"a") for p in pool]
        pool = [p if _text(p) else b"a" * width for p in pool]
    seed = draw(st.integers(0, 1 << 30))
    sizes = [(seed >> (k % 25)) % 40 + (k * 7) % 200 for k in range(count)]
    if draw(st.booleans()):
        sizes[-1] = 0  # an empty message last: its entry shorter than a word after its field
    out = bytearray(struct.pack(">Bi", 3, count))
    for k, size in enumerate(sizes):
        out += struct.pack(">Q", seed + k)
        value = None if kind == "none" else pool[(seed + k * 3) % len(pool)]
        if kind == "mixed" and (k == count // 2 or (seed + k) % 5 == 0):
            value = b"x" * ((seed + k) % 13) if (seed + k) % 7 else None
        if value is None:
            out += b"\xff\xff"
        else:
            out += struct.pack(">H", len(value)) + value
        out += struct.pack(">I", size) + bytes([k % 256]) * size
    if draw(st.booleans()):
        entries._CODES.clear()
    return bytes(out), count, kind == "mixed"


def _text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except ValueError:
        return False
    return True


@settings(max_examples=200, deadline=None, print_blob=False)
@given(_frame())
def test_a_frame_decoded_at_once_gives_the_walks_messages(frame):
    raw, count, mixed = frame
    view = memoryview(raw)
    try:
        expected = walk_messages(view, 5, count, 2)
    except ValueError:  # a FrameError, or a value that is not UTF-8
        expected = None
    try:
        got = Publish.decode_content(view, 0, 2, 2).messages
    except ValueError:
        got = None
    if expected is None:
        assert got is None
        return
    assert got == expected
    assert type(got) is SpannedEntries  # several lengths too, without the walk's tuples
    assert got.id_bytes() == struct.pack(f">{count}Q", *(m[0] for m in expected))
    if mixed:
        run = got.run()
        assert bytes(run.entries(0, count)) == b"".join(struct.pack(">I", len(m[2])) + bytes(m[2]) for m in expected)
        assert run.sizes(0, count) == [4 + len(m[2]) for m in expected]
        assert run.records_bytes() == sum(len(m[2]) for m in expected)
        assert run.largest() == max(len(m[2]) for m in expected)


def test_short_filter_fields_are_looked_up_as_numbers():
    """Values of up to 8 bytes go by ``_coded_values``: the same ``str`` objects each frame."""
    frame = b"".join(struct.pack(">QH", k, 3) + b"r%02d" % (k % 9) + struct.pack(">I", k % 50)
                     + b"m" * (k % 50) for k in range(400))
    raw = struct.pack(">Bi", 1, 400) + frame
    entries._CODES.clear()
    first = Publish.decode_content(memoryview(raw), 0, 2, 2).messages
    again = Publish.decode_content(memoryview(raw), 0, 2, 2).messages
    assert 5 in entries._CODES
    assert first.values == [f"r{k % 9:02d}" for k in range(400)]
    assert all(a is b for a, b in zip(first.values, again.values, strict=True))


@st.composite
def _run_of_frames(draw):
    """Publish frames one after the other (v1, v2 with filter fields of 0 to 300 bytes, the
    same values again or new ones, empty, none, not UTF-8, several lengths), each as the
    bytes, the ``bytearray`` (a large frame's kept buffer) or a view inside a larger buffer."""
    frames = []
    for _ in range(draw(st.integers(1, 5))):
        version = draw(st.sampled_from((1, 2, 2)))
        count = draw(st.sampled_from((1, 2, 9, entries.NUMPY_FROM - 1, entries.NUMPY_FROM, 500)))
        width = draw(st.sampled_from((0, 1, 2, 5, 6, 7, 8, 9, 16, 17, 100, 255, 300)))
        kind = draw(st.sampled_from(("text", "text", "text", "none", "not utf-8", "lengths")))
        seed = draw(st.integers(0, 1 << 30))
        rnd = random.Random(seed)  # the values' bytes: few letters, so that frames share some
        pool = [bytes(rnd.choice(b"ab\0") for _ in range(width))
                for _ in range(draw(st.integers(1, 5)))]
        if kind == "not utf-8" and width:
            pool.append(rnd.randbytes(width - 1) + b"\xff")
        out = bytearray(struct.pack(">Bi", 2, count))
        for k in range(count):
            out += struct.pack(">Q", (seed + k * 5) % (1 << 64))
            if version == 2:
                value = None if kind == "none" else pool[(seed >> (k % 20)) % len(pool)]
                if kind == "lengths" and k == (seed % count):
                    value = value[:-1] if value else b"x"
                out += b"\xff\xff" if value is None else struct.pack(">H", len(value)) + value
            size = (seed >> (k % 17)) % 60 + (k * 13) % 90
            if k == count - 1 and seed % 3 == 0:
                size = 0  # a short last entry: no word after its field
            out += struct.pack(">I", size) + bytes([(k + seed) % 256]) * size
        frames.append((version, count, bytes(out), draw(st.sampled_from(("bytes", "bytearray",
                                                                         "view")))))
    return frames


@settings(max_examples=300, deadline=None, print_blob=False)
@given(_run_of_frames(), st.sampled_from((1, 3, entries.VALUES_KEPT)), st.booleans())
def test_frames_one_after_another_give_the_walks_messages_and_entries(frames, kept, forget):
    """The decoded-values tables carry over from frame to frame (``_CODES``, ``_TABLES``,
    ``_FIELDS``; ``kept``: how many they hold before they are emptied): whatever came before,
    a frame gives the walk's messages (or is refused as the walk refuses it), and the
    ``EntrySpans`` storage takes from it hold the walk's entries."""
    default, entries.VALUES_KEPT = entries.VALUES_KEPT, kept
    if forget:
        entries._CODES.clear()
        entries._TABLES.clear()
        entries._FIELDS.clear()
    try:
        for version, count, content, form in frames:
            if form == "bytearray":
                view = memoryview(bytearray(content))
            elif form == "view":
                view = memoryview(b"head" + content + b"tail")[4:-4]
            else:
                view = memoryview(content)
            try:
                expected = walk_messages(view, 5, count, version)
            except ValueError:
                expected = None
            try:
                got = Publish.decode_content(view, 0, 2, version).messages
            except ValueError:
                got = None
            if expected is None:
                assert got is None
                event("refused")
                continue
            assert got == expected
            event(f"{type(got).__name__} of {'many' if count >= entries.NUMPY_FROM else 'few'}")
            if type(got) is SpannedEntries:  # (else the walk's tuples, or packed entries)
                assert got.id_bytes() == struct.pack(f">{count}Q", *(m[0] for m in expected))
                assert bytes(got.run().entries(0, count)) == b"".join(
                    struct.pack(">I", len(m[2])) + m[2] for m in expected)
    finally:
        entries.VALUES_KEPT = default


def _damaged(raw: bytes, damage: list[tuple[str, int, int]]) -> bytes:
    """``raw`` with its entries damaged: a byte set, bytes cut out or put in, the end cut off,
    bytes after the end (the 5-byte head, version and count, kept)."""
    out = bytearray(raw)
    for kind, where, byte in damage:
        if len(out) <= 6:
            break
        at = 5 + where % (len(out) - 5)
        if kind == "set":
            out[at] = byte
        elif kind == "cut":
            del out[at:at + 1 + byte % 4]
        elif kind == "insert":
            out[at:at] = bytes([byte]) * (1 + byte % 4)
        elif kind == "append":
            out += bytes([byte]) * (1 + where % 12)
        else:
            del out[at:]
    return bytes(out)


@settings(max_examples=300, deadline=None, print_blob=False)
@given(_frame(), st.lists(st.tuples(st.sampled_from(("set", "set", "cut", "insert", "end", "append")),
                                    st.integers(0, 1 << 20), st.integers(0, 255)),
                          min_size=1, max_size=3))
def test_a_damaged_frame_is_decoded_or_refused_as_the_walk_does(frame, damage):
    """A client's frame with a length field, a size or a value changed, bytes missing or extra,
    or its end cut off (what a hostile or broken publisher sends): decoded at once it gives the
    walk's messages and storage the walk's entries, or it is refused as the walk refuses it;
    never something else."""
    raw, count, _ = frame
    view = memoryview(_damaged(raw, damage))
    try:  # (``frames.decode`` makes either a FrameError)
        expected = walk_messages(view, 5, count, 2)
    except (ValueError, struct.error):
        expected = None
    try:
        got = Publish.decode_content(view, 0, 2, 2).messages
    except (ValueError, struct.error):
        got = None
    if expected is None:
        assert got is None
        event("refused")
        return
    assert got == expected
    event(type(got).__name__)
    if type(got) is SpannedEntries:
        run = got.run()
        assert bytes(run.entries(0, count)) == b"".join(struct.pack(">I", len(m[2])) + bytes(m[2]) for m in expected)
        assert run.records_bytes() == sum(len(m[2]) for m in expected)
        assert run.largest() == max(len(m[2]) for m in expected)


@st.composite
def _writers_frame(draw):
    """A frame of a writer's messages: each begins with the same section descriptor
    (``00 53 72``); in v2 filter values of 1 to 3 digits, other lengths or none; the bodies
    either free of the descriptor's bytes (``clean``) or made of them, so that the descriptor
    recurs inside bodies and values."""
    version = draw(st.sampled_from((1, 2, 2)))
    count = draw(st.integers(2, 600))
    clean = draw(st.booleans())
    rnd = random.Random(draw(st.integers(0, 1 << 30)))
    alphabet = b"\x01ab" if clean else b"\x00Sr\x01"
    out = bytearray(struct.pack(">Bi", 3, count))
    for k in range(count):
        out += struct.pack(">Q", k)
        pick = rnd.random()
        if version == 1:
            pass
        elif pick < 0.1:
            out += b"\xff\xff"
        else:
            value = (b"r%d" % rnd.randint(0, 999) if pick < 0.8 or clean
                     else bytes(rnd.choice(b"\x00Sr") for _ in range(rnd.randint(0, 6))))
            out += struct.pack(">H", len(value)) + value
        body = b"\x00Sr" + bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
        out += struct.pack(">I", len(body)) + body
    return bytes(out), count, clean, version


def _walked(raw: bytes, pos: int, count: int, version: int = 2) -> tuple[list[int], list[int]] | None:
    """(each entry's start and the end, each entry's skip) by a plain walk; None when the
    entries do not fill the frame."""
    starts, skips = [], []
    try:
        for _ in range(count):
            (length,) = struct.unpack_from(">H", raw, pos + 8)
            skip = 8 if version == 1 else 10 + (0 if length == 0xFFFF else length)
            (size,) = struct.unpack_from(">I", raw, pos + skip)
            starts.append(pos)
            skips.append(skip)
            pos += skip + 4 + size
    except struct.error:
        return None
    return (starts + [pos], skips) if pos == len(raw) else None


@settings(max_examples=300, deadline=None, print_blob=False)
@given(_writers_frame(), st.lists(st.tuples(st.sampled_from(("set", "cut", "insert", "end", "append")),
                                            st.integers(0, 1 << 20), st.integers(0, 255)), max_size=2))
def test_entries_chained_by_numpy_are_the_walks(frame, damage):
    """``_chained`` finds the entries of a writer's frame (messages that begin alike; in v2
    filter values of several lengths) without a step an entry: the walk's starts and skips whenever
    it gives an answer, and always when the descriptor's bytes do not recur inside the
    entries; none for a frame the entries do not fill (damaged: see ``_damaged``). The frame
    decodes to the walk's messages, or is refused as the walk refuses it, either way."""
    raw, count, clean, version = frame
    raw = _damaged(raw, damage)
    chained = entries._chained(raw, 5, count, version)
    walked = _walked(raw, 5, count, version)
    if chained is None:
        assert not (clean and not damage)
        event("left to the walk")
    else:
        event("chained")
        assert (chained[0].tolist(), chained[1].tolist()) == walked
    view = memoryview(raw)
    try:
        expected = walk_messages(view, 5, count, version)
    except (ValueError, struct.error):
        expected = None
    try:
        got = Publish.decode_content(view, 0, 2, version).messages
    except (ValueError, struct.error):
        got = None
    assert got == expected


def test_a_messages_first_bytes_inside_a_value_do_not_stop_the_chain():
    """A filter value and a body that hold the messages' first three bytes make candidates
    that no entry's chain leads to: they are dropped, and the entries are still found."""
    parts = []
    for k in range(300):
        value = b"\x00Sr" if k == 5 else b"r%d" % (k % 150)
        body = b"\x00Sr" + (b"a\x00Srb" if k == 7 else b"ab" * (k % 5))
        parts.append(struct.pack(">QH", k, len(value)) + value + struct.pack(">I", len(body)) + body)
    raw = struct.pack(">Bi", 3, 300) + b"".join(parts)
    chained = entries._chained(raw, 5, 300, 2)
    assert chained is not None
    assert (chained[0].tolist(), chained[1].tolist()) == _walked(raw, 5, 300)


def test_a_frame_of_the_first_bytes_over_and_over_is_left_to_the_walk():
    """Bodies that repeat the messages' second and third bytes (``53 72``) many times, as a
    hostile client may send: ``_chained`` gives up before it looks at each place (~4 ns a
    place), though these would chain (their first byte differs), and the walk gives the
    frame's messages."""
    raw = struct.pack(">Bi", 3, 300) + b"".join(
        struct.pack(">QH", k, 2) + b"r1" + struct.pack(">I", 93) + b"\x00Sr" + b"\x01Sr" * 30
        for k in range(300))
    assert entries._chained(raw, 5, 300, 2) is None
    view = memoryview(raw)
    assert Publish.decode_content(view, 0, 2, 2).messages == walk_messages(view, 5, 300, 2)
