"""What the rstream-based tests share: running a coroutine with a deadline, polling a condition
inside the client's loop, and rstream's low-level ``Client`` logged in as guest (its answers'
codes come back as exceptions, which the tests of bad input read)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine

from rstream.client import Client

from amqp_stream.testing import BrokerProcess


def run(coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
    """Run ``coro`` to its end on a loop of its own, failing after ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    """Poll ``condition`` with a deadline (the loop keeps serving the clients meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class admin:
    """An authenticated low-level rstream ``Client`` on ``broker``'s stream port."""

    def __init__(self, broker: BrokerProcess):
        self.c = Client(broker.host, broker.stream_port, frame_max=1024 * 1024, heartbeat=60)

    async def __aenter__(self) -> Client:
        await self.c.start()
        await self.c.authenticate("/", "guest", "guest")
        return self.c

    async def __aexit__(self, *_: object) -> None:
        await self.c.close()
