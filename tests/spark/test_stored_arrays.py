"""``stored_arrays`` (a batch of one shape read as columns) gives the batches ``stored_adder``
gives: random batches whose messages share a shape (sections, keys, property count) while
their values and encodings vary (smallint or int, str8 or str32, map8 or map32, nulls, empty
strings, NaN...), now and then with a message of another shape among them (which must send the
batch to ``stored_adder``), random declared schemas and filter values; no broker, no Spark."""

from __future__ import annotations

import struct

import numpy as np
import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from amqp_stream.client.names import FILTER_VALUE
from amqp_stream.spark import stored_arrays
from amqp_stream.spark.batches import Columns
from amqp_stream.spark.mapping import BASE_COLUMNS, declared_columns, fixed_columns
from amqp_stream.spark.stored_arrays import StoredBatches, stored_batch
from amqp_stream.spark.stored_columns import stored_adder
from amqp_stream.wire import encode
from tests.spark.test_batches import _same
from tests.spark.test_stored_columns import KEYS, TYPES, _compound, messages, schemas

_ints = st.one_of(st.integers(-128, 127), st.integers(-(2**63), 2**63 - 1),
                  st.integers(-(2**31), 2**31 - 1).map(proton.int32), st.integers(-128, 127).map(proton.byte),
                  st.integers(0, 255).map(proton.ubyte))
_texts = st.text(max_size=5) | st.sampled_from(["r01", "", "é"])
_KINDS = {"int": _ints, "str": _texts, "double": st.floats(allow_nan=True, allow_infinity=True),
          "bool": st.booleans(), "mixed": _ints | _texts | st.floats() | st.booleans()}
# a properties list's fields, by PROPERTY_ORDER
# a properties list's fields, by PROPERTY_ORDER: a writer's values, and (ODD) others the walk
# leaves to today's path, or that fail it, drawn in some batches only
_ODD = {0: st.just(proton.ulong(7)), 8: st.just("x"), 9: st.integers(2**59, 2**62).map(proton.timestamp)}
_PROPERTIES = [
    st.sampled_from(["m-1", "", "m-22", "é", "m-333"]),  # message_id
    st.binary(max_size=3),  # user_id
    _texts, _texts, _texts, _texts,  # to, subject, reply_to, correlation_id
    st.sampled_from(["application/json", ""]).map(proton.symbol), st.just(proton.symbol("gzip")),
    st.sampled_from([0, 1001]).map(proton.timestamp),  # absolute_expiry_time
    st.sampled_from([0, 1001, 1795823780661]).map(proton.timestamp)
    | st.integers(-(2**40), 2**48).map(proton.timestamp),  # creation_time
    _texts, st.integers(0, 3).map(proton.uint), _texts]


def _str32(s: str) -> bytes:
    raw = s.encode()
    return b"\xb1" + struct.pack(">I", len(raw)) + raw


def _value(draw, kind: str) -> bytes:
    """A value of ``kind``, null now and then, a str32 for a string now and then."""
    if draw(st.integers(0, 5)) == 0:
        return b"\x40"
    v = draw(_KINDS[kind])
    if isinstance(v, str) and draw(st.integers(0, 3)) == 0:
        return _str32(v)
    return _spoilt(draw, encode(v))


def _spoilt(draw, encoded: bytes) -> bytes:
    """``encoded``, or now and then a text the walk cannot decode (not UTF-8, a symbol not ASCII)."""
    if draw(st.integers(0, 40)):
        return encoded
    return draw(st.sampled_from([b"\xa1\x02\xff\xfe", b"\xa3\x02\xc3\xa9", b"\xa1\x03\xed\xa0\x80"]))


# the declared types a writer's column of each kind is read as (text as a double: a decimal
# written as its text, read as DOUBLE: null, a text is no number)
_MATCHING = {"int": ["integer", "long", "byte", "double"], "str": ["string", "double"], "double": ["double"],
             "bool": ["boolean"], "mixed": ["string"]}


def _declared(draw, kinds: dict[str, str]) -> StructType:
    """Declared columns: the shape's keys, mostly of the type their values take as they are,
    and properties (message_id, subject: text) and keys the messages lack."""
    names = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
    if draw(st.booleans()):  # a writer's id column
        names = ["message_id", *(n for n in names if n != "message_id")]
    fields = []
    for n in names:
        usual = _MATCHING[kinds[n]] if n in kinds else ["string"]
        t = draw(st.sampled_from(usual * 5 + TYPES))
        fields.append({"name": n, "type": t, "nullable": True, "metadata": {}})
    declared = StructType.fromJson({"type": "struct", "fields": fields})
    return declared_columns(StructType(list(BASE_COLUMNS.fields) + list(declared.fields)))


