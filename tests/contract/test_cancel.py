"""``cancel_and_wait``: background loops end even when a cancellation is lost.

The real case first: a loop of redis-py commands (socket timeout set, so each is
sent under ``asyncio.wait_for``), pausing between calls as the library's loops
do, loses a good share of single cancellations on Python 3.11 (CPython
gh-86296); every one of those loops must still end. Then a task that swallows
its first cancellation outright, as such a loop does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys

from redis.asyncio import Redis
from redis.exceptions import RedisError

from redis_tasks._cancel import cancel_and_wait
from redis_tasks.testing import RedisServer


async def test_loops_of_redis_commands_end_however_a_cancellation_lands(
    redis_server: RedisServer,
) -> None:
    client = Redis.from_url(redis_server.url, socket_timeout=1.0)
    lost = 0
    try:
        for _ in range(200):

            async def loop() -> None:
                while True:
                    with contextlib.suppress(RedisError):
                        await client.ping()
                    await asyncio.sleep(0.001)  # the pause of a polling loop

            task = asyncio.create_task(loop())
            await asyncio.sleep(random.random() * 0.003)  # any moment will do
            task.cancel()
            # One cancellation, as a plain cancel-and-gather would send.
            _, still = await asyncio.wait({task}, timeout=0.2)
            lost += bool(still)
            await asyncio.wait_for(cancel_and_wait([task]), 5)
            assert task.done()
    finally:
        await client.aclose()
    if sys.version_info < (3, 12):
        # What the helper is for: single cancellations are lost here.
        assert lost > 0


async def test_a_task_that_swallows_its_first_cancellation_still_ends() -> None:
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            swallowed.set()  # lost, as in a wait_for that completed at the same moment
        await asyncio.sleep(60)  # goes on as if never cancelled

    async def failing() -> None:
        raise RuntimeError("ended with an error")

    tasks = [asyncio.create_task(stubborn()), asyncio.create_task(failing())]
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(tasks), 5)
    assert swallowed.is_set()
    assert tasks[0].cancelled()
    assert isinstance(tasks[1].exception(), RuntimeError)
    await cancel_and_wait([])  # nothing to end: returns at once
