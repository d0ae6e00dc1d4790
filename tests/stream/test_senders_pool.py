"""The sender threads' pool (``stream_listener.senders.Senders``): a thread is started only when a
batch waits and none is idle, up to the limit, so that as many connections are sent at once as
have output waiting (issue 28: with one thread per core, connections' batches queued behind
each other while their sockets ran dry). Real threads and real sockets (socket pairs whose
reader holds back, so that a batch stays in its thread until the reader reads)."""

from __future__ import annotations

import os
import queue
import socket
import threading

from amqp_stream.stream_listener.senders import DEFAULT_THREADS, Batch, Senders, sender_threads
from tests.polling import wait_for


def _pool(count: int) -> tuple[Senders, queue.SimpleQueue[Batch]]:
    done: queue.SimpleQueue[Batch] = queue.SimpleQueue()
    return Senders(count, lambda fn, batch: fn(batch)), done


def test_one_connection_at_a_time_takes_one_thread():
    senders, done = _pool(8)
    a, b = socket.socketpair()
    with a, b:
        for i in range(5):  # each batch is back before the next comes
            senders.submit(Batch(a, [bytes([i]) * 100]), done.put)
            assert done.get(timeout=10).sent == 100
            assert b.recv(1000) == bytes([i]) * 100
        assert len(senders.threads) == 1


def test_connections_waiting_at_once_get_a_thread_each_up_to_the_limit():
    senders, done = _pool(3)
    pairs = [socket.socketpair() for _ in range(4)]
    size = 4 << 20  # more than a socket pair holds: the send waits for the reader
    try:
        for a, _ in pairs:
            a.setblocking(True)
            senders.submit(Batch(a, [os.urandom(16) * (size // 16)]), done.put)
        assert len(senders.threads) == 3  # the limit: the fourth batch waits for a thread
        wait_for(lambda: senders.idle == 0 and senders.jobs.qsize() == 1, 10,
                 "three batches in three threads at once, one waiting")
        readers = [threading.Thread(target=_drain, args=(b, size)) for _, b in pairs]
        for t in readers:
            t.start()
        for _ in pairs:
            assert done.get(timeout=30).sent == size
        for t in readers:
            t.join(30)
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def _drain(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        got += len(sock.recv(1 << 20))


def test_the_default_limit():
    assert sender_threads(-1) == max(DEFAULT_THREADS, os.cpu_count() or 1)
    assert sender_threads(0) == 0 and sender_threads(3) == 3
