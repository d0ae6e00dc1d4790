"""Small blocking AMQP helpers over plain Qpid Proton for the broker tests.

Tests speak to a real broker process with proton's ``BlockingConnection``; these helpers only
save repetition: a management client (HTTP over AMQP, as the official clients do it), publishing
with outcomes (also raw bytes), attaching consumers with filter sets, and reading the attach
reply (source filter echo, refusal conditions).
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from proton import Data, Delivery, Described, Message, symbol, ulong
from proton.reactor import Filter, ReceiverOption
from proton.utils import BlockingConnection, LinkDetached

OFFSET = symbol("rabbitmq:stream-offset-spec")
VALUES = symbol("rabbitmq:stream-filter")
UNFILTERED = symbol("rabbitmq:stream-match-unfiltered")
PROPS = symbol("amqp:properties-filter")
APP_PROPS = symbol("amqp:application-properties-filter")
SQL = symbol("amqp:sql-filter")


def queue_address(name: str) -> str:
    from urllib.parse import quote
    return "/queues/" + quote(name, safe="-._~")


def offset(value: Any) -> Described:
    return Described(OFFSET, value)


class RawFilter(ReceiverOption):
    """Put an arbitrary value (a list of (key, value) pairs as a map, or anything) as filter."""

    def __init__(self, entries: Any):
        self.entries = entries

    def apply(self, receiver: Any) -> None:
        data = receiver.source.filter
        if isinstance(self.entries, list):
            data.put_map()
            data.enter()
            for key, value in self.entries:
                data.put_object(key)
                data.put_object(value)
            data.exit()
        else:
            data.put_object(self.entries)


class Settled(ReceiverOption):
    def apply(self, receiver: Any) -> None:
        receiver.snd_settle_mode = 1  # the broker sends pre-settled


class Client:
    def __init__(self, url: str, timeout: float = 15, **kwargs: Any):
        self.conn = BlockingConnection(url, timeout=timeout, **kwargs)
        self._mgmt = None

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- management ------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, Message]:
        if self._mgmt is None:
            name = "management-link-pair"
            sender = self.conn.create_sender("/management", name=name)
            receiver = self.conn.create_receiver("/management", name=name, credit=10)
            self._mgmt = (sender, receiver)
        sender, receiver = self._mgmt
        msg_id = str(uuid.uuid4())
        sender.send(Message(id=msg_id, address=path, subject=method, reply_to="$me", body=body))
        reply = receiver.receive(timeout=15)
        receiver.accept()
        assert reply.correlation_id == msg_id
        assert reply.properties.get("http:response") == "1.1"
        return int(reply.subject), reply.body, reply

    def declare(self, name: str, arguments: dict | None = None) -> int:
        status, body, _ = self.request("PUT", queue_address(name),
                                       {"durable": True, "arguments": arguments or {"x-queue-type": "stream"}})
        assert status in (200, 201), (status, body)
        return status

    def info(self, name: str) -> dict:
        status, body, _ = self.request("GET", queue_address(name))
        assert status == 200, (status, body)
        return body

    def delete(self, name: str) -> int:
        status, body, _ = self.request("DELETE", queue_address(name))
        assert status == 200, (status, body)
        return body["message_count"]

    # -- publishing ------------------------------------------------------------------------
    def sender(self, name: str, **kwargs: Any) -> Any:
        return self.conn.create_sender(queue_address(name), **kwargs)

    def publish(self, name: str, messages: Iterable[Message]) -> list[int]:
        """Send each message and wait for its outcome; returns the outcomes."""
        sender = self.sender(name)
        try:
            outcomes = []
            for m in messages:
                outcomes.append(self.send_bytes(sender, m.encode()))
            return outcomes
        finally:
            sender.close()

    def send_bytes(self, sender: Any, data: bytes) -> int:
        """Send raw transfer bytes unsettled and wait for the outcome (a Delivery state)."""
        link = sender.link
        self.conn.wait(lambda: link.credit > 0, msg="waiting for credit")
        tag = uuid.uuid4().bytes
        dlv = link.delivery(tag)
        link.send(data)
        link.advance()
        self.conn.wait(lambda: dlv.settled, msg="waiting for outcome")
        self.last_delivery = dlv
        return dlv.remote_state

    # -- consuming -------------------------------------------------------------------------
    def receiver(self, name: str, entries: Any = None, credit: int = 100,
                 options: list | None = None, link_name: str | None = None) -> Any:
        opts = list(options or [])
        if entries is not None:
            opts.append(RawFilter(entries))
        return self.conn.create_receiver(queue_address(name), credit=credit, options=opts or None,
                                         name=link_name)

    def receive_all(self, receiver: Any, count: int, timeout: float = 15) -> list[Message]:
        out = []
        for _ in range(count):
            out.append(receiver.receive(timeout=timeout))
            receiver.accept()
        return out


def arrived(receiver: Any, count: int, timeout: float = 15) -> list[tuple[Message, Any]]:
    """The first ``count`` (message, delivery) pairs a blocking receiver holds, once they have
    arrived, left in place (nothing settled: a test reads their settle state and tags)."""
    receiver.connection.wait(lambda: receiver.fetcher.has_message >= count, timeout=timeout)
    return list(receiver.fetcher.incoming)[:count]


def echo_of(receiver: Any) -> list[tuple[Any, Any]] | None:
    """The source filter of the broker's attach reply, in wire order (None if absent)."""
    data = receiver.link.remote_source.filter
    data.rewind()
    if data.next() is None:
        return None
    assert data.type() == Data.MAP
    count = data.get_map()
    data.enter()
    out = []
    for _ in range(count // 2):
        data.next()
        key = data.get_object()
        data.next()
        out.append((key, data.get_object()))
    data.exit()
    return out


def annotations(msg: Message) -> dict:
    return {str(k): v for k, v in (msg.annotations or {}).items()}


__all__ = ["Client", "RawFilter", "Settled", "echo_of", "annotations", "offset", "LinkDetached",
           "queue_address", "OFFSET", "VALUES", "UNFILTERED", "PROPS", "APP_PROPS", "SQL",
           "Delivery", "Described", "Message", "symbol", "ulong", "Filter"]
