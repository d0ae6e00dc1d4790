"""Stage 2 as columns (``amqp_stream.columns``) against the filter itself, record by record.

Chunks are built byte by byte from a few record layouts (keys in str8 and sym8, values in
every integer constructor, str8/str32/sym8, null, double, bool), every record padded through
its body to one size, so that records of different layouts share a stride: exactly what the
determinant check must catch. Whatever the column matcher answers for a chunk must be what
the general matcher (``Filter.bytes_matcher``) says of each record; and for chunks of one
layout it must answer (the shortcut is taken where it can be)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_stream import columns
from amqp_stream.columns import _Determinants, column_matcher
from amqp_stream.columns import _layout as _layout_of
from sqlfilter import compile_sql
from storage.format import entry_stride

_INT_CODES = {0x50: ">B", 0x51: ">b", 0x52: ">B", 0x53: ">B", 0x54: ">b", 0x55: ">b",
              0x60: ">H", 0x61: ">h", 0x70: ">I", 0x71: ">i", 0x80: ">Q", 0x81: ">q"}
_KINDS = ["int:%02x" % c for c in _INT_CODES] + ["uint0", "str8", "str32", "sym8", "null",
                                                  "double", "true"]


def _key(name: str, sym: bool) -> bytes:
    raw = name.encode()
    return bytes((0xA3 if sym else 0xA1, len(raw))) + raw


def _value(kind: str, v: int) -> bytes:
    if kind.startswith("int:"):
        code = int(kind[4:], 16)
        fmt = _INT_CODES[code]
        size = struct.calcsize(fmt)
        lo, hi = (0, 2 ** (8 * size) - 1) if fmt[1].isupper() else (-2 ** (8 * size - 1), 2 ** (8 * size - 1) - 1)
        return bytes((code,)) + struct.pack(fmt, min(max(v, lo), hi))
    text = b"z%02d" % (abs(v) % 100)
    return {"uint0": b"\x43", "null": b"\x40", "true": b"\x41",
            "double": b"\x82" + struct.pack(">d", v),
            "str8": b"\xa1" + bytes((len(text),)) + text,
            "str32": b"\xb1" + struct.pack(">I", len(text)) + text,
            "sym8": b"\xa3" + bytes((len(text),)) + text}[kind]


def _record(layout: tuple, values: list[int], body: int, mid: int) -> bytes:
    """``layout``: (header?, properties?, [(key, sym key?, kind)]) and the body's length."""
    header, props, entries = layout
    out = b""
    if header:
        out += b"\x00\x53\x70\xc0\x02\x01\x41"  # durable
    if props:
        text = b"id-%d" % mid
        item = b"\xa1" + bytes((len(text),)) + text
        out += b"\x00\x53\x73\xc0" + bytes((len(item) + 1, 1)) + item
    items = b"".join(_key(k, sym) + _value(kind, v) for (k, sym, kind), v in zip(entries, values[:len(entries)], strict=True))
    out += b"\x00\x53\x74\xc1" + bytes((len(items) + 1, 2 * len(entries))) + items
    return out + b"\x00\x53\x75\xa0" + bytes((body,)) + b"b" * body


_entry = st.tuples(st.sampled_from(["k", "zone", "j"]), st.booleans(), st.sampled_from(_KINDS))
_layout = st.tuples(st.booleans(), st.booleans(), st.lists(_entry, min_size=0, max_size=3))
_filters = st.one_of(
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(["k", "zone"]), st.integers(-3, 300)),
    st.builds(lambda k, v: f"{k} = 'z{v:02d}'", st.sampled_from(["k", "zone"]), st.integers(0, 12)),
    st.builds(lambda k, a, b: f"{k} IN ({a}, {b})", st.sampled_from(["k", "zone"]),
              st.integers(-2, 12), st.integers(250, 70000)),
    st.builds(lambda k, v: f"{k} IN ('z{v:02d}', 'zz')", st.sampled_from(["k", "zone"]), st.integers(0, 12)),
    st.builds(lambda k, op, v: f"{k} {op} {v}", st.sampled_from(["k", "zone"]),
              st.sampled_from(["<", "<=", ">", ">=", "<>"]), st.integers(-5, 300)))


def _chunk(records: list[bytes]) -> bytes:
    width = max(len(r) for r in records)
    padded = []
    for r in records:  # pad through the body: its length byte and its bytes (at most 255)
        extra = width - len(r)
        at = r.rindex(b"\x00\x53\x75\xa0")
        n = r[at + 4] + extra
        padded.append(r[:at] + b"\x00\x53\x75\xa0" + bytes((n,)) + b"b" * n)
    return b"".join(struct.pack(">I", len(r)) + r for r in padded), padded