@st.composite
def shaped(draw) -> tuple[list[bytes], StructType]:
    """Messages of one shape (a writer's), their values drawn one by one, and declared columns."""
    order = draw(st.permutations([0x72, 0x73, 0x74, 0x75]))
    present = [c for c in order if draw(st.integers(0, 4))]
    annotation_keys = draw(st.permutations([k for k in (FILTER_VALUE, "x-stream-other") if draw(st.booleans())]))
    fv_kind = draw(st.sampled_from(["str", "str", "int"]))
    count = draw(st.integers(0, len(_PROPERTIES)))
    nulls = [draw(st.integers(0, 3)) == 0 for _ in range(count)]
    fields = [_PROPERTIES[i] | _ODD[i] if i in _ODD and draw(st.integers(0, 5)) == 0 else _PROPERTIES[i]
              for i in range(count)]
    app = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
    kinds = {k: draw(st.sampled_from(["int", "str", "double", "bool", "int", "str", "mixed"])) for k in app}
    out = []
    for _ in range(draw(st.integers(1, 8))):
        sections = []
        for code in present:
            if code == 0x72:
                items = [encode(proton.symbol(k))
                         + (_value(draw, fv_kind) if k == FILTER_VALUE else encode(draw(st.integers(0, 9))))
                         for k in annotation_keys]
                value = _compound(draw, "map", items)
            elif code == 0x73:
                value = _compound(draw, "list", [b"\x40" if nulls[i] or not draw(st.integers(0, 9))
                                                 else _spoilt(draw, encode(draw(fields[i]))) for i in range(count)])
            elif code == 0x74:
                value = _compound(draw, "map", [encode(k) + _value(draw, kinds[k]) for k in app])
            else:
                body = draw(st.binary(max_size=300))
                value = (b"\xb0" + struct.pack(">I", len(body)) + body) if draw(st.integers(0, 3)) == 0 \
                    else encode(body)
            sections.append(bytes((0, 0x53, code)) + value)
        out.append(b"".join(sections))
    return out, _declared(draw, kinds)


def _reference(datas: list[bytes], declared: StructType, stream, wanted) -> list | str:
    """Today's rows: ``stored_adder`` a message, one batch."""
    try:
        columns = Columns(declared, stream)
        add = stored_adder(columns, wanted)
        for i, d in enumerate(datas):
            add(d, 100 + i)
        return columns.batch().to_pylist()
    except Exception as exc:  # noqa: BLE001 - bytes no way reads, a time past year 9999: both fail alike
        return type(exc).__name__


def _columns(datas: list[bytes], declared: StructType, stream, wanted) -> list | str:
    try:
        batches = StoredBatches(Columns(declared, stream), wanted)
        batches.extend(100, datas)
        batch = batches.batch()
        return [] if batch is None else batch.to_pylist()
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__


_wanted = st.none() | st.sampled_from([("r01",), ("r01", ""), ("é", "5")])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped(), st.lists(messages(), max_size=1), st.integers(0, 8), schemas(), st.booleans(),
       st.none() | st.just("p-1"), _wanted)
def test_columns_give_the_rows_of_the_walk(batch, other, at, random_schema, random, stream, wanted):
    """Of one shape, or with a message of another among them: the same rows (or the same error)."""
    datas, declared = batch
    if random:
        declared = random_schema
    datas = datas[:at] + other + datas[at:]
    assert _same(_columns(datas, declared, stream, wanted), _reference(datas, declared, stream, wanted))


def _usual_schema() -> StructType:
    return declared_columns(StructType.fromJson({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in [("n", "integer"), ("region", "string"), ("amount", "double"), ("k", "long"),
                     ("message_id", "string"), ("ok", "boolean"), ("absent", "timestamp")]]}))


