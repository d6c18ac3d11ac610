"""Testing a handler without a Redis: ``InMemoryTaskManager`` has the same contract and a
work queue, so a ``Worker`` runs on it with the same leases, fencing and cancellation. The
Guides / Testing page shows this file whole; the tests run its test function. It tests the
Workers page's handler (``docs_src/worker_handler.py``)."""

import asyncio

from docs_src.worker_handler import handler
from redis_tasks import (
    InMemoryTaskManager,
    RequestContext,
    Task,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
)

ALICE = RequestContext(endpoint="/mcp", partition_key="user:alice")


async def until(manager: InMemoryTaskManager, task_id: str, *statuses: TaskStatus) -> Task:
    """Poll as a client would, until the task reaches one of ``statuses``."""
    while True:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        assert task is not None
        if task.status in statuses:
            return task
        await asyncio.sleep(0.01)


async def test_a_declined_confirmation_fails_the_task() -> None:
    async with InMemoryTaskManager() as manager, Worker(manager, handler) as worker:
        running = asyncio.create_task(worker.run())
        origin = TaskOrigin.from_persisted_state({"tool": "rebuild"})
        task = await manager.create_task(ALICE, origin)
        await until(manager, task.task_id, TaskStatus.INPUT_REQUIRED)
        declined = {"confirm": {"action": "decline"}}
        await manager.update_task(TaskUpdateContext(ALICE, task.task_id, declined))
        failed = await until(manager, task.task_id, TaskStatus.FAILED, TaskStatus.COMPLETED)
        assert failed.status is TaskStatus.FAILED
        assert failed.error is not None
        assert failed.error.code == -32602  # the handler's TaskFailed, as the client sees it
        await worker.stop()
        await running