_MATCHERS: dict = {}


def _truth(sql: str, records: list[bytes]) -> list[int]:
    general = compile_sql(sql).bytes_matcher()
    out = []
    for i, r in enumerate(records):
        try:
            if general(r):
                out.append(i)
        except Exception:
            pass
    return out


@settings(max_examples=300, deadline=None)
@given(layouts=st.lists(_layout, min_size=1, max_size=3), picks=st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(-3, 300), min_size=3, max_size=3),
              st.integers(0, 40)), min_size=2, max_size=30), sql=_filters)
def test_columns_answer_as_the_filter_does_record_by_record(layouts, picks, sql):
    records = [_record(layouts[p % len(layouts)], vals, body, i)
               for i, (p, vals, body) in enumerate(picks)]
    data, padded = _chunk(records)
    stride = entry_stride(data, len(padded))
    assert stride == len(padded[0]) + 4
    match = _MATCHERS.get(sql) or _MATCHERS.setdefault(sql, column_matcher(compile_sql(sql)))
    assert match is not None
    got = match(data, stride, len(padded))  # (one matcher over many chunks: the layout it
    # remembers from the last chunk must not answer for another)
    if got is not None:
        assert got == _truth(sql, padded), (sql, layouts)


@settings(max_examples=100, deadline=None)
@given(layout=_layout, picks=st.lists(st.lists(st.integers(-3, 12), min_size=3, max_size=3),
                                      min_size=2, max_size=40), sql=_filters)
def test_a_chunk_of_one_layout_is_matched_as_columns(layout, picks, sql):
    """One layout, values that keep each record's size (ids of one width, small numbers)."""
    records = [_record(layout, vals, 5, 10 + i % 90) for i, vals in enumerate(picks)]
    data, padded = _chunk(records)
    got = column_matcher(compile_sql(sql))(data, len(padded[0]) + 4, len(padded))
    key = sql.split()[0]
    mine = [(sym, kind) for k, sym, kind in layout[2] if k == key]
    text = "'" in sql
    handled = ("str8", "str32") if text else tuple(k for k in _KINDS if k.startswith("int:")) + ("uint0",)
    if got is None:  # left to the record-by-record matcher: a symbol key, a repeated key,
        assert len(mine) > 1 or any(sym or kind not in handled for sym, kind in mine)  # a type
    else:                                                           # the columns do not read
        assert got == _truth(sql, padded)
    if len(mine) == 1 and not mine[0][0] and mine[0][1] in handled or not mine:
        assert got is not None


def test_round_robin_values_find_their_one_percent():
    """The benchmark's shape: ``k = i % 100`` and ``zone = 'z<k>'``, 2,000 records."""
    records = [_record((False, True, [("k", False, "int:54"), ("zone", False, "str8")]),
                       [i % 100, i % 100, 0], 100, 100000 + i) for i in range(2000)]
    data, padded = _chunk(records)
    for sql in ("k = 7", "zone = 'z07'", "k < 10", "k IN (7, 8)", "zone IN ('z07', 'z08')"):
        got = column_matcher(compile_sql(sql))(data, len(padded[0]) + 4, 2000)
        assert got == _truth(sql, padded) and got, sql
    assert column_matcher(compile_sql("k = 7"))(data, len(padded[0]) + 4, 2000) == list(range(7, 2000, 100))


def test_text_values_with_nul_bytes_are_compared_whole():
    """String values compared as fixed-width strings (numpy's ``S``, which pads with NULs):
    values that differ only in NUL bytes, at the end or inside, are told apart."""
    values = ["a\x00\x00", "a\x00b", "\x00\x00\x00", "a\x00\x01", "ab\x00", "\x00ab", "aab"]
    records = []
    for i in range(40):
        text = values[i % len(values)].encode()
        item = b"\xa1\x04zone\xa1\x03" + text
        records.append(b"\x00\x53\x74\xc1" + bytes((len(item) + 1, 2)) + item
                       + b"\x00\x53\x75\xa0\x01b")
    data, padded = _chunk(records)
    for v in values:
        for sql in (f"zone = '{v}'", f"zone IN ('{v}', 'zz\x00')"):
            got = column_matcher(compile_sql(sql))(data, len(padded[0]) + 4, len(padded))
            assert got == _truth(sql, padded) and got, repr(sql)