def _usual(i: int) -> bytes:
    """What proton writes (the sink's AMQP 1.0 path), ids of several lengths."""
    m = proton.Message(body=f'{{"n": {i}}}'.encode(), id=f"m-{i}", creation_time=1795823780.661 + i,
                       content_type="application/json")
    m.properties = {"n": proton.int32(i * 1000 - 50_000), "region": f"r{i % 3}", "amount": i * 0.25,
                    "k": i * 3 - 200, "ok": i % 2 == 0, "none": None, "u": proton.ubyte(i % 256)}
    m.annotations = {proton.symbol(FILTER_VALUE): f"r{i % 3}"}
    return bytes(m.encode())


@pytest.mark.parametrize("wanted", [None, ("r0", "r2")])
def test_the_usual_messages_are_read_as_columns(wanted):
    """proton's messages (a writer's: smallint and int, smalllong and long, ids of several
    lengths) are of one shape: read as columns, the walk's rows."""
    declared = _usual_schema()
    datas = [_usual(i) for i in range(300)]
    got = stored_batch(Columns(declared), datas, np.arange(100, 400), wanted)
    assert got is not None
    assert _same(got.to_pylist(), _reference(datas, declared, None, wanted))
    assert got.num_rows == (300 if wanted is None else 200)


@pytest.mark.parametrize("decimal_amount", [False, True])
def test_the_sinks_messages_are_read_as_columns(decimal_amount):
    """The Spark sink's own messages (``ArrowEncoder``, the bench's rows) are of one shape; a
    decimal ``amount`` (written as its text) read as DOUBLE too (null: a text is no number)."""
    import decimal

    import pyarrow as pa
    from pyspark.sql.types import DecimalType, DoubleType, IntegerType, LongType, StringType, StructField

    from amqp_stream.spark.encoding import ArrowEncoder
    from amqp_stream.spark.mapping import WritePlan
    fields = [StructField("n", IntegerType()), StructField("region", StringType()),
              StructField("amount", DoubleType()), StructField("message_id", StringType()),
              StructField("k", LongType())]
    ids = range(-200, 800)
    amounts = pa.array([i * 0.1 for i in ids])
    write_fields = list(fields)
    if decimal_amount:
        write_fields[2] = StructField("amount", DecimalType(22, 2))
        amounts = pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(22, 2))
    batch = pa.RecordBatch.from_arrays([
        pa.array([i * 999 for i in ids], pa.int32()), pa.array([f"r{i % 7}" for i in ids]), amounts,
        pa.array([f"m-{i}" for i in ids]), pa.array([i * 3**30 for i in ids], pa.int64())],
        names=[f.name for f in fields])
    write_schema = StructType(write_fields)
    datas = ArrowEncoder(WritePlan.for_schema(write_schema, "region"), write_schema).encode(batch)
    declared = declared_columns(StructType(list(BASE_COLUMNS.fields) + fields))
    got = stored_batch(Columns(declared), datas, np.arange(100, 100 + len(datas)))
    assert got is not None and _same(got.to_pylist(), _reference(datas, declared, None, None))


def test_a_batch_of_another_shape_is_read_by_the_walk(monkeypatch):
    """A message whose application properties hold another key: the batch goes to the walk,
    whose rows come out."""
    declared = _usual_schema()
    other = proton.Message(body=b"x", properties={"n": proton.int32(5), "extra": "y"})
    datas = [_usual(i) for i in range(5)] + [bytes(other.encode())]
    assert stored_batch(Columns(declared), datas, np.arange(6)) is None
    walked = []
    real = stored_arrays.stored_adder

    def counting(columns, wanted):
        add = real(columns, wanted)
        return lambda d, o: walked.append(o) or add(d, o)
    monkeypatch.setattr(stored_arrays, "stored_adder", counting)
    assert _same(_columns(datas, declared, None, None), _reference(datas, declared, None, None))
    assert walked == list(range(100, 106))



@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=12), st.integers(0, 3), st.integers(0, 14),
       st.integers(0, 14), st.booleans())
