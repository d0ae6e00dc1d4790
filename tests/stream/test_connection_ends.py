"""How stream-protocol connections end on a real broker process: a client that drops its socket
while chunks are on their way costs one log line and its own connection, and nothing of a
connection (descriptors included) outlives it, however it ended."""

from __future__ import annotations

import os
import random
import socket
import struct

from amqp_stream.streamproto import frames as f
from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, ServerClosed, StreamClient
from tests.polling import wait_for

RECORDS, PER_FRAME, SIZE = 40_000, 4000, 100


def _fill(b: BrokerProcess, stream: str) -> StreamClient:
    producer = StreamClient("127.0.0.1", b.stream_port)
    assert producer.create_stream(stream) == OK and producer.declare_publisher(1, stream) == OK
    body = b"x" * SIZE
    for start in range(0, RECORDS, PER_FRAME):
        producer.publish(1, [(i, body) for i in range(start, start + PER_FRAME)])
    assert producer.wait_confirms(1, [RECORDS - 1])[RECORDS - 1] == OK
    return producer


def _reset(sock: socket.socket) -> None:
    """Close with an RST at once (SO_LINGER 0), as a killed client's kernel would."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_consumers_that_drop_their_socket_mid_delivery_cost_one_line_each(tmp_path):
    """Each consumer takes one chunk, grants more credit and resets its socket in the same
    breath: the broker reads the Credit, starts sending and the send fails. That failure is
    one line ("closed"), the connection goes, and nothing recurses (it used to go round
    write -> _lost -> process -> write until RecursionError, a traceback at every level)."""
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never"]) as b:
        producer = _fill(b, "big")
        peers = []
        for _ in range(20):
            c = StreamClient("127.0.0.1", b.stream_port)
            assert c.subscribe(1, "big", credit=1) == OK
            c.next_chunk()
            peers.append("127.0.0.1:%d" % c.sock.getsockname()[1])
            c.credit(1, 50)
            _reset(c.sock)
        wait_for(lambda: all(f"stream connection {p} closed" in b.log_text() for p in peers),
                 30, "the broker to close every dropped consumer")
        assert producer.metadata(["big"])[1]["big"][0] == OK  # the broker still serves
        producer.close()
        log = b.log_text()
    assert "Traceback" not in log and "RecursionError" not in log
    for peer in peers:
        lines = [line for line in log.splitlines() if peer in line]
        subscribed = next(i for i, line in enumerate(lines) if "stream subscription 1" in line)
        assert [line.split(" ", 3)[3] for line in lines[subscribed + 1:]] == \
            [f"amqp_stream.stream_listener: stream connection {peer} closed"], lines


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


_VALID = [f.encode(x)[4:] for x in (
    f.DeclarePublisher(2, 1, "ref", "s"), f.Subscribe(3, 1, "s", f.OffsetSpec.first(), 10, {}),
    f.Subscribe(3, 2, "s", f.OffsetSpec.offset(5), 10, {"sql-filter": "n > 1"}),
    f.Delete(4, "nosuch"), f.StoreOffset("ref", "s", 5), f.QueryOffset(5, "ref", "s"),
    f.Metadata(6, ("s", "q")), f.Unsubscribe(7, 1), f.Credit(1, 5), f.DeletePublisher(8, 1),
    f.QueryPublisherSequence(9, "ref", "s"), f.StreamStats(10, "s"),
    f.Publish(1, ((1, None, memoryview(b"abc"), None),), 1))]


def _mutated(rng: random.Random) -> bytes:
    """A valid client frame with up to three bytes changed, inserted or deleted."""
    data = bytearray(rng.choice(_VALID))
    for _ in range(rng.randrange(4)):
        op, at = rng.randrange(3), rng.randrange(len(data) + 1)
        if op == 0 and at < len(data):
            data[at] = rng.randrange(256)
        elif op == 1:
            data.insert(at, rng.randrange(256))
        elif at < len(data):
            del data[at]
    return struct.pack(">I", len(data)) + bytes(data)


def test_fuzzed_connections_leave_no_descriptor_behind(tmp_path):
    """Seeded fuzz: opened connections send mutated frames and then reset, close, or wait for
    an answer first; others send garbage before the handshake. Afterwards the broker's open
    descriptors (/proc/PID/fd) come back to what they were. A reset that reaches an idle
    socket used to be lost under uvloop (its poll handle stops silently on the error), and
    such connections stayed open for good (18 -> 31 fds over 6,000 connections)."""
    rng = random.Random(2525)
    with BrokerProcess(tmp_path / "data", extra_args=["--fsync", "never",
                                                      "--handshake-timeout", "2"]) as b:
        pid = b.proc.pid
        c = StreamClient("127.0.0.1", b.stream_port)
        assert c.create_stream("s") == OK and c.declare_publisher(1, "s") == OK
        c.publish(1, [(i, b"m%d" % i) for i in range(100)])
        assert c.wait_confirms(1, [99])[99] == OK
        peer = "127.0.0.1:%d" % c.sock.getsockname()[1]
        c.close()
        wait_for(lambda: f"stream connection {peer} closed" in b.log_text(), 10,
                 "the setup connection to close")
        baseline = _fds(pid)
        for n in range(400):
            if n % 4 == 3:  # garbage before the handshake
                sock = socket.create_connection(("127.0.0.1", b.stream_port), timeout=5)
            else:
                c = StreamClient("127.0.0.1", b.stream_port, timeout=5, handshake=False)
                sock = c.sock
            try:
                if n % 4 == 3:
                    sock.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
                else:
                    c.handshake("guest", "guest")
                    for _ in range(rng.randrange(1, 4)):
                        c.send_raw(_mutated(rng))
                    if rng.random() < 0.3:
                        c.stream_stats("s")  # a round trip, or the server's Close
            except (OSError, ServerClosed, TimeoutError, ValueError):
                pass
            if rng.random() < 0.7:
                _reset(sock)
            else:
                sock.close()
        wait_for(lambda: _fds(pid) <= baseline, 30,
                 f"the broker's fds to come back to {baseline} (now {_fds(pid)})")
        survivor = StreamClient("127.0.0.1", b.stream_port)  # and it still serves
        assert survivor.stream_stats("s")[0] == OK
        survivor.close()
