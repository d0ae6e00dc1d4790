"""`read` decodes each record's AMQP message (issue 25 item 21): the body as `consume` prints
it, properties and annotations in `--json`, and the stored bytes under their own name
(`message_b64`). Records written by a real broker from `publish`, and one that is not AMQP."""

from __future__ import annotations

import base64
import json

from amqp_stream.testing import BrokerProcess
from storage import Stream, StreamConfig
from tests.cli.test_commands import cli

LINES = ['{"id": 1, "region": "eu"}', "plain\ttext", "héllo"]


def test_read_prints_decoded_bodies_and_keeps_the_bytes_apart(tmp_path):
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        assert cli("declare", "ev", url=b.url).returncode == 0
        r = cli("publish", "ev", "--filter-value-from", "region", url=b.url, stdin=LINES[0] + "\n")
        assert r.returncode == 0, r.stderr
        r = cli("publish", "ev", "--property", "k=v", url=b.url, stdin=f"{LINES[1]}\n{LINES[2]}\n")
        assert r.returncode == 0, r.stderr
    log = data / "streams" / "ev" / "log"

    r = cli("read", str(log), "--no-follow")
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t", 2) for line in r.stdout.splitlines()]
    assert [(row[0], row[2]) for row in rows] == [
        ("0", LINES[0]), ("1", "plain\\ttext"), ("2", "héllo")]

    r = cli("read", str(log), "--no-follow", "--json")
    assert r.returncode == 0, r.stderr
    first, second, _ = [json.loads(line) for line in r.stdout.splitlines()]
    assert first["body"] == LINES[0] and first["filter_value"] == "eu"
    assert first["application_properties"] == {"id": 1, "region": "eu"}
    assert second["body"] == "plain\ttext" and second["application_properties"] == {"k": "v"}
    raw = base64.b64decode(first["message_b64"])
    assert len(raw) == first["size"] and LINES[0].encode() in raw and len(raw) > len(LINES[0])
    assert "body_b64" not in first


def test_a_record_that_is_not_an_amqp_message(tmp_path):
    with Stream.open(tmp_path / "log", StreamConfig(fsync="never")) as s:
        s.append(b"\xffnot amqp")
    r = cli("read", str(tmp_path / "log"), "--no-follow", "--json")
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert record["body"] == "base64:" + base64.b64encode(b"\xffnot amqp").decode()
    assert record["decode_error"] and base64.b64decode(record["message_b64"]) == b"\xffnot amqp"