def test_a_chunks_records_in_a_range(bodies, at, start, stop, sub_batch):
    """``stream_read._rows`` keeps a delivered chunk's records within the range (as spans of the
    chunk, or through ``decode_records`` when a sub-batch is among them), numbered from the
    chunk's id, and says whether the range is done."""
    from storage.format import CHUNK_HEADER_BYTES, encode_chunk, encode_entries, encode_subbatch
    from amqp_stream.spark.offsets import OffsetRange
    from amqp_stream.spark.stream_read import _rows

    datas = [b"\x00\x53\x75" + encode(b) for b in bodies]
    at = min(at, len(datas))
    if sub_batch:
        data = encode_entries(datas[:at]) + encode_subbatch(datas[at:]) if at < len(datas) else encode_entries(datas)
        entries = at + (at < len(datas))
    else:
        data, entries = encode_entries(datas), len(datas)
    chunk = b"".join(encode_chunk(100, 0, data, entries, len(datas)))
    assert len(chunk) == CHUNK_HEADER_BYTES + len(data)
    rng = OffsetRange(100 + start, 100 + max(start, stop))
    batches = StoredBatches(Columns(declared_columns(StructType(list(BASE_COLUMNS.fields)))))
    done = _rows(chunk, rng, batches)
    batch = batches.batch()
    rows = [] if batch is None else [(r["offset"], r["body"]) for r in batch.to_pylist()]
    assert rows == [(100 + i, b) for i, b in enumerate(bodies) if rng.start <= 100 + i < rng.end]
    assert done == (rng.end <= 100 + len(datas))


@pytest.mark.parametrize("content_type, read", [(b"\xa3\x10application/json", True), (b"\xa3\x02\xc3\xa9", False),
                                                (b"\xa1\x03\xed\xa0\x80", False), (b"\xa1\x02\xc3\xa9", True)])
def test_a_text_alike_in_every_message_is_checked_once(content_type, read):
    """A content type the same in every message is checked once, as the walk would check each:
    a symbol that is not ASCII, a string that is not UTF-8, leave the batch to the walk."""
    declared = _usual_schema()
    datas = []
    for i in range(50):
        props = b"\xa1\x03m-" + bytes([0x30 + i % 10]) + b"\x40" * 5 + content_type
        datas.append(b"\x00\x53\x73\xc0" + bytes([len(props) + 1, 7]) + props
                     + b"\x00\x53\x74\xc1\x06\x02\xa1\x01n\x54" + bytes([i]) + b"\x00\x53\x75\xa0\x01x")
    got = stored_batch(Columns(declared), datas, np.arange(len(datas)))
    assert (got is not None) == read
    assert _same(_columns(datas, declared, None, None), _reference(datas, declared, None, None))


_ENCODED = {0x71: ">i", 0x81: ">q", 0x51: ">b", 0x54: ">b", 0x55: ">b", 0x50: ">B", 0x52: ">B", 0x53: ">B",
            0x82: ">d"}


@pytest.mark.parametrize("code, values", [(0x71, [5, -70000, 2**31 - 1]), (0x81, [7, -(2**40), 2**63 - 1]),
                                          (0x54, [-128, 0, 127]), (0x55, [-3, 4, 100]), (0x51, [-1, 2, 3]),
                                          (0x50, [0, 200, 255]), (0x52, [1, 128, 3]), (0x53, [9, 250, 0]),
                                          (0x82, [1.5, -0.0, 1e300])])
@pytest.mark.parametrize("declared_type", ["byte", "short", "integer", "long", "double"])
@pytest.mark.parametrize("null_at", [None, 1])
def test_numbers_of_one_encoding_in_a_column_of_any_width(code, values, declared_type, null_at):
    """A column whose values all have one encoding is read as it lies when the declared type
    holds every value of that encoding (no bounds check, no mask): its rows are still the
    walk's, where a value does not fit (a ubyte 200 as a byte, an int as a short), and where
    a null is among them (each message's constructor then differs: no longer one encoding)."""
    fields = [{"name": "a", "type": declared_type, "nullable": True, "metadata": {}}]
    declared = declared_columns(StructType(list(BASE_COLUMNS.fields)
                                           + list(StructType.fromJson({"type": "struct", "fields": fields}).fields)))
    datas = []
    for i, v in enumerate(values * 20):
        value = b"\x40" if i == null_at else bytes([code]) + struct.pack(_ENCODED[code], v)
        items = b"\xa1\x01a" + value
        datas.append(b"\x00\x53\x74\xc1" + bytes([len(items) + 1, 2]) + items + b"\x00\x53\x75\xa0\x01x")
    assert _same(_columns(datas, declared, None, None), _reference(datas, declared, None, None))


@st.composite
def _given(draw, declared: StructType, stream) -> StructType:
    """A schema given with ``.schema(...)``: some of the whole read's columns, in any order."""
    whole = list(fixed_columns(stream is not None).fields) + list(declared.fields)
    picked = draw(st.lists(st.sampled_from(range(len(whole))), unique=True, min_size=1, max_size=len(whole)))
    return StructType([whole[i] for i in picked])


