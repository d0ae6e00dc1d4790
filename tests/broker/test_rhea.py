"""rhea (Node.js) clients against a real broker process: management, publishing, and consuming
with filters whose descriptors are ulong codes (0x120, 0x173, 0x174) beside the RabbitMQ symbols.

``tests/js/client.js`` does one thing per run, driven by a JSON spec, and prints what the broker
answered: outcomes, the attach echo (keys, descriptors and wire types), the messages. Consumers
stop at a final matching ``END`` message, so the lists compared are exactly what the broker let
through. The test skips only when ``node`` is not installed; a missing ``rhea`` is a failure
(``scripts/bootstrap`` installs it from ``tests/js/package-lock.json``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parents[1] / "js"
NODE = shutil.which("node")

pytestmark = [pytest.mark.skipif(NODE is None, reason="node is not installed"), pytest.mark.timeout(120)]

SQL, PROPERTIES, APP_PROPERTIES = 0x120, 0x173, 0x174
OFFSET, VALUES, UNFILTERED = "rabbitmq:stream-offset-spec", "rabbitmq:stream-filter", "rabbitmq:stream-match-unfiltered"
NAMES = {SQL: "amqp:sql-filter", PROPERTIES: "amqp:properties-filter", APP_PROPERTIES: "amqp:application-properties-filter"}


def rhea(broker, spec: dict) -> dict:
    if not (JS / "node_modules" / "rhea").is_dir():
        pytest.fail("rhea is not installed: run scripts/bootstrap (npm ci in tests/js)")
    spec = dict(spec, url=broker.url)
    done = subprocess.run([NODE, str(JS / "client.js"), json.dumps(spec)], capture_output=True, text=True,
                          timeout=60, cwd=JS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def management(broker, *requests: tuple[str, str, object]) -> list[dict]:
    result = rhea(broker, {"op": "management",
                           "requests": [{"method": m, "path": p, "body": b} for m, p, b in requests]})
    assert result["ok"], result
    return result["responses"]


def declare(broker, name: str) -> None:
    [response] = management(broker, ("PUT", f"/queues/{name}",
                                     {"durable": True, "arguments": {"x-queue-type": "stream"}}))
    assert response["subject"] == "201"


def publish(broker, name: str, messages: list[dict], one_at_a_time: bool = False) -> None:
    result = rhea(broker, {"op": "publish", "address": f"/queues/{name}", "messages": messages,
                           "one_at_a_time": one_at_a_time})
    assert result["ok"], result
    assert result["outcomes"] == ["accepted"] * len(messages)


def consume(broker, name: str, filters: list[dict], **extra) -> dict:
    return rhea(broker, {"op": "consume", "address": f"/queues/{name}", "filters": filters,
                         "until_body": "END", **extra})


def f(key: str, descriptor, value, type_: str = "string") -> dict:
    return {"key": key, "descriptor": descriptor, "value": value, "type": type_}


FIRST = f("offset", OFFSET, "first")


def bodies(result: dict) -> list[str]:
    assert result["ok"], result
    return [m["body"] for m in result["messages"]]


def echo(result: dict) -> dict:
    """The attach reply's filter as {key: (descriptor as sent back, value)}."""
    out = {}
    for key, entry in (result["attach_filter"] or {}).items():
        out[key] = (entry["descriptor"]["value"], entry["value"])
    return out


def test_management_through_rhea(broker, stream_name):
    body = {"durable": True, "arguments": {"x-queue-type": "stream"}}
    created, again, info, deleted, missing = management(
        broker, ("PUT", f"/queues/{stream_name}", body), ("PUT", f"/queues/{stream_name}", body),
        ("GET", f"/queues/{stream_name}", None), ("DELETE", f"/queues/{stream_name}", None),
        ("GET", f"/queues/{stream_name}", None))
    assert [r["subject"] for r in (created, again, info, deleted, missing)] == ["201", "200", "200", "200", "404"]
    assert [r["correlation_id"] for r in (created, again, info)] == ["req-0", "req-1", "req-2"]
    assert info["body"]["name"] == stream_name and info["body"]["type"] == "stream"


def test_publish_and_consume_everything(broker, stream_name):
    declare(broker, stream_name)
    publish(broker, stream_name, [{"body": f"m{i}", "application_properties": {"i": i}} for i in range(20)]
            + [{"body": "END"}])
    result = consume(broker, stream_name, [FIRST])
    assert bodies(result) == [f"m{i}" for i in range(20)]
    assert [m["message_annotations"]["x-stream-offset"] for m in result["messages"]] == list(range(20))
    assert [m["application_properties"] for m in result["messages"]] == [{"i": i} for i in range(20)]
    assert result["attach_source_address"] == f"/queues/{stream_name}"
    assert echo(result) == {"offset": (OFFSET, "first")}


