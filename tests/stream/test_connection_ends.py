"""How stream-protocol connections end on a real broker process: a client that drops its socket
while chunks are on their way costs one log line and its own connection, and nothing of a
connection (descriptors included) outlives it, however it ended."""

from __future__ import annotations

import socket
import struct

from amqp_stream.testing import BrokerProcess
from conformance.streamclient import OK, StreamClient
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
