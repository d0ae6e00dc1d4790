"""What the commands say when something is wrong (issue 25 item 20): each message names the
real cause, once, and points to the fix. Real subprocesses against the session broker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from amqp_stream.testing import free_port
from tests.cli.test_commands import cli

pytestmark = pytest.mark.timeout(180)


def test_reset_offset_bad_spec_names_no_foreign_option_and_one_syntax(broker, stream_name):
    r = cli("reset-offset", stream_name, "job1", "bogus", url=broker.url)
    assert r.returncode == 2 and r.stdout == ""
    assert "--from" not in r.stderr
    assert r.stderr.startswith("amqp-stream reset-offset: error: not an offset spec: 'bogus' (first | last")
    assert r.stderr.count("first") == 1  # one syntax list, not two
    r = cli("consume", stream_name, "--from", "bogus", url=broker.url)
    assert r.returncode == 2 and "--from: not an offset spec: 'bogus' (first, last" in r.stderr


def test_declare_with_other_arguments_names_the_argument(broker, stream_name):
    assert cli("declare", stream_name, "--max-age", "7D", url=broker.url).returncode == 0
    try:
        r = cli("declare", stream_name, "--max-age", "8D", url=broker.url)
        assert r.returncode == 1
        assert r.stderr == (f"amqp-stream declare: error: stream '{stream_name}' exists with other "
                            "arguments: x-max-age: received '8D' but current is '7D'\n")
        r = cli("declare", stream_name, "--filter-size-bytes", "32", url=broker.url)
        assert "x-max-age: received none but current is '7D'" in r.stderr
        assert "x-stream-filter-size-bytes: received 32 but current is none" in r.stderr
    finally:
        cli("delete", stream_name, url=broker.url)


def test_lower_case_keyword_gets_a_hint():
    url = f"amqp://127.0.0.1:{free_port()}"  # refused before connecting: nothing listens
    r = cli("consume", "s", "--sql", "region like 'eu%'", url=url)
    assert r.returncode == 2
    assert "'like' is a reserved word (keywords are upper case: LIKE) at character 8" in r.stderr
    r = cli("consume", "s", "--sql", "between = 1 AND date = 2", url=url)
    assert "'date' is a reserved word (keywords are upper case: DATE)" in r.stderr


def test_connecting_to_the_stream_port_says_so(broker):
    r = cli("info", "s", "--timeout", "10", url=f"amqp://127.0.0.1:{broker.stream_port}")
    assert r.returncode == 1
    assert "it answers as a RabbitMQ stream-protocol listener" in r.stderr
    assert "use the AMQP port" in r.stderr


def test_connecting_to_the_metrics_port_says_so(broker):
    r = cli("info", "s", "--timeout", "3", url=f"amqp://127.0.0.1:{broker.metrics_port}")
    assert r.returncode == 1
    assert "it answers as an HTTP server" in r.stderr


def test_amqps_to_a_plain_listener_says_so(broker):
    r = cli("info", "s", "--timeout", "10", "--tls-insecure", url=broker.url.replace("amqp://", "amqps://"))
    assert r.returncode == 1
    assert "it answers as a plain AMQP listener: use amqp://" in r.stderr


def test_a_right_listener_gets_no_listener_hint(broker):
    r = cli("info", "s", "--user", "guest", "--password", "wrong", url=broker.url)
    assert r.returncode == 1 and "answers as" not in r.stderr


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AMQP_STREAM_")}
    return subprocess.run([sys.executable, "-m", "amqp_stream", "serve", "--port", str(free_port()),
                           "--stream-port", "0", "--metrics-port", "0", "--management-port", "0", *args],
                          capture_output=True, text=True, timeout=60, env={**environ, **(env or {})})


def test_a_data_directory_that_is_a_file(tmp_path):
    path = tmp_path / "data"
    path.write_text("")
    r = _serve("--data-dir", str(path))
    assert r.returncode == 2
    assert r.stderr == (f"amqp-stream serve: error: data_dir {path} is a file, not a directory "
                        "(--data-dir names the directory holding the streams)\n")


def test_deleting_a_missing_stream_says_it_did_not_exist(broker, stream_name):
    r = cli("delete", stream_name, url=broker.url)
    assert (r.returncode, r.stdout) == (0, f"no stream {stream_name}: nothing deleted\n")


def test_one_message_is_singular(broker, stream_name):
    assert cli("declare", stream_name, url=broker.url).returncode == 0
    r = cli("publish", stream_name, url=broker.url, stdin="x\n")
    assert (r.returncode, r.stdout) == (0, f"published 1 message to {stream_name}\n")
    r = cli("delete", stream_name, url=broker.url)
    assert r.stdout == f"deleted {stream_name} (1 message)\n"


def test_serve_help_gives_each_default_once():
    help_text = subprocess.run([sys.executable, "-m", "amqp_stream", "serve", "--help"], capture_output=True,
                               text=True, timeout=60, env=dict(os.environ, COLUMNS="1000")).stdout
    options = {" ".join(part.split()).split(" ")[0]: " ".join(part.split())
               for part in help_text.split("\n  -")[1:]}  # one entry per option: flag -> its help
    assert options["-container-id"].count("default") == 1
    assert "(default: amqp-stream@<hostname>)" in options["-container-id"]
    assert options["-event-loop"].count("default") == 1
    assert "(default: None)" not in help_text


def test_a_typo_in_a_flag_or_command_gets_a_suggestion():
    r = cli("publish", "s", "--fitler-value", "x", "--windw=3")
    assert r.returncode == 2
    assert "unrecognized arguments: --fitler-value x --windw=3" in r.stderr
    assert "--fitler-value (did you mean --filter-value?)" in r.stderr
    assert "--windw (did you mean --window?)" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("amqp-stream publish: error:")
    r = cli("consme", "s")
    assert r.returncode == 2 and "invalid choice: 'consme' (did you mean consume?)" in r.stderr


def test_an_unknown_environment_variable_is_named(tmp_path, broker):
    r = _serve("--data-dir", str(tmp_path / "d"), env={"AMQP_STREAM_FSYNC_INTERVAL": "5"})
    assert r.returncode == 2
    assert r.stderr == ("amqp-stream serve: error: unknown environment variable "
                        "AMQP_STREAM_FSYNC_INTERVAL (did you mean AMQP_STREAM_FSYNC_INTERVAL_MS?)\n")
    env = dict(os.environ, AMQP_STREAM_USR="guest")
    r = subprocess.run([sys.executable, "-m", "amqp_stream", "info", "nosuch", "--url", broker.url],
                       capture_output=True, text=True, timeout=60, env=env)
    assert ("amqp-stream info: warning: unknown environment variable AMQP_STREAM_USR "
            "(did you mean AMQP_STREAM_USER?)") in r.stderr


def test_an_unknown_config_key_gets_a_suggestion(tmp_path):
    conf = tmp_path / "broker.toml"
    conf.write_text("prot = 5673\n")
    r = _serve("--data-dir", str(tmp_path / "d"), "--config", str(conf))
    assert r.returncode == 2 and "unknown setting 'prot'" in r.stderr and "(did you mean port?)" in r.stderr
