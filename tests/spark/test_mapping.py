"""Row <-> message mapping, on real encoded messages (no broker, no Spark session)."""

from __future__ import annotations

import datetime as dt
import json

import proton
import pytest
from pyspark.sql.types import StructType

from amqp_stream.client import StreamMessage
from amqp_stream.spark.mapping import BASE_COLUMNS, WritePlan, declared_columns, message_to_row

# StructType.fromDDL needs a session; build the schemas from JSON instead.
SCHEMA = StructType.fromJson({"type": "struct", "fields": [
    {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in [
        ("region", "string"), ("n", "integer"), ("big", "long"), ("amount", "double"), ("ok", "boolean"),
        ("ts", "timestamp"), ("day", "date"), ("tags", {"type": "array", "elementType": "string", "containsNull": True}),
        ("message_id", "string"), ("subject", "string"), ("missing", "string")]]})


def roundtrip(msg: proton.Message, offset: int = 7) -> StreamMessage:
    """What a consumer gets back: the encoded message with x-stream-offset added."""
    msg.annotations = dict(msg.annotations or {}, **{proton.symbol("x-stream-offset"): offset})
    back = proton.Message()
    back.decode(msg.encode())
    return StreamMessage.from_message(back)


def test_row_without_body_column_becomes_json_with_typed_application_properties():
    plan = WritePlan.for_schema(SCHEMA, "region")
    ts = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    row = ("eu", 3, 2**40, 1.25, True, ts, dt.date(2026, 1, 2), ["a", "b"], "id-1", "hello", None)
    m = roundtrip(plan.message(row))
    assert m.filter_value == "eu" and m.offset == 7
    assert m.properties["message_id"] == "id-1" and m.properties["subject"] == "hello"
    assert m.properties["content_type"] == "application/json"
    body = json.loads(m.body)
    assert body["region"] == "eu" and body["n"] == 3 and body["tags"] == ["a", "b"] and body["missing"] is None
    app = m.message.properties
    assert isinstance(app["n"], proton.int32) and app["big"] == 2**40 and app["amount"] == 1.25
    assert app["ok"] is True and app["ts"] == proton.timestamp(int(ts.timestamp() * 1000))
    assert app["day"] == "2026-01-02" and json.loads(app["tags"]) == ["a", "b"]
    assert "missing" not in app and "message_id" not in app and app["region"] == "eu"


def test_message_back_to_a_row_with_declared_columns():
    plan = WritePlan.for_schema(SCHEMA, "region")
    ts = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    row = ("eu", 3, 2**40, 1.25, False, ts, dt.date(2026, 1, 2), ["x"], "id-1", "hello", None)
    full = StructType(BASE_COLUMNS.fields + SCHEMA.fields)
    out = message_to_row(roundtrip(plan.message(row), 42), declared_columns(full))
    offset, timestamp, fv, body, app = out[:5]
    assert offset == 42 and fv == "eu" and json.loads(body)["big"] == 2**40
    assert timestamp is not None
    assert app["n"] == "3" and app["ok"] == "false" and app["region"] == "eu"
    region, n, big, amount, ok, ts_back, day, tags, mid, subject, missing = out[5:]
    assert (region, n, big, amount, ok, day, tags, mid, subject, missing) == \
        ("eu", 3, 2**40, 1.25, False, dt.date(2026, 1, 2), ["x"], "id-1", "hello", None)
    assert ts_back == ts


def test_body_column_is_the_body_and_checked():
    schema = StructType.fromJson({"type": "struct", "fields": [
        {"name": "body", "type": "binary", "nullable": True, "metadata": {}},
        {"name": "k", "type": "string", "nullable": True, "metadata": {}}]})
    m = roundtrip(WritePlan.for_schema(schema).message((bytearray(b"\x00raw"), "v")))
    assert m.body == b"\x00raw" and m.filter_value is None and m.application_properties == {"k": "v"}
    assert "content_type" not in m.properties
    bad = StructType.fromJson({"type": "struct", "fields": [
        {"name": "body", "type": "integer", "nullable": True, "metadata": {}}]})
    with pytest.raises(ValueError, match="binary or string"):
        WritePlan.for_schema(bad)
    with pytest.raises(ValueError, match="filterValueColumn 'nope'"):
        WritePlan.for_schema(schema, "nope")