def test_every_integer_constructor_under_every_operator():
    """Signed and unsigned constructors of every width, values at their edges."""
    for kind in [k for k in _KINDS if k.startswith("int:")] + ["uint0"]:
        layout = (False, False, [("j", False, "str8"), ("k", False, kind)])
        records = [_record(layout, [0, v, 0], 3, 0)
                   for v in (-129, -128, -3, -1, 0, 1, 7, 10, 127, 128, 200, 255, 256, 70000)]
        data, padded = _chunk(records)
        for sql in ("k < 10", "k >= -2", "k <> 7", "k = 255", "k = -1", "k IN (-1, 200, 70000)",
                    "k > 127", "k <= -129"):
            got = column_matcher(compile_sql(sql))(data, len(padded[0]) + 4, len(padded))
            assert got == _truth(sql, padded), (kind, sql)


def test_keys_of_one_length_in_another_order_are_another_layout():
    """Records of one size whose keys of one length come in another order, or another key of
    the filtered key's length in its place: the key bytes are determinants."""
    for a, b in ((["k", "j"], ["j", "k"]), (["k"], ["j"]), (["j"], ["k"]), (["zone", "j"], ["j", "zone"])):
        for kind, sql in (("int:54", "k = 7"), ("str8", "zone = 'z07'"), ("int:54", "k > 3")):
            la = (False, False, [(key, False, kind) for key in a])
            lb = (False, False, [(key, False, kind) for key in b])
            records = [_record(la if i % 3 else lb, [7, 7, 7], 3, 0) for i in range(9)]
            data, padded = _chunk(records)
            got = column_matcher(compile_sql(sql))(data, len(padded[0]) + 4, len(padded))
            assert got is None or got == _truth(sql, padded), (a, b, sql)


def test_one_matcher_over_chunks_of_other_layouts_of_one_size():
    """The layout a matcher remembers from the last chunk answers for the next only if that
    chunk's first record holds the same determinants."""
    match = column_matcher(compile_sql("k = 7"))
    a = (False, False, [("k", False, "int:54"), ("j", False, "int:54")])
    b = (False, False, [("j", False, "int:54"), ("k", False, "int:54")])
    for layout in (a, b, a, b):
        data, padded = _chunk([_record(layout, [7, 1, 0], 3, 0) for _ in range(5)])
        assert match(data, len(padded[0]) + 4, 5) == _truth("k = 7", padded)


@settings(max_examples=200, deadline=None)
@given(layout=_layout, picks=st.lists(st.lists(st.integers(-3, 12), min_size=3, max_size=3),
                                      min_size=3, max_size=30), data=st.data(), sql=_filters)
def test_entries_of_other_sizes_within_the_strides_length_are_not_columns(layout, picks, data, sql):
    """The reader gives the matcher a stride from the first entry and the section's length
    alone (``storage.reader._stride``): entries of other sizes that add up to that length
    (one shorter, one longer by as much) are seen by their headers, whatever the bodies."""
    records = [_record(layout, vals, 20, 10 + i % 90) for i, vals in enumerate(picks)]
    _, padded = _chunk(records)
    i, j = data.draw(st.lists(st.integers(1, len(padded) - 1), min_size=2, max_size=2, unique=True))
    d = data.draw(st.integers(1, 20))
    sized = list(padded)
    for at, delta in ((i, -d), (j, d)):
        r = sized[at]
        cut = r.rindex(b"\x00\x53\x75\xa0")
        body = r[cut + 4] + delta
        sized[at] = r[:cut] + b"\x00\x53\x75\xa0" + bytes((body,)) + b"b" * body
    chunk = b"".join(struct.pack(">I", len(r)) + r for r in sized)
    stride = len(sized[0]) + 4
    assert len(chunk) == stride * len(sized) and entry_stride(chunk, len(sized)) == 0
    got = column_matcher(compile_sql(sql))(chunk, stride, len(sized))
    assert got is None or got == _truth(sql, sized), (sql, layout)


def test_the_last_bytes_past_the_last_whole_word_are_checked():
    """Determinants in the few bytes of a chunk after its last 8-byte word (checked one by
    one): records of application properties alone, the last one's value constructor
    another of the same size (ubyte against smallint) there."""
    record = b"\x00\x53\x74\xc1\x06\x02\xa1\x01k\x54\x07"
    stride = len(record) + 4
    tried = 0
    for n in range(2, 20):
        if (stride * n) % 8 < 2:
            continue
        tried += 1
        data = (struct.pack(">I", len(record)) + record) * n
        other = data[:-2] + b"\x50\x07"
        assert column_matcher(compile_sql("k = 7"))(data, stride, n) == list(range(n))
        assert column_matcher(compile_sql("k = 7"))(other, stride, n) is None, n
    assert tried