def _read_as(datas: list[bytes], columns: Columns, wanted, walk: bool) -> tuple[list, list] | str:
    """(column names, rows) of one batch read as columns, or by the walk."""
    try:
        if walk:
            add = stored_adder(columns, wanted)
            for i, d in enumerate(datas):
                add(d, 100 + i)
            batch = columns.batch()
        else:
            batches = StoredBatches(columns, wanted)
            batches.extend(100, datas)
            batch = batches.batch()
        return ([], []) if batch is None else (batch.schema.names, batch.to_pylist())
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped(), st.none() | st.just("p-1"), _wanted, st.data())
def test_a_given_schema_gives_those_columns_of_the_whole_read(batch, stream, wanted, data):
    """``Columns.of`` a given schema (fixed columns left out, any order): as columns and by the
    walk, the whole read's rows, those columns in that order. A column left out is not made, so
    an error only it would raise (a time past year 9999) is not raised."""
    datas, declared = batch
    given_schema = data.draw(_given(declared, stream))
    whole = _columns(datas, declared, stream, wanted)
    names = given_schema.names
    for walk in (False, True):
        got = _read_as(datas, Columns.of(given_schema, stream), wanted, walk)
        if isinstance(whole, str):
            assert got == whole or not isinstance(got, str), (got, whole)
            continue
        assert not isinstance(got, str), got
        got_names, got_rows = got
        assert got_rows == [] or got_names == names
        assert _same(got_rows, [{n: r[n] for n in names} for r in whole])


def _fields_of(f) -> list:
    """``_Fields`` as plain lists, to compare two ways of finding them."""
    def field(x):
        return None if x is None else [np.asarray(x[0]).tolist(), np.asarray(x[1]).tolist(), np.asarray(x[2]).tolist()]
    return [field(f.fv), None if f.props is None else [field(p) for p in f.props], f.app_keys,
            [field(v) for v in f.app_values], field(f.body)]


def _found(datas: list[bytes], declared: StructType):
    """(fields by layout or None, fields by ``_walk`` or the exception's name) of one batch."""
    b = stored_arrays._Batch.of(datas)
    checked = stored_arrays._checked_when_made(Columns(declared))
    try:
        laid = stored_arrays._laid_out(b, checked)
    except (stored_arrays._Shape, IndexError) as exc:
        laid = type(exc).__name__
    try:
        walked = _fields_of(stored_arrays._walk(b, checked))
    except (stored_arrays._Shape, IndexError) as exc:
        walked = type(exc).__name__
    return (laid if laid is None or isinstance(laid, str) else _fields_of(laid)), walked


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped(), st.integers(0, 3))
def test_fields_found_by_layout_are_the_walks(batch, copies):
    """Where the first message's layout holds for every message, its fields are those ``_walk``
    finds, step by step (or ``_walk`` refuses the batch alike: a text that is not UTF-8).
    Copies of the first message make batches whose layout holds more often."""
    datas, declared = batch
    datas = datas[:1] * copies + datas
    laid, walked = _found(datas, declared)
    if laid is not None:
        assert laid == walked


def _sink_messages(ids) -> list[bytes]:
    import pyarrow as pa
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField

    from amqp_stream.spark.encoding import ArrowEncoder
    from amqp_stream.spark.mapping import WritePlan
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                         StructField("amount", DoubleType()), StructField("message_id", StringType()),
                         StructField("k", LongType())])
    batch = pa.RecordBatch.from_arrays([
        pa.array(list(ids), pa.int32()), pa.array([f"r{i % 7:02d}" for i in ids]),
        pa.array([i * 0.25 for i in ids]), pa.array([f"m-{i}" for i in ids]),
        pa.array([i * 3 for i in ids], pa.int64())], names=schema.names)
    return [bytes(d) for d in ArrowEncoder(WritePlan.for_schema(schema, "region"), schema).encode(batch)]


def test_the_sinks_messages_of_one_layout_are_read_by_it():
    """The sink's messages with ids of one length (their JSON bodies of several lengths end
    them): found by layout, the walk's fields and rows; one key spoilt in one message of the
    same length, and the batch is left to ``_walk`` (which refuses it)."""
    datas = _sink_messages(range(100_000, 101_000))
    assert len({len(d) for d in datas}) > 1
    declared = _usual_schema()
    laid, walked = _found(datas, declared)
    assert laid is not None and laid == walked
    assert _same(_columns(datas, declared, None, None), _reference(datas, declared, None, None))
    spoilt = list(datas)
    spoilt[500] = spoilt[500].replace(b"region", b"regiom")
    laid, walked = _found(spoilt, declared)
    assert laid is None and walked == "_Shape"
    assert _same(_columns(spoilt, declared, None, None), _reference(spoilt, declared, None, None))


