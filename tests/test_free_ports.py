"""The port picker the fixtures share: a port it offers is never offered again while the first
taker may not have bound it yet (a cluster test picks every node's ports before starting any)."""

from __future__ import annotations

import socket

from amqp_stream.testing import _ephemeral_low, free_ports


def test_ports_are_not_offered_twice_in_a_process() -> None:
    picks = [p for _ in range(200) for p in free_ports(5)]
    assert len(set(picks)) == len(picks)


def test_ports_lie_below_the_ephemeral_range_and_are_free() -> None:
    for port in free_ports(20):
        assert 1024 <= port < _ephemeral_low()
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # raises if something holds it


def test_a_bound_port_is_skipped() -> None:
    (first,) = free_ports(1)
    with socket.socket() as held:
        held.bind(("127.0.0.1", first + 1))
        held.listen()
        assert first + 1 not in free_ports(3)
