"""The port picker the fixtures share: a port it offers is never offered again while the first
taker may not have bound it yet (a cluster test picks every node's ports before starting any)."""

from __future__ import annotations

import socket

import pytest

from amqp_stream.testing import _ephemeral_low, _port_range, free_ports


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
    low, high = _port_range()
    following = low + (first + 1 - low) % (high - low)  # the port the picker tries next
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.1", following))
            held.listen()
        except OSError:
            pass  # another test's broker holds it already: bound all the same
        assert following not in free_ports(3)


def test_xdist_workers_pick_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pytest-xdist workers each walk their own slice: neither can offer a port the other
    offered and has not bound yet."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(range(*_port_range()))
    first, second = slices
    assert len(first) >= 4096 and len(second) >= 4096
    assert not set(first) & set(second)
    assert first.stop <= _ephemeral_low() and second.stop <= _ephemeral_low()
