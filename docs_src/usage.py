"""A task from create to result in one process: a server's side (create, poll, answer) and a
worker's (a handler under a lease), on the Redis at ``$REDIS_URL``. The Guides / Tasks from
Python page shows this file whole, and the tests run it as it is."""

import asyncio
import os
from datetime import timedelta
from typing import Any

from redis_tasks import (
    InputRequest,
    RedisTaskManager,
    RequestContext,
    TaskExecution,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
)

CONFIRM = InputRequest(
    method="elicitation/create",
    params={"mode": "form", "message": "Proceed?", "requestedSchema": {"type": "object"}},
)


async def serve(manager: RedisTaskManager) -> None:
    # Server: a tools/call becomes a task, durably stored and enqueued before we answer.
    alice = RequestContext(endpoint="/mcp", partition_key="user:alice")
    origin = TaskOrigin.from_persisted_string('{"tool": "report", "arguments": {"q": 1}}')
    task = await manager.create_task(alice, origin, payload=b"job", ttl=timedelta(minutes=30))
    reply = {"resultType": "task", **task.to_wire()}  # the CreateTaskResult
    assert reply["resultType"] == "task"

    # Any server process: tasks/get and tasks/update, authorized against the binding.
    get = TaskRequestContext(alice, task.task_id)
    polled = await manager.find_task(get)
    while polled is not None and polled.status is TaskStatus.WORKING:
        await asyncio.sleep(0.1)  # a client waits polled.poll_interval
        polled = await manager.find_task(get)
    assert polled is not None
    assert polled.status is TaskStatus.INPUT_REQUIRED
    await manager.update_task(
        TaskUpdateContext(alice, task.task_id, {"confirm": {"action": "accept", "content": {}}})
    )
    while polled is not None and not polled.status.is_terminal:
        await asyncio.sleep(0.1)
        polled = await manager.find_task(get)
    assert polled is not None
    assert polled.status is TaskStatus.COMPLETED
    print(polled.status.value, polled.result)


async def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
    async with RedisTaskManager.from_url(url, prefix="usage") as manager:
        # Worker: runs a handler for each task under a lease. Every worker operation
        # carries the lease's fence, so once another worker has taken the task over,
        # this one's writes are refused (LeaseLostError).
        async def handler(execution: TaskExecution) -> dict[str, Any]:
            await manager.mark_working(execution.task_id, "checking", fence=execution.fence)
            # request_input(..., fence=execution.fence), re-issued as answers arrive
            # (each returns those recorded so far) until every key is answered:
            answers = await execution.request_input({"confirm": CONFIRM}, "waiting for you")
            # Returning ends the task: complete_task(..., fence=execution.fence).
            text = answers["confirm"]["action"]
            return {"content": [{"type": "text", "text": text}], "isError": False}

        async with Worker(manager, handler) as worker:
            running = asyncio.create_task(worker.run())
            await serve(manager)
            await worker.stop()
            await running


if __name__ == "__main__":
    asyncio.run(main())
