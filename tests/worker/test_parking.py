"""A handler waiting for its client's input holds no worker: its task is parked.

On every backend a worker runs on (in memory, standalone Redis, the cluster, Valkey
9.1, Redis 8.2), with real workers in this process: waiting handlers give their
slots to other tenants' tasks, their answers run them again from the top (each
answered round replayed), a stop does not wait for a person, and a handler or a
worker that opts out keeps today's behaviour.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from redis_tasks import (
    InMemoryTaskManager,
    RequestContext,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
)
from redis_tasks._work_queue import WorkerBackend
from tests.support.backends import Backend
from tests.support.helpers import ALICE, BOB, ELICIT, ELICIT_ANSWER, ORIGIN, wait_until
from tests.worker.test_worker import running, worker_backend

__all__ = ["worker_backend"]  # the backends' fixture, shared with test_worker

NEVER = timedelta(hours=1)


async def create(m: WorkerBackend, who: RequestContext, payload: bytes) -> str:
    return (await m.create_task(who, ORIGIN, payload=payload)).task_id


async def status_of(m: WorkerBackend, who: RequestContext, task_id: str) -> TaskStatus | None:
    task = await m.find_task(TaskRequestContext(who, task_id))
    return None if task is None else task.status


async def all_reach(
    m: WorkerBackend, who: RequestContext, task_ids: list[str], status: TaskStatus
) -> None:
    async def reached() -> bool:
        return all([await status_of(m, who, t) is status for t in task_ids])

    await wait_until(reached, within=15, what=f"every task {status.value}")


class Asking:
    """A handler whose ``ask`` tasks ask a person one question (``park`` as given),
    counting each run of each task and the ``parks`` it ran with."""

    def __init__(self, *, park: bool = True) -> None:
        self.park = park
        self.runs: Counter[str] = Counter()
        self.resumed: dict[str, tuple[int, int]] = {}

    async def __call__(self, execution: TaskExecution) -> dict[str, Any]:
        self.runs[execution.task_id] += 1  # code before the wait: runs again on resume
        if execution.payload != b"ask":
            return {}
        if execution.parks:
            self.resumed[execution.task_id] = (execution.parks, execution.attempt)
        answers = await execution.request_input({"name": ELICIT}, "who?", park=self.park)
        return {"hello": answers["name"]["content"]["name"]}


async def test_tasks_waiting_for_people_leave_the_worker_to_other_tenants(
    worker_backend: Backend,
) -> None:
    """The issue's case: a worker of concurrency 4, four of tenant A's tasks waiting
    for answers nobody gives yet; tenant B's three tasks all run. Then the answers
    come: each parked task runs again from the top, its round replayed, and ends
    once, as its first attempt."""
    m = worker_backend.manager
    handler = Asking()
    async with running(m, handler, concurrency=4, input_poll_interval=timedelta(seconds=30)):
        waiting = [await create(m, ALICE, b"ask") for _ in range(4)]
        await all_reach(m, ALICE, waiting, TaskStatus.INPUT_REQUIRED)
        others = [await create(m, BOB, b"") for _ in range(3)]
        await all_reach(m, BOB, others, TaskStatus.COMPLETED)
        assert [await status_of(m, ALICE, t) for t in waiting] == [TaskStatus.INPUT_REQUIRED] * 4
        for task_id in waiting:
            await m.update_task(TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER}))
        await all_reach(m, ALICE, waiting, TaskStatus.COMPLETED)
    for task_id in waiting:
        task = await m.find_task(TaskRequestContext(ALICE, task_id))
        assert task is not None
        assert task.result == {"hello": "Luca"}
    # A task parked (at once while every slot was taken, else after park_after) ran
    # twice, and its resumed run says so; one still in its slot when its answer came
    # ran once. B's tasks needed a park at least.
    parked = [t for t in waiting if handler.runs[t] == 2]
    assert parked
    assert all(handler.runs[t] in (1, 2) for t in waiting)
    assert handler.resumed == dict.fromkeys(parked, (1, 1))


async def test_a_stop_does_not_wait_for_people(worker_backend: Backend) -> None:
    """A worker that would hold waiting handlers for an hour stops at once: their
    tasks are parked, and their answers have another worker run them."""
    m = worker_backend.manager
    handler = Asking()
    async with running(m, handler, park_after=NEVER, lease=timedelta(seconds=60)) as worker:
        waiting = [await create(m, ALICE, b"ask") for _ in range(3)]
        await all_reach(m, ALICE, waiting, TaskStatus.INPUT_REQUIRED)
        started = time.monotonic()
        await worker.stop(grace=60)
        assert time.monotonic() - started < 5  # not the grace: nobody had to answer
    assert handler.runs == dict.fromkeys(waiting, 1)
    async with running(m, handler):
        for task_id in waiting:
            await m.update_task(TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER}))
        await all_reach(m, ALICE, waiting, TaskStatus.COMPLETED)
    assert handler.runs == dict.fromkeys(waiting, 2)


async def test_a_handler_that_cannot_be_run_again_keeps_its_slot(worker_backend: Backend) -> None:
    """``park=False`` (a wait), or ``park_after=None`` (a worker): the handler waits in
    its slot, on a worker whose every slot is taken, and its one run ends the task."""
    m = worker_backend.manager
    for options, handler in (({}, Asking(park=False)), ({"park_after": None}, Asking())):
        async with running(m, handler, concurrency=1, **options):
            task_id = await create(m, ALICE, b"ask")
            await all_reach(m, ALICE, [task_id], TaskStatus.INPUT_REQUIRED)
            await m.update_task(TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER}))
            await all_reach(m, ALICE, [task_id], TaskStatus.COMPLETED)
        assert handler.runs == {task_id: 1}


async def test_a_refused_park_is_not_asked_again_until_an_input_poll() -> None:
    """Every slot taken (concurrency 1), so a wait asks to park at once; but the task's
    cancellation was asked, so the park script refuses, and the handler hears of the
    cancellation only at its next renewal (no cancel hints). Meanwhile its wait asks
    again once an input poll, not in a loop."""
    async with InMemoryTaskManager() as m:
        queue = m.work_queue
        parks: list[str] = []
        park = queue.park

        async def counted(task_id: str, *, fence: int) -> bool:
            parks.append(task_id)
            return await park(task_id, fence=fence)

        queue.park = counted  # type: ignore[method-assign]
        gate = asyncio.Event()

        async def handler(execution: TaskExecution) -> dict[str, Any]:
            await execution.answered_so_far({"name": ELICIT})
            await gate.wait()  # the cancellation is asked first
            while True:
                await execution.wait_for_input()
                await execution.answered_so_far({"name": ELICIT})

        options: dict[str, Any] = {
            "concurrency": 1,
            "cancel_hints": False,
            "lease": timedelta(seconds=3),
            "input_poll_interval": timedelta(milliseconds=400),
        }
        async with running(m, handler, **options):
            task_id = await create(m, ALICE, b"")
            await all_reach(m, ALICE, [task_id], TaskStatus.INPUT_REQUIRED)
            await m.request_cancellation(TaskRequestContext(ALICE, task_id))
            gate.set()
            await all_reach(m, ALICE, [task_id], TaskStatus.CANCELLED)
    # The renewal that tells the handler comes a third of a lease (1 s) after the claim:
    # a handful of asks at 400 ms apart, where a loop made thousands.
    assert 1 <= len(parks) <= 5