def _small(constructor: int, items: list[bytes]) -> bytes:
    """A list8 or map8 (``constructor``) of ``items`` (a map's: keys and values)."""
    body = b"".join(items)
    return bytes([constructor, len(body) + 1, len(items)]) + body


@st.composite
def texts_of_several_lengths(draw) -> tuple[list[bytes], StructType]:
    """Messages laid out alike but for the lengths of their texts (ids, keys' values, a filter
    value, a body that ends them or not), the encodings fixed for the batch; now and then one
    message spoilt (a list's or map's size off by one, a key changed, a text not UTF-8)."""
    lengths = st.integers(0, 12)
    fv = draw(st.booleans())
    props = draw(st.sampled_from([None, "message_id", "message_id+subject"]))
    app = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=4))
    kinds = {k: draw(st.sampled_from(["str", "str", "int", "double"])) for k in app}
    str32 = {k: draw(st.integers(0, 4)) == 0 for k in app}
    body = draw(st.sampled_from(["end", "middle", None]))

    def text(key: str | None = None) -> bytes:
        raw = "é".encode() * draw(st.integers(0, 1)) + b"x" * draw(lengths)
        return (b"\xb1" + struct.pack(">I", len(raw)) if key and str32[key] else bytes([0xA1, len(raw)])) + raw

    out = []
    for i in range(draw(st.integers(1, 12))):
        sections = []
        if fv:
            sections.append(b"\x00\x53\x72" + _small(0xC1, [encode(proton.symbol(FILTER_VALUE)), text()]))
        if props:
            fields = [text(), b"\x40", b"\x40", text() if "subject" in props else b"\x40", b"\x40", b"\x40",
                      encode(proton.symbol("application/json")), b"\x40", b"\x40",
                      encode(proton.timestamp(1795823780661 + i))]
            sections.append(b"\x00\x53\x73" + _small(0xC0, fields))
        if body == "middle":
            sections.append(b"\x00\x53\x75" + encode(bytes(draw(lengths))))
        values = {"str": lambda k: text(k), "int": lambda k: encode(proton.int32(1000 + i)),
                  "double": lambda k: encode(i * 0.5)}
        sections.append(b"\x00\x53\x74" + _small(0xC1, [x for k in app for x in (encode(k), values[kinds[k]](k))]))
        if body == "end":
            sections.append(b"\x00\x53\x75" + encode(bytes(draw(lengths))))
        out.append(b"".join(sections))
    if len(out) > 1 and draw(st.integers(0, 3)) == 0:
        i = draw(st.integers(1, len(out) - 1))
        m = bytearray(out[i])
        where = draw(st.sampled_from([at for at in range(len(m) - 1) if m[at] in (0xC0, 0xC1, 0xA1)] or [0]))
        m[where + 1] = (m[where + 1] + draw(st.sampled_from([1, 255]))) % 256 if m[where] != 0xA1 \
            else m[where + 1]
        if m[where] == 0xA1 and len(m) > where + 2:
            m[where + 2] = draw(st.sampled_from([0xFF, ord("y")]))
        out[i] = bytes(m)
    return out, _declared(draw, kinds)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts_of_several_lengths())
def test_texts_of_several_lengths_are_read_by_layout(batch):
    """Messages laid out alike but for their texts' lengths: read in segments, the fields
    ``_walk`` finds and the rows ``stored_adder`` gives (or both refuse a spoilt message)."""
    datas, declared = batch
    laid, walked = _found(datas, declared)
    if laid is not None:
        assert laid == walked
    assert _same(_columns(datas, declared, None, None), _reference(datas, declared, None, None))


def test_texts_of_several_lengths_make_segments():
    """The batches above are read in more than one segment, and by layout most of the time
    (the property test is not vacuous)."""
    seen = []
    original = stored_arrays._segments

    def counted(*args):
        cut = original(*args)
        seen.append(0 if cut is None else len(cut[0]))
        return cut

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(texts_of_several_lengths())
    def run(batch):
        _found(*batch)

    stored_arrays._segments = counted
    try:
        run()
    finally:
        stored_arrays._segments = original
    assert sum(n > 1 for n in seen) > len(seen) // 3


