"""The replication port's authentication against real nodes (static layouts, no ZooKeeper):
a connection without the cluster's secret, or with a wrong one, takes no chunk and gets no
operator's answer, and is logged; a real node started with a wrong secret holds nothing; the
right secret is served; the other replicas go on as before.
The ZooKeeper side (the secret made under the cluster's path, the CLI proving it) is in
``test_operations.py``."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

pytest.importorskip("rstream")

from amqp_stream.cluster import auth  # noqa: E402
from amqp_stream.cluster import replication_wire as wire  # noqa: E402
from amqp_stream.cluster.layout import StreamLayout  # noqa: E402
from amqp_stream.cluster.leader import admin_request  # noqa: E402
from amqp_stream.cluster.testing import Cluster  # noqa: E402
from storage.format import CHUNK_HEADER  # noqa: E402
from tests.cluster.checker import check, log_dir, log_end, raw_chunks  # noqa: E402
from tests.cluster.test_replication import STREAM, bodies, producer, publish  # noqa: E402
from tests.polling import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _frames_until_closed(sock: socket.socket, reader: auth.FrameReader) -> list[tuple[int, bytes]]:
    """Every frame the node sends until it closes the connection."""
    out = []
    while True:
        try:
            out.append(reader.next("more"))
        except (wire.WireError, ConnectionResetError):  # closed (reset: bytes left unread)
            return out


def _hello(node: str = "intruder") -> bytes:
    return wire.encode_hello(wire.Hello(STREAM, node, 1, 0, ()))


def test_only_the_cluster_secret_opens_the_replication_port(tmp_path):
    c = Cluster(tmp_path)
    # n3 is a member, but its node was given another secret than the others
    c.set_layouts([(StreamLayout(STREAM, 1, "n1", ("n1", "n2", "n3")), {})])
    doc = json.loads(c.files["n3"].read_text("utf-8"))
    doc["secret"] = auth.new_secret()
    c.files["n3"].write_text(json.dumps(doc), "utf-8")
    try:
        c.start()
        confirmed: list[bytes] = []

        async def go(tag: str) -> None:
            async with producer(c, "n1") as p:
                await publish(p, bodies(tag, 500), confirmed)
        asyncio.run(go("a"))  # confirmed by n1 and n2: quorum 2 of 3
        leader = c.nodes["n1"]
        address = (leader.host, leader.replication_port)

        # no proof at all: HELLO straight after the challenge
        with socket.create_connection(address, timeout=10) as sock:
            reader = auth.FrameReader(sock)
            assert reader.next("challenge")[0] == wire.CHALLENGE
            sock.sendall(_hello())
            got = _frames_until_closed(sock, reader)
        assert [k for k, _ in got] == [wire.REFUSE], got
        code, reason = wire.decode_refuse(got[0][1])
        assert code == wire.REFUSE_AUTH and "authentication failed" in reason

        # a stranger's frame announcing 50 MiB: closed at once, nothing buffered for it
        with socket.create_connection(address, timeout=10) as sock:
            reader = auth.FrameReader(sock)
            reader.next("challenge")
            sock.sendall(wire.HEAD.pack(50 << 20, wire.AUTH) + b"\0" * 4096)
            assert _frames_until_closed(sock, reader) == []

        # a wrong secret: refused before HELLO is looked at
        with socket.create_connection(address, timeout=10) as sock:
            reader = auth.FrameReader(sock)
            frame, _ = auth.client_auth(reader, b"not the secret")
            sock.sendall(frame + _hello())
            got = _frames_until_closed(sock, reader)
        assert [k for k, _ in got] == [wire.REFUSE], got
        assert wire.decode_refuse(got[0][1])[0] == wire.REFUSE_AUTH

        # operators' requests: a raw ADMIN and a wrong secret are refused; the right one works
        with socket.create_connection(address, timeout=10) as sock:
            reader = auth.FrameReader(sock)
            reader.next("challenge")
            sock.sendall(wire.encode_admin({"op": "status", "stream": STREAM}))
            got = _frames_until_closed(sock, reader)
        assert [k for k, _ in got] == [wire.REFUSE], got
        with pytest.raises(auth.AuthError, match="authentication failed"):
            admin_request(*address, {"op": "status", "stream": STREAM}, 10, b"wrong")
        secret = c.secret.encode()
        answer = admin_request(*address, {"op": "status", "stream": STREAM}, 10, secret)
        assert answer["role"] == "leader" and answer["committed_end"] == 500, answer

        log = c.log("n1")
        assert "refused: frame type 1 without authenticating first" in log
        assert log.count("refused: wrong cluster secret") >= 2  # the raw client's, n3's

        # the real node with the wrong secret: refused by the leader, holds nothing
        wait_for(lambda: "refused this node's authentication" in c.log("n3"), 10,
                 "n3 told of its refusal")
        assert raw_chunks(log_dir(c.data_dirs()["n3"], STREAM)) == []

        # the right secret: START, then the chunks the leader holds
        with socket.create_connection(address, timeout=10) as sock:
            reader = auth.FrameReader(sock)
            frame, welcome = auth.client_auth(reader, secret)
            sock.sendall(frame + _hello())
            auth.check_welcome(*reader.next("welcome"), welcome)
            kind, payload = reader.next("start")
            assert kind == wire.START and wire.decode_start(payload).offset == 0
            end = 0
            while end < 500:
                kind, payload = reader.next("chunk")
                if kind == wire.CHUNK:
                    end = raw_chunks_end(payload)
        # n2 was never disturbed: more publishes are confirmed, the two logs identical
        asyncio.run(go("b"))
        dirs = c.data_dirs()
        wait_for(lambda: log_end(log_dir(dirs["n2"], STREAM)) == 1000, 20,
                 "n2 at the leader's end")
        check({n: dirs[n] for n in ("n1", "n2")}, STREAM, confirmed, at_least=1000)
        assert raw_chunks(log_dir(dirs["n3"], STREAM)) == []
    finally:
        c.close()


def raw_chunks_end(payload: bytes) -> int:
    """A CHUNK frame's chunk: the offset after its last record (chunk id + records)."""
    fields = CHUNK_HEADER.unpack_from(payload, 1)
    return int(fields[6] + fields[3])


def test_a_static_node_without_a_secret_or_with_an_empty_one_does_not_start(tmp_path):
    import subprocess

    c = Cluster(tmp_path, names=("n1", "n2"))
    c.set_layouts([])
    doc = json.loads(c.files["n1"].read_text("utf-8"))
    del doc["secret"]
    c.files["n1"].write_text(json.dumps(doc), "utf-8")
    command = c.brokers["n1"].command()
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--cluster-static needs the cluster's secret" in out.stderr
    out = subprocess.run(command + ["--cluster-secret", " "], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "cluster_secret must not be empty" in out.stderr
