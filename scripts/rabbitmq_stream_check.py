"""Check amqp_stream.streamproto's frames against a real RabbitMQ stream listener.

Not part of the test suite (it needs a RabbitMQ node with the rabbitmq_stream plugin):

    python scripts/rabbitmq_stream_check.py [host] [port]     # default 127.0.0.1 5552, guest/guest

Every client frame is encoded by ``frames.encode``, every server frame decoded by
``frames.decode`` (and re-encoded, which must give the same bytes); the script stops at the
first difference and prints what the server answered.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
import zlib

from amqp_stream.streamproto import Key, ResponseCode
from amqp_stream.streamproto import frames as f

OK = ResponseCode.OK


class Wire:
    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buf = b""
        self.corr = 0

    def send(self, frame: f.Frame) -> None:
        self.sock.sendall(f.encode(frame))

    def receive(self) -> f.Frame:
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack_from(">I", self.buf)
                if len(self.buf) >= 4 + size:
                    raw, self.buf = self.buf[:4 + size], self.buf[4 + size:]
                    frame = f.decode(raw[4:])
                    assert f.encode(frame) == raw, (frame, raw.hex())
                    return frame
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.buf += data

    def call(self, make) -> f.Frame:
        self.corr += 1
        self.send(make(self.corr))
        while True:
            frame = self.receive()
            if getattr(frame, "correlation_id", None) == self.corr:
                return frame
            print("   (pushed)", frame)


def show(label: str, frame: object) -> None:
    print(f"{label:28} {frame}")


def main(host: str = "127.0.0.1", port: int = 5552) -> None:
    w = Wire(host, port)
    show("PeerProperties", w.call(lambda c: f.PeerProperties(c, {"product": "streamproto-check"})))
    show("SaslHandshake", w.call(f.SaslHandshake))
    show("SaslAuthenticate", w.call(lambda c: f.SaslAuthenticate(c, "PLAIN", b"\0guest\0guest")))
    tune = w.receive()
    show("server Tune", tune)
    w.send(f.Tune(tune.frame_max, 0))
    show("Open", w.call(lambda c: f.Open(c, "/")))
    name = f"streamproto-check-{int(time.time())}"
    show("Create", w.call(lambda c: f.Create(c, name, {"max-length-bytes": "10000000",
                                                       "stream-max-segment-size-bytes": "500000"})))
    show("Metadata", w.call(lambda c: f.Metadata(c, (name, "no-such-stream"))))
    show("DeclarePublisher", w.call(lambda c: f.DeclarePublisher(c, 1, "check", name)))
    inner = b"".join(struct.pack(">I", len(m)) + m for m in (b"b1", b"b2", b"b3"))
    w.send(f.Publish(1, ((1, None, b"m1", None), (2, None, inner, (0, 3, len(inner))),
                         (3, None, b"m5", None))))
    show("PublishConfirm", w.receive())
    show("QueryPublisherSequence", w.call(lambda c: f.QueryPublisherSequence(c, "check", name)))
    show("Subscribe", w.call(lambda c: f.Subscribe(c, 7, name, f.OffsetSpec.offset(2), 1,
                                                   {"filter.0": "x", "match-unfiltered": "true"})))
    deliver = w.receive()
    head = f.chunk_header(deliver.chunk)
    assert head.crc == zlib.crc32(deliver.chunk[f.CHUNK_HEADER.size:])
    show("Deliver", (deliver.subscription_id, head))
    w.send(f.Credit(7, 1))
    w.send(f.StoreOffset("reader", name, 4))
    time.sleep(0.3)
    show("QueryOffset", w.call(lambda c: f.QueryOffset(c, "reader", name)))
    show("Unsubscribe", w.call(lambda c: f.Unsubscribe(c, 7)))
    # Not Route/Partitions: RabbitMQ 3.10 answers them with the request key (0x0018/0x0019,
    # no response bit), which decodes as a Route/Partitions request; 4.x sets the bit.
    show("DeletePublisher", w.call(lambda c: f.DeletePublisher(c, 1)))
    show("Delete", w.call(lambda c: f.Delete(c, name)))
    show("Close", w.call(lambda c: f.Close(c, OK, "done")))
    w = Wire(host, port)
    w.call(lambda c: f.PeerProperties(c))
    w.call(f.SaslHandshake)
    w.call(lambda c: f.SaslAuthenticate(c, "PLAIN", b"\0guest\0guest"))
    w.receive()
    w.send(f.Tune(0, 0))
    w.call(lambda c: f.Open(c, "/"))
    w.corr += 1
    w.send(f.ExchangeCommandVersions(w.corr, ((Key.DELIVER, 1, 2),)))
    show("ExchangeCommandVersions", w.receive())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 5552)
