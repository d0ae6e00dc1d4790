"""Subscribe properties: stage-1 values, match-unfiltered, and the stage-2 extension
(``sql-filter``, ``property.<field>``, ``application-property.<key>``) over stored bytes."""

from __future__ import annotations

import pytest
from proton import Message, symbol

from amqp_stream.errors import BadRequest
from amqp_stream.stream_listener.subscription_filters import parse


def stored(**kw) -> bytes:
    return Message(**kw).encode()


def test_stage1_properties():
    f = parse({"filter.0": "a", "filter.1": "b", "match-unfiltered": "TRUE", "other": "x"})
    assert (f.values, f.match_unfiltered, f.match, f.stage2) == (["a", "b"], True, None, None)
    assert parse({}).match_unfiltered is False


def test_sql_filter():
    f = parse({"sql-filter": "n > 3 AND region LIKE 'eu%'"})
    assert f.stage2 == "sql"
    assert f.match(stored(body="x", properties={"n": 4, "region": "eu-west"}))
    assert not f.match(stored(body="x", properties={"n": 3, "region": "eu-west"}))


def test_property_filters_convert_to_each_fields_type():
    f = parse({"property.subject": "orders", "property.content-type": "text/plain",
               "property.group-sequence": "7", "application-property.region": "&p:eu"})
    assert f.stage2 == "properties"
    good = stored(body="x", subject="orders", content_type=symbol("text/plain"),
                  group_sequence=7, properties={"region": "eu-north"})
    assert f.match(good)
    assert not f.match(stored(body="x", subject="orders", content_type=symbol("text/plain"),
                              group_sequence=7, properties={"region": "us"}))
    assert not f.match(stored(body="x", subject="other", content_type=symbol("text/plain"),
                              group_sequence=7, properties={"region": "eu"}))


@pytest.mark.parametrize("props", [
    {"sql-filter": "n >"},
    {"sql-filter": "n = 1", "property.subject": "s"},
    {"property.no-such-field": "x"},
    {"property.creation-time": "yesterday"},
])
def test_unusable_filters_are_bad_requests(props):
    with pytest.raises(BadRequest):
        parse(props)
