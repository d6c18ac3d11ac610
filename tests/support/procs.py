"""Child-process entry points for the multi-process tests (imported under spawn)."""

from __future__ import annotations

import asyncio
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from redis_tasks import (
    JsonRpcError,
    RedisTaskManager,
    RequestContext,
    TaskRequestContext,
    TaskTerminalError,
)

WAYS = ("complete", "fail", "cancel")


async def _attempt(manager: RedisTaskManager, task_id: str, way: str, token: str) -> str:
    try:
        if way == "complete":
            await manager.complete_task(task_id, {"winner": token})
        elif way == "fail":
            await manager.fail_task(task_id, JsonRpcError(code=-32000, message="x", data=token))
        elif way == "cancel":
            await manager.cancel_task(task_id, token)
        else:  # "same": every racer asks for the identical outcome
            await manager.cancel_task(task_id)
    except TaskTerminalError:
        return "terminal"
    except Exception as exc:  # reported to the parent, which fails the test
        return f"error:{type(exc).__name__}"
    return "won"


def race(
    url: str,
    prefix: str,
    task_ids: list[str],
    who: int,
    coroutines: int,
    barrier: Barrier,
    results: Queue[Any],
    identical: bool = False,
) -> None:
    """Race ``coroutines`` terminal transitions per task against the other process:
    distinct outcomes, or (``identical``) the same plain cancel from every racer."""

    async def main() -> list[tuple[str, str, str, str]]:
        outcomes = []
        async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
            await manager.client.ping()  # connect before the race starts
            for task_id in task_ids:
                barrier.wait()  # both processes start each task's race together
                ways = ["same" if identical else WAYS[(i + who) % 3] for i in range(coroutines)]
                tokens = [f"p{who}c{i}" for i in range(coroutines)]
                got = await asyncio.gather(
                    *(_attempt(manager, task_id, w, t) for w, t in zip(ways, tokens, strict=True))
                )
                outcomes += [(task_id, w, t, g) for w, t, g in zip(ways, tokens, got, strict=True)]
        return outcomes

    results.put(asyncio.run(main()))


def subscribe(
    url: str, prefix: str, ready: Event, expected: Queue[Any], results: Queue[Any], timeout: float
) -> None:
    """Subscribe, signal readiness, then report how many events each task ID got.

    Returns once every expected count is reached (or ``timeout`` passes).
    """

    async def main() -> dict[str, int]:
        counts: dict[str, int] = {}
        async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
            with manager.event_publisher.subscribe(
                lambda task_id: counts.__setitem__(task_id, counts.get(task_id, 0) + 1)
            ):
                await manager.event_publisher.wait_ready()
                ready.set()
                want: dict[str, int] = await asyncio.to_thread(expected.get, True, timeout)
                deadline = time.monotonic() + timeout
                while any(counts.get(k, 0) < n for k, n in want.items()):
                    if time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.01)
        return counts

    results.put(asyncio.run(main()))


def find_origin(url: str, prefix: str, task_id: str, results: Queue[Any]) -> None:
    """Find the task from this process and report its origin's persisted string."""

    async def main() -> str | None:
        async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
            task = await manager.find_task(
                TaskRequestContext(RequestContext("/mcp", "alice"), task_id)
            )
            return None if task is None else task.origin.to_persisted_string()

    results.put(asyncio.run(main()))