def test_a_chunk_past_one_block_is_checked_to_its_end():
    """A chunk longer than one block of the determinant check (``_BLOCK_BYTES``), of one
    layout but for one record of another near its end; one matcher over growing chunks."""
    from amqp_stream import columns
    a = (False, False, [("k", False, "int:54"), ("j", False, "int:54")])
    b = (False, False, [("j", False, "int:54"), ("k", False, "int:54")])
    match = column_matcher(compile_sql("k = 7"))
    size = len(_record(a, [7, 7, 0], 100, 0)) + 4
    for n in (3, 40, columns._BLOCK_BYTES // size + 50, 2 * columns._BLOCK_BYTES // size + 7):
        for odd in (None, n - 2, n // 2):
            records = [_record(b if i == odd else a, [i % 100, 7, 0], 100, 0) for i in range(n)]
            data, padded = _chunk(records)
            got = match(data, size, n)
            if odd is None:
                assert got == list(range(7, n, 100)), n
            else:
                assert got is None or got == _truth("k = 7", padded), (n, odd)
                assert got is None, (n, odd)


def test_a_broker_answers_by_columns_as_it_does_record_by_record(tmp_path):
    """A real broker, a stream with a derived key on ``region`` and one without, messages of
    one size and layout (so chunks, and the derived key's blocks, are matched as columns):
    AMQP consumers get exactly the matching offsets."""
    from proton import Message

    from amqp_stream.client import connect
    from amqp_stream.derived_keys import ARGUMENT
    from amqp_stream.testing import BrokerProcess
    from conformance.streamclient import OK, StreamClient

    total = 3000
    ks = [i % 100 for i in range(total)]
    regions = [f"r{i // 100 % 30:02d}" for i in range(total)]
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]) as b:
        c = StreamClient("127.0.0.1", b.stream_port, timeout=10)
        for pid, (stream, arguments) in enumerate((("plain", {}), ("derived", {ARGUMENT: "region"})), 1):
            assert c.create_stream(stream, arguments) == OK
            assert c.declare_publisher(pid, stream) == OK
            for start in range(0, total, 500):  # confirmed frame by frame: several chunks
                ids = list(range(start, start + 500))
                c.publish(pid, [(i, bytes(Message(body=b"m%06d" % i, properties={
                    "region": regions[i], "k": ks[i]}).encode())) for i in ids])
                c.wait_confirms(pid, ids)
        c.close()
        client = connect(b.url)
        try:
            for stream in ("plain", "derived"):
                for sql, want in (("region = 'r07'", lambda i: regions[i] == "r07"),
                                  ("k = 7", lambda i: ks[i] == 7), ("k < 3", lambda i: ks[i] < 3),
                                  ("region IN ('r01', 'r29')", lambda i: regions[i] in ("r01", "r29"))):
                    consumer = client.consumer(stream, offset="first", sql=sql, credit=500)
                    got = [m.offset for m in consumer.read_available(end=total, timeout=30)]
                    consumer.close()
                    assert got == [i for i in range(total) if want(i)], (stream, sql)
        finally:
            client.close()


def test_a_record_of_another_layout_is_seen_in_every_block():
    """A chunk's determinants are checked a block of entries at a time, either over the
    entries as they lie (a short body: the determinants reach past half an entry) or over
    their first bytes copied side by side (a long body): one record of another layout of
    the same size, wherever it lies (first, last, either side of a block's end), is seen."""
    a = (False, True, [("k", False, "int:54"), ("zone", False, "str8")])
    b = (False, True, [("zone", False, "str8"), ("k", False, "int:54")])
    for body, compacted in ((2, False), (200, True)):
        first = _record(a, [0, 0, 0], body, 100000)
        stride = len(first) + 4
        check = _Determinants(stride, _layout_of(first, b"k")[0])
        assert bool(check.width) is compacted
        rows = columns._BLOCK_BYTES // (check.width or stride)  # (about: whole words)
        n = rows + 300
        records = [_record(a, [i % 100, i % 100, 0], body, 100000 + i) for i in range(n)]
        data, padded = _chunk(records)
        match = column_matcher(compile_sql("k = 7"))
        assert match(data, stride, n) == _truth("k = 7", padded) == list(range(7, n, 100))
        for at in (0, rows - 1, rows, rows + 1, n - 1):
            other = _record(b, [at % 100, at % 100, 0], body, 100000 + at)
            assert len(other) == len(records[at])
            odd = records[:at] + [other] + records[at + 1:]
            data, padded = _chunk(odd)
            assert column_matcher(compile_sql("k = 7"))(data, stride, n) is None, (body, at)
            assert match(data, stride, n) is None, (body, at)  # (after a chunk of layout a)