@pytest.fixture
def fruit(broker, stream_name):
    declare(broker, stream_name)
    publish(broker, stream_name, [
        {"body": "a1", "filter_value": "apple", "subject": "fruit", "application_properties": {"region": "emea", "n": 1}},
        {"body": "b1", "filter_value": "banana", "subject": "fruit", "application_properties": {"region": "amer", "n": 2}},
        {"body": "u1", "application_properties": {"region": "emea", "n": 3}},
        {"body": "a2", "filter_value": "apple", "subject": "tree", "application_properties": {"region": "apac", "n": 4}},
        {"body": "END", "filter_value": "apple", "subject": "fruit", "application_properties": {"region": "emea", "n": 99}},
    ], one_at_a_time=True)  # one chunk per message: stage 1 is exact per message
    return stream_name


def test_sql_filter_as_ulong_code(broker, fruit):
    result = consume(broker, fruit, [FIRST, f("sql-filter", SQL, "region = 'emea' AND n >= 1")])
    assert bodies(result) == ["a1", "u1"]
    assert echo(result)["sql-filter"][1] == "region = 'emea' AND n >= 1"
    assert echo(result)["sql-filter"][0] in (SQL, NAMES[SQL])
    assert list(result["attach_filter"]) == ["offset", "sql-filter"]  # order as sent


def test_properties_filter_as_ulong_code(broker, fruit):
    result = consume(broker, fruit, [FIRST, f("props", PROPERTIES, {"subject": "fruit"}, "symbol_map")])
    assert bodies(result) == ["a1", "b1"]
    assert echo(result)["props"][0] in (PROPERTIES, NAMES[PROPERTIES])


def test_application_properties_filter_as_ulong_code(broker, fruit):
    result = consume(broker, fruit, [FIRST, f("app", APP_PROPERTIES, {"region": "emea"}, "map")])
    assert bodies(result) == ["a1", "u1"]
    assert echo(result)["app"][0] in (APP_PROPERTIES, NAMES[APP_PROPERTIES])


def test_stage_one_values_and_match_unfiltered_as_symbols(broker, fruit):
    result = consume(broker, fruit, [FIRST, f("values", VALUES, ["apple"], "list")])
    assert bodies(result) == ["a1", "a2"]
    result = consume(broker, fruit, [FIRST, f("values", VALUES, ["apple"], "list"),
                                     f("unfiltered", UNFILTERED, True, "bool")])
    assert bodies(result) == ["a1", "u1", "a2"]
    assert list(echo(result)) == ["offset", "values", "unfiltered"]
    # a single string is a value too, and stage 1 combines with an ulong-coded SQL filter
    result = consume(broker, fruit, [FIRST, f("values", VALUES, "apple"), f("sql", SQL, "n > 1")])
    assert bodies(result) == ["a2"]


def test_offset_as_long_and_link_names(broker, fruit):
    # the same link name again on a new connection starts afresh (no state kept by link name)
    one = consume(broker, fruit, [f("offset", OFFSET, 3, "long")], link_name="same-name")
    two = consume(broker, fruit, [f("offset", OFFSET, 1, "long")], link_name="same-name")
    assert bodies(one) == ["a2"]
    assert bodies(two) == ["b1", "u1", "a2"]


def test_invalid_sql_is_left_out_of_the_echo(broker, fruit):
    result = consume(broker, fruit, [FIRST, f("sql-filter", SQL, "region = = 'emea'")])
    assert "sql-filter" not in echo(result)
    assert echo(result) == {"offset": (OFFSET, "first")}
    assert bodies(result) == ["a1", "b1", "u1", "a2"]  # no filter in place: everything


def test_unparseable_offset_refuses_the_link(broker, fruit):
    result = consume(broker, fruit, [f("offset", OFFSET, "yesterday-ish")])
    assert not result["ok"]
    assert result["attach_filter"] is None and result["attach_source_address"] is None
    assert "receiver closed" in result["error"] and "amqp:invalid-field" in result["error"]


def test_management_link_pair_reopened_under_other_names_gets_replies(broker, stream_name):
    """rhea closes its /management pair and opens one with other names on the same session: the
    new pair is answered (replies once went to the first pair's closed sender)."""
    result = rhea(broker, {"op": "management", "link_name": "first", "reopen_as": "second",
                           "requests": [{"method": "PUT", "path": f"/queues/{stream_name}",
                                         "body": {"durable": True, "arguments": {}}},
                                        {"method": "GET", "path": f"/queues/{stream_name}"}],
                           "timeout_ms": 8000})
    assert result["ok"], result
    assert [r["subject"] for r in result["responses"]] == ["201", "200"]
    assert [r["subject"] for r in result["responses2"]] == ["200", "200"]
    assert result["responses2"][1]["body"]["name"] == stream_name
