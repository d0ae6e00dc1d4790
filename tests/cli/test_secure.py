"""The client commands' connection options against a broker with TLS and SASL PLAIN.

A broker of its own (the session broker is plain and anonymous) with a self-signed certificate
made by the `openssl` tool and a users file; the commands run as subprocesses.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from amqp_stream.testing import BrokerProcess
from tests.cli.test_commands import cli

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is needed to make a test certificate (scripts/bootstrap installs it)")
    directory = tmp_path_factory.mktemp("cli-tls")
    cert, key, users = directory / "cert.pem", directory / "key.pem", directory / "users"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    users.write_text("carol:s3cret\n")
    proc = BrokerProcess(directory / "data", extra_args=["--tls-cert", str(cert), "--tls-key", str(key),
                                                         "--users", str(users)])
    proc.start()
    # proton checks DNS names, not IP addresses, against the certificate: connect to localhost
    proc.secure_url = f"amqps://localhost:{proc.port}"
    proc.cert = str(cert)
    yield proc
    proc.close()


def test_commands_over_tls_with_plain(secure_broker):
    auth = ["--user", "carol", "--password", "s3cret", "--tls-ca", secure_broker.cert]
    url = secure_broker.secure_url
    assert cli("declare", "secure", *auth, url=url).stdout == "created secure\n"
    r = cli("publish", "secure", *auth, url=url, stdin="over tls\n")
    assert r.returncode == 0, r.stderr
    r = cli("consume", "secure", "--no-follow", *auth, url=url)
    assert (r.returncode, r.stdout) == (0, "over tls\n"), r.stderr


def test_wrong_password_exit_1(secure_broker):
    r = cli("info", "secure", "--user", "carol", "--password", "wrong", "--tls-ca", secure_broker.cert,
            url=secure_broker.secure_url)
    assert r.returncode == 1 and r.stderr.startswith("amqp-stream info: error:")


def test_anonymous_against_a_plain_only_broker_says_so(secure_broker):
    r = cli("info", "secure", "--tls-ca", secure_broker.cert, url=secure_broker.secure_url)
    assert r.returncode == 1
    assert "the broker does not offer ANONYMOUS: give a user and password for PLAIN" in r.stderr


def test_unverified_certificate_exit_1_unless_insecure(secure_broker):
    r = cli("info", "nothing-here", "--user", "carol", "--password", "s3cret", url=secure_broker.secure_url)
    assert r.returncode == 1 and "not found" not in r.stderr  # the TLS handshake failed first
    r = cli("info", "nothing-here", "--user", "carol", "--password", "s3cret", "--tls-insecure",
            url=secure_broker.secure_url)
    assert r.returncode == 1 and "stream 'nothing-here' not found" in r.stderr
