"""Parked tasks: a task waiting for its client's input, given back by its worker.

On the in-memory reference, the embedded Redis, a standalone redis-server and the
3+3 cluster, through the contract and the :class:`WorkQueue` alone (the worker's
side is in ``tests/worker/test_parking.py``): a park ends the lease and frees the
tenant's running place; the answer that completes the round queues the task again,
at its tenant's head, exactly once; a cancellation ends a parked task at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from redis_tasks import (
    ClaimOutcome,
    InputKeyReusedError,
    Limits,
    Task,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
)
from redis_tasks._errors import LeaseLostError
from redis_tasks._work_queue import WorkerBackend
from tests.contract.test_tenants import FLOOD, LONG, Build, create, make, next_one, served
from tests.support.helpers import ELICIT, ELICIT_ANSWER, ORIGIN, ROOTS, ROOTS_ANSWER

__all__ = ["make"]  # the backends' fixture, shared with test_tenants


async def answer(m: WorkerBackend, task_id: str, answers: dict[str, Any]) -> None:
    await m.update_task(TaskUpdateContext(FLOOD, task_id, answers))


async def cancel(m: WorkerBackend, task_id: str) -> None:
    await m.request_cancellation(TaskRequestContext(FLOOD, task_id))


async def find(m: WorkerBackend, task_id: str) -> Task:
    task = await m.find_task(TaskRequestContext(FLOOD, task_id))
    assert task is not None
    return task


async def claimed_waiting(m: WorkerBackend, requests: dict[str, Any]) -> tuple[str, int]:
    """A task claimed (its fence) whose handler asked ``requests`` and waits."""
    task_id = await create(m)
    got = await next_one(m)
    assert got is not None
    assert got[0].task_id == task_id
    fence = got[1].fence
    assert await m.request_input(task_id, requests, fence=fence) == {}
    return task_id, fence


async def test_a_parked_task_holds_no_lease_and_its_answer_queues_it_at_its_tenants_head(
    make: Build,
) -> None:
    async with make() as b:
        m = b.manager
        q = m.work_queue
        task_id, fence = await claimed_waiting(m, {"name": ELICIT})
        behind = [await create(m) for _ in range(2)]  # the tenant's next tasks wait
        assert await q.park(task_id, fence=fence) is True
        # The lease ended with the park: the handler's late writes are refused.
        with pytest.raises(LeaseLostError):
            await m.complete_task(task_id, {}, fence=fence)
        task = await find(m, task_id)
        assert task.status is TaskStatus.INPUT_REQUIRED
        assert set(task.input_requests) == {"name"}
        # While it waits, its tenant's other tasks run; it is in no queue.
        assert await served(m, 2) == behind
        assert await next_one(m) is None
        await answer(m, task_id, {"name": ELICIT_ANSWER})
        assert (await find(m, task_id)).status is TaskStatus.WORKING
        got = await next_one(m)
        assert got is not None
        entry, claim = got
        assert (entry.task_id, claim.outcome) == (task_id, ClaimOutcome.RUN)
        # A resume is no new attempt; the claim says the task was parked once.
        assert (claim.attempt, claim.parks) == (1, 1)
        assert claim.fence > fence
        # The re-run asks the same round: the recorded answer comes back at once.
        again = await m.request_input(task_id, {"name": ELICIT}, fence=claim.fence)
        assert again == {"name": ELICIT_ANSWER}
        await m.complete_task(task_id, {"ok": True}, fence=claim.fence)
        assert await next_one(m) is None


async def test_a_resumed_task_goes_before_its_tenants_queued_tasks(make: Build) -> None:
    async with make() as b:
        m = b.manager
        task_id, fence = await claimed_waiting(m, {"name": ELICIT})
        # The first goes straight into the stream (nothing waited); the others queue.
        behind = [await create(m) for _ in range(3)]
        assert await m.work_queue.park(task_id, fence=fence)
        await answer(m, task_id, {"name": ELICIT_ANSWER})
        assert await served(m, 4) == [behind[0], task_id, *behind[1:]]


async def test_nothing_is_parked_once_the_round_was_answered_or_cancellation_asked(
    make: Build,
) -> None:
    async with make() as b:
        m = b.manager
        q = m.work_queue
        answered, fence = await claimed_waiting(m, {"name": ELICIT})
        await answer(m, answered, {"name": ELICIT_ANSWER})
        assert await q.park(answered, fence=fence) is False
        # Still leased to its run: it renews and finishes as before.
        await q.renew(answered, fence=fence, consumer="w1", lease=LONG)
        await m.complete_task(answered, {}, fence=fence)
        cancelled, fence = await claimed_waiting(m, {"name": ELICIT})
        await cancel(m, cancelled)
        assert await q.park(cancelled, fence=fence) is False
        assert (await find(m, cancelled)).status is TaskStatus.INPUT_REQUIRED
        # A stale fence is told so, as for any worker write.
        with pytest.raises(LeaseLostError):
            await q.park(cancelled, fence=fence - 1)


async def test_a_parked_task_answered_in_part_stays_parked_and_one_answer_resumes_it(
    make: Build,
) -> None:
    async with make() as b:
        m = b.manager
        task_id, fence = await claimed_waiting(m, {"name": ELICIT, "dirs": ROOTS})
        assert await m.work_queue.park(task_id, fence=fence)
        await answer(m, task_id, {"name": ELICIT_ANSWER})
        assert await next_one(m) is None  # one request still outstanding
        # Racing answers to the last request: one is accepted, one resume.
        await asyncio.gather(*(answer(m, task_id, {"dirs": ROOTS_ANSWER}) for _ in range(8)))
        got = await next_one(m)
        assert got is not None
        assert got[0].task_id == task_id
        assert await next_one(m) is None
        answers = await m.request_input(
            task_id, {"name": ELICIT, "dirs": ROOTS}, fence=got[1].fence
        )
        assert answers == {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER}


async def test_a_resumed_runs_claim_brings_its_answers_and_its_rounds_replay_from_them(
    make: Build,
) -> None:
    async with make() as b:
        m = b.manager
        task_id, fence = await claimed_waiting(m, {"name": ELICIT})
        assert await m.work_queue.park(task_id, fence=fence)
        await answer(m, task_id, {"name": ELICIT_ANSWER})
        got = await next_one(m)
        assert got is not None
        claim = got[1]
        ((key, fingerprint, _),) = claim.recorded
        assert (key, len(fingerprint)) == (b"name", 32)
        # Nothing is left to take: the run gets its answers by replaying its rounds.
        assert await m.take_input_responses(task_id, fence=claim.fence) == {}
        run = TaskExecution(
            m,
            task_id,
            origin=ORIGIN,
            payload=b"",
            attempt=claim.attempt,
            fence=claim.fence,
            input_poll=60.0,
            parks=claim.parks,
            recorded=claim.recorded,
        )
        assert await run.request_input({"name": ELICIT}) == {"name": ELICIT_ANSWER}
        # The same key for another request is refused as the manager refuses it.
        with pytest.raises(InputKeyReusedError):
            await run.request_input({"name": ROOTS})
        # A round not answered goes to the manager: the task waits for it.
        assert await run.answered_so_far({"dirs": ROOTS}) == {}
        assert (await find(m, task_id)).status is TaskStatus.INPUT_REQUIRED
        await m.complete_task(task_id, {}, fence=claim.fence)


async def test_a_cancellation_ends_a_parked_task_at_once(make: Build) -> None:
    async with make() as b:
        m = b.manager
        task_id, fence = await claimed_waiting(m, {"name": ELICIT})
        assert await m.work_queue.park(task_id, fence=fence)
        await cancel(m, task_id)
        assert (await find(m, task_id)).status is TaskStatus.CANCELLED
        await answer(m, task_id, {"name": ELICIT_ANSWER})  # ignored: it ended
        assert await next_one(m) is None


async def test_a_parked_task_frees_its_place_under_its_tenants_cap(make: Build) -> None:
    async with make(limits=Limits(max_running_tasks_per_tenant=1)) as b:
        m = b.manager
        q = m.work_queue
        task_id, fence = await claimed_waiting(m, {"name": ELICIT})
        second = await create(m)  # straight into the stream: its claim defers it
        deferred = await next_one(m)
        assert deferred is not None
        assert deferred[1].outcome is ClaimOutcome.DEFERRED
        assert await next_one(m) is None  # the tenant is at its cap
        assert await q.park(task_id, fence=fence)
        got = await next_one(m)
        assert got is not None
        assert got[0].task_id == second
        # Answered while the second runs: queued again (straight into the stream, as
        # a create would go), its claim defers it, and it waits for the place.
        await answer(m, task_id, {"name": ELICIT_ANSWER})
        deferred = await next_one(m)
        assert deferred is not None
        assert (deferred[0].task_id, deferred[1].outcome) == (task_id, ClaimOutcome.DEFERRED)
        assert await next_one(m) is None
        await m.complete_task(second, {}, fence=got[1].fence)
        got = await next_one(m)
        assert got is not None
        assert got[0].task_id == task_id