def test_a_filter_value_twice_is_not_read_by_layout():
    """Two filter-value annotations in every message: ``_walk`` refuses the batch, and so does
    the layout (which would otherwise keep the second): the walk's rows, or its error, come out."""
    declared = _usual_schema()
    items = (b"\xa3\x15" + FILTER_VALUE.encode() + b"\xa1\x02r1") * 2
    ann = b"\x00\x53\x72\xc1" + bytes([1 + len(items), 4]) + items
    datas = [ann + b"\x00\x53\x75\xa0\x01" + bytes([i]) for i in range(20)]
    laid, walked = _found(datas, declared)
    assert laid is None and walked == "_Shape"
    assert _same(_columns(datas, declared, None, None), _reference(datas, declared, None, None))


def test_structure_past_a_long_value_is_compared():
    """A 64-byte value between two keys: either key spoilt in one message leaves the batch to
    ``_walk`` (the rows compared reach past the value); unspoilt, the layout's fields are the
    walk's."""
    declared = _usual_schema()

    def message(i: int, first_key: bytes = b"a", second_key: bytes = b"b") -> bytes:
        items = (b"\xa1\x01" + first_key + b"\xa1\x40" + bytes([0x41 + i % 26]) * 64
                 + b"\xa1\x01" + second_key + b"\x54" + bytes([i]))
        return (b"\x00\x53\x74\xc1" + bytes([1 + len(items), 4]) + items
                + b"\x00\x53\x75\xa0\x01" + bytes([i]))

    datas = [message(i) for i in range(40)]
    laid, walked = _found(datas, declared)
    assert laid is not None and laid == walked
    for spoilt in (message(7, second_key=b"c"), message(7, first_key=b"c")):
        laid, walked = _found(datas[:7] + [spoilt] + datas[8:], declared)
        assert laid is None and walked == "_Shape"


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.data())
def test_reads_from_the_segments_are_the_buffers(length, count, data):
    """Once ``keep`` keeps the segments' rows (every message's bytes from a place of its own in
    each), ``fixed``, ``same`` and ``spans`` at ``place(k, d)`` read them from those rows: the
    same values as read from the buffer (positions that are not ``place``'s), at every segment,
    distance and width (texts of one size or several, some null), with messages that differ
    or not."""
    base = data.draw(st.binary(min_size=length + 16, max_size=length + 16))
    datas = [bytes(b if data.draw(st.integers(0, 3)) else data.draw(st.integers(0, 255)) for b in base)
             for _ in range(count)]
    b = stored_arrays._Batch.of(datas)
    width = -(-length // 8) * 8
    segments = data.draw(st.integers(1, 3))
    bases = [b.starts] + [b.starts + np.array(data.draw(st.lists(st.integers(0, 8), min_size=count, max_size=count)))
                          for _ in range(segments - 1)]
    b.keep(bases, [b.rows_at(at, width) for at in bases])
    k = data.draw(st.integers(0, segments - 1))
    d = data.draw(st.integers(0, length - 1))
    size = data.draw(st.integers(1, length - d))
    pos, plain = b.place(k, d), bases[k] + d
    assert b.in_head(pos, size) is not None and b.in_head(plain, size) is None
    for dtype in ("u1", ">u4", ">i8", ">f8"):
        if d + np.dtype(dtype).itemsize <= width:
            got, want = b.fixed(pos, dtype), b.fixed(plain, dtype)
            assert got.tobytes() == want.tobytes()
    want = [x[s + d:s + d + size] for x, s in zip(datas, (bases[k] - b.starts).tolist(), strict=True)]
    assert b.same(pos, size) == b.same(plain, size) == (len(set(want)) == 1)
    valid = np.ones(count, bool)
    assert b.spans(pos, np.full(count, size), valid).to_pylist() == want
    sizes = data.draw(st.lists(st.integers(0, length - d), min_size=count, max_size=count))  # of several lengths
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=count, max_size=count)))
    got = b.spans(pos, np.array(sizes), valid).to_pylist()
    assert got == [x[s + d:s + d + n] if ok else None
                   for x, s, n, ok in zip(datas, (bases[k] - b.starts).tolist(), sizes, valid, strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5), st.integers(1, 24),
       st.integers(0, 5), st.data())
