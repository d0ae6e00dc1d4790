"""The stream listener over TLS (its own port, RabbitMQ's 5551) with rstream: handshake, PLAIN,
publish with confirms, chunks delivered (read and encrypted, not sendfile'd), a plain client
refused; the plain port keeps serving."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess

import pytest
from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer, amqp_decoder

from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, ServerClosed, StreamClient


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is needed to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_rstream_over_tls(tmp_path, certificate):
    cert, key = certificate
    with BrokerProcess(tmp_path / "data", extra_args=["--tls-cert", str(cert),
                                                      "--tls-key", str(key)]) as b:
        context = ssl.create_default_context(cafile=str(cert))
        bodies = [b"t%d" % i for i in range(300)] + [b"y" * 300_000]  # a chunk of several slices

        async def go():
            got = []
            done = asyncio.Event()
            async with Producer("localhost", b.stream_tls_port, username="guest", password="guest",
                                ssl_context=context) as p:
                await p.create_stream("over-tls")
                confirmed = []
                all_confirmed = asyncio.Event()

                def on_confirm(status):
                    confirmed.append(status.is_confirmed)
                    if len(confirmed) == len(bodies):
                        all_confirmed.set()
                await p.send_batch("over-tls", [AMQPMessage(body=x) for x in bodies],
                                   on_publish_confirm=on_confirm)
                await all_confirmed.wait()
                assert all(confirmed)
            c = Consumer("localhost", b.stream_tls_port, username="guest", password="guest",
                         ssl_context=context)
            await c.start()

            def on_message(msg, ctx):
                got.append((ctx.offset, msg.body))
                if len(got) == len(bodies):
                    done.set()
            await c.subscribe("over-tls", on_message, decoder=amqp_decoder,
                              offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await done.wait()
            await c.close()
            return got
        got = asyncio.run(asyncio.wait_for(go(), 30))
        assert got == list(enumerate(bodies))
        # a plain client on the TLS port gets nowhere; the plain port still serves
        with pytest.raises((ServerClosed, OSError, TimeoutError)):
            StreamClient("127.0.0.1", b.stream_tls_port, timeout=5)
        with StreamClient("127.0.0.1", b.stream_port) as plain:
            assert plain.metadata(["over-tls"])[1]["over-tls"][0] == OK


def test_the_start_log_says_which_port_each_stream_listener_advertises(tmp_path, certificate):
    """TLS clients are told the TLS port (Open, Metadata): the start log says so, not the
    plain port."""
    cert, key = certificate
    with BrokerProcess(tmp_path / "data", extra_args=["--tls-cert", str(cert),
                                                      "--tls-key", str(key)]) as b:
        log = b.log_text()
    assert (f"listening on rabbitmq-stream+tls://127.0.0.1:{b.stream_tls_port} "
            f"(advertised as 127.0.0.1:{b.stream_tls_port})") in log, log
    assert (f"listening on rabbitmq-stream://127.0.0.1:{b.stream_port} "
            f"(advertised as 127.0.0.1:{b.stream_port})") in log, log
