"""Exchanges, bindings and super streams from the command line, as real subprocesses against the
session broker: declare/list/delete exchanges, bind/list/unbind (a stream and an exchange),
messages published through the exchange land where the bindings say, and super streams made
over the stream protocol listed with their partitions and deleted with them."""

from __future__ import annotations

import json

import pytest
from proton import Message

from tests.broker.amqp import Client, Delivery
from tests.cli.test_commands import cli

pytestmark = pytest.mark.timeout(180)


def stream_cli(broker, *args: str):
    return cli(*args, "--stream-url", broker.stream_url)


def test_exchanges_and_bindings(broker, stream_name):
    x, y = stream_name + "-x", stream_name + "-y"
    url = broker.url
    assert cli("declare", stream_name, url=url).returncode == 0
    r = cli("declare-exchange", x, "--type", "topic", url=url)
    assert (r.returncode, r.stdout) == (0, f"declared exchange {x} (topic)\n"), r.stderr
    assert cli("declare-exchange", y, "--type", "fanout", url=url).returncode == 0
    r = cli("declare-exchange", x, "--type", "direct", url=url)  # another type: 409
    assert r.returncode == 1
    assert f"inequivalent arg 'type' for exchange '{x}' in vhost '/'" in r.stderr
    r = cli("exchanges", "--json", url=url)
    kinds = {e["name"]: e["type"] for e in json.loads(r.stdout)}
    assert kinds[x] == "topic" and kinds[y] == "fanout" and kinds["amq.direct"] == "direct"
    r = cli("bind", x, stream_name, "--key", "eu.#", url=url)
    assert (r.returncode, r.stdout) == (0, f"bound {stream_name} to {x} with key 'eu.#'\n"), r.stderr
    assert cli("bind", y, x, "--exchange", url=url).returncode == 0
    r = cli("bind", x, "no-such-stream-" + stream_name, url=url)
    assert r.returncode == 1 and f"no queue 'no-such-stream-{stream_name}' in vhost '/'" in r.stderr
    r = cli("bindings", "--destination", stream_name, url=url)
    assert r.stdout.splitlines() == [
        "source\tdestination\tdestination_type\tbinding_key\targuments",
        f"{x}\t{stream_name}\tstream\teu.#\t"], r.stderr
    r = cli("bindings", "--source", y, "--json", url=url)
    [binding] = json.loads(r.stdout)
    assert (binding["destination_exchange"], binding["binding_key"]) == (x, "")
    with Client(broker.url) as c:  # through y, then x, to the stream
        sender = c.conn.create_sender(f"/exchanges/{y}")
        assert c.send_bytes(sender, Message(body="via y").encode()) == Delivery.RELEASED  # key ""
        sender = c.conn.create_sender(f"/exchanges/{x}/eu.paris")
        assert c.send_bytes(sender, Message(body="eu").encode()) == Delivery.ACCEPTED
        assert c.info(stream_name)["message_count"] == 1
    r = cli("unbind", x, stream_name, "--key", "eu.#", url=url)
    assert (r.returncode, r.stdout) == (0, f"unbound {stream_name} from {x} with key 'eu.#'\n")
    r = cli("unbind", x, stream_name, "--key", "eu.#", url=url)
    assert r.returncode == 0 and "nothing unbound" in r.stdout
    assert cli("bindings", "--destination", stream_name, "--json", url=url).stdout.strip() == "[]"
    for name in (x, y):
        r = cli("delete-exchange", name, url=url)
        assert (r.returncode, r.stdout) == (0, f"deleted exchange {name}\n")
    assert x not in cli("exchanges", url=url).stdout
    r = cli("delete-exchange", "amq.fanout", url=url)
    assert r.returncode == 1 and "starts with reserved prefix 'amq.'" in r.stderr
    cli("delete", stream_name, url=url)