def test_rows_of_the_pieces_are_the_joined_bytes_to_each_pieces_end(pieces, width, d, data):
    """``_rows`` before the pieces are joined: each message's row is the joined buffer's bytes
    from its place up to its piece's end, zeros after; once joined, the joined buffer's."""
    starts: list[int] = []
    begin = 0
    for piece in pieces:  # messages start anywhere in their piece, at least one a piece
        places = data.draw(st.sets(st.integers(0, len(piece) - 1), min_size=1, max_size=4))
        starts += [begin + p for p in sorted(places)]
        begin += len(piece)
    ends = starts[1:] + [begin]
    piece_end = {s: next(b for b in np.cumsum([len(p) for p in pieces]) if b > s) for s in starts}
    b = stored_arrays._Batch(pieces, np.array(starts), np.array(ends))
    at = b.starts + d
    rows = b._rows(at, width)
    joined = b"".join(pieces) + bytes(stored_arrays._PAD + 64)
    for row, s, a in zip(rows, starts, at.tolist(), strict=True):
        have = max(0, min(width, int(piece_end[s]) - a))
        assert row.tobytes() == joined[a:a + have] + bytes(width - have)
    assert "raw" not in b.__dict__  # nothing joined for them
    if int(at.max()) + width <= b.size + stored_arrays._PAD:  # within the joined buffer and its pad
        b.raw  # noqa: B018 - joined now
        assert [r.tobytes() for r in b._rows(at, width)] == [joined[a:a + width] for a in at.tolist()]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 5), st.integers(0, 3), st.data())
def test_alike_is_the_masked_rows_compared(n, k, skew, data):
    """``_alike`` (the last row first, then flat runs of words against repeated masks, over
    ``_ROWS`` rows at a time) says what comparing every masked row with the first says, for
    rows one after the other and for a column of wider rows, with a row that differs anywhere."""
    words = np.tile(np.array(data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=k + skew, max_size=k + skew)),
                             np.uint64), (n, 1))
    if data.draw(st.booleans()):
        i, j = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, k + skew - 1)) if k + skew else 0
        if k + skew:
            words[i, j] ^= np.uint64(1) << np.uint64(data.draw(st.integers(0, 63)))
    masks = np.array(data.draw(st.lists(st.sampled_from([0, 2**64 - 1, 0xFF00, 2**63]), min_size=k, max_size=k)),
                     np.uint64)
    column = words[:, skew:skew + k]  # not one after the other when skew or the rows are wider
    want = bool(((column & masks) == (column[0] & masks)).all())
    assert stored_arrays._alike(column, masks) is want
    assert stored_arrays._alike(np.ascontiguousarray(column), masks) is want


@pytest.mark.parametrize("ids", [range(100_000, 103_000), range(8_500, 11_500)])
def test_a_laid_out_batch_of_chunks_is_read_from_its_pieces(monkeypatch, ids):
    """Chunks of the sink's messages of one layout (ids of one length, or of two: two
    segments), read without their bodies: their rows come from the chunks where they lie, the
    ids of several lengths from those rows, and the chunks are never joined (the join was a
    copy of every byte); the rows are the walk's."""
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField

    datas = _sink_messages(ids)
    laid, walked = _found(datas, _usual_schema())
    assert laid is not None and laid == walked
    schema = StructType([StructField("n", IntegerType()), StructField("region", StringType()),
                         StructField("amount", DoubleType()), StructField("message_id", StringType()),
                         StructField("k", LongType())])
    want = Columns.of(schema)
    add = stored_adder(want, None)
    for i, d in enumerate(datas):
        add(d, i)
    monkeypatch.setattr(stored_arrays._Batch, "raw", property(lambda self: pytest.fail("the chunks were joined")))
    batches = StoredBatches(Columns.of(schema))
    first = 0
    for size in (1, 700, 1299, 1000):  # chunks: a header's bytes, then size-prefixed records
        records = datas[first:first + size]
        piece = bytes(11) + b"".join(struct.pack(">I", len(r)) + r for r in records)
        lengths = np.array([len(r) for r in records])
        ends = 11 + np.cumsum(lengths + 4)
        batches.extend_spans(first, piece, ends - lengths, ends)
        first += size
    got = batches.batch()
    assert got is not None and got.num_rows == len(datas)
    assert _same(got.to_pylist(), want.batch().to_pylist())
