"""amqp_stream.client against a real broker process: management, windowed publishing with
every outcome, consumers with filters, drain at the end of the stream, and the failures a
caller must see (rejection, lost connection, timeout, missing stream)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from proton import Link

from tests.polling import wait_for

from amqp_stream import client as amqp
from amqp_stream.testing import BrokerProcess


@pytest.fixture
def conn(broker):
    with amqp.connect(broker.url, timeout=30) as c:
        yield c


def fill(c: amqp.Client, stream: str, n: int, value=lambda i: ["a", "b", None][i % 3]) -> None:
    with c.publisher(stream, window=32) as pub:
        for i in range(n):
            pub.publish(f"body-{i}".encode(), filter_value=value(i), message_id=f"id-{i}",
                        properties={"subject": f"s{i % 2}"}, application_properties={"i": i, "k": f"k{i % 4}"})
        assert all(o.accepted for o in pub.flush())


def test_management_declare_info_delete(conn, stream_name):
    first = conn.declare(stream_name, {"x-max-length-bytes": 10_000_000})
    assert first["type"] == "stream" and first["first_offset"] == first["next_offset"] == 0
    assert conn.declare(stream_name, {"x-max-length-bytes": 10_000_000})["name"] == stream_name
    with pytest.raises(amqp.ManagementError) as err:
        conn.declare(stream_name, {"x-max-length-bytes": 5})
    assert err.value.status == 409
    with pytest.raises(amqp.ManagementError) as err:
        conn.declare(stream_name + "-bad", {"x-max-age": "ten minutes"})
    assert err.value.status == 400
    fill(conn, stream_name, 7)
    info = conn.info(stream_name)
    assert (info["first_offset"], info["next_offset"], info["message_count"]) == (0, 7, 7)
    assert conn.delete(stream_name) == 7
    assert not conn.exists(stream_name)
    with pytest.raises(amqp.StreamNotFound, match=stream_name):
        conn.info(stream_name)


def test_name_needing_percent_encoding(conn, stream_name):
    name = stream_name + " ü/x"
    conn.declare(name)
    fill(conn, name, 3)
    with conn.consumer(name) as c:
        assert [m.offset for m in c.read_available()] == [0, 1, 2]
    conn.delete(name)


def test_window_bounds_unsettled_and_every_outcome_comes_back(conn, stream_name):
    conn.declare(stream_name)
    with conn.publisher(stream_name, window=5) as pub:
        for i in range(300):
            seq = pub.publish(b"x", message_id=i)
            assert seq == i and pub.unsettled <= 5
        outcomes = pub.flush()
    assert [o.seq for o in outcomes] == list(range(300))
    assert all(o.state == "accepted" for o in outcomes) and [o.message_id for o in outcomes] == list(range(300))
    assert conn.info(stream_name)["next_offset"] == 300


def test_named_publisher_is_deduplicated_and_offsets_are_stored(conn, stream_name):
    """A named publisher's resent ids are accepted and not stored; the management calls read the
    last stored id and store and read a consumer offset."""
    conn.declare(stream_name)
    ref = "writer ü/1"  # needs percent-encoding in the management path
    assert conn.publisher_sequence(stream_name, ref) == 0
    with conn.publisher(stream_name, reference=ref) as pub:
        for i in range(1, 6):
            pub.publish(f"m{i}".encode(), publishing_id=i)
        assert all(o.accepted for o in pub.flush())
        with pytest.raises(ValueError, match="strictly increase"):
            pub.publish(b"again", publishing_id=5)
    with conn.publisher(stream_name, reference=ref) as retry:  # a retry resends 3..8
        for i in range(3, 9):
            retry.publish(f"m{i}".encode(), publishing_id=i)
        assert [o.state for o in retry.flush()] == ["accepted"] * 6
    with conn.consumer(stream_name) as c:
        assert [m.body for m in c.read_available()] == [f"m{i}".encode() for i in range(1, 9)]
    assert conn.publisher_sequence(stream_name, ref) == 8
    with conn.publisher(stream_name) as unnamed, pytest.raises(ValueError, match="reference"):
        unnamed.publish(b"x", publishing_id=1)
    assert conn.stored_offset(stream_name, "reader ü") is None
    conn.store_offset(stream_name, "reader ü", 4)
    assert conn.stored_offset(stream_name, "reader ü") == 4
    with pytest.raises(amqp.StreamNotFound):
        conn.stored_offset(stream_name + "-missing", "reader")


def test_presettled_publishing(conn, stream_name):
    conn.declare(stream_name)
    with conn.publisher(stream_name, presettled=True) as pub:
        for i in range(200):
            pub.publish(b"fire", application_properties={"i": i})
        assert {o.state for o in pub.flush()} == {"presettled"}
    # pre-settled: nothing says when the broker has stored them but the stream's end
    wait_for(lambda: conn.info(stream_name)["next_offset"] == 200, 15, "200 messages stored")
    with conn.consumer(stream_name) as c:
        assert [m.application_properties["i"] for m in c.read_available()] == list(range(200))


def test_consumed_messages_carry_offset_filter_value_and_sections(conn, stream_name):
    conn.declare(stream_name)
    created = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    with conn.publisher(stream_name) as pub:
        pub.publish(b"\x00bin", filter_value="eu", message_id="m1",
                    properties={"subject": "sub", "correlation_id": "c1", "content_type": "application/octet-stream",
                                "creation_time": created}, application_properties={"n": 5, "f": 1.5, "ok": True})
        pub.publish("text body")
        pub.publish({"map": [1, 2]})
        pub.flush()
    with conn.consumer(stream_name, offset=0) as c:
        a, b, m = list(c.read_available())
    assert (a.offset, a.filter_value, a.body) == (0, "eu", b"\x00bin")
    assert a.properties["message_id"] == "m1" and a.properties["subject"] == "sub"
    assert a.properties["correlation_id"] == "c1" and a.properties["content_type"] == "application/octet-stream"
    assert a.properties["creation_time"] == created.timestamp()
    assert a.application_properties == {"n": 5, "f": 1.5, "ok": True}
    assert (b.offset, b.body, b.filter_value, b.properties) == (1, "text body", None, {})
    assert (m.offset, m.body) == (2, {"map": [1, 2]})


def test_a_consumer_gets_pre_settled_deliveries_unless_named(conn, stream_name):
    """Reading a stream consumes nothing: an unnamed consumer asks for pre-settled deliveries
    and sends no disposition; a named one gets them unsettled, to accept what it is done with."""
    conn.declare(stream_name)
    fill(conn, stream_name, 3)
    with conn.consumer(stream_name) as c:
        assert c.link.remote_snd_settle_mode == Link.SND_SETTLED
        got = list(c.read_available())
        assert [m.offset for m in got] == [0, 1, 2] and all(m.delivery is None for m in got)
    with conn.consumer(stream_name, consumer_name="settles") as c:
        assert c.link.remote_snd_settle_mode == Link.SND_UNSETTLED
        got = list(c.read_available())
        assert all(m.delivery is not None for m in got)
        c.accept(got[-1])
    assert conn.stored_offset(stream_name, "settles") == 2


def test_offset_specs_and_end_of_stream(conn, stream_name):
    conn.declare(stream_name)
    fill(conn, stream_name, 30)
    with conn.consumer(stream_name, offset=17, credit=4) as c:
        assert [m.offset for m in c.read_available(end=25)] == list(range(17, 25))
    with conn.consumer(stream_name, offset="next") as c:
        assert c.receive(timeout=0.3) is None and c.drain() == 0
        fill(conn, stream_name, 2)
        got = c.receive(timeout=30)
        assert got is not None and got.offset == 30
    with conn.consumer(stream_name, offset="first", credit=8) as c:
        assert len(list(c.read_available())) == 32
        assert c.drain() == 0  # nothing more: the end of the stream


def test_stage1_filters_exactly_by_the_client_and_echo(conn, stream_name):
    conn.declare(stream_name)
    fill(conn, stream_name, 60)
    with conn.consumer(stream_name, filter_values=["a"], match_unfiltered=True) as c:
        assert set(map(str, c.accepted_filters)) == {amqp.OFFSET_SPEC, amqp.STREAM_FILTER, amqp.MATCH_UNFILTERED}
        assert c.missing_filters == []
        got = [m for m in c.read_available()]
    # stage 1 is per chunk: other values may come along, never fewer than asked
    wanted = [m for m in got if m.filter_value in ("a", None)]
    assert [m.offset for m in wanted] == [i for i in range(60) if i % 3 != 1]


def test_stage2_sql_and_property_filters(conn, stream_name):
    conn.declare(stream_name)
    fill(conn, stream_name, 40)
    with conn.consumer(stream_name, sql="i >= 10 AND k = 'k1' AND properties.subject = 's1'") as c:
        assert [m.offset for m in c.read_available()] == [i for i in range(10, 40) if i % 4 == 1]
    with conn.consumer(stream_name, properties={"subject": "s0"}, application_properties={"k": "k2"}) as c:
        assert str(amqp.PROPERTIES_FILTER) in map(str, c.accepted_filters)
        assert [m.offset for m in c.read_available()] == [i for i in range(40) if i % 4 == 2]
    with conn.consumer(stream_name, sql="i >>> 3") as c:  # invalid: left out, not fatal
        assert c.missing_filters == ["sql-filter"]
    with pytest.raises(ValueError):
        conn.consumer(stream_name, sql="i = 1", properties={"subject": "x"})


def test_missing_stream(conn, stream_name):
    with pytest.raises(amqp.StreamNotFound, match="not found"):
        conn.consumer(stream_name)
    with pytest.raises(amqp.StreamNotFound):
        conn.publisher(stream_name)


def test_deleted_stream_fails_the_publisher(conn, broker, stream_name):
    conn.declare(stream_name)
    pub = conn.publisher(stream_name)
    pub.publish(b"1")
    pub.flush()
    with amqp.connect(broker.url) as other:
        other.delete(stream_name)
    with pytest.raises(amqp.PublishError, match="deleted|detached|not accepted"):
        for _ in range(1000):
            pub.publish(b"2")
        pub.flush()


def test_a_closed_client_says_so(broker, stream_name):
    """After ``close``, or ``abort`` as an interrupt does, every operation of the client raises
    ``ClientError`` saying it is closed (it raised ``AttributeError`` on its None connection)."""
    def check(c: amqp.Client) -> None:
        assert c.closed
        for op in (lambda: c.info(stream_name), lambda: c.publisher(stream_name),
                   lambda: c.consumer(stream_name), c.pump):
            with pytest.raises(amqp.ClientError, match="is closed"):
                op()

    for end in (amqp.Client.close, amqp.Client.abort):
        c = amqp.connect(broker.url, timeout=30)
        c.declare(stream_name)
        end(c)
        check(c)


def test_threads_share_a_client(conn, stream_name):
    conn.declare(stream_name)
    errors = []

    def work(tag):
        try:
            with conn.publisher(stream_name, window=8) as pub:
                for i in range(150):
                    pub.publish(f"{tag}-{i}".encode())
                pub.flush()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in "xyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with conn.consumer(stream_name) as c:
        bodies = sorted(m.body for m in c.read_available())
    assert bodies == sorted(f"{t}-{i}".encode() for t in "xyz" for i in range(150))


def test_rejection_is_reported_per_message(tmp_path):
    with BrokerProcess(tmp_path / "d", extra_args=["--max-message-size", "1000"]) as b, amqp.connect(b.url) as c:
        c.declare("s")
        pub = c.publisher("s", window=3)
        for i in range(6):
            pub.publish(b"x" * (5000 if i == 2 else 10))
        with pytest.raises(amqp.PublishError, match=r"1 of 6 .*#2 rejected") as err:
            pub.flush()
        states = [o.state for o in err.value.outcomes]
        assert states == ["accepted", "accepted", "rejected", "accepted", "accepted", "accepted"]


def test_connection_loss_and_timeout_raise_publish_error(tmp_path):
    b = BrokerProcess(tmp_path / "d").start()
    try:
        c = amqp.connect(b.url, timeout=3)
        c.declare("s")
        pub = c.publisher("s", window=4, timeout=2)
        pub.publish(b"ok")
        pub.flush()
        os.kill(b.proc.pid, signal.SIGSTOP)  # a broker that stops answering
        try:
            with pytest.raises(amqp.PublishError, match="timed out") as err:
                for _ in range(10):
                    pub.publish(b"x")
                pub.flush()
            assert err.value.unconfirmed > 0
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        b.kill()
        with pytest.raises(amqp.PublishError, match="lost|closed|aborted|timed out"):
            for _ in range(50):
                pub.publish(b"y")
            pub.flush()
        c.close()
        with pytest.raises(amqp.ClientError, match="cannot connect"):
            amqp.connect(b.url, timeout=3)
    finally:
        b.close()


def test_plain_credentials_over_tls(tmp_path):
    from tests.spark.secure import PASSWORD, USER, secure_broker

    b, url, ca = secure_broker(tmp_path)
    with b:
        tls = amqp.TlsOptions(ca_file=str(ca))
        with amqp.connect(url, user=USER, password=PASSWORD, tls=tls) as c:
            c.declare("s")
            fill(c, "s", 3)
            assert c.info("s")["next_offset"] == 3
        with pytest.raises(amqp.ClientError, match="unauthorized-access"):
            amqp.connect(url, user=USER, password="wrong", tls=tls, timeout=10)
        with pytest.raises(amqp.ClientError, match="unauthorized-access"):
            amqp.connect(url, tls=tls, timeout=10)  # anonymous is refused
        with pytest.raises(amqp.ClientError, match="certificate verify failed"):
            amqp.connect(url, user=USER, password=PASSWORD, timeout=10)  # CA not trusted


def test_a_client_certificate_without_a_key_file_has_its_key_beside_it(tmp_path):
    """``TlsOptions(cert_file=...)`` without ``key_file`` (``--tls-cert`` alone) reads the key
    from the certificate's file, as Python's ``ssl`` does: proton handed OpenSSL no key file and
    the process died of SIGSEGV. A key file alone, or a certificate file holding no key, is a
    ``ClientError`` naming the files."""
    from tests.spark.secure import PASSWORD, USER, secure_broker

    b, url, ca = secure_broker(tmp_path)
    both = tmp_path / "both.pem"
    both.write_bytes(ca.read_bytes() + (tmp_path / "key.pem").read_bytes())
    # in a child: the crash took the interpreter with it
    code = f"from amqp_stream.client import TlsOptions; TlsOptions(cert_file={str(both)!r}).domain()"
    child = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True)
    assert child.returncode == 0, child
    with b:
        tls = amqp.TlsOptions(ca_file=str(ca), cert_file=str(both))
        with amqp.connect(url, user=USER, password=PASSWORD, tls=tls, timeout=15) as c:
            assert c.declare("s")["name"] == "s"
    with pytest.raises(amqp.ClientError, match=f"certificate {ca} with the key in {ca}"):
        amqp.TlsOptions(cert_file=str(ca)).domain()
    with pytest.raises(amqp.ClientError, match="needs its certificate file"):
        amqp.TlsOptions(key_file=str(both)).domain()


def test_tls_peer_name_is_the_name_checked_against_the_certificate(tmp_path):
    """``TlsOptions.peer_name`` (Spark's ``tlsPeerName``) replaces the URL host for SNI and the
    host-name check: a certificate for ``broker.test`` reached at 127.0.0.1 verifies with it."""
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=broker.test",
                    "-addext", "subjectAltName=DNS:broker.test"], check=True, capture_output=True)
    with BrokerProcess(tmp_path / "data", extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as b:
        url = b.url.replace("amqp://", "amqps://")
        with amqp.connect(url, tls=amqp.TlsOptions(ca_file=str(cert), peer_name="broker.test"),
                          timeout=15) as c:
            assert c.declare("over-tls")["name"] == "over-tls"
        for tls in (amqp.TlsOptions(ca_file=str(cert)), amqp.TlsOptions(ca_file=str(cert), peer_name="other.test")):
            with pytest.raises(amqp.ClientError):
                amqp.connect(url, tls=tls, timeout=15).close()


@pytest.mark.timeout(120)  # the old close waited on the frozen broker without end
def test_interrupt_drops_the_connection_without_waiting_on_the_engine(tmp_path):
    """Ctrl-C may land inside proton's engine and leave it unable to finish a closing handshake
    (its selector can lose the socket from its read set). Leaving the ``with`` blocks by an
    interrupt therefore asks nothing more of the engine: with the broker frozen, the old graceful
    close waited out the link's and the connection's time-outs (2 x 30 s); the socket is closed
    at once instead, and the broker, thawed, sees the connection gone."""
    from tests.broker.test_tracking_metrics import scrape

    b = BrokerProcess(tmp_path / "d").start()
    try:
        timeout = 30.0
        with amqp.connect(b.url, timeout=timeout) as c:
            c.declare("s")
        assert scrape(b)["amqp_stream_connections"] == 0
        os_stopped = False
        start = None
        try:
            with pytest.raises(KeyboardInterrupt):
                with amqp.connect(b.url, timeout=timeout) as c, c.consumer("s") as consumer:
                    assert consumer.receive(timeout=0.1) is None
                    os.kill(b.proc.pid, signal.SIGSTOP)  # no handshake can finish now
                    os_stopped = True
                    start = time.monotonic()
                    raise KeyboardInterrupt
            # bounded by the client's time-out, not a guess at speed: a close that waited on the
            # frozen broker would take at least `timeout`
            assert time.monotonic() - start < timeout
            assert c.conn is None
        finally:
            if os_stopped:
                os.kill(b.proc.pid, signal.SIGCONT)
        wait_for(lambda: scrape(b)["amqp_stream_connections"] == 0, 30, "the broker to see the socket closed")
    finally:
        b.close()


def test_a_connection_makes_no_tls_contexts_it_does_not_use(conn, stream_name):
    """proton's ``Container()`` made two OpenSSL contexts for every connection (~40 ms of CPU,
    plain connections too); the client's container has none (``ssl`` None), and proton's own
    ``SSLConfig`` is back in place for anyone else. TLS connections take their own domain
    (``test_tls_*``)."""
    from proton import _reactor

    assert conn.conn.container.ssl is None
    assert _reactor.SSLConfig.__name__ == "SSLConfig"
    assert conn.declare(stream_name)["name"] == stream_name
