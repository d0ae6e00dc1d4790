"""A broker with PLAIN users and TLS, for tests of the credential and TLS options."""

from __future__ import annotations

import subprocess
from pathlib import Path

from amqp_stream.testing import BrokerProcess

USER, PASSWORD = "alice", "s3cret pass"


def secure_broker(tmp: Path) -> tuple[BrokerProcess, str, Path]:
    """(broker, amqps URL, CA file): a self-signed certificate for 127.0.0.1 made with openssl."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    users = tmp / "users.txt"
    users.write_text(f"{USER}:{PASSWORD}\n")
    b = BrokerProcess(tmp / "data", extra_args=["--users", str(users), "--tls-cert", str(cert), "--tls-key", str(key)])
    return b, b.url.replace("amqp://", "amqps://"), cert
