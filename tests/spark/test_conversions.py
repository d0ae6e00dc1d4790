"""Declared columns: every AMQP type read as every declared Spark type (issue 25 item 14).

One table (``EXPECTED``, as docs/spark.md "Declared columns" gives it) is checked twice: on
``to_spark`` over values decoded from real encoded messages, and through a real Spark read of a
message carrying each AMQP value under one property per declared type. Before, a declared STRING
over an AMQP int32 read as proton's repr ``'int32(5)'``.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from decimal import Decimal

import proton
import pytest
from pyspark.sql.types import StructType

from amqp_stream import client as amqp
from amqp_stream.spark.mapping import check_readable, to_spark

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
D70 = dt.date(1970, 1, 1)
UUID = uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
DECLARED = ["STRING", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "BOOLEAN", "BINARY",
            "TIMESTAMP", "TIMESTAMP_NTZ", "DATE", "DECIMAL(12,2)", "ARRAY<STRING>", "MAP<STRING,INT>",
            "STRUCT<k: INT>"]
JSON_TYPES = {"STRING": "string", "TINYINT": "byte", "SMALLINT": "short", "INT": "integer", "BIGINT": "long",
              "FLOAT": "float", "DOUBLE": "double", "BOOLEAN": "boolean", "BINARY": "binary",
              "TIMESTAMP": "timestamp", "TIMESTAMP_NTZ": "timestamp_ntz", "DATE": "date",
              "DECIMAL(12,2)": "decimal(12,2)",
              "ARRAY<STRING>": {"type": "array", "elementType": "string", "containsNull": True},
              "MAP<STRING,INT>": {"type": "map", "keyType": "string", "valueType": "integer",
                                  "valueContainsNull": True},
              "STRUCT<k: INT>": {"type": "struct", "fields": [
                  {"name": "k", "type": "integer", "nullable": True, "metadata": {}}]}}


def ts(ms: float) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


N = None
# AMQP type, value -> the value read as each DECLARED type (N: no reading as that type, null)
EXPECTED = {
    "boolean": (True, ["true", N, N, N, N, N, N, True, N, N, N, N, N, N, N, N]),
    "ubyte": (proton.ubyte(200), ["200", N, 200, 200, 200, 200.0, 200.0, N, N, ts(200), ts(200), D70,
                                  Decimal("200.00"), N, N, N]),
    "ushort": (proton.ushort(40000), ["40000", N, N, 40000, 40000, 40000.0, 40000.0, N, N, ts(40000),
                                      ts(40000), D70, Decimal("40000.00"), N, N, N]),
    "uint": (proton.uint(3_000_000_000), ["3000000000", N, N, N, 3_000_000_000, 3e9, 3e9, N, N, ts(3e9),
                                          ts(3e9), dt.date(1970, 2, 4), Decimal("3000000000.00"), N, N, N]),
    "ulong": (proton.ulong(2**64 - 1), ["18446744073709551615", N, N, N, N, 2.0**64, 2.0**64, N, N, N, N, N,
                                        N, N, N, N]),
    "byte": (proton.byte(-5), ["-5", -5, -5, -5, -5, -5.0, -5.0, N, N, ts(-5), ts(-5), dt.date(1969, 12, 31),
                               Decimal("-5.00"), N, N, N]),
    "short": (proton.short(-300), ["-300", N, -300, -300, -300, -300.0, -300.0, N, N, ts(-300), ts(-300),
                                   dt.date(1969, 12, 31), Decimal("-300.00"), N, N, N]),
    "int": (proton.int32(5), ["5", 5, 5, 5, 5, 5.0, 5.0, N, N, ts(5), ts(5), D70, Decimal("5.00"), N, N, N]),
    "long": (2**40, [str(2**40), N, N, N, 2**40, 2.0**40, 2.0**40, N, N, ts(2**40), ts(2**40),
                     dt.date(2004, 11, 3), N, N, N, N]),
    "float": (proton.float32(1.5), ["1.5", N, N, N, N, 1.5, 1.5, N, N, ts(1.5), ts(1.5), D70, Decimal("1.50"),
                                    N, N, N]),
    "double": (0.1, ["0.1", N, N, N, N, f32(0.1), 0.1, N, N, ts(0.1), ts(0.1), D70, Decimal("0.10"), N, N, N]),
    "decimal32": (proton.decimal32(7), [N] * 16),
    "char": (proton.char("A"), ["A", 65, 65, 65, 65, 65.0, 65.0, N, N, ts(65), ts(65), D70, Decimal("65.00"),
                                N, N, N]),
    "timestamp": (proton.timestamp(1_700_000_000_123), [
        "2023-11-14T22:13:20.123Z", N, N, N, 1_700_000_000_123, f32(1.700000000123e12), 1.700000000123e12, N,
        N, ts(1_700_000_000_123), ts(1_700_000_000_123), dt.date(2023, 11, 14), N, N, N, N]),
    "uuid": (UUID, [str(UUID), N, N, N, N, N, N, N, UUID.bytes, N, N, N, N, N, N, N]),
    "binary": (b"caf\xc3\xa9", ["café", N, N, N, N, N, N, N, b"caf\xc3\xa9", N, N, N, N, N, N, N]),
    "not_utf8": (b"\xff\x00", [N, N, N, N, N, N, N, N, b"\xff\x00", N, N, N, N, N, N, N]),
    "string": ("42", ["42", N, N, N, N, N, N, N, b"42", N, N, N, Decimal("42.00"), N, N, N]),
    "symbol": (proton.symbol("2026-01-02T03:04:05"), [
        "2026-01-02T03:04:05", N, N, N, N, N, N, N, b"2026-01-02T03:04:05", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), dt.date(2026, 1, 2), N, N, N, N]),
    "true_text": ("True", ["True", N, N, N, N, N, N, N, b"True", N, N, N, N, N, N, N]),
    "json_text": ('{"k": 1}', ['{"k": 1}', N, N, N, N, N, N, N, b'{"k": 1}', N, N, N, N, N, {"k": 1}, (1,)]),
    "nan": (float("nan"), [N, N, N, N, N, "nan", "nan", N, N, N, N, N, N, N, N, N]),
    "list": (["x", 3], [N, N, N, N, N, N, N, N, N, N, N, N, N, ["x", "3"], N, N]),
    "map": ({"k": 7}, [N, N, N, N, N, N, N, N, N, N, N, N, N, N, {"k": 7}, (7,)]),
}


def decoded(app: dict) -> proton.Message:
    """A message as a consumer decodes it (binaries are views into it: keep it while reading)."""
    back = proton.Message()
    back.decode(proton.Message(body=b"", properties=app).encode())
    return back


def dtype(ddl: str):
    return StructType.fromJson({"type": "struct", "fields": [
        {"name": "c", "type": JSON_TYPES[ddl], "nullable": True, "metadata": {}}]}).fields[0].dataType


def comparable(v):
    """Spark's and to_spark's values in one form: timestamps as UTC instants, binaries as bytes."""
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, tuple):
        return tuple(v)
    if isinstance(v, float) and v != v:
        return "nan"  # NaN equals nothing; the table writes it "nan"
    return v


@pytest.mark.parametrize("amqp_type", list(EXPECTED))
def test_every_amqp_type_as_every_declared_type(amqp_type):
    value, expected = EXPECTED[amqp_type]
    message = decoded({"v": value})
    got = [comparable(to_spark(message.properties["v"], dtype(d))) for d in DECLARED]
    assert got == [comparable(e) for e in expected], list(zip(DECLARED, got, expected, strict=True))


def test_a_type_no_amqp_value_has_fails_at_planning(spark, broker):
    schema = StructType.fromJson({"type": "struct", "fields": [
        {"name": "d", "type": "interval day to second", "nullable": True, "metadata": {}}]})
    with pytest.raises(ValueError, match=r"column d: type interval day to second cannot be read"):
        check_readable(schema)
    df = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", "any")
          .option("properties", "d INTERVAL DAY TO SECOND").load())
    with pytest.raises(Exception, match=r"column d: type interval day to second cannot be read"):
        df.collect()


def test_spark_reads_the_whole_matrix(spark, broker, stream_name):
    props = {f"{t}__{i}": v for t, (v, _) in EXPECTED.items() for i in range(len(DECLARED))}
    with amqp.connect(broker.url) as c:
        c.declare(stream_name)
        with c.publisher(stream_name) as pub:
            pub.publish(b"x", application_properties=props)
            pub.flush()
    ddl = ", ".join(f"`{t}__{i}` {d}" for t in EXPECTED for i, d in enumerate(DECLARED))
    df = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
          .option("properties", ddl).load())
    (row,) = df.collect()
    for t, (_, expected) in EXPECTED.items():
        got = [comparable(row[f"{t}__{i}"]) for i in range(len(DECLARED))]
        assert got == [comparable(e) for e in expected], (t, list(zip(DECLARED, got, expected, strict=True)))
    # the case: a declared STRING over an AMQP int matches its digits (Spark's filter)
    for pushdown in ("false", "true"):
        df = (spark.read.format("amqp-stream").option("url", broker.url).option("stream", stream_name)
              .option("properties", "`int__0` STRING").option("pushdown", pushdown).load())
        assert df.where("`int__0` = '5'").count() == 1, pushdown
