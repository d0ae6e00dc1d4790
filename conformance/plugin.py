"""The conformance suite's command-line options and marker, as a pytest plugin.

Why a plugin and not only conftest.py: pytest reads a conftest's options only when that
conftest is loaded at start-up, which `pytest conformance ...` does but a bare `pytest` at the
repository root does not. setup.cfg loads this module with `-p conformance.plugin`, so
`--broker-url` and friends work from both; conformance/conftest.py registers them itself when
the plugin was not loaded.
"""

from __future__ import annotations

import pytest


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "AMQP 1.0 stream broker conformance suite")
    group.addoption("--broker-url", default=None,
                    help="AMQP URL of the broker under test (default: start this project's broker)")
    group.addoption("--broker-user", default=None, help="SASL PLAIN user (default: ANONYMOUS)")
    group.addoption("--broker-password", default=None, help="SASL PLAIN password")
    group.addoption("--broker-ca", default=None, help="CA certificate file to verify an amqps:// broker")
    group.addoption("--broker-cert", default=None, help="client certificate file (amqps://)")
    group.addoption("--broker-key", default=None, help="client private key file (amqps://)")
    group.addoption("--broker-insecure", action="store_true",
                    help="amqps:// without verifying the broker's certificate")
    group.addoption("--stream-url", default=None,
                    help="rabbitmq-stream://user:password@host:port/ of the broker under test's "
                         "stream listener (default: that of the broker this suite starts; the "
                         "stream-protocol tests are left out with --broker-url alone)")


def register_markers(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "extension: checks a behaviour of this project beyond RabbitMQ 4.2 "
        "(leave out with -m 'not extension' against another broker)")
    config.addinivalue_line(
        "markers", "rabbitmq311: a stream-protocol feature RabbitMQ has from 3.11 on (single "
        "active consumer, Partitions, Route): leave out with -m 'not rabbitmq311' against 3.10")
    config.addinivalue_line(
        "markers", "rabbitmq313: a stream-protocol feature RabbitMQ has from 3.13 on (Publish v2, "
        "filtering, ExchangeCommandVersions, StreamStats): leave out with -m 'not rabbitmq313' "
        "against RabbitMQ 3.10-3.12")
    config.addinivalue_line(
        "markers", "rabbitmq4: needs RabbitMQ 4's AMQP 1.0 streams beside the stream listener "
        "(interoperability tests): leave out with -m 'not rabbitmq4' against RabbitMQ 3.x")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)
