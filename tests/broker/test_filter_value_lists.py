"""Several filter values per message (an extension): ``x-stream-filter-value`` as a list or an
array of strings, on a real broker. Every value goes into the chunk's Bloom filter, so a
consumer asking for any one of them gets the message; a string stays RabbitMQ's single value.
"""

from __future__ import annotations

from proton import UNDESCRIBED, Array, Data, Delivery, Described, Message

from amqp_stream.wire import MAX_FILTER_VALUES
from tests.broker.amqp import OFFSET, UNFILTERED, VALUES, Client, offset
from tests.broker.test_rhea import FIRST, bodies, consume, declare, f, publish


def _tagged(body: str, value) -> Message:
    return Message(body=body, annotations={"x-stream-filter-value": value})


def _receive_exactly(c: Client, name: str, values, expected: list[str],
                     unfiltered: bool = False) -> None:
    """The consumer asking for ``values`` gets ``expected`` and then, after them, only the
    final marker (published with every value, so nothing is waited for by time)."""
    entries = [(OFFSET, offset("first")), (VALUES, Described(VALUES, values))]
    if unfiltered:
        entries.append((UNFILTERED, Described(UNFILTERED, True)))
    r = c.receiver(name, entries)
    got = [m.body for m in c.receive_all(r, len(expected) + 1)]
    assert got == expected + ["END"], values
    r.close()


def test_a_list_of_values_is_found_by_each_of_them(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        # one confirmed publish at a time: each message is a chunk of its own
        for m in (_tagged("rb", ["red", "blue"]),
                  _tagged("g", "green"),
                  _tagged("bp", Array(UNDESCRIBED, Data.STRING, "blue", "pink")),
                  _tagged("r", ["red"]),
                  Message(body="plain"),
                  _tagged("none", []),
                  _tagged("END", ["red", "blue", "green", "pink", "x"])):
            sender.send(m)
        sender.close()
        _receive_exactly(c, stream_name, "red", ["rb", "r"])
        _receive_exactly(c, stream_name, "blue", ["rb", "bp"])
        _receive_exactly(c, stream_name, "pink", ["bp"])
        _receive_exactly(c, stream_name, "green", ["g"])
        _receive_exactly(c, stream_name, ["pink", "green"], ["g", "bp"])
        _receive_exactly(c, stream_name, "x", [])
        _receive_exactly(c, stream_name, "x", ["plain", "none"], unfiltered=True)
        # the stored bytes are what was sent: the list comes back as published
        r = c.receiver(stream_name, [(OFFSET, offset("first"))])
        first = c.receive_all(r, 1)[0]
        assert first.annotations["x-stream-filter-value"] == ["red", "blue"]


def test_a_list_that_is_not_all_strings_or_too_long_is_rejected(broker, stream_name):
    with Client(broker.url) as c:
        c.declare(stream_name)
        sender = c.sender(stream_name)
        for bad in (["red", 1], ["v"] * (MAX_FILTER_VALUES + 1)):
            assert c.send_bytes(sender, _tagged("x", bad).encode()) == Delivery.REJECTED
            assert c.last_delivery.remote.condition.name == "amqp:invalid-field"
        ok = [f"v{i}" for i in range(MAX_FILTER_VALUES)]
        assert c.send_bytes(sender, _tagged("ok", ok).encode()) == Delivery.ACCEPTED
        assert c.info(stream_name)["message_count"] == 1


def test_rhea_publishing_lists(broker, stream_name):
    declare(broker, stream_name)
    publish(broker, stream_name, [
        {"body": "ab", "filter_value": ["apple", "banana"]},
        {"body": "c", "filter_value": "cherry"},
        {"body": "END", "filter_value": ["apple", "banana", "cherry"]},
    ], one_at_a_time=True)
    assert bodies(consume(broker, stream_name, [FIRST, f("v", VALUES, "banana")])) == ["ab"]
    assert bodies(consume(broker, stream_name, [FIRST, f("v", VALUES, "apple")])) == ["ab"]
    assert bodies(consume(broker, stream_name, [FIRST, f("v", VALUES, "cherry")])) == ["c"]
