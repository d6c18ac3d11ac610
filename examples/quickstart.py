"""The quickstart: a handler for a worker process, and a script that creates tasks and
waits for their results. Its own key prefix, ``quickstart`` (a prefix is one
application's queue: a worker serves every task of its prefix with its one handler)::

    export REDIS_URL=redis://localhost:6379/0
    redis-tasks check --prefix quickstart
    redis-tasks worker examples/quickstart.py:handler --prefix quickstart   # one terminal
    python examples/quickstart.py                                          # another
    redis-tasks inspect --prefix quickstart
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from redis_tasks import (
    RedisTaskManager,
    RequestContext,
    TaskExecution,
    TaskOrigin,
    TaskRequestContext,
)

PREFIX = "quickstart"


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """One task: its origin names what to do (here: square a number)."""
    n = execution.origin.persisted_state["n"]  # what create_task was given
    await execution.report(f"squaring {n}")  # the task's status message, while it runs
    return {"square": n * n}  # returning completes the task with this result


async def main() -> None:
    """Create three tasks as one client, then poll each to its end and print it."""
    url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
    async with RedisTaskManager.from_url(url, prefix=PREFIX) as manager:
        alice = RequestContext(endpoint="/quickstart", partition_key="alice")
        tasks = [
            await manager.create_task(alice, TaskOrigin.from_persisted_state({"n": n}))
            for n in (2, 3, 4)
        ]
        for task in tasks:
            found = await manager.find_task(TaskRequestContext(alice, task.task_id))
            while found is not None and not found.status.is_terminal:
                await asyncio.sleep(0.1)  # a client polls at found.poll_interval
                found = await manager.find_task(TaskRequestContext(alice, task.task_id))
            assert found is not None
            print(found.status.value, found.result)


if __name__ == "__main__":
    asyncio.run(main())
