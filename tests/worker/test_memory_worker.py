"""The worker on :class:`InMemoryTaskManager`: what the Redis suites prove with processes.

The worker suite (``tests/worker/test_worker.py``) runs on the in-memory backend too.
What it leaves to real processes and faults on Redis is proved here in memory: a
crashed worker's task reclaimed by another after its lease, and a task that keeps
crashing its workers failed as poison. The manager's clock is moved forward
instead of waiting for leases to run out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from redis_tasks import (
    ClaimOutcome,
    InMemoryTaskManager,
    LeaseLostError,
    Task,
    TaskExecution,
    TaskRequestContext,
    Worker,
)
from redis_tasks import TaskStatus as Status
from redis_tasks._lease import INTERNAL_ERROR
from tests.support.helpers import ALICE, ORIGIN, wait_until


async def create(manager: InMemoryTaskManager, payload: bytes = b"") -> str:
    return (await manager.create_task(ALICE, ORIGIN, payload=payload)).task_id


@asynccontextmanager
async def running(
    manager: InMemoryTaskManager, handler: Any, **options: Any
) -> AsyncIterator[Worker]:
    """A worker running in the background for the duration of the block."""
    async with Worker(manager, handler, **options) as worker:
        runner = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            await worker.stop(grace=1.0)
            await runner


async def settled(manager: InMemoryTaskManager, task_id: str) -> Task:
    async def terminal() -> Task | None:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        return task if task is not None and task.is_terminal else None

    return await wait_until(terminal, what="a terminal task")


async def test_a_crashed_workers_task_is_reclaimed_after_its_lease() -> None:
    m = InMemoryTaskManager(partitions=1)
    task_id = await create(m, b"job")
    # A worker that read and claimed the task, then died: nothing renews its lease.
    queue = m.work_queue
    reader = queue.reader(0, "crashed", timedelta(seconds=1))
    (entry,) = await reader.read(1)
    crashed = await queue.claim(
        entry, consumer="crashed", lease=timedelta(milliseconds=300), max_attempts=5
    )
    assert crashed.outcome is ClaimOutcome.RUN
    runs: list[tuple[int, int]] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        runs.append((execution.fence, execution.attempt))
        return {"payload": execution.payload.decode()}

    async with running(m, handler, lease=timedelta(milliseconds=300)):
        task = await settled(m, task_id)
    assert task.status is Status.COMPLETED
    assert task.result == {"payload": "job"}
    ((fence, attempt),) = runs
    assert attempt == 2
    assert fence > crashed.fence
    with pytest.raises(LeaseLostError):  # the crashed worker's late write is refused
        await m.complete_task(task_id, {"late": True}, fence=crashed.fence)


async def test_a_task_that_keeps_crashing_its_workers_fails_as_poison() -> None:
    ahead = [0.0]  # seconds the manager's clock is moved forward
    m = InMemoryTaskManager(partitions=1, clock=lambda: time.time() + ahead[0])
    task_id = await create(m)
    queue, lease = m.work_queue, timedelta(milliseconds=150)
    reader = queue.reader(0, "w0", timedelta(seconds=1))
    (entry,) = await reader.read(1)
    # Two workers in turn claim the task and die holding it.
    for n in (1, 2):
        claim = await queue.claim(entry, consumer=f"w{n}", lease=lease, max_attempts=2)
        assert (claim.outcome, claim.attempt) == (ClaimOutcome.RUN, n)
        ahead[0] += 0.25  # the lease runs out, with nothing renewing it
        _, (entry,) = await queue.reclaim(
            0, consumer=f"w{n + 1}", idle=lease, cursor="0-0", count=10
        )
    ran: list[str] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        ran.append(execution.task_id)
        return {}

    async with running(m, handler, lease=lease, max_attempts=2):
        task = await settled(m, task_id)
    assert (task.status, task.error) == (Status.FAILED, INTERNAL_ERROR)
    assert ran == []
