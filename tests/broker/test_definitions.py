"""``amqp_stream.definitions`` on its own, over a real file: RabbitMQ's predeclared exchanges,
declare equivalence and reserved names, routing for every exchange type (direct, fanout,
topic, headers, exchange to exchange, the default exchange), persistence across a reload,
``edit`` keeping all or nothing when the store fails, and dangling bindings dropped at load."""

from __future__ import annotations

import json

import pytest

from amqp_stream.definitions import (PREDECLARED, Binding, Definitions, Exchange, FileStore,
                                     headers_match, topic_matches)
from amqp_stream.errors import Forbidden, NotFound, PreconditionFailed

STREAMS = {"s1", "s2", "s3"}


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "definitions.json")


def make(path, streams=STREAMS) -> Definitions:
    d = Definitions(FileStore(path), lambda name: name in streams)
    d.load()
    return d


def test_predeclared_exchanges_as_rabbitmq(path):
    d = make(path)
    assert {(x.name, x.type, x.internal) for x in d.all_exchanges()} == {
        ("", "direct", False), ("amq.direct", "direct", False), ("amq.topic", "topic", False),
        ("amq.match", "headers", False), ("amq.headers", "headers", False),
        ("amq.fanout", "fanout", False), ("amq.rabbitmq.trace", "topic", True)}
    assert d.declare_exchange(Exchange("amq.direct", "direct")) is False  # same: fine
    with pytest.raises(PreconditionFailed):
        d.declare_exchange(Exchange("amq.direct", "fanout"))
    with pytest.raises(Forbidden):
        d.declare_exchange(Exchange("amq.mine", "direct"))
    with pytest.raises(Forbidden):
        d.delete_exchange("amq.fanout")
    with pytest.raises(Forbidden):
        d.bind(Binding("", "s1", "s1"))


def test_declare_equivalence_and_delete(path):
    d = make(path)
    assert d.declare_exchange(Exchange("x", "topic", arguments={"a": 1}))
    assert not d.declare_exchange(Exchange("x", "topic", arguments={"a": 1}))
    # RabbitMQ compares type, durable, auto_delete, internal and alternate-exchange only
    assert not d.declare_exchange(Exchange("x", "topic", arguments={"a": 2}))
    with pytest.raises(PreconditionFailed, match="inequivalent arg 'alternate-exchange' for "
                       "exchange 'x' in vhost '/': received 'ae' but current is none"):
        d.declare_exchange(Exchange("x", "topic", arguments={"alternate-exchange": "ae"}))
    with pytest.raises(PreconditionFailed, match="inequivalent arg 'type' for exchange 'x' in "
                       "vhost '/': received 'fanout' but current is 'topic'"):
        d.declare_exchange(Exchange("x", "fanout"))
    d.bind(Binding("x", "s1", "a.#"))
    assert d.delete_exchange("x") and not d.delete_exchange("x")
    assert d.bindings == []


def test_bind_checks_both_ends(path):
    d = make(path)
    d.declare_exchange(Exchange("x", "direct"))
    with pytest.raises(NotFound):
        d.bind(Binding("nope", "s1", "k"))
    with pytest.raises(NotFound):
        d.bind(Binding("x", "missing-stream", "k"))
    assert d.bind(Binding("x", "s1", "k")) and not d.bind(Binding("x", "s1", "k"))
    assert d.unbind(Binding("x", "s1", "k")) and not d.unbind(Binding("x", "s1", "k"))


def test_routing_by_type(path):
    d = make(path)
    for name, kind in (("d", "direct"), ("f", "fanout"), ("t", "topic"), ("h", "headers")):
        d.declare_exchange(Exchange(name, kind))
    d.bind(Binding("d", "s1", "k1"))
    d.bind(Binding("d", "s2", "k2"))
    d.bind(Binding("d", "s3", "k1"))
    assert d.route("d", "k1") == ["s1", "s3"] and d.route("d", "none") == []
    d.bind(Binding("f", "s2", "ignored"))
    assert d.route("f", "anything") == ["s2"]
    d.bind(Binding("t", "s1", "eu.*.orders"))
    d.bind(Binding("t", "s2", "#.orders"))
    assert d.route("t", "eu.fr.orders") == ["s1", "s2"] and d.route("t", "orders") == ["s2"]
    d.bind(Binding("h", "s3", arguments={"x-match": "any", "a": 1, "b": 2}))
    assert d.route("h", "", {"b": 2}) == ["s3"] and d.route("h", "", {"b": 3}) == []
    assert d.route("", "s2") == ["s2"] and d.route("", "nope") == []  # the default exchange
    with pytest.raises(NotFound):
        d.route("missing", "k")


def test_exchange_to_exchange_and_cycles(path):
    d = make(path)
    d.declare_exchange(Exchange("a", "fanout"))
    d.declare_exchange(Exchange("b", "fanout"))
    d.bind(Binding("a", "b", destination_type="exchange"))
    d.bind(Binding("b", "a", destination_type="exchange"))
    d.bind(Binding("b", "s1"))
    assert d.route("a", "k") == ["s1"]


