"""The worker on :class:`InMemoryTaskManager`: the same worker, the same outcomes.

The worker suite's tests that use nothing but the contract and the work queue
(``tests/test_worker.py``) run here again on the in-memory backend: this module's
``redis_backend`` fixture, which shadows conftest's for this module only, gives
them an in-memory manager. The rest of the worker suite looks at Redis streams
itself and stays there. Below them, what that suite leaves to processes and
faults: a crashed worker's task reclaimed by another after its lease, and a
task that keeps crashing its workers failed as poison.
"""

from __future__ import annotations

import asyncio
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

from .conftest import Backend
from .helpers import ALICE, ORIGIN, wait_until
from .test_worker import (
    test_a_cancellation_hint_delivers_it_sooner_than_renewal,
    test_a_handler_that_ignores_cancellation_may_still_complete,
    test_a_result_that_cannot_be_stored_fails_the_task,
    test_a_task_cancelled_before_any_claim_ends_cancelled_without_running,
    test_a_worker_that_loses_its_lease_stops_its_handler,
    test_a_worker_with_fewer_slots_than_partitions_serves_every_partition,
    test_cancellation_is_observed_within_one_renewal_interval,
    test_graceful_stop_hands_unfinished_tasks_to_another_worker_at_once,
    test_handler_results_complete_tasks_even_with_is_error,
    test_input_round_trip_resumes_the_handler_with_the_answers,
    test_other_exceptions_fail_with_a_generic_error_and_log_no_secret,
    test_task_failed_ends_the_task_with_its_error,
)

__all__ = [
    "test_a_cancellation_hint_delivers_it_sooner_than_renewal",
    "test_a_handler_that_ignores_cancellation_may_still_complete",
    "test_a_result_that_cannot_be_stored_fails_the_task",
    "test_a_task_cancelled_before_any_claim_ends_cancelled_without_running",
    "test_a_worker_that_loses_its_lease_stops_its_handler",
    "test_a_worker_with_fewer_slots_than_partitions_serves_every_partition",
    "test_cancellation_is_observed_within_one_renewal_interval",
    "test_graceful_stop_hands_unfinished_tasks_to_another_worker_at_once",
    "test_handler_results_complete_tasks_even_with_is_error",
    "test_input_round_trip_resumes_the_handler_with_the_answers",
    "test_other_exceptions_fail_with_a_generic_error_and_log_no_secret",
    "test_task_failed_ends_the_task_with_its_error",
]


@pytest.fixture
async def redis_backend(prefix: str) -> AsyncIterator[Backend]:
    """An in-memory backend under the name the imported worker tests ask for."""
    manager = InMemoryTaskManager()
    async with manager:
        yield Backend("memory", manager, prefix)


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
    m = InMemoryTaskManager(partitions=1)
    task_id = await create(m)
    queue, lease = m.work_queue, timedelta(milliseconds=150)
    reader = queue.reader(0, "w0", timedelta(seconds=1))
    (entry,) = await reader.read(1)
    # Two workers in turn claim the task and die holding it.
    for n in (1, 2):
        claim = await queue.claim(entry, consumer=f"w{n}", lease=lease, max_attempts=2)
        assert (claim.outcome, claim.attempt) == (ClaimOutcome.RUN, n)
        await asyncio.sleep(0.25)
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
