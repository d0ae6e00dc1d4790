"""The client commands run as real subprocesses against the session broker.

Each test drives `python -m amqp_stream <command>` exactly as a user would, and checks the exact
stdout, the stderr reports and the exit code (0 ok, 1 runtime failure, 2 usage).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from amqp_stream.testing import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(180)

EVENTS = [
    {"id": 1, "region": "eu", "n": 10, "name": "alpha"},
    {"id": 2, "region": "us", "n": 20, "name": "beta"},
    {"id": 3, "region": "eu", "n": 30, "tags": ["x", "y"]},
    {"id": 4, "n": 40},
    {"id": 5, "region": "apac", "n": 50, "ok": True},
]
LINES = [json.dumps(e) for e in EVENTS]


def cli(*args: str, url: str | None = None, stdin: str | None = None, timeout: float = 120
        ) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("AMQP_STREAM_URL", None)
    command = [sys.executable, "-m", "amqp_stream", *args]
    if url is not None:
        command += ["--url", url]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def declared(broker, stream_name) -> str:
    r = cli("declare", stream_name, url=broker.url)
    assert r.returncode == 0, r.stderr
    yield stream_name
    cli("delete", stream_name, url=broker.url)


@pytest.fixture
def events(broker, declared, tmp_path) -> str:
    """The stream with EVENTS published from a JSON-lines file, filter value from `region`."""
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    r = cli("publish", declared, "--file", str(path), "--filter-value-from", "region", url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"published 5 messages to {declared}\n"), r.stderr
    return declared


def consume(broker, stream, *args) -> subprocess.CompletedProcess:
    return cli("consume", stream, "--no-follow", *args, url=broker.url)


def test_declare_info_delete(broker, stream_name):
    r = cli("declare", stream_name, "--max-age", "7D", "--filter-size-bytes", "32", url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"created {stream_name}\n"), r.stderr
    r = cli("declare", stream_name, "--max-age", "7D", "--filter-size-bytes", "32", url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"exists {stream_name}\n")
    r = cli("declare", stream_name, "--max-age", "8D", url=broker.url)
    assert r.returncode == 1 and "exists with other arguments" in r.stderr
    r = cli("info", stream_name, url=broker.url)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["name"] == stream_name and info["type"] == "stream"
    assert info["arguments"]["x-max-age"] == "7D"
    assert info["arguments"]["x-stream-filter-size-bytes"] == 32
    r = cli("delete", stream_name, url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"deleted {stream_name} (0 messages)\n")
    r = cli("info", stream_name, url=broker.url)
    assert r.returncode == 1 and f"stream '{stream_name}' not found" in r.stderr


def test_declare_invalid_argument_is_runtime_failure(broker, stream_name):
    r = cli("declare", stream_name, "--filter-size-bytes", "300", url=broker.url)
    assert r.returncode == 1
    assert "refused" in r.stderr and "x-stream-filter-size-bytes" in r.stderr


def test_usage_errors_exit_2(broker, stream_name):
    assert cli("declare", url=broker.url).returncode == 2
    assert cli("declare", stream_name, "--max-length-bytes", "lots", url=broker.url).returncode == 2
    r = cli("info", stream_name, "--max-age", "1D", url=broker.url)
    assert r.returncode == 2 and "unrecognized arguments: --max-age" in r.stderr
    assert cli("consume", stream_name, "--from", "bogus", url=broker.url).returncode == 2
    assert cli("consume", stream_name, "--sql", "a = 1", "--property", "a=1", url=broker.url).returncode == 2
    assert cli("publish", stream_name, "--property", "novalue", url=broker.url).returncode == 2


def test_consume_everything_plain(broker, events):
    r = consume(broker, events)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == LINES
    assert 'filters in place: rabbitmq:stream-offset-spec="first"' in r.stderr


def test_consume_stage1_filter(broker, events):
    r = consume(broker, events, "--filter", "eu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [LINES[0], LINES[2]]
    assert 'rabbitmq:stream-filter="eu"' in r.stderr
    r = consume(broker, events, "--filter", "eu", "--filter", "apac", "--match-unfiltered")
    assert r.stdout.splitlines() == [LINES[0], LINES[2], LINES[3], LINES[4]]


def test_consume_sql(broker, events):
    r = consume(broker, events, "--sql", "n >= 20 AND n < 50 AND region IS NOT NULL")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [LINES[1], LINES[2]]
    assert 'sql-filter="n >= 20 AND n < 50 AND region IS NOT NULL"' in r.stderr
    r = consume(broker, events, "--sql", "ok")
    assert r.stdout.splitlines() == [LINES[4]]


def test_consume_property_filter(broker, events):
    r = consume(broker, events, "--property", "region=&p:e", "--property", "n=30")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [LINES[2]]


def test_consume_count_and_offset(broker, events):
    r = cli("consume", events, "--from", "1", "--count", "2", url=broker.url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == LINES[1:3]


def test_consume_json(broker, events):
    r = consume(broker, events, "--json", "--filter", "eu")
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["offset"] for rec in records] == [0, 2]
    assert records[0] == {
        "offset": 0, "filter_value": "eu", "properties": {}, "annotations": {},
        "application_properties": {"id": 1, "region": "eu", "n": 10, "name": "alpha"},
        "body": LINES[0],
    }
    assert records[1]["application_properties"]["tags"] == '["x","y"]'


def test_bad_filter_refused_before_connecting():
    """Nothing listens at the URL: exit 2 (not 1) shows the filter was refused before connecting."""
    url = f"amqp://127.0.0.1:{free_port()}"
    r = cli("consume", "s", "--sql", "n >= ", url=url)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("amqp-stream consume: error: --sql: unexpected end of expression at character 6\n"
                        "  n >= \n       ^\n")
    r = cli("consume", "s", "--property", "p.subjekt=x", url=url)
    assert r.returncode == 2 and "--property: amqp:properties-filter: unknown field" in r.stderr
    r = cli("perf", "--consumer-sql", "value = 'v0' AN x", url=url)
    assert r.returncode == 2 and r.stdout == ""
    assert "--consumer-sql: unexpected 'AN' at character 14" in r.stderr


class _BrokerWithoutSql(BrokerProcess):
    """A broker built without the SQL filter (a supported build: SQL filters are left out of the
    attach reply, as RabbitMQ before 4.2 does)."""

    def command(self):
        serve = super().command()
        return [serve[0], "-c", "import sqlfilter; del sqlfilter.compile_sql; "
                "from amqp_stream.cli import main; raise SystemExit(main())", *serve[3:]]


def test_left_out_filter_fails_unless_allowed(tmp_path):
    with _BrokerWithoutSql(tmp_path / "data") as b:
        assert cli("declare", "ev", url=b.url).returncode == 0
        assert cli("publish", "ev", url=b.url, stdin="\n".join(LINES) + "\n").returncode == 0
        r = cli("consume", "ev", "--no-follow", "--sql", "n >= 20", url=b.url)
        assert r.returncode == 1 and r.stdout == ""
        assert "the broker left out filter(s) sql-filter" in r.stderr
        r = cli("consume", "ev", "--no-follow", "--sql", "n >= 20", "--allow-missing-filters", url=b.url)
        assert r.returncode == 0, r.stderr
        assert "warning: the broker left out filter sql-filter" in r.stderr
        assert r.stdout.splitlines() == LINES  # not filtered: the broker did not put it in place
        r = cli("perf", "--stream", "ev", "--duration", "30", "--consumer-sql", "n >= 20", url=b.url)
        assert r.returncode == 1 and r.stdout == ""  # failed before the load, no summary
        assert "left out consumer filter(s) sql-filter" in r.stderr


def test_publish_stdin_text_and_filter_value(broker, declared):
    r = cli("publish", declared, "--filter-value", "k", "--property", "src=stdin", "--property", "n=7",
            url=broker.url, stdin="one\n\ntwo\n")
    assert (r.returncode, r.stdout) == (0, f"published 2 messages to {declared}\n"), r.stderr
    r = consume(broker, declared, "--json")
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["body"], x["filter_value"], x["application_properties"]) for x in records] == [
        ("one", "k", {"src": "stdin", "n": 7}), ("two", "k", {"src": "stdin", "n": 7})]


def test_publish_json_format_rejects_bad_line(broker, declared):
    r = cli("publish", declared, "--format", "json", url=broker.url, stdin='{"a": 1}\nnot json\n')
    assert r.returncode == 1 and "line 2" in r.stderr


def test_publish_to_missing_stream(broker, stream_name):
    r = cli("publish", stream_name, url=broker.url, stdin="x\n")
    assert r.returncode == 1 and "not found" in r.stderr


def test_consume_missing_stream(broker, stream_name):
    r = consume(broker, stream_name)
    assert r.returncode == 1 and "not found" in r.stderr


@pytest.mark.parametrize("command", [["info", "s"], ["publish", "s"], ["consume", "s", "--count", "1"],
                                     ["perf", "--duration", "1"]], ids=lambda c: c[0])
def test_unreachable_broker_exit_1(command):
    url = f"amqp://127.0.0.1:{free_port()}"
    r = cli(*command, "--timeout", "5", url=url, stdin="x\n")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith(f"amqp-stream {command[0]}: error:")


def _summary(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines())


def _consumer_figures(text: str) -> dict[str, str]:
    return dict(part.split("=") for part in text.split())


def test_perf_prints_summary(broker):
    r = cli("perf", "--duration", "2", "--producers", "1", "--consumers", "2", "--rate", "300",
            "--filter-values", "3", "--filter-run", "10", "--consumer-filter", "v0",
            "--consumer-sql", "value = 'v0'", url=broker.url)
    assert r.returncode == 0, r.stderr
    summary = _summary(r.stdout)
    published = int(summary["published"])
    assert published > 0 and summary["rejected"] == "0"
    # values come in runs of 10: v0 x10, v1 x10, v2 x10, v0 ...; SQL keeps exactly the v0 ones
    expected = sum(1 for n in range(published) if (n // 10) % 3 == 0)
    figures = _consumer_figures(summary["consumer_0"])
    assert figures["delivered"] == figures["matched"] == str(expected)
    assert figures["bytes"] == str(expected * 100)
    assert figures["saving"] == f"{100 * (1 - expected / published):.1f}%"
    assert summary["consumer_1"] == summary["consumer_0"]
    assert int(summary["consumed"]) == 2 * expected
    for key in ("publish_rate_msg_s", "consume_rate_msg_s", "latency_ms_p50", "latency_ms_p99"):
        float(summary[key])
    assert "progress: t=1s" in r.stderr
    assert cli("info", summary["stream"], url=broker.url).returncode == 1  # the temporary stream is gone


def test_perf_filter_values_in_runs_let_stage1_skip_chunks(broker):
    """Stage 1 alone: with values in runs, chunks differ, so the consumer gets every v0 message
    and fewer than all (round-robin values put every value in every chunk)."""
    r = cli("perf", "--duration", "2", "--rate", "400", "--filter-values", "4", "--filter-run", "20",
            "--consumer-filter", "v0", url=broker.url)
    assert r.returncode == 0, r.stderr
    summary = _summary(r.stdout)
    published = int(summary["published"])
    figures = _consumer_figures(summary["consumer_0"])
    assert int(figures["matched"]) == sum(1 for n in range(published) if (n // 20) % 4 == 0)
    assert int(figures["matched"]) <= int(figures["delivered"]) < published
    assert float(figures["saving"].rstrip("%")) > 0


def test_perf_reads_an_existing_stream_from_first(broker, events):
    r = cli("perf", "--stream", events, "--producers", "0", "--from", "first", "--consumer-filter", "eu",
            url=broker.url)
    assert r.returncode == 0, r.stderr
    summary = _summary(r.stdout)
    figures = _consumer_figures(summary["consumer_0"])
    # stage 1 only: whole chunks; the eu messages are all there and counted as matched
    assert figures["matched"] == "2" and 2 <= int(figures["delivered"]) <= 5
    assert cli("info", events, url=broker.url).returncode == 0  # a named stream is kept


def test_perf_ctrl_c_prints_the_summary_so_far_and_deletes_the_stream(broker):
    env = dict(os.environ)
    env.pop("AMQP_STREAM_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "amqp_stream", "perf", "--duration", "600",
                             "--rate", "200", "--url", broker.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr.readline().startswith("progress: t=1s")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    summary = _summary(out)
    assert summary["interrupted"] == "true" and int(summary["published"]) > 0
    assert cli("info", summary["stream"], url=broker.url).returncode == 1


def test_consume_follows_until_count(broker, declared):
    """Without --no-follow the command waits at the end of the stream for new messages."""
    env = dict(os.environ)
    env.pop("AMQP_STREAM_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "amqp_stream", "consume", declared, "--from", "next",
                             "--count", "2", "--url", broker.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # the filter report on stderr comes once the link is attached
        assert "filters in place" in proc.stderr.readline()
        r = cli("publish", declared, url=broker.url, stdin="first\nsecond\nthird\n")
        assert r.returncode == 0, r.stderr
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert out.splitlines() == ["first", "second"]


def test_consume_from_last_and_timestamp(broker, declared):
    for line in ("a", "b", "c"):  # one publish per message: one chunk each
        assert cli("publish", declared, url=broker.url, stdin=line + "\n").returncode == 0
    r = consume(broker, declared, "--from", "last")
    assert r.stdout.splitlines() == ["c"]
    r = consume(broker, declared, "--from", "@1000")  # before the start: everything
    assert r.stdout.splitlines() == ["a", "b", "c"]
    r = consume(broker, declared, "--from", "2000-01-01T00:00:00+00:00")
    assert r.stdout.splitlines() == ["a", "b", "c"]


def test_publish_lines_format_keeps_json_as_text(broker, declared):
    r = cli("publish", declared, "--format", "lines", url=broker.url, stdin='{"a": 1}\n')
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(x) for x in consume(broker, declared, "--json").stdout.splitlines()]
    assert record["body"] == '{"a": 1}' and record["application_properties"] == {}


def test_interrupt_exits_130(broker, declared):
    """Ctrl-C (SIGINT) while following ends the command with exit code 130."""
    env = dict(os.environ)
    env.pop("AMQP_STREAM_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "amqp_stream", "consume", declared, "--url", broker.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert "filters in place" in proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130


def test_help_of_delete_and_info_lists_no_declare_options():
    for command in ("delete", "info"):
        r = cli(command, "--help")
        assert r.returncode == 0 and "--url" in r.stdout
        assert "--max-age" not in r.stdout and "stream arguments" not in r.stdout
    assert "--max-age" in cli("declare", "--help").stdout


def test_a_url_of_another_protocol_is_refused(broker):
    url = broker.url.replace("amqp://", "http://")
    r = cli("info", "s", url=url)
    assert r.returncode == 2 and r.stdout == ""
    assert f"{url} is not an AMQP URL: use amqp:// or amqps://" in r.stderr


def test_plain_against_a_broker_offering_only_anonymous_says_so(tmp_path):
    # only ANONYMOUS: no users file on a non-loopback listener, anonymous allowed on purpose
    # (on loopback with no users file PLAIN takes the default guest/guest)
    b = BrokerProcess(tmp_path / "data", extra_args=["--allow-anonymous"])
    b.command = lambda: [*BrokerProcess.command(b), "--host", "0.0.0.0"]
    b.start()
    try:
        r = cli("info", "s", "--user", "guest", "--password", "guest", url=b.url)
    finally:
        b.close()
    assert r.returncode == 1
    assert "a broker that offers only ANONYMOUS wants no user" in r.stderr


def test_consume_json_prints_every_time_in_ms(broker, declared):
    from datetime import datetime, timezone

    from proton import timestamp

    from amqp_stream.client import connect

    created = datetime(2026, 11, 22, 4, 0, 0, 123000, tzinfo=timezone.utc)
    ms = int(created.timestamp() * 1000)
    with connect(broker.url) as client, client.publisher(declared) as pub:
        pub.publish("x", properties={"creation_time": created},
                    application_properties={"at": timestamp(ms)})
        pub.flush()
    (record,) = [json.loads(x) for x in consume(broker, declared, "--json").stdout.splitlines()]
    assert record["properties"]["creation_time"] == ms
    assert record["application_properties"]["at"] == ms


def test_publish_reports_progress_off_a_terminal(broker, declared):
    """stderr is a pipe: a progress line comes every few seconds, even while input is awaited."""
    env = dict(os.environ)
    env.pop("AMQP_STREAM_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "amqp_stream", "publish", declared, "--url", broker.url],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        proc.stdin.write("one\ntwo\n")
        proc.stdin.flush()
        line = proc.stderr.readline()  # the input stays open: only the periodic report can come
        assert line.startswith("amqp-stream publish: progress: ") and " messages sent, " in line
        out, _ = proc.communicate("three\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out) == (0, f"published 3 messages to {declared}\n")