@pytest.mark.parametrize("pattern,key,expected", [
    ("a.b", "a.b", True), ("a.*", "a.b", True), ("a.*", "a", False), ("a.*", "a.b.c", False),
    ("#", "", True), ("#", "a.b", True), ("a.#", "a", True), ("a.#.c", "a.b.x.c", True),
    ("*.#.*", "a", False), ("*.#.*", "a.b", True), ("#.#", "x", True)])
def test_topic_matching(pattern, key, expected):
    assert topic_matches(pattern, key) is expected


def test_headers_matching():
    assert headers_match({"a": 1}, {"a": 1, "z": 0})
    assert not headers_match({"a": 1, "b": 2}, {"a": 1})
    assert headers_match({"x-match": "any", "a": 1, "b": 2}, {"a": 1})
    assert headers_match({"a": None}, {"a": "whatever"})
    assert headers_match({"x-other": 1}, {})  # x- arguments are not matched...
    assert not headers_match({"x-match": "all-with-x", "x-other": 1}, {})  # ...unless asked


def test_persisted_and_reloaded(path):
    d = make(path)
    d.declare_exchange(Exchange("ss", "direct", arguments={"x-super-stream": True}))
    d.bind(Binding("ss", "s1", "0", {"x-stream-partition-order": 0}))
    again = make(path)
    assert again.exchange("ss") == Exchange("ss", "direct")
    assert again.exchange("ss").arguments == {"x-super-stream": True}
    assert [b.to_json() for b in again.bindings] == [b.to_json() for b in d.bindings]
    on_disk = json.loads(open(path).read())
    assert on_disk["format"] == 1 and all(x["name"] not in PREDECLARED
                                          for x in on_disk["exchanges"])


def test_load_drops_bindings_to_streams_that_are_gone(path):
    d = make(path)
    d.declare_exchange(Exchange("x", "fanout"))
    d.bind(Binding("x", "s1"))
    d.bind(Binding("x", "s2"))
    again = make(path, streams={"s2"})
    assert [b.destination for b in again.bindings] == ["s2"]
    assert [b["destination"] for b in json.loads(open(path).read())["bindings"]] == ["s2"]


def test_edit_is_all_or_nothing_when_the_store_fails(path):
    """A failed save leaves memory as it was: nothing visible that is not on disk."""
    d = make(path)
    d.declare_exchange(Exchange("x", "fanout"))

    class Broken(FileStore):
        def save(self, document: dict) -> None:
            raise OSError(28, "No space left on device")
    d.store = Broken(path)
    with pytest.raises(OSError):
        with d.edit():
            d.exchanges["y"] = Exchange("y", "direct")
            d.bindings.append(Binding("x", "s1"))
    assert d.exchange("y") is None and d.bindings == []
    with pytest.raises(OSError):
        d.bind(Binding("x", "s1"))
    assert d.bindings == []
    assert make(path).exchange("x") is not None and make(path).exchange("y") is None


def test_auto_delete_exchange_goes_with_its_last_binding(path):
    """rabbit_db_exchange:maybe_auto_delete: not at declare, but when the last binding from it
    is removed (unbind, its stream deleted, or an exchange it was bound to deleted)."""
    d = make(path)
    d.declare_exchange(Exchange("ad", "fanout", auto_delete=True))
    assert d.exchange("ad") is not None  # no binding yet: it stays
    d.bind(Binding("ad", "s1"))
    d.bind(Binding("ad", "s2"))
    d.unbind(Binding("ad", "s1"))
    assert d.exchange("ad") is not None
    d.unbind(Binding("ad", "s2"))
    assert d.exchange("ad") is None
    d.declare_exchange(Exchange("ad", "fanout", auto_delete=True))
    d.bind(Binding("ad", "s3"))
    d.forget_stream("s3")
    assert d.exchange("ad") is None
    d.declare_exchange(Exchange("up", "fanout", auto_delete=True))
    d.declare_exchange(Exchange("down", "fanout"))
    d.bind(Binding("up", "down", destination_type="exchange"))
    d.delete_exchange("down")
    assert d.exchange("up") is None and d.bindings == []
    assert make(path).exchange("up") is None  # saved


def test_routes_kept_between_changes_follow_every_change(path):
    """The route cache answers as a fresh routing would after each change (bind, unbind,
    exchange deleted and redeclared, stream forgotten); headers routes are never kept."""
    d = make(path)
    d.declare_exchange(Exchange("x", "topic"))
    d.bind(Binding("x", "s1", "a.*"))
    assert d.route("x", "a.b") == ["s1"] and d.route("x", "a.b") == ["s1"]
    d.bind(Binding("x", "s2", "#"))
    assert d.route("x", "a.b") == ["s1", "s2"]
    d.unbind(Binding("x", "s1", "a.*"))
    assert d.route("x", "a.b") == ["s2"]
    d.forget_stream("s2")
    assert d.route("x", "a.b") == []
    d.delete_exchange("x")
    with pytest.raises(NotFound):
        d.route("x", "a.b")
    d.declare_exchange(Exchange("h", "headers"))
    d.bind(Binding("h", "s3", arguments={"k": 1}))
    assert d.route("h", "", {"k": 1}) == ["s3"] and d.route("h", "", {"k": 2}) == []