def test_publish_to_an_exchange(broker, stream_name):
    """`publish --exchange X --routing-key K` goes to /exchanges/X/K: each line lands in every
    stream the key routes to; a key that routes nowhere is exit 1 (released); a missing
    exchange, or a stream and --exchange together, are clear errors."""
    a, b, x = stream_name + "-a", stream_name + "-b", stream_name + "-x"
    url = broker.url
    with Client(url) as c:
        c.declare(a)
        c.declare(b)
        c.request("PUT", f"/exchanges/{x}", {"type": "topic"})
        for stream, key in ((a, "eu.*"), (b, "#")):
            c.request("POST", "/bindings", {"source": x, "destination_queue": stream,
                                            "binding_key": key, "arguments": {}})
    r = cli("publish", "--exchange", x, "--routing-key", "eu.paris", url=url, stdin="one\ntwo\n")
    assert (r.returncode, r.stdout) == (0, f"published 2 messages to exchange {x}\n"), r.stderr
    r = cli("publish", "-x", x, "-k", "us", url=url, stdin='{"n": 3}\n')
    assert r.returncode == 0, r.stderr
    with Client(url) as c:
        assert (c.info(a)["message_count"], c.info(b)["message_count"]) == (2, 3)
        c.request("DELETE", f"/exchanges/{x}")
        c.request("PUT", f"/exchanges/{x}", {"type": "direct"})  # now nothing is bound
    r = cli("publish", "--exchange", x, "--routing-key", "k", url=url, stdin="lost\n")
    assert r.returncode == 1
    assert "1 of 1 message(s) not accepted; first: message #1 released (routed to no stream)" in r.stderr
    r = cli("publish", "--exchange", "no-such-" + x, url=url, stdin="x\n")
    assert r.returncode == 1 and f"exchange 'no-such-{x}' not found" in r.stderr
    assert cli("publish", a, "--exchange", x, url=url, stdin="x\n").returncode == 2
    assert cli("publish", a, "--routing-key", "k", url=url, stdin="x\n").returncode == 2
    with Client(url) as c:
        c.request("DELETE", f"/exchanges/{x}")
    for stream in (a, b):
        cli("delete", stream, url=url)


def test_super_streams(broker, stream_name):
    name = stream_name + "-ss"
    r = stream_cli(broker, "create-super-stream", name, "--partitions", "3", "--max-age", "1h")
    assert (r.returncode, r.stdout) == (
        0, f"created super stream {name}: {name}-0, {name}-1, {name}-2\n"), r.stderr
    r = stream_cli(broker, "create-super-stream", name + "-k", "--binding-keys", "eu,us")
    assert r.returncode == 0, r.stderr
    r = cli("super-streams", "--json", url=broker.url)
    listed = json.loads(r.stdout)
    assert listed[name] == [f"{name}-0", f"{name}-1", f"{name}-2"]
    assert listed[name + "-k"] == [f"{name}-k-eu", f"{name}-k-us"]
    r = cli("super-streams", url=broker.url)
    assert f"{name}\t{name}-0,{name}-1,{name}-2" in r.stdout.splitlines()
    with Client(broker.url) as c:  # the partitions are streams with the arguments given
        assert c.info(f"{name}-1")["arguments"]["x-max-age"] == "1h"
    r = stream_cli(broker, "create-super-stream", name, "--partitions", "2")  # exists
    assert r.returncode == 1 and "create super stream" in r.stderr
    for n in (name, name + "-k"):
        r = stream_cli(broker, "delete-super-stream", n)
        assert (r.returncode, r.stdout) == (0, f"deleted super stream {n}\n"), r.stderr
    assert json.loads(cli("super-streams", "--json", url=broker.url).stdout).get(name) is None
    r = cli("info", f"{name}-0", url=broker.url)
    assert r.returncode == 1  # the partitions went with it
    r = stream_cli(broker, "create-super-stream", name, "--partitions", "0")
    assert r.returncode == 1 and "--partitions must be at least 1" in r.stderr
